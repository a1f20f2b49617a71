"""The strategy contract: a view made of entries, the budget, and what a strategy returns.

A strategy is a pure transform: ``apply(view, ctx) -> Outcome``. It does no I/O and never imports
litellm; one that needs an LLM receives a summarizer callable in ``ctx``. When it replaces a range
of messages in a way that must survive resume (truncation, summaries, checkpoints), it returns
:class:`Compaction` objects; the runner appends them to the transcript as compaction records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, cast

from ctxagent.messages import Message
from ctxagent.tokens import PER_REQUEST

if TYPE_CHECKING:
    from ctxagent.strategies.step import StrategyConfig

T = TypeVar("T")


@dataclass(frozen=True)
class Entry:
    """One message of the view with its token count (tokens) and where it comes from.

    ``start``..``end`` are the transcript seq numbers it stands for (inclusive): equal for an
    original message, a range for a compaction's replacement message. ``kind`` is ``"message"``
    for a transcript message, else the name of the strategy that made the entry. A tool result
    (and a replacement of one) carries its ``handle``, chosen once when its record was written
    (:mod:`ctxagent.handles`), and ``offloaded``: its full value is already in the output store.
    A replacement of a range carries ``refs``, the handles of the tool results it stands for, so
    the model keeps a way back to each of them (NO LOSS), and ``quotes``, the user messages it
    replaced, kept verbatim in it (compaction by role keeps user messages).
    """

    message: Message
    tokens: int
    start: int
    end: int
    turn: int
    kind: str = "message"
    handle: str | None = None
    offloaded: bool = False
    refs: tuple[str, ...] = ()  # a replacement of a range: the handles of the tool results inside it
    quotes: tuple[str, ...] = ()  # a replacement of a range: the user messages inside it, verbatim
    role: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # read on every entry of every request by every strategy: a plain attribute, not a property
        object.__setattr__(self, "role", str(self.message.get("role")))


class EntryMemo:
    """Results of pure per-entry computations, remembered while the entry object lives.

    Entries of the base view are the same objects from one request to the next, so a strategy
    that derives something from one entry (a stub, a verdict, a normalized text) computes it once
    instead of on every request: per-turn cost stops growing with the history. A computation that
    also depends on other objects (the entry's tool call, the earlier result it repeats) names them
    in ``deps``: they are told apart by identity, and the memo holds them with the entry, so no
    ``id`` in a remembered slot can be reused by a new object (an ``id`` in ``key`` alone could be:
    once its object is freed, a new call at the same address would get the old call's stub). It is
    cleared when it reaches ``limit`` items (memory stays bounded in sessions of any length).
    """

    def __init__(self, limit: int = 200_000):
        self.limit = limit
        self._items: dict[tuple[Any, ...], tuple[Entry, tuple[object, ...], Any]] = {}

    def get(self, entry: Entry, key: Any, compute: Callable[[], T], deps: tuple[object, ...] = ()) -> T:
        """``compute()`` for (``entry``, ``key``, the objects ``deps``), from memory when it was
        computed before. ``key`` holds values (compared by equality), ``deps`` objects (by identity)."""
        slot = (id(entry), key, *map(id, deps))
        hit = self._items.get(slot)
        if hit is not None and hit[0] is entry:
            return cast(T, hit[2])  # one slot, one computation: the value compute() returned before
        value = compute()
        if len(self._items) >= self.limit:
            self._items.clear()
        self._items[slot] = (entry, deps, value)
        return value


MEMO = EntryMemo()


class ViewMemo:
    """Results of pure whole-view computations (calls of results, units, token totals), remembered
    while the view list object lives: the steps of one pipeline run share one view object until one
    of them changes it, so each is computed once per request instead of once per step. Holds the
    list (its ``id`` cannot be reused while remembered); a view list is never mutated once built.
    """

    def __init__(self, limit: int = 64):
        self.limit = limit
        self._items: dict[tuple[int, Any], tuple[Sequence[Any], int, Any]] = {}

    def get(self, view: Sequence[Any], key: Any, compute: Callable[[], T]) -> T:
        """``compute()`` for (``view``, ``key``), from memory when it was computed before."""
        slot = (id(view), key)
        hit = self._items.get(slot)
        if hit is not None and hit[0] is view and hit[1] == len(view):
            return cast(T, hit[2])  # one key, one computation: the value compute() returned before
        value = compute()
        if len(self._items) >= self.limit:
            self._items.clear()
        self._items[slot] = (view, len(view), value)
        return value


VIEW_MEMO = ViewMemo()


class Fold:
    """A left fold over the entries of a view, carried over from one request to the next.

    Between compactions a request's view is the previous one plus new entries at its end (the same
    entry objects in front: PREFIX), so a strategy that folds the view entry by entry only needs to
    fold the new ones: per-request work stays flat however long the session grows. ``run`` checks
    that the view extends the one folded last (identity of the entries, a C-level list compare)
    and starts over when it does not (a compaction, another session, other parameters). The state
    is mutated in place; ``init(key)`` makes a fresh one, ``step(state, index, entry)`` folds one entry.
    """

    def __init__(self, init: Callable[[Any], Any], step: Callable[[Any, int, Entry], None]):
        self.init, self.step = init, step
        self._seen: list[Entry] = []
        self._key: Any = None
        self._state: Any = None

    def run(self, view: Sequence[Entry], key: Any = None) -> Any:
        """The state after folding every entry of ``view``; ``key``: what else the fold depends on."""
        done = len(self._seen)
        if self._state is None or key != self._key or len(view) < done or list(view[:done]) != self._seen:
            self._state, self._key, done = self.init(key), key, 0
        for index in range(done, len(view)):
            self.step(self._state, index, view[index])
        self._seen = list(view)
        return self._state


@dataclass(frozen=True)
class Budget:
    """The token budget of one request (all numbers in tokens, fractions of ``window``).

    BUDGET law: view tokens + ``tools`` + ``reserved`` ≤ ``window``, where ``reserved`` is the
    reply's reserved output plus the safety margin. ``scale`` calibrates our token estimate with
    the provider's reported prompt tokens (ratio of the two; 1.0 before any report).
    """

    window: int
    tools: int
    reserved: int
    target: float
    trigger: float
    scale: float = 1.0

    def estimate(self, view: Sequence[Entry]) -> int:
        """Our uncalibrated prompt tokens of the request: the view and the tool schemas."""
        return PER_REQUEST + VIEW_MEMO.get(view, "tokens", lambda: sum(e.tokens for e in view)) + self.tools

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
    """What a strategy may read besides the view: budget, its parameters, where things live.

    ``params``: the pipeline step (its class is the strategy's ``Params``), or a mapping of
    parameters that the strategy validates into one (defaults for the missing ones)."""

    budget: Budget
    params: StrategyConfig | Mapping[str, Any] = field(default_factory=dict)
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
    """What a strategy returns: the new view, the compactions to record (maybe none), and the
    original tool-result entries whose full text must be in the output store because the new view
    only points at them by handle (the runner writes those; strategies do no I/O). ``warnings``:
    readable lines for the user (a summary that failed and what was done instead); diagnostics
    only, so two outcomes that differ in them alone are equal."""

    view: list[Entry]
    compactions: list[Compaction] = field(default_factory=list)
    offloads: list[Entry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list, compare=False)


class Strategy(Protocol):
    """A named transform of the view, whose parameters are declared by ``Params`` (its pipeline
    step class, :mod:`ctxagent.strategies.step`; a step that may call an LLM is refused on batch paths)."""

    name: ClassVar[str]
    Params: ClassVar[type[StrategyConfig]]

    def apply(self, view: list[Entry], ctx: StrategyContext) -> Outcome: ...


def groups(view: Sequence[Entry]) -> list[list[int]]:
    """Indexes of ``view`` cut into units that are kept or dropped whole.

    An assistant message with tool calls forms one unit with the tool messages that follow it;
    every other message is a unit alone. Returned oldest first (remembered per view: do not
    change the lists).
    """
    return VIEW_MEMO.get(view, "groups", lambda: _groups(view))


def _groups(view: Sequence[Entry]) -> list[list[int]]:
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
