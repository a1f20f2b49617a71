"""Where the runner's records go before the session state applies them.

:class:`TranscriptSink` is the live one (the session's JSONL transcript, fsynced per write);
:class:`MemorySink` keeps them in memory for a read-only peek (``inspect context``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctxagent.sessions.session import Session
from ctxagent.sessions.transcript import Transcript


class Sink(Protocol):
    """Where the runner's records go before the state applies them."""

    writes_files: bool

    def write(self, items: Sequence[Any]) -> None: ...


@dataclass
class TranscriptSink:
    """The live sink: the session's transcript (flushed and fsynced before ``write`` returns).

    Records are redacted with the secrets of the environment as the run started (read once, not
    on every record: reading the environment cost ~0.17 ms a record).
    """

    session: Session
    writes_files: bool = True
    _transcript: Transcript = field(init=False, repr=False)
    _redactor: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from ctxagent.sessions import redact

        self._transcript, self._redactor = self.session.transcript, redact.default()

    def write(self, items: Sequence[Any]) -> None:
        self._transcript.append(items, self._redactor)


@dataclass
class MemorySink:
    """A read-only peek's sink: records kept in memory, nothing written anywhere."""

    items: list[Any] = field(default_factory=list)
    writes_files: bool = False

    def write(self, items: Sequence[Any]) -> None:
        self.items.extend(items)
