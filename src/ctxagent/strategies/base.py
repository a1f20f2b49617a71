"""The strategy contract: a view made of entries, the budget, and what a strategy returns.

A strategy is a pipeline step (:mod:`ctxagent.strategies.step`) with a pure ``step.apply(view, ctx,
scan) -> Outcome``: no I/O, never litellm (an LLM step receives a summarizer callable in ``ctx``). A
replacement that must survive resume (truncation, summaries, checkpoints) comes back as
:class:`Compaction` objects, which the runner appends to the transcript as compaction records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, TypeVar, cast

from ctxagent.messages import Message
from ctxagent.tokens import PER_REQUEST

T = TypeVar("T")
_TOKENS: Callable[[Entry], int] = attrgetter("tokens")  # an entry's: summed over views, so a C-level getter


@dataclass(frozen=True)
class Entry:
    """One message of the view with its token count (tokens) and where it comes from: ``start``..``end``,
    the transcript seq numbers it stands for (inclusive; a range for a compaction's replacement), and
    ``kind``, ``"message"`` or the name of the strategy that made it. A tool result (and a replacement
    of one) carries its ``handle``, chosen once when its record was written (:mod:`ctxagent.handles`),
    and ``offloaded``: its full value is already in the output store.
    """

    message: Message
    tokens: int
    start: int
    end: int
    turn: int
    kind: str = "message"
    handle: str | None = None
    offloaded: bool = False
    refs: tuple[str, ...] = ()  # a replacement of a range: the handles of the tool results inside it (NO LOSS)
    quotes: tuple[str, ...] = ()  # a replacement of a range: its user messages, verbatim (kept by role)
    role: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # read on every entry of every request by every strategy: a plain attribute, not a property
        object.__setattr__(self, "role", str(self.message.get("role")))


class EntryMemo:
    """Results of pure per-entry computations, remembered while the entry object lives (one per
    :class:`Scan`, so per session and step: never shared between sessions).

    Base-view entries are the same objects from one request to the next, so a stub or a verdict is
    computed once per entry: per-turn cost stops growing with the history. Objects it also depends on
    (the entry's call) go in ``deps`` and are held with the entry, so no remembered ``id`` is reused
    by a new object (a new call at a freed call's address would get the old stub). Cleared at ``limit``.
    """

    def __init__(self, limit: int = 200_000):
        self.limit = limit
        self._items: dict[tuple[Any, ...], tuple[Entry, tuple[object, ...], Any]] = {}

    def get(self, entry: Entry, key: Any, compute: Callable[[], T], deps: tuple[object, ...] = ()) -> T:
        """``compute()`` for ``entry``, ``key`` (values, by equality) and ``deps`` (objects, by identity), memoized."""
        slot = (id(entry), key, *map(id, deps))
        hit = self._items.get(slot)
        if hit is not None and hit[0] is entry:
            return cast(T, hit[2])  # one slot, one computation: the value compute() returned before
        value = compute()
        if len(self._items) >= self.limit:
            self._items.clear()
        self._items[slot] = (entry, deps, value)
        return value


class Scan:
    """What one pipeline step keeps for one session between requests: a left fold over the
    entries of the view, and an :class:`EntryMemo`. Owned by the session's
    :class:`~ctxagent.strategies.pipeline.Engine`; a step called without one gets a fresh one.

    Between compactions a request's view is the previous one plus new entries (PREFIX), so
    :meth:`fold` folds only the new ones and per-request work stays flat; it starts over when the view
    does not extend the one folded last (identity of the entries: a compaction) or ``key`` changed.
    """

    def __init__(self) -> None:
        self.memo = EntryMemo()
        self._seen: list[Entry] = []
        self._key: Any = None
        self._state: Any = None

    def fold(self, view: Sequence[Entry], key: Any, init: Callable[[], T], step: Callable[[T, int, Entry], None]) -> T:
        """The state after folding every entry of ``view``: ``init()`` makes a fresh one (when the
        view does not extend the last one folded, or ``key`` changed), ``step(state, index, entry)``
        folds one entry in place. ``key``: everything ``init`` and ``step`` depend on besides the entries."""
        done = len(self._seen)
        if self._state is None or key != self._key or len(view) < done or list(view[:done]) != self._seen:
            self._state, self._key, done = init(), key, 0
        state = cast(T, self._state)
        for index in range(done, len(view)):
            step(state, index, view[index])
        self._seen = list(view)
        return state


@dataclass(frozen=True)
class Budget:
    """The token budget of one request (all numbers in tokens, fractions of ``window``). BUDGET law:
    view tokens + ``tools`` + ``reserved`` (the reply's reserved output and the safety margin) ≤ ``window``.
    ``scale`` calibrates our estimate with the provider's reported prompt tokens (1.0 before any report).
    """

    window: int
    tools: int
    reserved: int
    target: float
    trigger: float
    scale: float = 1.0

    def estimate(self, view: Sequence[Entry]) -> int:
        """Our uncalibrated prompt tokens of the request: the view and the tool schemas."""
        return PER_REQUEST + sum(map(_TOKENS, view)) + self.tools

    def total(self, view: Sequence[Entry]) -> int:
        """Tokens the request would cost: the estimate (calibrated) and the reserve."""
        return int(self.estimate(view) * self.scale + 0.5) + self.reserved

    def over(self, view: Sequence[Entry], fraction: float) -> bool:
        """Whether the request would cost more than ``fraction`` of the window."""
        return self.total(view) > self.window * fraction

    def fits(self, view: Sequence[Entry]) -> bool:
        """Whether the request keeps the BUDGET law."""
        return self.total(view) <= self.window


Summarizer = Callable[[str, int], str]
"""``summarizer(text, max_tokens) -> summary``: an LLM call, given to LLM strategies only."""


@dataclass(frozen=True)
class StrategyContext:
    """What a step may read besides the view and its own parameters: the budget, the turn, where
    things live, the summarizer, the pinned facts, from which seq edits are free."""

    budget: Budget
    turn: int = 0
    transcript_path: str = "transcript.jsonl"
    model: str = ""
    summarizer: Summarizer | None = None
    pins: tuple[str, ...] = ()
    free_from: int = 0  # seq from which edits are free: those messages were never sent (PREFIX)
    summarizer_window: int | None = None  # the summarizer's context window, tokens (None: unknown, no clamp)


@dataclass(frozen=True)
class Compaction:
    """A replacement, in the view only, of seq ``start``..``end`` by ``message`` (or nothing)."""

    strategy: str
    start: int
    end: int
    message: Message | None
    tokens: int
    tokens_before: int
    refs: tuple[str, ...] = ()  # handles of the tool results inside the range (named in the message)
    quotes: tuple[str, ...] = ()  # user messages inside the range, quoted verbatim in the message


@dataclass(frozen=True)
class Outcome:
    """What a strategy returns: the new view, the compactions to record (maybe none), and the original
    tool-result entries the new view only points at by handle (the runner stores them; strategies do
    no I/O). ``warnings``: lines for the user (a summary that failed and what was done instead),
    diagnostics only: two outcomes that differ in them alone are equal."""

    view: list[Entry]
    compactions: list[Compaction] = field(default_factory=list)
    offloads: list[Entry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list, compare=False)


def groups(view: Sequence[Entry]) -> list[list[int]]:
    """Indexes of ``view`` cut into units kept or dropped whole, oldest first: an assistant message
    with tool calls and the tool messages that follow it, or any other message alone."""
    units: list[list[int]] = []
    for index, entry in enumerate(view):
        if entry.role == "tool" and units and view[units[-1][0]].message.get("tool_calls"):
            units[-1].append(index)
        else:
            units.append([index])
    return units


def protected(view: Sequence[Entry]) -> set[int]:
    """Indexes HEAD protects: the system message, the pinned facts, the task (first user message),
    and the user message that opened the current turn (the last user message)."""
    keep: set[int] = {i for i, e in enumerate(view) if e.kind == "pins"}
    if view and view[0].role == "system":
        keep.add(0)
    users = [i for i, e in enumerate(view) if e.role == "user" and e.kind == "message"]
    if users:
        keep.update({users[0], users[-1]})
    return keep


def changes(old: Sequence[Entry], new: Sequence[Entry], strategy: str) -> list[Compaction]:
    """The compactions that turn ``old`` into ``new`` (both ordered by seq; pins entries ignored): a new
    entry replaces the old ones inside its seq range; a run of old entries that no new entry covers is
    removed (a compaction without message, named ``strategy``)."""
    olds = [e for e in old if e.start >= 0]
    news = [e for e in new if e.start >= 0]
    out: list[Compaction] = []
    removed: list[Entry] = []
    i = j = 0
    while i < len(olds) or j < len(news):
        o = olds[i] if i < len(olds) else None
        n = news[j] if j < len(news) else None
        if o is not None and n is not None and _same(o, n):
            _flush(removed, out, strategy)
            i, j = i + 1, j + 1
        elif n is not None and (o is None or n.start <= o.start):
            _flush(removed, out, strategy)
            before = 0
            while i < len(olds) and olds[i].start >= n.start and olds[i].end <= n.end:
                before += olds[i].tokens
                i += 1
            out.append(Compaction(n.kind, n.start, n.end, n.message, n.tokens, before, n.refs, n.quotes))
            j += 1
        else:
            assert o is not None
            removed.append(o)
            i += 1
    _flush(removed, out, strategy)
    return out


def _same(a: Entry, b: Entry) -> bool:
    return a is b or (a.start == b.start and a.end == b.end and a.kind == b.kind and a.message == b.message)


def _flush(removed: list[Entry], out: list[Compaction], strategy: str) -> None:
    if removed:
        out.append(Compaction(strategy, removed[0].start, removed[-1].end, None, 0, sum(e.tokens for e in removed)))
        removed.clear()
