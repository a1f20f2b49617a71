"""The profile's schema: the pydantic models a profile YAML validates against, and the thrash rule.

Apart from the loader (:mod:`ctxagent.profile`) so that the strategies' checks and pipelines import
these models without it. Every key, its unit and its default: docs/context.md ("Profiles").
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ctxagent.mcp_tools.config import SERVER_NAME, ServerConfig
from ctxagent.strategies.registry import Step
from ctxagent.strategies.step import StrategyConfig
from ctxagent.strategies.truncate import TruncateStep
from ctxagent.tools.permissions import PermissionsConfig

Path_ = Literal["interactive", "batch"]
DEFAULT_TOOLS = ["shell", "read_file", "write_file", "list_dir", "read_output", "grep_output", "recall"]
DEFAULT_SYSTEM_PROMPT = (
    "You are a careful agent working from a command line, with tools. Act, do not describe what you would "
    "do: to read a file, call read_file with its path; to see a folder, call list_dir. Never guess or make "
    "up values: take them from tool results. A tool result too large to show is saved, and its preview says "
    "how to search it (grep_output) or read parts of it (read_output). As soon as a tool result contains "
    "what the task asks for, stop calling tools and answer in a short reply that quotes the exact value."
)
"""The system prompt of every bundled profile. Written for small local models too (Qwen2.5-Coder-1.5B,
docs/local-models.md): no example handle (the model made up handles like ``@app.log``), the file tool
named, and when to stop (told only "when you are done", it kept calling tools or replied with nothing)."""
MIN_GAP = 0.15
"""Smallest ``trigger - target`` (fractions of the window) a profile or a pipeline step may have.

A compaction cuts the request to the target; the next one comes when it has grown back to the
trigger, so the gap is the room the agent works in between two compactions. An agent turn adds
roughly 400-1,200 tokens and a tool result 2-8K in bursts (DESIGN.md, "Knowledge"): a gap of 0.05
(``target: 0.75``, ``trigger: 0.8``) is one search result on a 128K window, and gave 7 compactions
in 8 steps, each paying its cost (a summary call, a broken prompt cache) for nothing. 0.15 is 4.8K
tokens on a 32K window (4-12 ordinary turns) and 19K on 128K; every bundled profile keeps 0.25 or more.
"""


def reply_reserve(window: int) -> int:
    """Tokens reserved for the reply in a ``window``-token context when the profile does not say:
    an eighth of the window, between 256 and 4,096 (4,096 from a 32K window up; 512 of a 4,096-token
    window). A fixed 4,096 took more than the whole of a 4K window (with the margin); a small model on
    a small window answers in tens of tokens, and a tool call rarely needs hundreds. An answer cut at
    the reserve ends with ``finish_reason: "length"`` and names ``max_output_tokens``."""
    return max(256, min(4096, window // 8))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PreviewConfig(_Strict):
    """How much of an offloaded output stays in the context (lines and characters, not tokens)."""

    head_lines: int = Field(40, ge=0)
    tail_lines: int = Field(20, ge=0)
    max_chars: int = Field(4000, ge=200)


class SummarizerConfig(_Strict):
    """The model LLM strategies call (may be cheaper than the agent's); ``None``: the agent's model."""

    model: str | None = None
    api_base: str | None = None
    max_tokens: int = Field(1000, ge=50, description="tokens of one summary at most")


class RecallConfig(_Strict):
    """The ``recall`` tool: an embedding model (litellm model string) whose ranking is fused with
    BM25's (``None``: BM25 only), its ``api_base``, and the hits returned by default."""

    embedding_model: str | None = None
    api_base: str | None = None
    top_k: int = Field(8, ge=1, le=50, description="hits recall returns by default")


class Limits(_Strict):
    """Spend limits of a run or of a session (None: no limit). Tokens are provider-reported (input
    counts cached tokens too), cost in US dollars at litellm's per-model prices (cache prices
    included), wall time in seconds. docs/agents.md, "Budgets"."""

    max_input_tokens: int | None = Field(None, ge=1, description="prompt tokens, summed over calls")
    max_output_tokens_total: int | None = Field(None, ge=1, description="completion tokens, summed over calls")
    max_cost_usd: float | None = Field(None, gt=0, description="US dollars")
    max_wall_s: float | None = Field(None, gt=0, description="seconds of wall time")

    def set(self) -> dict[str, float]:
        """The limits that are set, by key."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class LimitsConfig(_Strict):
    """The circuit breaker (agent/budgets.py): limits per run and per session (a session's spend
    sums all its runs, survives resume), and the fraction of a limit at which a warning is given."""

    run: Limits = Limits()
    session: Limits = Limits()
    warn_at: float = Field(0.8, gt=0, lt=1, description="fraction of a limit that warns once")


class DelegateConfig(_Strict):
    """The ``delegate`` tool (agent/delegate.py): message-size contracts between agents (tokens),
    children run at once, nesting depth, the children's profile and model (None: the parent's) and the share
    of the parent's remaining run budget a child gets when the call names no budget."""

    assignment_max_tokens: int = Field(500, ge=10, description="largest assignment, tokens")
    result_max_tokens: int = Field(1000, ge=10, description="largest result kept inline, tokens")
    max_concurrent: int = Field(3, ge=1, le=16, description="children running at once")
    max_depth: int = Field(1, ge=1, le=4, description="levels of children below the top agent")
    profile: str | None = None
    model: str | None = Field(None, description="the children's model (litellm string or scripted:PATH)")
    max_turns: int = Field(15, ge=1, description="model calls of one child")
    budget_share: float = Field(0.25, gt=0, le=1, description="of the parent's remaining run budget")


class LessonsConfig(_Strict):
    """Lessons learned in one session for the next (ctxagent/lessons/): the block a new session is
    shown (tokens at most), the scope (None: the working directory's repository; a name: a named
    scope shared by any directory), the user-wide scope shown too, the floor of confidence a lesson
    needs to be shown, how many lessons a scope keeps (the weakest are evicted), and whether an LLM
    proposes lessons too (only where LLM calls may run: interactive, or ``allow_llm_in_batch``)."""

    enabled: bool = True
    max_tokens: int = Field(500, ge=0, description="tokens of the injected lessons block at most")
    scope: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    user_scope: bool = True
    min_confidence: float = Field(0.4, ge=0, le=1, description="lessons below it are kept but not shown")
    max_stored: int = Field(200, ge=1, description="lessons a scope keeps at most")
    llm: bool = Field(True, description="also ask the summarizer model for lessons where LLM calls may run")


class ToolEnvironmentConfig(_Strict):
    """The ``tool_environment`` key: what the shell's commands and MCP servers get of ctxagent's
    environment (tools/environment.py: credentials are withheld)."""

    pass_through: list[str] = Field(default_factory=list, description="variable names (or fnmatch patterns) "
                                    "passed to tools although they look like credentials")


class McpConfig(_Strict):
    """The ``mcp`` key: how MCP servers' tools enter requests (``mcp_servers`` names the servers)."""

    schema_budget: float = Field(0.10, ge=0, le=1, description="MCP tool schemas, fraction of the window, "
                                 "before they are deferred behind find_tools (0: always defer)")


def _truncate_everywhere() -> dict[Path_, list[Step]]:
    return {"interactive": [TruncateStep()], "batch": [TruncateStep()]}


class Profile(_Strict):
    """A validated profile. docs/context.md ("Profiles") gives every key and its default."""

    name: str = "custom"
    model: str = "openai/gpt-4o-mini"
    api_base: str | None = None
    context_window: int | None = Field(None, ge=256, description="tokens; None = litellm model info")
    max_output_tokens: int | None = Field(None, ge=1, description="tokens reserved for the reply; None: sized "
                                          "to the window (reply_reserve)")
    temperature: float | None = Field(None, ge=0, le=2, description=(
        "sampling temperature sent with every request of the agent's model; None: the provider's or server's "
        "default (llama.cpp's server samples at 0.8; small local models call tools more reliably at 0)"))
    margin_tokens: int = Field(256, ge=0, description="safety margin, tokens")
    tool_result_limit: int = Field(20_000, ge=100, description="largest tool result, tokens")
    # with tool_result_limit, the smaller wins: one output never fills a small window (agent/setup.py)
    tool_result_fraction: float = Field(0.25, gt=0, le=0.9, description="largest tool result, fraction of window")
    preview: PreviewConfig = PreviewConfig()
    target: float = Field(0.5, gt=0, lt=1, description="compaction target, fraction of window")
    trigger: float = Field(0.8, gt=0, le=1, description="compaction trigger, fraction of window")
    max_turns: int = Field(30, ge=1)
    timeout_s: float = Field(120.0, gt=0)
    retries: int = Field(2, ge=0, le=10)
    # longest wait before a retry, seconds; a server asking (Retry-After) for more is not retried
    max_retry_wait_s: float = Field(60.0, ge=0, le=3600)
    # send tool_choice: "auto" with the tools (some OpenAI-compatible servers ignore tools without it)
    send_tool_choice: bool = True
    text_tool_calls: Literal["auto", "always", "off"] = "auto"  # calls written as text: agent/text_calls.py
    tools: list[str] = Field(default_factory=lambda: list(DEFAULT_TOOLS))
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    pipelines: dict[Path_, list[Step]] = Field(default_factory=_truncate_everywhere)
    allow_llm_in_batch: bool = False
    summarizer: SummarizerConfig = SummarizerConfig()
    recall: RecallConfig = RecallConfig()  # tools/recall.py
    pins: list[str] = Field(default_factory=list, description="facts kept verbatim in every view")
    permissions: PermissionsConfig = Field(default_factory=PermissionsConfig)  # tools/permissions.py
    redact: Literal["persist", "always"] = "persist"  # sessions/redact/; docs/security.md
    tool_environment: ToolEnvironmentConfig = ToolEnvironmentConfig()  # tools/environment.py
    prompt_cache: Literal["auto", "off"] = "auto"  # breakpoints for the providers that need them
    loop_guard: int = Field(4, ge=0, description="identical calls in a row before a warning (0: off, else >= 2)")
    repeat_notes: bool = True  # agent/activity.py, with loop_guard
    thrash_turns: int = Field(3, ge=0, description="consecutive compacting requests before escalation")
    limits: LimitsConfig = LimitsConfig()  # budgets: a circuit breaker on tokens, money and time
    delegate: DelegateConfig = DelegateConfig()  # sub-agents (the delegate tool)
    lessons: LessonsConfig = LessonsConfig()  # lessons learned in one session for the next (lessons/)
    mcp_servers: dict[str, ServerConfig] = Field(default_factory=dict)  # mcp_tools/config.py (mcpServers shape)
    mcp: McpConfig = McpConfig()

    @field_validator("mcp_servers")
    @classmethod
    def _server_names(cls, value: dict[str, ServerConfig]) -> dict[str, ServerConfig]:
        for name in value:
            if not SERVER_NAME.match(name) or "__" in name:
                raise ValueError(f"MCP server name {name!r}: 1-32 letters, digits, '_' or '-', without '__'")
        return value

    @field_validator("text_tool_calls", mode="before")
    @classmethod
    def _yaml_off_is_off(cls, value: object) -> object:
        """YAML 1.1 reads a bare ``off`` as false (and ``on`` as true): false is ``off``, true ``auto``."""
        return {False: "off", True: "auto"}.get(value, value) if isinstance(value, bool) else value

    @field_validator("loop_guard")
    @classmethod
    def _loop_guard_counts_repeats(cls, value: int) -> int:
        if value == 1:  # one call is not a repeat: every first call would be warned about
            raise ValueError("loop_guard counts identical calls in a row: 0 (off) or at least 2")
        return value

    @model_validator(mode="after")
    def _target_below_trigger(self) -> Profile:
        if self.target >= self.trigger:
            raise ValueError(f"target ({self.target}) must be below trigger ({self.trigger})")
        return self

    def reply_tokens(self, window: int, given: int | None = None) -> int:
        """Tokens reserved for the reply (sent as ``max_tokens``): ``given`` (``--max-output-tokens``),
        else ``max_output_tokens``, else :func:`reply_reserve` of the ``window`` (tokens)."""
        return given or self.max_output_tokens or reply_reserve(window)

    def pipeline(self, path: Path_) -> list[StrategyConfig]:
        """The ordered strategies of ``path`` (``interactive`` or ``batch``)."""
        return self.pipelines.get(path, [])


def thrash_problem(target: float, trigger: float) -> str | None:
    """Why compacting at ``trigger`` down to ``target`` would thrash (see :data:`MIN_GAP`), or None."""
    if trigger - target >= MIN_GAP - 1e-9:
        return None
    fix = f"target at most {trigger - MIN_GAP:.2f}" if trigger - MIN_GAP > 0 else "a higher trigger"
    return (f"target {target:g} is too close to trigger {trigger:g}: each compaction would be followed by another "
            f"within a step or two (thrashing); keep trigger - target >= {MIN_GAP:g} ({fix})")
