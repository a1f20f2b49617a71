"""Where the runner's records go before the session state applies them.

:class:`TranscriptSink` is the live one (the session's JSONL transcript, fsynced per write);
:class:`MemorySink` keeps them in memory for a read-only peek (``inspect context``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctxagent.sessions.session import Session


class Sink(Protocol):
    """Where the runner's records go before the state applies them."""

    writes_files: bool

    def write(self, items: Sequence[Any]) -> None: ...


@dataclass
class TranscriptSink:
    """The live sink: the session's transcript (flushed and fsynced before ``write`` returns)."""

    session: Session
    writes_files: bool = True

    def write(self, items: Sequence[Any]) -> None:
        self.session.transcript.append(items)


@dataclass
class MemorySink:
    """A read-only peek's sink: records kept in memory, nothing written anywhere."""

    items: list[Any] = field(default_factory=list)
    writes_files: bool = False

    def write(self, items: Sequence[Any]) -> None:
        self.items.extend(items)
