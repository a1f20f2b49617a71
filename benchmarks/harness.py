"""The per-turn loop every context manager is driven through, and what it measures.

One loop for everyone (:func:`drive`): for each turn of a :class:`~benchmarks.workloads.Trace`,
append the user message (if any), ask the manager for the view of the next request (timed: that is
the *management overhead*), check the view (PAIR law with :func:`ctxagent.messages.pair_violations`,
HEAD, BUDGET, fact probes), then append the scripted assistant message and the tool results.

What is real for ctxagent (:class:`CtxagentManager`): the view comes from
:class:`ctxagent.agent.context.ContextState` exactly as the runner uses it (messages added as
``MessageRecord`` with stored token counts, ``build(steps, budget, turn=..., pins=...)``, recorded
compactions applied with ``ContextState.record``, the originals a strategy points at written to a
real :class:`~ctxagent.sessions.store.OutputStore` with ``store_text`` as ``Runner._materialize``
does). Tool outputs go through the real :func:`ctxagent.tools.offload.settle` with the profile's
tool-result limit and preview settings, into a real output store (computed once per offload policy
and copied into each run's own store; settle's time is tool time, not management overhead). Not
done: the JSONL transcript appends (they cost the same with or without management) and the model
call (scripted). Token counts are ctxagent's tiktoken counts (o200k_base for gpt-4o-mini).

Cache billing (:func:`cached_prefix`): each request's input is split into the part a provider's prompt
cache would serve (the leading whole messages identical to the previous request's, plus the tool
schemas in front of them) and the rest; billed input = uncached + ratio x cached, with ratio = the
cache-read price / the input price (:data:`DEFAULT_CACHE_RATIO` for the headline numbers,
:func:`model_cache_ratio` for the model's own price).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from benchmarks.workloads import Trace
from ctxagent.agent.model import ToolCall
from ctxagent.messages import Message, pair_violations, text_of, tool_call
from ctxagent.tokens import PER_REQUEST, count_message, count_text

MODEL = "openai/gpt-4o-mini"
HANDLE = re.compile(r"@[A-Za-z0-9_-]{1,32}(?:\.[0-9]+)?")
DEFAULT_CACHE_RATIO = 0.1  # cache-read price / input price when none is given (issue 9; Anthropic's reads)


class Overflow(Exception):
    """The manager refused to build a request over the budget (ctxagent's ContextOverflowError)."""


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


_TEXT_CACHE: dict[Path, str] = {}


def store_texts(outputs: Path, view_text: str) -> list[str]:
    """The stored outputs whose handle the view names (files of a real ctxagent output store)."""
    from ctxagent.sessions.store import OutputStore

    store = OutputStore(outputs)
    found = []
    for handle in set(HANDLE.findall(view_text)):
        try:
            path = store.path_of(handle)
        except Exception:  # not a handle this store can name
            continue
        text = _TEXT_CACHE.get(path)
        if text is None:
            if not path.is_file():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            _TEXT_CACHE[path] = text
        found.append(text)
    return found


class CtxagentManager:
    """ctxagent's real machinery: ContextState + a profile's pipeline + the output store."""

    def __init__(self, name: str, *, steps: Sequence[Any], budget: Any, offloaded: Offloaded, root: Path,
                 summarizer: FakeSummarizer | None, pins: Sequence[str] = ()):
        from ctxagent.agent.context import ContextState
        from ctxagent.sessions.store import OutputStore

        self.name = name
        self.steps = list(steps)
        self.budget = budget
        self.summarizer = summarizer
        self.pins = list(pins)
        self._tools = offloaded.messages
        root.mkdir(parents=True, exist_ok=True)
        if offloaded.outputs.is_dir():
            shutil.copytree(offloaded.outputs, root / "outputs", dirs_exist_ok=True)
        _forget(root / "outputs")
        self.store = OutputStore(root / "outputs")
        self.stored = set(offloaded.handles)
        self.state = ContextState(transcript_path=str(root / "transcript.jsonl"), model=MODEL)
        self.materialize_ms: list[float] = []
        self.compaction_records = 0

    def add(self, message: Message, tokens: int, seq: int, turn: int) -> None:
        from ctxagent.sessions.records import MessageRecord

        self.state.add(MessageRecord(seq=seq, turn=turn, tokens=tokens, message=message))

    def tool_message(self, call_id: str) -> tuple[Message, int]:
        return self._tools[call_id]

    def view(self, turn: int) -> View:
        from ctxagent.errors import ContextOverflowError

        try:
            built = self.state.build(self.steps, self.budget, turn=turn, summarizer=self.summarizer, pins=self.pins)
        except ContextOverflowError as err:
            raise Overflow(str(err)) from err
        start = time.perf_counter()
        self._materialize(built.offloads)
        self.materialize_ms.append((time.perf_counter() - start) * 1000)
        if built.compactions:
            self.state.record(built.compactions)
            self.compaction_records += len(built.compactions)
        return View([e.message for e in built.view], [e.tokens for e in built.view], len(built.compactions))

    def _materialize(self, entries: Sequence[Any]) -> None:
        """What ``Runner._materialize`` does: store the originals the view now points at by handle."""
        from ctxagent.sessions.store import handle_for
        from ctxagent.tools.offload import store_text

        for entry in entries:
            call_id = entry.message.get("tool_call_id") or ""
            handle = handle_for(call_id)
            if not call_id or handle in self.stored:
                continue
            store_text(self.store, handle, call_id, str(entry.message.get("content") or ""))
            self.stored.add(handle)

    def stored_texts(self, view_text: str) -> list[str]:
        return store_texts(self.store.root, view_text)


def _forget(outputs: Path) -> None:
    for path in list(_TEXT_CACHE):
        if path.parent == outputs:
            del _TEXT_CACHE[path]


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
    materialize_ms: list[float] = field(default_factory=list)
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


def drive(prep: Prepared, manager: Manager, *, group: str, window: int, tool_tokens: int, reserved: int,
          probes: bool = True, on_view: Callable[[int, View], None] | None = None) -> RunResult:
    """Run ``manager`` over the trace; see the module docstring. Never raises for a manager's error:
    a manager that refuses (Overflow) or crashes stops the run and the result says at which turn."""
    result = RunResult(manager.name, group)
    trace = prep.trace
    seq = 0
    task: Message | None = None
    current: Message | None = None
    wanted: dict[int, list[tuple[Any, int]]] = {}
    previous: list[Message] | None = None  # the last request's messages, copied (a manager may reuse its list)
    if probes:
        for at, fact, distance in trace.probes():
            wanted.setdefault(at, []).append((fact, distance))
    manager.add(prep.system, prep.system_tokens, seq, 0)
    seq += 1
    for turn in trace.turns:
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
        result.overhead_ms.append(elapsed * 1000)
        request = PER_REQUEST + sum(view.tokens) + tool_tokens
        result.tokens.append(request)
        prefix = cached_prefix(previous, view.messages, view.tokens, tool_tokens)
        result.cached.append(prefix.tokens)
        if previous is not None and prefix.messages < len(previous):
            result.prefix_breaks.append(number)
        previous = [dict(m) for m in view.messages]
        result.turns = number
        if view.compactions:
            result.compaction_turns.append(number)
        if request + reserved > window:
            result.over_budget_requests += 1
            result.over_budget_turns.append(number)
        problems = pair_violations(view.messages)
        if problems:
            result.pair_violation_requests += 1
            result.pair_violation_turns.append(number)
            if len(result.pair_examples) < 3:
                result.pair_examples.append(f"turn {number}: {problems[0]}")
        assert task is not None
        head = check_head(view.messages, prep.system, task, current)
        if head:
            result.head_violation_requests += 1
            if len(result.head_examples) < 3:
                result.head_examples.append(f"turn {number}: {head}")
        if number in wanted:
            result.probes.extend(probe(view, manager, wanted[number], number))
        if on_view is not None:
            on_view(number, view)
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
    result.materialize_ms = list(getattr(manager, "materialize_ms", []))
    return result


def probe(view: View, manager: Manager, facts: list[tuple[Any, int]], turn: int) -> list[dict[str, Any]]:
    """Where each probed fact's latest value is: in the view, through a handle the view names, or
    lost (``stale`` when only a superseded value is still there)."""
    text = "\n".join(text_of(m) for m in view.messages)
    stored = manager.stored_texts(text)
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
        out.append({"fact": fact.key, "kind": fact.kind, "distance": distance, "turn": turn, "status": status,
                    "corrected": fact.corrected is not None and turn >= (fact.corrected_turn or 0)})
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
        "materialize_ms_total": sum(result.materialize_ms),
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
