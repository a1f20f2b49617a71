"""From transcript records to the context (view) of the next request, under the BUDGET law.

``ContextState`` holds the *base view*: the transcript's messages with its recorded compactions
applied. It is built once when a session is opened and then kept up to date incrementally (one
entry per appended message, recorded compactions replayed as they are made), so the per-turn cost
does not grow with the transcript. :meth:`ContextState.build` runs the profile's pipeline on it and
checks the budget before anything is sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxagent.errors import ContextOverflowError
from ctxagent.profile import StrategyConfig
from ctxagent.sessions import records
from ctxagent.strategies import pipeline
from ctxagent.strategies.base import (
    Budget,
    Compaction,
    Entry,
    Outcome,
    StrategyContext,
    Summarizer,
    protected,
)
from ctxagent.tokens import count_message

PINS_LABEL = "[ctxagent pinned facts: kept verbatim through every compaction]"


def compaction_of(record: records.CompactionRecord) -> Compaction:
    """The strategy-side value of a stored compaction record."""
    return Compaction(record.strategy, record.start, record.end, record.message, record.tokens,
                      record.tokens_before)


def record_of(comp: Compaction) -> records.CompactionRecord:
    """The transcript record of a compaction a strategy made."""
    return records.CompactionRecord(strategy=comp.strategy, start=comp.start, end=comp.end,
                                    message=comp.message, tokens=comp.tokens,
                                    tokens_before=comp.tokens_before)


def entry_of(record: records.MessageRecord) -> Entry:
    """A message record as a view entry (tokens from the record: never re-tokenized)."""
    return Entry(record.message, record.tokens, record.seq, record.seq, record.turn)


@dataclass
class ContextState:
    """The base view of a session plus what building a request needs."""

    view: list[Entry] = field(default_factory=list)
    transcript_path: str = "transcript.jsonl"
    model: str = ""

    @classmethod
    def from_records(cls, items: Iterable[Any], **kwargs: Any) -> ContextState:
        """Replay messages and compactions in transcript order."""
        state = cls(**kwargs)
        pending: list[Entry] = []
        for item in items:
            if isinstance(item, records.MessageRecord):
                pending.append(entry_of(item))
            elif isinstance(item, records.CompactionRecord):
                state.view.extend(pending)
                pending = []
                state.view = pipeline.replay(state.view, [compaction_of(item)])
        state.view.extend(pending)
        return state

    def add(self, record: records.MessageRecord) -> None:
        """Append one newly written message."""
        self.view.append(entry_of(record))

    def record(self, compactions: Sequence[Compaction]) -> None:
        """Apply compactions that were just written to the transcript."""
        self.view = pipeline.replay(self.view, compactions)

    def build(self, steps: Sequence[StrategyConfig], budget: Budget, *, turn: int,
              summarizer: Summarizer | None = None, pins: Sequence[str] = ()) -> Outcome:
        """The view of the next request and the new compactions to record.

        Pinned facts, when there are any, are sent as a second system message right after the
        first one; no strategy drops it.

        Raises:
            ContextOverflowError: the protected part alone (system, pins, task, current user
                message, tool schemas, reserve) is over the trigger — compacting could only
                thrash — or the result still breaks the BUDGET law. The message gives the tokens
                needed, the window, and the largest parts of the context.
        """
        view = with_pins(self.view, pins, self.model)
        check_protected(view, budget)
        ctx = StrategyContext(budget=budget, turn=turn, transcript_path=self.transcript_path,
                              model=self.model, summarizer=summarizer, pins=tuple(pins))
        outcome = pipeline.run(view, steps, ctx)
        check_budget(outcome.view, budget)
        return outcome


def with_pins(view: Sequence[Entry], pins: Sequence[str], model: str = "") -> list[Entry]:
    """``view`` with the pinned-facts system message after the first message (if any pins)."""
    out = list(view)
    if pins:
        text = PINS_LABEL + "\n" + "\n".join(f"- {p}" for p in pins)
        message = {"role": "system", "content": text}
        out.insert(1 if out else 0, Entry(message, count_message(message, model), -1, -1, 0, kind="pins"))
    return out


def check_protected(view: Sequence[Entry], budget: Budget) -> None:
    """Thrash guard: raise ``ContextOverflowError`` when what no strategy may drop is over the trigger."""
    keep = [view[i] for i in sorted(protected(view))]
    if budget.over(keep, budget.trigger):
        raise ContextOverflowError(
            f"the protected part of the context alone (system prompt, pins, task, current message, "
            f"tool schemas {budget.tools} and reserve {budget.reserved}) needs {budget.total(keep)} tokens, "
            f"over the compaction trigger ({budget.trigger:.0%} of a {budget.window}-token window); "
            "compaction cannot help: shorten the task or pins, or use a model with a larger window"
        )


def check_budget(view: Sequence[Entry], budget: Budget) -> None:
    """Raise ``ContextOverflowError`` unless the request keeps the BUDGET law."""
    if budget.fits(view):
        return
    raise ContextOverflowError(
        f"the context needs {budget.total(view)} tokens but the window is {budget.window} "
        f"(tool schemas {budget.tools}, reserved for the reply and margin {budget.reserved}); "
        f"largest parts: {largest_parts(view)}"
    )


def largest_parts(view: Sequence[Entry], n: int = 3) -> str:
    """The ``n`` largest messages of ``view``, described for an error message."""
    largest = sorted(view, key=lambda e: e.tokens, reverse=True)[:n]
    return ", ".join(f"{e.role} message #{e.start} ({e.tokens} tokens)" for e in largest)
