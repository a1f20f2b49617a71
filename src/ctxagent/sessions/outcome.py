"""What a session's records say it holds: its task, its final answer, its usage totals (:class:`Usage`).

The one rule every command uses to tell an answered session: its last message is a final answer (an
assistant message without tool calls), whatever end records follow it (none after a ``kill -9``,
``interrupted`` after a signal). The answer stands: it is reported, and the model is not asked again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxagent.messages import Message

if TYPE_CHECKING:
    from ctxagent.sessions.records import UsageRecord
    from ctxagent.sessions.transcript import Transcript


def is_answer(message: Message) -> bool:
    """Whether ``message`` is a final answer: an assistant message without tool calls."""
    return message.get("role") == "assistant" and not message.get("tool_calls")


def final_answer(records_: Sequence[Any]) -> str | None:
    """The content (``""`` when it has none) of the last message record of ``records_`` (a transcript's
    records, or its last ones down to its last message) when that message is a final answer, else None."""
    from ctxagent.sessions import records

    last = next((r.message for r in reversed(records_) if isinstance(r, records.MessageRecord)), None)
    return str(last.get("content") or "") if last is not None and is_answer(last) else None


def recorded_answer(transcript: Transcript) -> str | None:
    """:func:`final_answer` of a session's ``transcript``, read from its end (only its last records,
    whatever its size); None when the session does not exist."""
    from ctxagent.sessions import records

    return final_answer(transcript.tail(want=records.MessageRecord))


def recorded_task(transcript: Transcript) -> str | None:
    """The first user message's content in a session's ``transcript`` (its task, as ``run`` recorded it);
    None while none is recorded (no session, or a run stopped before it wrote its task)."""
    from ctxagent.sessions import records

    return next((str(r.message.get("content") or "") for r in transcript.records()
                 if isinstance(r, records.MessageRecord) and r.message.get("role") == "user"), None)


@dataclass
class Usage:
    """Totals of provider-reported usage (tokens; cost in US dollars, when known): the fold's
    (agent/state.py), and ``inspect transcript``'s, which needs no more of the agent."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    priced: int = 0  # calls whose cost was known

    def add(self, record: UsageRecord) -> None:
        self.calls += record.calls
        self.priced += record.cost_usd is not None
        self.prompt_tokens += record.prompt_tokens
        self.completion_tokens += record.completion_tokens
        self.cached_tokens += record.cached_tokens
        self.cost_usd += record.cost_usd or 0.0
