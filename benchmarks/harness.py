"""How every configuration is driven over a trace, and what is measured on each request.

ctxagent runs as a user runs it (:class:`CtxagentRun`): the real :class:`ctxagent.agent.runner.Runner`
on a real session (header, JSONL transcript, output store, under a temporary ``CTXAGENT_DATA_DIR``),
with the profile's pipeline on its path, a toolset built like ``agent.setup.toolset_for`` whose tools
replay the trace's outputs (so the toolset's real ``settle`` offloads them), a model that plays the
trace's scripted assistant turns (:class:`TraceModel`) and, where the runner uses one, a fake
summarizer behind the model interface (:class:`SummarizerModel`). Nothing of the runner's loop is
copied here: the request checked is the one the runner sends to the model.

Baselines and peers (:class:`PlainManager`, ``benchmarks.peers``) go through :func:`drive`: per turn,
append the user message, ask for the view (timed), append the scripted reply and the tool results.

Both check every request the same way (:class:`Checks`): input tokens (ctxagent's tiktoken counts,
o200k_base for gpt-4o-mini), PAIR with :func:`ctxagent.messages.pair_violations`, HEAD, BUDGET, fact
probes (in the view, or through a handle the view names in that run's real output store).

Cache billing (:func:`cached_prefix`): each request's input is split into the part a provider's prompt
cache would serve (the leading whole messages identical to the previous request's, plus the tool
schemas in front of them) and the rest; billed input = uncached + ratio x cached, with ratio = the
cache-read price / the input price (:data:`DEFAULT_CACHE_RATIO` for the headline numbers,
:func:`model_cache_ratio` for the model's own price).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from benchmarks.workloads import Trace
from ctxagent.agent.model import ToolCall
from ctxagent.messages import Message, pair_violations, text_of, tool_call
from ctxagent.tokens import PER_REQUEST, count_message, count_text
from ctxagent.tools.toolset import Toolset

MODEL = "openai/gpt-4o-mini"
HANDLE = re.compile(r"@[A-Za-z0-9_-]{1,32}(?:\.[0-9]+)?")
DEFAULT_CACHE_RATIO = 0.1  # cache-read price / input price when none is given (issue 9; Anthropic's reads)


class Overflow(Exception):
    """A manager (baseline or peer) refused to build a request over the budget."""


# --- the fake summarizer -------------------------------------------------------------------------

_FACTY = re.compile(r"[/@]|\d|error|exception|decision|decided|correction|fyi|ticket", re.IGNORECASE)
_LABEL = re.compile(r"#\d+(?:-\d+)? ")  # the start of one message in the summarizer's rendering


@dataclass
class FakeSummarizer:
    """A deterministic stand-in for the summarizer LLM: returns a shortened text and counts its calls.

    It keeps, verbatim and up to 80% of its token cap: first the lines of earlier summaries,
    checkpoints and state documents in its input (the prompts ask to carry them over), then the
    newest fact-like lines (a path, a number, a handle, an error word, a decision); and it copies
    any pinned facts it is asked to keep. Asked for JSON (checkpoint, distill), it answers with a
    JSON object of the keys the prompt names. It is a generous model of an LLM summarizer: a real
    one may paraphrase values. Tokens in and out are counted with ctxagent's tokenizer.
    """

    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0  # time inside the fake (a real LLM call's latency replaces it): not overhead

    def __call__(self, text: str, max_tokens: int) -> str:
        start = time.perf_counter()
        self.calls += 1
        self.tokens_in += count_text(text, MODEL)
        reply = self.reply(text, max_tokens)
        self.tokens_out += count_text(reply, MODEL)
        self.seconds += time.perf_counter() - start
        return reply

    @staticmethod
    def reply(text: str, max_tokens: int) -> str:
        import json

        head, _, material = text.partition("\n\n")
        pins: list[str] = []
        if "pinned facts verbatim" in head:
            pins = [line[2:] for line in head.splitlines() if line.startswith("- ")]
        carried: list[str] = []  # earlier summaries' lines: the prompts say to carry them over
        fresh: list[str] = []
        inside = False  # within the body of an earlier summary, checkpoint or window note
        for line in material.splitlines():
            if "[ctxagent " in line and "{" in line:  # an earlier state document as one line of JSON
                try:
                    doc = json.loads(line[line.index("{"):])
                except ValueError:
                    doc = None
                if isinstance(doc, dict):
                    carried.extend(str(v) for value in doc.values() if isinstance(value, list) for v in value)
                    continue
            flat = " ".join(line.split())[:200]
            if _LABEL.match(flat):
                inside = "[ctxagent " in flat
                if not inside and _FACTY.search(flat):
                    fresh.append(flat)
            elif inside and flat and not flat.startswith(("Summary (fake", "key facts:", "goal:", "phase:")):
                carried.append(flat.removeprefix("- "))
            elif not inside and _FACTY.search(flat):
                fresh.append(flat)
        budget = max(20, int(max_tokens * 0.8) - sum(count_text(p, MODEL) + 1 for p in pins))
        picked: list[str] = []
        used = 0
        for line in [*dict.fromkeys(carried), *reversed(fresh)]:
            cost = count_text(line, MODEL) + 1
            if used + cost > budget:
                break
            picked.append(line)
            used += cost
        if "JSON object" in head:
            if "state document" in head:
                return json.dumps({"goal": "fix the failing billing tests", "verified_facts": picked + pins,
                                   "discarded_hypotheses": [], "pending_actions": ["continue"]})
            return json.dumps({"goal": "fix the failing billing tests", "phase": "working",
                               "key_facts": picked + pins, "completed": [], "pending": ["continue"]})
        return "\n".join(["Summary (fake summarizer: earlier summaries carried over, then the newest facts):",
                          *picked, *pins])


# --- per-trace preparation -----------------------------------------------------------------------


@dataclass
class Prepared:
    """A trace as messages with token counts (counted once, shared by every run)."""

    trace: Trace
    system: Message
    system_tokens: int
    users: dict[int, tuple[Message, int]]
    assistants: dict[int, tuple[Message, int]]
    raw: dict[str, tuple[Message, int]]  # call id -> raw tool message (no offloading) and tokens
    seconds: float = 0.0


def prepare(trace: Trace, system_prompt: str) -> Prepared:
    start = time.perf_counter()
    system = {"role": "system", "content": system_prompt}
    users, assistants, raw = {}, {}, {}
    for turn in trace.turns:
        if turn.user is not None:
            msg = {"role": "user", "content": turn.user}
            users[turn.number] = (msg, count_message(msg, MODEL))
        msg = {"role": "assistant", "content": turn.content,
               "tool_calls": [tool_call(c.id, c.name, c.arguments) for c in turn.calls]}
        assistants[turn.number] = (msg, count_message(msg, MODEL))
        for call in turn.calls:
            tool = {"role": "tool", "tool_call_id": call.id, "content": call.output}
            raw[call.id] = (tool, count_message(tool, MODEL))
    return Prepared(trace, system, count_message(system, MODEL), users, assistants, raw,
                    time.perf_counter() - start)


@dataclass
class Offloaded:
    """Tool messages as ctxagent's offloading leaves them, for one offload policy, and the store
    (a directory of real files) that settle wrote the offloaded outputs into."""

    messages: dict[str, tuple[Message, int]]
    handles: set[str]
    outputs: Path
    seconds: float


def offload_all(prep: Prepared, policy: Any, root: Path) -> Offloaded:
    """Run every tool output of the trace through ctxagent's real ``settle`` with ``policy``."""
    from ctxagent.sessions.store import OutputStore
    from ctxagent.tools.offload import settle

    store = OutputStore(root / "outputs")
    messages: dict[str, tuple[Message, int]] = {}
    handles: set[str] = set()
    start = time.perf_counter()
    for turn in prep.trace.turns:
        for call in turn.calls:
            content, record = settle(call.output, call=ToolCall(call.id, call.name, call.arguments),
                                     tool_name=call.name, store=store, policy=policy)
            if record is None:
                messages[call.id] = prep.raw[call.id]
                continue
            handles.add(record.handle)
            msg = {"role": "tool", "tool_call_id": call.id, "content": content}
            messages[call.id] = (msg, count_message(msg, MODEL))
    return Offloaded(messages, handles, store.root, time.perf_counter() - start)


# --- managers ------------------------------------------------------------------------------------


@dataclass
class View:
    messages: list[Message]
    tokens: list[int]  # per message, as the manager counts them (ctxagent: stored counts)
    compactions: int = 0


class Manager(Protocol):
    name: str
    summarizer: FakeSummarizer | None

    def add(self, message: Message, tokens: int, seq: int, turn: int) -> None: ...

    def tool_message(self, call_id: str) -> tuple[Message, int]: ...

    def view(self, turn: int) -> View: ...

    def stored_texts(self, view_text: str) -> list[str]: ...


class PlainManager:
    """No context management: every message, every request (optionally with ctxagent's offloading)."""

    summarizer = None

    def __init__(self, name: str, messages: dict[str, tuple[Message, int]], outputs: Path | None = None):
        self.name = name
        self._tools = messages
        self._outputs = outputs
        self.history: list[Message] = []
        self.tokens: list[int] = []

    def add(self, message: Message, tokens: int, seq: int, turn: int) -> None:
        self.history.append(message)
        self.tokens.append(tokens)

    def tool_message(self, call_id: str) -> tuple[Message, int]:
        return self._tools[call_id]

    def view(self, turn: int) -> View:
        return View(self.history, self.tokens)

    def stored_texts(self, view_text: str) -> list[str]:
        return store_texts(self._outputs, view_text) if self._outputs else []

    def stored_refs(self, view_text: str) -> dict[str, str]:
        return store_refs(self._outputs, view_text) if self._outputs else {}

    def tool_context(self) -> Any:
        """A context for ``grep_output`` on the offload store (None without one)."""
        return tool_context(self._outputs) if self._outputs else None


def tool_context(outputs: Path, transcript: Path | None = None) -> Any:
    """A :class:`ctxagent.tools.base.ToolContext` over the output store at ``outputs`` (cached per store)."""
    from ctxagent.sessions.store import OutputStore
    from ctxagent.tools.base import ToolContext

    key = (outputs, transcript)
    if key not in _CONTEXTS:
        _CONTEXTS[key] = ToolContext(OutputStore(outputs), outputs.parent, transcript=transcript)
    return _CONTEXTS[key]


_CONTEXTS: dict[tuple[Path, Path | None], Any] = {}
_TEXT_CACHE: dict[tuple[Path, str], str] = {}


def store_texts(outputs: Path, view_text: str) -> list[str]:
    """The stored outputs whose handle the view names (files of a real ctxagent output store)."""
    return list(store_refs(outputs, view_text).values())


def store_refs(outputs: Path, view_text: str) -> dict[str, str]:
    """Handle -> stored text of every stored output whose handle the view names."""
    from ctxagent.sessions.store import OutputStore

    store = OutputStore(outputs)
    found: dict[str, str] = {}
    for handle in set(HANDLE.findall(view_text)):
        text = _TEXT_CACHE.get((outputs, handle))  # asked for every request: a lookup, not a path and a stat
        if text is None:
            try:
                path = store.path_of(handle)
            except Exception:  # not a handle this store can name
                continue
            if not path.is_file():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            _TEXT_CACHE[(outputs, handle)] = text
        found[handle] = text
    return found


# --- ctxagent: the real runner --------------------------------------------------------------------


@contextmanager
def data_dir(path: Path) -> Iterator[None]:
    """``CTXAGENT_DATA_DIR`` set to ``path`` for the block (the sessions folder of one run)."""
    old = os.environ.get("CTXAGENT_DATA_DIR")
    os.environ["CTXAGENT_DATA_DIR"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CTXAGENT_DATA_DIR", None)
        else:
            os.environ["CTXAGENT_DATA_DIR"] = old


class TraceModel:
    """The model of a run: plays the trace's scripted assistant turns in order and keeps the request it
    was sent (the messages, and the runner's view entries for their stored token counts). Reports as
    usage the runner's own estimate of the request (a provider whose tokenizer matches ours exactly:
    the calibration stays 1). Its time is the model's, not management overhead."""

    name = MODEL

    def __init__(self, prep: Prepared):
        self.prep = prep
        self.turns = prep.trace.turns
        self.position = 0  # index of the next turn to play
        self.runner: Any = None  # set once the runner exists (for the entries of the request)
        self.seconds = 0.0
        self.sent: tuple[int, list[Message], list[int]] | None = None  # turn number, messages, tokens per message

    def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> Any:
        from ctxagent.agent.model import Reply, Usage

        start = time.perf_counter()
        turn = self.turns[self.position]
        self.position += 1
        entries = self.runner.request()  # the view the runner built for this request
        if len(entries) == len(messages) and all(e.message is m for e, m in zip(entries, messages, strict=True)):
            tokens = [e.tokens for e in entries]
        else:  # not the runner's current view (an emergency rebuild): count the messages themselves
            tokens = [count_message(m, MODEL) for m in messages]
        self.sent = (turn.number, list(messages), tokens)
        usage = Usage(prompt_tokens=PER_REQUEST + sum(tokens) + self.runner.tools.tool_tokens,
                      completion_tokens=self.prep.assistants[turn.number][1])
        reply = Reply(turn.content, tuple(ToolCall(c.id, c.name, c.arguments) for c in turn.calls), usage=usage)
        self.seconds += time.perf_counter() - start
        return reply


_AT_MOST = re.compile(r"At most (\d+) tokens")


class SummarizerModel:
    """The summarizer the runner calls (``Runner._summarize``: system + one user message, no tools):
    :class:`FakeSummarizer` behind the model interface. Like a real LLM it keeps to the prompt's
    "At most N tokens" and never writes more than ``max_tokens`` (the profile's ``summarizer.max_tokens``,
    the model's output cap); reports its tokens as usage; its time is the LLM's, not overhead."""

    name = "bench-fake-summarizer"

    def __init__(self, fake: FakeSummarizer, max_tokens: int):
        self.fake, self.max_tokens = fake, max_tokens
        self.seconds = 0.0

    def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> Any:
        from ctxagent.agent.model import Reply, Usage

        start = time.perf_counter()
        text = str(messages[-1].get("content") or "")
        asked = _AT_MOST.search(text)
        cap = min(self.max_tokens, int(asked.group(1))) if asked else self.max_tokens
        before_in, before_out = self.fake.tokens_in, self.fake.tokens_out
        content = self.fake(text, cap)
        usage = Usage(prompt_tokens=self.fake.tokens_in - before_in,
                      completion_tokens=self.fake.tokens_out - before_out)
        self.seconds += time.perf_counter() - start
        return Reply(content, usage=usage)


def bench_toolset(prep: Prepared, profile: Any, ctx: Any, policy: Any) -> Any:
    """The run's tools as ``agent.setup.toolset_for`` makes them (the profile's tools, then the context
    tools its pipelines need), with every tool the trace calls replaced by one that returns the trace's
    output for that call (the real tool's schema and kind; a trace tool the profile lacks is added).
    Their values go through the toolset's real ``settle`` (offloading, previews, the output store)."""
    from dataclasses import replace

    from ctxagent.tools.agent_tools import context_tools
    from ctxagent.tools.base import Tool, schema
    from ctxagent.tools.toolset import BUILTIN, make_toolset

    outputs = {c.id: c.output for t in prep.trace.turns for c in t.calls}
    toolset: Any = None

    def replay(tool_ctx: Any, **arguments: Any) -> str:
        return outputs[toolset.current]

    called: dict[str, set[str]] = {}
    for turn in prep.trace.turns:
        for c in turn.calls:
            called.setdefault(c.name, set()).update(json.loads(c.arguments))

    def synthetic(name: str) -> Tool:
        if name in BUILTIN:
            return replace(BUILTIN[name], fn=replay)
        return Tool(name, f"benchmark tool {name}", schema({a: {"type": "string"} for a in sorted(called[name])}),
                    replay)

    steps = sorted({step.strategy for path in profile.pipelines.values() for step in path})
    tools = [synthetic(n) if n in called else BUILTIN[n] for n in profile.tools]
    tools += [synthetic(n) for n in called if n not in profile.tools]
    made = make_toolset([], ctx, policy, [*tools, *context_tools(steps)])
    toolset = ReplayToolset(list(made.tools.values()), made.ctx, made.policy)
    return toolset


class ReplayToolset(Toolset):
    """A real :class:`~ctxagent.tools.toolset.Toolset` that tells its replaying tools which call they
    answer, and times its calls (tool time: the tool and ``settle``, not management overhead)."""

    current = ""
    seconds = 0.0

    def call(self, call: Any, handle: str | None = None, *, ctx: Any = None, arguments: Any = None) -> Any:
        start = time.perf_counter()
        self.current = call.id
        try:
            return super().call(call, handle, ctx=ctx, arguments=arguments)
        finally:
            self.seconds += time.perf_counter() - start


class CtxagentRun:
    """ctxagent as a user runs it: the real :class:`ctxagent.agent.runner.Runner` on a real session
    (header, transcript, output store) with ``profile`` on ``path``, :class:`TraceModel` as its model,
    :func:`bench_toolset` as its tools and, where the runner uses one, :class:`SummarizerModel`.

    :meth:`drive` feeds it the trace: ``runner.run(user message, max_turns=N)`` for each stretch of
    turns up to the next user message (the run stops at that bound, with the runner's own "max_turns"
    end record, and the next ``run`` appends the user message), so the requests are exactly the
    trace's, as for every other configuration. Every request the model receives is checked
    (:class:`Checks`). Overhead of a request: the runner's wall time from the end of the previous
    request's tools to the reply recorded (building the view, strategies, compaction and output
    records, materialized originals, transcript appends), minus the model's and the summarizer's time.
    """

    def __init__(self, name: str, prep: Prepared, profile: Any, *, path: str, window: int, root: Path):
        import yaml

        from ctxagent.agent.config import RunConfig
        from ctxagent.agent.runner import Runner
        from ctxagent.agent.setup import offload_policy
        from ctxagent.agent.state import fold
        from ctxagent.sessions import records
        from ctxagent.sessions.session import Session
        from ctxagent.tools.base import ToolContext
        from ctxagent.tools.guard import Grants

        # a replayed trace cannot react to the loop guard's warning (its next call is fixed), so the guard
        # is off here; benchmarks/quality.py measures what it and the repeat notes save
        profile = profile.model_copy(update={"loop_guard": 0})
        self.name, self.prep, self.profile, self.path, self.window = name, prep, profile, path, window
        self.data = root / "data"
        workdir = root / "work"
        workdir.mkdir(parents=True, exist_ok=True)
        self.fake = FakeSummarizer()
        self.summarizer = SummarizerModel(self.fake, profile.summarizer.max_tokens)
        self.model = TraceModel(prep)
        self.policy = offload_policy(profile, MODEL)
        # the profile as run (window, limits, pipeline changed from the bundled one) is a YAML file the
        # header names, as `--profile PATH` would, with its text kept in the header
        profile_file = root / "profile.yaml"
        profile_text = yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False)
        profile_file.write_text(profile_text, encoding="utf-8")
        with data_dir(self.data):
            self.session = Session.at("bench")
            self.session.root.mkdir(parents=True)
            header = records.SessionHeader(name=self.session.name, model=MODEL, profile=str(profile_file),
                                           context_window=window, path=path, workdir=str(workdir),
                                           profile_text=profile_text)
            self.session.transcript.append([header])
            state = fold([header], transcript_path=str(self.session.transcript.path))
            self.store = self.session.store
            self.toolset = bench_toolset(prep, profile, ToolContext(self.store, workdir), self.policy)
            self.runner = Runner(self.session, state, profile, self.model, self.toolset,  # as `--allow-all`:
                                 summarizer_model=lambda: self.summarizer,  # the trace's shell and write calls run
                                 config=RunConfig(grants=Grants(allow_all=True)))
        self.model.runner = self.runner
        _forget(self.store.root)

    def stored_texts(self, view_text: str) -> list[str]:
        return store_texts(self.store.root, view_text)

    def stored_refs(self, view_text: str) -> dict[str, str]:
        return store_refs(self.store.root, view_text)

    def tool_context(self) -> Any:
        return tool_context(self.store.root, self.session.transcript.path)

    def search_everything(self, keywords: str, pattern: str, value: str) -> bool | None:
        """One ``recall`` call (BM25, its default hits) with ``keywords``; None without the tool."""
        if "recall" not in self.profile.tools or not keywords.strip():
            return None if "recall" not in self.profile.tools else False
        from ctxagent.tools.recall import recall

        return value in recall(self.tool_context(), keywords)

    def drive(self, *, group: str, probes: bool = True,
              on_view: Callable[[int, View], None] | None = None) -> RunResult:
        """Run the whole trace through the runner; see the class docstring. Never raises for ctxagent's
        error: an overflow (``ContextOverflowError``) or a crash stops the run at that turn."""
        from ctxagent import Compacted, ContextOverflowError, LimitReached, Replied, Requesting, ToolDone

        result = RunResult(self.name, group)
        budget = self.runner.budget()
        system = {"role": "system", "content": self.profile.system_prompt}
        checks = Checks(result, self.prep.trace, system, window=self.window, tool_tokens=self.runner.tools.tool_tokens,
                        reserved=int(budget.reserved), probes=probes, on_view=on_view)
        turns, model = self.prep.trace.turns, self.model
        task: Message | None = None
        current: Message | None = None
        users_sent: set[int] = set()
        with data_dir(self.data):
            while model.position < len(turns) and result.stopped_at is None:
                turn = turns[model.position]
                user = None
                if turn.user is not None and turn.number not in users_sent:
                    users_sent.add(turn.number)
                    user = turn.user
                    current = {"role": "user", "content": user}
                    task = task or current
                upto = next((i for i in range(model.position + 1, len(turns)) if turns[i].user is not None), len(turns))
                events = self.runner.run(user, max_turns=upto - model.position)
                step = 0.0  # the runner's own time since the last request's tools ended
                compactions = 0
                announced: Any = None
                in_model, in_llm = model.seconds, self.summarizer.seconds
                try:
                    while True:
                        start = time.perf_counter()
                        try:
                            event = next(events)
                        except StopIteration:
                            break
                        finally:
                            step += time.perf_counter() - start
                        if isinstance(event, Compacted):
                            compactions += 1
                        elif isinstance(event, Requesting):
                            announced = event
                        elif isinstance(event, Replied):
                            assert model.sent is not None and task is not None
                            number, messages, tokens = model.sent
                            overhead = step - (model.seconds - in_model) - (self.summarizer.seconds - in_llm)
                            request, prefix = checks.request(number, View(messages, tokens, compactions), self, task,
                                                             current, overhead)
                            # the runner's own account of the request must agree with the harness's
                            if announced is None or announced.tokens != request + checks.reserved or (
                                    checks.previous is not None and len(result.tokens) > 1
                                    and announced.same != prefix.messages):
                                result.extra["runner_disagreements"] = result.extra.get("runner_disagreements", 0) + 1
                            announced = None
                            result.extra["compaction_records"] = result.extra.get("compaction_records", 0) + compactions
                            step, compactions = 0.0, 0
                        elif isinstance(event, ToolDone):
                            step = 0.0
                            in_model, in_llm = model.seconds, self.summarizer.seconds
                except LimitReached as err:
                    if err.bound != "max_turns":  # a guard stopped the run (thrash): a finding, not a stretch end
                        result.stopped_at = turns[min(model.position, len(turns) - 1)].number
                        result.error = f"stopped: {err}"[:400]
                except ContextOverflowError as err:
                    result.stopped_at = turns[min(model.position, len(turns) - 1)].number
                    result.error = f"context overflow: {err}"[:400]
                except Exception as err:  # a crash is a finding, reported, not a benchmark failure
                    result.stopped_at = turns[min(model.position, len(turns) - 1)].number
                    result.error = f"crash: {type(err).__name__}: {err}"[:400]
        result.summarizer_calls = self.fake.calls
        result.summarizer_tokens_in = self.fake.tokens_in
        result.summarizer_tokens_out = self.fake.tokens_out
        result.extra.setdefault("compaction_records", 0)
        result.extra.setdefault("runner_disagreements", 0)
        result.extra["tool_schema_tokens"] = self.runner.tools.tool_tokens
        result.extra.update(model_seconds=model.seconds, tool_seconds=self.toolset.seconds,
                            summarizer_seconds=self.summarizer.seconds,
                            transcript_bytes=self.session.transcript.path.stat().st_size)
        return result


def _forget(outputs: Path) -> None:
    for key in list(_TEXT_CACHE):
        if key[0] == outputs:
            del _TEXT_CACHE[key]


# --- prompt caching -------------------------------------------------------------------------------


class Prefix(NamedTuple):
    """What a prompt cache serves of one request: leading messages and their tokens (schemas included)."""

    messages: int
    tokens: int


def cached_prefix(previous: Sequence[Message] | None, messages: Sequence[Message], tokens: Sequence[int],
                  schema_tokens: int) -> Prefix:
    """The part of a request a provider's prompt cache would serve, given the request before it.

    ``messages`` and ``tokens`` (per message) are the request; ``previous`` is the previous request's
    messages (None for the first request: nothing is cached). The cached part is the longest run of
    leading whole messages equal (``==``) to ``previous``'s, plus ``schema_tokens`` (the tool schemas,
    which a provider puts before the messages) when that run is not empty. A simple model: only the
    previous request is cached, with no minimum length (OpenAI's 1,024 tokens), no 128-token steps, no
    cache-write surcharge, no expiry. Units: tokens.
    """
    if not previous:
        return Prefix(0, 0)
    same = 0
    for old, new in zip(previous, messages, strict=False):  # the shorter one bounds the prefix
        if old is not new and old != new:
            break
        same += 1
    return Prefix(same, sum(tokens[:same]) + schema_tokens if same else 0)


def billed(tokens: Sequence[int], cached: Sequence[int], ratio: float) -> float:
    """Input tokens as billed: uncached tokens at full price plus cached ones at ``ratio`` (tokens)."""
    return sum(tokens) - (1 - ratio) * sum(cached)


@cache
def model_cache_ratio(model: str = MODEL) -> float | None:
    """``cache_read_input_token_cost / input_cost_per_token`` of ``model`` from litellm's price map
    (the JSON file litellm ships and loads as ``litellm.model_cost`` offline; read without importing
    litellm, which takes seconds), or None when the model or its cache price is not in it."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.origin:
        return None
    path = Path(spec.origin).parent / "model_prices_and_context_window_backup.json"
    try:
        prices = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    entry = prices.get(model) or prices.get(model.split("/", 1)[-1]) or {}
    read, full = entry.get("cache_read_input_token_cost"), entry.get("input_cost_per_token")
    return read / full if read is not None and full else None


# --- the loop ------------------------------------------------------------------------------------


@dataclass
class RunResult:
    name: str
    group: str
    turns: int = 0
    tokens: list[int] = field(default_factory=list)  # input tokens per request (messages + schemas)
    cached: list[int] = field(default_factory=list)  # of those, tokens a prompt cache serves (cached_prefix)
    prefix_breaks: list[int] = field(default_factory=list)  # turns whose request changed an earlier message
    over_budget_turns: list[int] = field(default_factory=list)
    pair_violation_turns: list[int] = field(default_factory=list)
    overhead_ms: list[float] = field(default_factory=list)
    compaction_turns: list[int] = field(default_factory=list)
    pair_violation_requests: int = 0
    pair_examples: list[str] = field(default_factory=list)
    head_violation_requests: int = 0
    head_examples: list[str] = field(default_factory=list)
    over_budget_requests: int = 0
    stopped_at: int | None = None
    error: str | None = None
    probes: list[dict[str, Any]] = field(default_factory=list)
    summarizer_calls: int = 0
    summarizer_tokens_in: int = 0
    summarizer_tokens_out: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def total(self, upto: int | None = None) -> int:
        """Input tokens of the first ``upto`` requests (all by default)."""
        return sum(self.tokens[:upto] if upto else self.tokens)

    def billed(self, ratio: float, upto: int | None = None) -> float:
        """Cache-billed input tokens of the first ``upto`` requests at cache-read ``ratio``."""
        end = upto or len(self.tokens)
        return billed(self.tokens[:end], self.cached[:end], ratio)


def check_head(messages: Sequence[Message], system: Message, task: Message, current: Message | None) -> str | None:
    """How ``messages`` breaks HEAD (system first and byte-identical, task kept, current user message
    kept), or None."""
    if not messages or messages[0] != system:
        return "the system message is not first or not identical"
    if not any(m == task for m in messages):
        return "the task (first user message) is missing"
    if current is not None and not any(m == current for m in messages):
        return "the user message of the current turn is missing"
    return None


class Checks:
    """What is checked and counted on every request, whoever built it (:func:`drive` for the peers and
    the baselines, :class:`CtxagentRun` for ctxagent): input tokens, the prompt-cache prefix, compactions,
    BUDGET, PAIR, HEAD, fact probes. ``system`` is the system message HEAD wants first."""

    def __init__(self, result: RunResult, trace: Trace, system: Message, *, window: int, tool_tokens: int,
                 reserved: int, probes: bool = True, on_view: Callable[[int, View], None] | None = None):
        self.result, self.system = result, system
        self.window, self.tool_tokens, self.reserved = window, tool_tokens, reserved
        self.on_view = on_view
        self.previous: list[Message] | None = None  # the last request's messages, copied (a manager may reuse its list)
        self.wanted: dict[int, list[tuple[Any, int]]] = {}
        # how a model would reach a fact (benchmarks/reach.py): baselines, profiles and peers (not the
        # strategies alone: the search per probe would double the suite's time)
        self.reach = reach_of(trace) if probes and result.group != "strategy" else None
        self.reach_at = {len(trace.turns)}  # every fact planted before the last request
        self.facts = trace.facts
        if probes:
            for at, fact, distance in trace.probes():
                self.wanted.setdefault(at, []).append((fact, distance))

    def request(self, number: int, view: View, stored: Any, task: Message, current: Message | None,
                overhead_s: float) -> tuple[int, Prefix]:
        """Check and count the request of turn ``number``; ``stored`` has ``stored_texts(view_text)``.
        Returns the request's input tokens (messages, schemas, priming) and its cached prefix."""
        result = self.result
        result.overhead_ms.append(overhead_s * 1000)
        request = PER_REQUEST + sum(view.tokens) + self.tool_tokens
        result.tokens.append(request)
        prefix = cached_prefix(self.previous, view.messages, view.tokens, self.tool_tokens)
        result.cached.append(prefix.tokens)
        if self.previous is not None and prefix.messages < len(self.previous):
            result.prefix_breaks.append(number)
        self.previous = [dict(m) for m in view.messages]
        result.turns = number
        if view.compactions:
            result.compaction_turns.append(number)
        if request + self.reserved > self.window:
            result.over_budget_requests += 1
            result.over_budget_turns.append(number)
        problems = pair_violations(view.messages)
        if problems:
            result.pair_violation_requests += 1
            result.pair_violation_turns.append(number)
            if len(result.pair_examples) < 3:
                result.pair_examples.append(f"turn {number}: {problems[0]}")
        head = check_head(view.messages, self.system, task, current)
        if head:
            result.head_violation_requests += 1
            if len(result.head_examples) < 3:
                result.head_examples.append(f"turn {number}: {head}")
        if number in self.wanted:
            result.probes.extend(probe(view, stored, self.wanted[number], number, result.compaction_turns))
        if self.reach is not None and number in self.reach_at:
            result.extra.setdefault("reach", []).extend(self.reach.sweep(stored, view, self.facts, number))
        if self.on_view is not None:
            self.on_view(number, view)
        return request, prefix


def drive(prep: Prepared, manager: Manager, *, group: str, window: int, tool_tokens: int, reserved: int,
          probes: bool = True, on_view: Callable[[int, View], None] | None = None) -> RunResult:
    """Run ``manager`` (a baseline or a peer) over the trace: per turn, append the user message, ask
    for the view (timed), check it (:class:`Checks`), append the scripted reply and the tool results.
    Never raises for a manager's error: a manager that refuses (Overflow) or crashes stops the run and
    the result says at which turn. ctxagent itself is driven by :class:`CtxagentRun` (the real runner)."""
    result = RunResult(manager.name, group)
    checks = Checks(result, prep.trace, prep.system, window=window, tool_tokens=tool_tokens, reserved=reserved,
                    probes=probes, on_view=on_view)
    seq = 0
    task: Message | None = None
    current: Message | None = None
    manager.add(prep.system, prep.system_tokens, seq, 0)
    seq += 1
    for turn in prep.trace.turns:
        number = turn.number
        if number in prep.users:
            msg, tokens = prep.users[number]
            manager.add(msg, tokens, seq, number)
            seq += 1
            current = msg
            task = task or msg
        in_llm = manager.summarizer.seconds if manager.summarizer is not None else 0.0
        start = time.perf_counter()
        try:
            view = manager.view(number)
        except Overflow as err:
            result.stopped_at, result.error = number, f"context overflow: {err}"[:400]
            break
        except Exception as err:  # a crash is a finding, reported, not a benchmark failure
            result.stopped_at, result.error = number, f"crash: {type(err).__name__}: {err}"[:400]
            break
        elapsed = time.perf_counter() - start
        if manager.summarizer is not None:  # the summarizer stands for an LLM call: its time is not ours
            elapsed -= manager.summarizer.seconds - in_llm
        assert task is not None
        checks.request(number, view, manager, task, current, elapsed)
        msg, tokens = prep.assistants[number]
        manager.add(msg, tokens, seq, number)
        seq += 1
        for call in turn.calls:
            msg, tokens = manager.tool_message(call.id)
            manager.add(msg, tokens, seq, number)
            seq += 1
    if manager.summarizer is not None:
        result.summarizer_calls = manager.summarizer.calls
        result.summarizer_tokens_in = manager.summarizer.tokens_in
        result.summarizer_tokens_out = manager.summarizer.tokens_out
    return result


_REACH: dict[int, tuple[Trace, Any]] = {}


def reach_of(trace: Trace) -> Any:
    """The :class:`benchmarks.reach.Reach` of ``trace`` (built once per trace)."""
    from benchmarks.reach import Reach

    if id(trace) not in _REACH or _REACH[id(trace)][0] is not trace:
        _REACH[id(trace)] = (trace, Reach(trace))
    return _REACH[id(trace)][1]


def probe(view: View, manager: Any, facts: list[tuple[Any, int]], turn: int,
          compactions: Sequence[int] = ()) -> list[dict[str, Any]]:
    """Where each probed fact's latest value is: in the view, through a handle the view names, or
    lost (``stale`` when only a superseded value is still there); ``crossed``: the compactions
    recorded after the fact was planted, up to this request."""
    text = "\n".join(text_of(m) for m in view.messages)
    stored = manager.stored_texts(text)  # anything with stored_texts(view_text)
    out = []
    for fact, distance in facts:
        value = fact.expected(turn)
        if value in text:
            status = "in_view"
        elif any(value in s for s in stored):
            status = "handle"
        else:
            old = fact.stale(turn)
            status = "stale" if old and (old in text or any(old in s for s in stored)) else "lost"
        row = {"fact": fact.key, "kind": fact.kind, "distance": distance, "turn": turn, "status": status,
               "planted": fact.turn, "crossed": sum(fact.turn < t <= turn for t in compactions),
               "corrected": fact.corrected is not None and turn >= (fact.corrected_turn or 0)}
        out.append(row)
    return out


# --- summaries of a run --------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(result: RunResult, baseline: RunResult | None, checkpoints: Sequence[int],
            cache_ratio: float = DEFAULT_CACHE_RATIO, model_ratio: float | None = None) -> dict[str, Any]:
    """The numbers of one run for the table and the JSON (tokens, ms). Ratios to ``baseline`` (raw and
    cache-billed input at ``cache_ratio``, and at ``model_ratio`` when given) and the per-checkpoint
    counts (over budget, PAIR, facts) cover the first ``checkpoint`` requests."""
    over = result.overhead_ms
    first, last = over[:100], over[-100:]
    out: dict[str, Any] = {
        "name": result.name,
        "group": result.group,
        "turns": result.turns,
        "stopped_at": result.stopped_at,
        "error": result.error,
        "peak_tokens": max(result.tokens, default=0),
        "total_input_tokens": result.total(),
        "cached_input_tokens": sum(result.cached),
        "cache_ratio": cache_ratio,
        "billed_input_tokens": result.billed(cache_ratio),
        "cache_hit_pct": 100.0 * sum(result.cached) / result.total() if result.total() else 0.0,
        "prefix_breaks": len(result.prefix_breaks),
        "pair_violation_requests": result.pair_violation_requests,
        "pair_examples": result.pair_examples,
        "head_violation_requests": result.head_violation_requests,
        "head_examples": result.head_examples,
        "over_budget_requests": result.over_budget_requests,
        "compactions": len(result.compaction_turns),
        "overhead_ms_p50": statistics.median(over) if over else 0.0,
        "overhead_ms_p99": pct(over, 0.99),
        "overhead_ms_p50_first100": statistics.median(first) if first else 0.0,
        "overhead_ms_p50_last100": statistics.median(last) if last else 0.0,
        "summarizer_calls": result.summarizer_calls,
        "summarizer_tokens_in": result.summarizer_tokens_in,
        "summarizer_tokens_out": result.summarizer_tokens_out,
        **result.extra,
    }
    for at in checkpoints:
        out.update(_at_checkpoint(result, at))
    if baseline is not None and baseline.tokens:
        out.update(_versus(result, baseline, checkpoints, cache_ratio, model_ratio))
    out.update(_retention(result.probes))
    from benchmarks.reach import summarize as reach_summary

    out.update(reach_summary(result.probes, result.compaction_turns, result.extra.pop("reach", None)))
    return out


def _complete(result: RunResult, at: int) -> bool:
    """Whether ``result`` sent its first ``at`` requests (it did not stop before)."""
    return result.turns >= at and (result.stopped_at is None or result.stopped_at > at)


def _at_checkpoint(result: RunResult, at: int) -> dict[str, Any]:
    """Counts over the first ``at`` requests: over budget, PAIR violations, facts retrievable (%)."""
    probes = [p["status"] in ("in_view", "handle") for p in result.probes if p["turn"] <= at]
    return {f"over_budget_at_{at}": sum(t <= at for t in result.over_budget_turns),
            f"pair_bad_at_{at}": sum(t <= at for t in result.pair_violation_turns),
            f"retrievable_pct_at_{at}": 100.0 * sum(probes) / len(probes) if probes else None}


def _versus(result: RunResult, baseline: RunResult, checkpoints: Sequence[int], cache_ratio: float,
            model_ratio: float | None) -> dict[str, Any]:
    """Raw and cache-billed input as fractions of ``baseline``'s over the same requests."""
    out: dict[str, Any] = {}
    for at in checkpoints:
        ok = _complete(result, at) and baseline.turns >= at
        out[f"ratio_at_{at}"] = result.total(at) / baseline.total(at) if ok else None
        out[f"billed_ratio_at_{at}"] = result.billed(cache_ratio, at) / baseline.billed(cache_ratio, at) if ok else None
        if model_ratio is not None:
            out[f"billed_model_ratio_at_{at}"] = (result.billed(model_ratio, at) / baseline.billed(model_ratio, at)
                                                  if ok else None)
    out["model_cache_ratio"] = model_ratio
    n = result.turns
    out["ratio"] = result.total() / baseline.total(n) if n else None
    out["billed_ratio"] = result.billed(cache_ratio) / baseline.billed(cache_ratio, n) if n else None
    spent = result.summarizer_tokens_in + result.summarizer_tokens_out
    saved = baseline.total(n) - result.total()
    out["compression_tokens_spent"] = spent
    out["tokens_saved_vs_none"] = saved
    out["saved_per_spent"] = (saved / spent) if spent else None
    return out


def _retention(probes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Where the probed facts were: counts by status, % retrievable overall and by probe distance."""
    statuses = [p["status"] for p in probes]
    if not statuses:
        return {}
    out: dict[str, Any] = {"retention": {s: statuses.count(s) for s in ("in_view", "handle", "stale", "lost")},
                           "retrievable_pct": 100.0 * sum(s in ("in_view", "handle") for s in statuses) / len(statuses)}
    by: dict[str, list[bool]] = {}
    for p in probes:
        by.setdefault(str(p["distance"]), []).append(p["status"] in ("in_view", "handle"))
    out["retention_by_distance"] = {d: 100.0 * sum(v) / len(v) for d, v in by.items()}
    lost: dict[str, int] = {}
    for p in probes:
        if p["status"] in ("lost", "stale"):
            lost[f"{p['kind']}:{p['fact']}"] = lost.get(f"{p['kind']}:{p['fact']}", 0) + 1
    out["lost_facts"] = lost
    return out
