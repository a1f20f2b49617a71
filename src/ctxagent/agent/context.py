"""From transcript records to the context (view) of the next request, under the BUDGET law.

``ContextState`` holds the *base view*: the transcript's messages with its recorded compactions applied,
fed by :mod:`ctxagent.agent.state`. Every change a strategy makes is a recorded compaction, so the next
request is the base view plus the pinned facts: between compactions it extends the previous one (PREFIX).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache

from ctxagent.errors import ContextOverflowError, CtxagentError
from ctxagent.messages import Message, pair_violations
from ctxagent.profile import StrategyConfig
from ctxagent.sessions import records
from ctxagent.strategies import pipeline
from ctxagent.strategies.base import Budget, Compaction, Entry, Outcome, StrategyContext, Summarizer, protected
from ctxagent.tokens import count_message

PINS_LABEL = "[ctxagent pinned facts: kept verbatim through every compaction]"


def compaction_of(record: records.CompactionRecord) -> Compaction:
    """The strategy-side value of a stored compaction record."""
    return Compaction(record.strategy, record.start, record.end, record.message, record.tokens,
                      record.tokens_before, tuple(record.refs), tuple(record.quotes))


def record_of(comp: Compaction) -> records.CompactionRecord:
    """The transcript record of a compaction a strategy made."""
    return records.CompactionRecord(**asdict(comp))


def entry_of(record: records.MessageRecord, handle: str | None = None, offloaded: bool | None = None) -> Entry:
    """A message record as a view entry (tokens and handle from the record: never re-derived;
    ``handle``/``offloaded`` stand in for a record written before it kept them)."""
    return Entry(record.message, record.tokens, record.seq, record.seq, record.turn,
                 handle=record.handle or handle, offloaded=record.offloaded if offloaded is None else offloaded)


@dataclass
class ContextState:
    """The base view of a session plus what building a request needs."""

    view: list[Entry] = field(default_factory=list)
    transcript_path: str = "transcript.jsonl"
    model: str = ""
    sent_upto: int = -1  # the last request's highest seq: later messages, never sent nor cached, are free to edit
    _last: tuple[list[Entry], int] = field(default_factory=lambda: ([], 0), repr=False)
    _pair_checked: bool = field(default=False, repr=False)  # PAIR checked since the view was read
    # the strategies' incremental work: a cache, not state (not compared; a snapshot of the state holds a fresh one)
    engine: pipeline.Engine = field(default_factory=pipeline.Engine, repr=False, compare=False)

    def add(self, record: records.MessageRecord, handle: str | None = None, offloaded: bool | None = None) -> None:
        """Append one message record (``handle``, ``offloaded``: see :func:`entry_of`); before an assistant
        message, the view is remembered as the last request (the one it replied to)."""
        if record.message.get("role") == "assistant":
            self.sent_upto = record.seq - 1
            self._last = (self.view, len(self.view))  # the list is only appended to, or replaced
        self.view.append(entry_of(record, handle, offloaded))

    def add_result(self, record: records.MessageRecord, owner: Message, handle: str | None = None,
                   offloaded: bool | None = None) -> str:
        """Append a tool result right after the assistant message ``owner`` (the dict that holds its call)
        and that message's other results (PAIR). Returns "" when it was in place, else the repair made, as
        a sentence: moved up (the entries it passes keep their seq slots, so recorded ranges still apply),
        or left out of the view."""
        view = self.view
        head = len(view)
        while head and view[head - 1].role == "tool":
            head -= 1
        if head and view[head - 1].message is owner:
            self.add(record, handle, offloaded)
            return ""
        at = next((k for k in range(len(view) - 1, -1, -1) if view[k].message is owner), None)
        what = f"tool result #{record.seq} ({record.message.get('tool_call_id')!r})"
        if at is None:
            return f"{what} left out of the view: its call's assistant message is no longer in the view"
        place = at + 1
        while place < len(view) and view[place].role == "tool":
            place += 1
        moved = [entry_of(record, handle, offloaded), *view[place:]]
        if any(e.start != e.end for e in moved):
            return f"{what} left out of the view: a compaction lies between it and its call"
        slots = sorted(e.start for e in moved)
        self.view = [*view[:place], *(replace(e, start=s, end=s) for e, s in zip(moved, slots, strict=True))]
        return (f"{what} placed right after its call's assistant message #{view[at].start} (it came after "
                f"#{view[-1].start}); the messages between move down one slot in the view")

    def record(self, compactions: Sequence[Compaction]) -> None:
        """Apply compactions that were just written to the transcript (a new list: see ``add``)."""
        self.view = pipeline.replay(self.view, compactions)

    def last_request(self) -> list[Entry]:
        """The base-view entries of the last request sent (pinned facts not included)."""
        entries, length = self._last
        return entries[:length]

    def build(self, steps: Sequence[StrategyConfig], budget: Budget, *, turn: int,
              summarizer: Summarizer | None = None, pins: Sequence[str] = (),
              summarizer_window: int | None = None) -> Outcome:
        """The view of the next request, the new compactions to record, the original tool results to
        store (``offloads``) and ``warnings`` (one line per LLM step that fell back). ``pins``: every
        pinned fact, in the pins message strategies decide on; ``summarizer_window``: tokens (None: unknown).

        Raises:
            ContextOverflowError: the protected part alone is over the trigger (compacting could only
                thrash), or the result still breaks BUDGET; the message names the tokens and largest parts.
            PairError: the result breaks the PAIR law (never sent).
        """
        view = with_pins(self.view, pins, self.model)
        check_protected(view, budget)
        ctx = StrategyContext(budget=budget, turn=turn, transcript_path=self.transcript_path,
                              model=self.model, summarizer=summarizer, pins=tuple(pins),
                              free_from=self.sent_upto + 1, summarizer_window=summarizer_window)
        outcome = self.engine.run(view, steps, ctx)
        if outcome.compactions or not self._pair_checked:  # appended live, a turn keeps PAIR by construction:
            check_pair(outcome.view)  # check what was read (maybe damaged) and what a strategy rewrote
            self._pair_checked = True
        check_budget(outcome.view, budget)
        return outcome


def with_pins(view: Sequence[Entry], pins: Sequence[str], model: str = "") -> list[Entry]:
    """``view`` with the pinned-facts system message after the first message (if any pins)."""
    out = list(view)
    if pins:
        out.insert(1 if out else 0, _pins_entry(tuple(pins), model))
    return out


@lru_cache(maxsize=8)
def _pins_entry(pins: tuple[str, ...], model: str) -> Entry:
    """The pins message as a view entry, tokenized once per distinct pins (else several times a request)."""
    message = {"role": "system", "content": PINS_LABEL + "\n" + "\n".join(f"- {p}" for p in pins)}
    return Entry(message, count_message(message, model), -1, -1, 0, kind="pins")


def check_protected(view: Sequence[Entry], budget: Budget) -> None:
    """Thrash guard: raise ``ContextOverflowError`` when what no strategy may drop is over the trigger."""
    keep = [view[i] for i in sorted(protected(view))]
    if budget.over(keep, budget.trigger):
        raise ContextOverflowError(
            f"the protected part of the context alone (system prompt, pins, task, current message, "
            f"tool schemas {budget.tools} and reserve {budget.reserved}) needs {budget.total(keep)} tokens, "
            f"over the compaction trigger ({budget.trigger:.0%} of a {budget.window}-token window); "
            f"compaction cannot help: shorten the task or pins, {room(budget)}, or use a larger window")


class PairError(CtxagentError):
    """A request would break the PAIR law (a damaged transcript the fold could not repair)."""

    status = "pair_error"


def check_pair(view: Sequence[Entry]) -> None:
    """Raise :class:`PairError` unless every tool result of ``view`` follows its call (PAIR): a
    request that breaks it is never sent (strict providers reject it with an HTTP 400)."""
    problems = pair_violations([e.message for e in view])
    if problems:
        raise PairError("the next request would break PAIR, so it is not sent: " + "; ".join(problems[:5])
                        + " (the transcript is damaged in a way ctxagent cannot repair; 'ctxagent inspect "
                        "transcript' shows it)")


def check_budget(view: Sequence[Entry], budget: Budget) -> None:
    """Raise ``ContextOverflowError`` unless the request keeps the BUDGET law."""
    if budget.fits(view):
        return
    raise ContextOverflowError(
        f"the context needs {budget.total(view)} tokens but the window is {budget.window} "
        f"(tool schemas {budget.tools}, reserved for the reply and margin {budget.reserved}); "
        f"largest parts: {largest_parts(view)}; to make room: {room(budget)}")


def room(budget: Budget) -> str:
    """The settings that free room in every request (reply reserve, tool schemas), for a "cannot fit" error."""
    return (f"lower max_output_tokens (the reply reserve and margin take {budget.reserved} tokens; the profile's "
            f"max_output_tokens or --max-output-tokens N) or drop tools from the profile's tools list (their "
            f"schemas take {budget.tools} tokens)")


def largest_parts(view: Sequence[Entry], n: int = 3) -> str:
    """The ``n`` largest messages of ``view``, described for an error message."""
    largest = sorted(view, key=lambda e: e.tokens, reverse=True)[:n]
    return ", ".join(f"{e.role} message #{e.start} ({e.tokens} tokens)" for e in largest)
