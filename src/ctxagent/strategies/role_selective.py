"""``role_selective``: compaction by role; big tool results cut to findings, long reasoning to its conclusion.

Source of the rule (DESIGN.md, "Knowledge"): compaction by role keeps system and user messages,
cuts tool results over ~300 tokens to their findings and assistant text over ~400 tokens to its
conclusion; the middle-out preview keeps the beginning (headers, structure) and the end
(conclusions, final values); LLM compression belongs to interactive paths only.

Outside the last ``keep_turns`` units, a tool result over ``tool_tokens`` keeps its first and last
lines around a marker naming the call, size and handle (the original is offloaded), assistant text
over ``assistant_tokens`` its last paragraph; pins are kept. Like every step's change, each reduction
is recorded as a compaction of that one message (strategies/pipeline.py). With ``llm: true``, up to
``max_calls`` results per request are reduced to their findings by the summarizer instead; a failed
one falls back to head and tail and is reported in ``Outcome.warnings``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field

from ctxagent.messages import content_of
from ctxagent.strategies.base import Compaction, Entry, Outcome, Scan, StrategyContext, groups
from ctxagent.strategies.common import (
    calls_of_results,
    handle_of,
    pins_in,
    replaced,
    short_call,
    size_of,
    with_pins,
)
from ctxagent.strategies.rendering import clip
from ctxagent.strategies.step import Count, KeepTurns, StrategyConfig, UseLlm
from ctxagent.strategies.summarizing import SummaryFailed, condense
from ctxagent.tokens import count_text

LINE_CHARS = 200  # characters kept of each line of a reduced tool result

FINDINGS_PROMPT = (
    "Below is the output of one tool call an AI agent made. Reduce it to its key findings, as short "
    "plain-text lines: what it shows that matters for the agent's task. Keep exact values verbatim "
    "(file paths, numbers, ids, handles like @abc123, commands, error messages). Never invent "
    "anything the output does not show. At most {max_tokens} tokens, no preamble."
)


def head_tail(content: str, head: int, tail: int, marker: str) -> str:
    """``content``'s first ``head`` and last ``tail`` lines (each cut to :data:`LINE_CHARS`) around ``marker``."""
    lines = [line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + "…" for line in content.splitlines()]
    if len(lines) <= head + tail:
        return "\n".join([*lines, marker])
    return "\n".join([*lines[:head], marker, *lines[len(lines) - tail :]])


def conclusion(content: str, max_tokens: int, model: str = "") -> str:
    """The last paragraph of ``content``, cut middle-out to ``max_tokens``."""
    paragraphs = [p for p in re.split(r"\n\s*\n", content.strip()) if p.strip()]
    return clip(paragraphs[-1] if paragraphs else "", max_tokens, model)


class RoleSelectiveStep(StrategyConfig):
    """``role_selective``: big tool results cut to their findings, long assistant text to its conclusion."""

    uses_llm = True
    llm_switch = "llm"
    strategy: Literal["role_selective"] = "role_selective"
    tool_tokens: Count = Field(300, description="tokens over which a tool result is reduced")
    assistant_tokens: Count = Field(400, description="tokens of text over which assistant text is reduced")
    keep_turns: KeepTurns = 2
    head_lines: Count = Field(8, description="lines kept at the head of a reduced tool result")
    tail_lines: Count = Field(4, description="lines kept at the tail of a reduced tool result")
    llm: UseLlm = False
    findings_tokens: Count = Field(200, description="tokens an LLM reduction may have")
    max_calls: Count = Field(4, description="LLM reductions per request at most")

    def apply(self, view: list[Entry], ctx: StrategyContext, scan: Scan | None = None) -> Outcome:
        units = groups(view)
        recent = {i for unit in units[max(0, len(units) - self.keep_turns) :] for i in unit}
        calls = calls_of_results(view)
        llm_calls = self.max_calls if self.needs_llm() and ctx.summarizer is not None else 0
        out = list(view)
        compactions: list[Compaction] = []
        offloads: list[Entry] = []
        warnings: list[str] = []
        for index, entry in enumerate(view):
            if index in recent or entry.kind != "message":
                continue
            new, by_llm = None, False
            if entry.role == "tool" and entry.tokens > self.tool_tokens:  # by the LLM when it is smaller
                new = self._findings(entry, calls.get(index), ctx, warnings) if llm_calls > 0 else None
                by_llm = new is not None and new.tokens < entry.tokens
                new = new if by_llm else self._head_tail(entry, calls.get(index), ctx)
                llm_calls = max(0, llm_calls - 1)
            elif entry.role == "assistant":
                new = self._conclusion(entry, ctx)
            if new is None or new.tokens >= entry.tokens:
                continue
            out[index] = new
            if by_llm:
                compactions.append(Compaction(self.strategy, new.start, new.end, new.message, new.tokens,
                                              entry.tokens))
            if entry.role == "tool" and not entry.offloaded:
                offloads.append(entry)
        if out == view:
            return Outcome(view, warnings=warnings)
        return Outcome(out, compactions, offloads, warnings)

    def _findings(self, entry: Entry, call: dict[str, Any] | None, ctx: StrategyContext,
                  warnings: list[str]) -> Entry | None:
        """The LLM reduction of one tool result, or None when it failed (its warning added to ``warnings``)."""
        assert ctx.summarizer is not None
        content = content_of(entry.message)
        try:
            findings = condense(f"result of {short_call(call, 200)}:\n{content}", summarizer=ctx.summarizer,
                                final_prompt=FINDINGS_PROMPT.format(max_tokens=self.findings_tokens),
                                max_tokens=self.findings_tokens, chunk_tokens=8000,
                                pins=pins_in([content], ctx.pins), model=ctx.model,
                                window=ctx.summarizer_window)
        except SummaryFailed as err:
            warnings.append(f"{self.strategy}: the LLM findings of {short_call(call, 60)} (message #{entry.start}) "
                            f"failed ({err}); cut it to its head and tail instead")
            return None
        label = (f"[ctxagent findings of {short_call(call, 80)}, a {size_of(entry)}-token result; "
                 f"full result: {handle_of(entry)} (read_output or grep_output)]")
        return replaced(entry, f"{label}\n{findings}", ctx, self.strategy)

    def _head_tail(self, entry: Entry, call: dict[str, Any] | None, ctx: StrategyContext) -> Entry:
        """The deterministic head-and-tail reduction of one tool result."""
        content = content_of(entry.message)
        marker = (f"[... ctxagent cut this {size_of(entry)}-token result of {short_call(call, 80)} to its "
                  f"head and tail; full result: {handle_of(entry)} (read_output or grep_output) ...]")
        reduced = head_tail(content, self.head_lines, self.tail_lines, marker)
        return replaced(entry, with_pins(reduced, [content], ctx.pins), ctx, self.strategy)

    def _conclusion(self, entry: Entry, ctx: StrategyContext) -> Entry | None:
        """Assistant text over ``assistant_tokens`` reduced to its conclusion, or None when it is not over."""
        max_tokens = self.assistant_tokens
        if entry.tokens <= max_tokens:  # cheap first: the entry's count includes its text
            return None
        content = content_of(entry.message)
        tokens = count_text(content, ctx.model)
        if tokens <= max_tokens:
            return None
        reduced = (f"[ctxagent cut {tokens} tokens of reasoning to the conclusion]\n"
                   f"{conclusion(content, max_tokens // 2, ctx.model)}")
        return replaced(entry, with_pins(reduced, [content], ctx.pins), ctx, self.strategy)
