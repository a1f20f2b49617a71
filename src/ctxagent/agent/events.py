"""Typed step events the runner yields; the CLI renders them, tests assert on them. Never persisted."""

from __future__ import annotations

from dataclasses import dataclass

from ctxagent.agent.model import Reply, ToolCall
from ctxagent.strategies.base import Compaction


@dataclass(frozen=True)
class Compacted:
    """A strategy replaced part of the view (and the compaction was recorded)."""

    compaction: Compaction


@dataclass(frozen=True)
class Requesting:
    """A model request is about to be sent."""

    turn: int
    tokens: int  # the budgeted total: the prompt, tool schemas included, plus reserved
    window: int  # tokens
    messages: int  # how many it holds
    same: int = 0  # leading messages identical to the last request's (a prompt cache can serve them; PREFIX)
    reserved: int = 0  # tokens: the reply's reserved output and the safety margin

    @property
    def prompt(self) -> int:
        """Tokens of the prompt alone (our calibrated estimate): ``tokens`` less the reserve."""
        return self.tokens - self.reserved


@dataclass(frozen=True)
class Replied:
    """The model replied (the reply is already in the transcript)."""

    turn: int
    reply: Reply


@dataclass(frozen=True)
class ToolStarted:
    """A tool call is about to run (not sent for calls refused or answered by a note)."""

    call: ToolCall


@dataclass(frozen=True)
class ToolDone:
    """A tool call finished; ``content`` is what the model will see, ``handle`` set if offloaded,
    ``denied`` when the permission gate refused it (it never ran; ``content`` says which policy)."""

    call: ToolCall
    content: str
    is_error: bool
    handle: str | None
    denied: bool = False


@dataclass(frozen=True)
class Finished:
    """The run ended. ``status``: answered, max_turns, provider_error, context_overflow, ..."""

    status: str
    answer: str | None
    turns: int
    detail: str = ""


@dataclass(frozen=True)
class Warned:
    """Something went worse than planned but the run goes on (also written as a note record):
    a summary failed and a fallback ran, compaction escalated, the loop guard warned."""

    source: str
    text: str


Event = Compacted | Requesting | Replied | ToolStarted | ToolDone | Warned | Finished
