"""Where the runner's records go before the session state applies them (a sink), and what makes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctxagent.agent.events import Warned
from ctxagent.agent.state import SessionState
from ctxagent.messages import Message
from ctxagent.sessions import records, redact
from ctxagent.sessions.redact import RedactingStore
from ctxagent.sessions.session import Session
from ctxagent.strategies.base import Entry
from ctxagent.tokens import count_message
from ctxagent.tools.offload import store_text


class Sink(Protocol):
    """Where the runner's records go before the state applies them."""

    writes_files: bool

    def write(self, items: Sequence[Any]) -> None: ...


class TranscriptSink:
    """The live sink: the session's transcript (fsynced before ``write`` returns), records redacted with the
    environment's secrets as the run started (read once: reading them cost ~0.17 ms a record)."""

    writes_files = True

    def __init__(self, session: Session):
        self._transcript, self._redactor = session.transcript, redact.default()

    def write(self, items: Sequence[Any]) -> None:
        self._transcript.append(items, self._redactor)


@dataclass
class MemorySink:
    """A read-only peek's sink: records kept in memory, nothing written anywhere."""

    items: list[Any] = field(default_factory=list)
    writes_files: bool = False

    def write(self, items: Sequence[Any]) -> None:
        self.items.extend(items)


class Recorder:
    """Makes a runner's records, writes each to the ``sink``, then applies it to the ``state`` (ONE STATE).
    ``redact_always``: the profile's ``redact: always`` (docs/security.md); ``store``: for originals."""

    def __init__(self, state: SessionState, sink: Sink, store: RedactingStore, *, redact_always: bool = False):
        self.state, self.sink, self.store, self.redact_always = state, sink, store, redact_always

    @property
    def model_name(self) -> str:
        """The model in force (its tokenizer counts the messages)."""
        assert self.state.settings is not None, "a session state without header"
        return self.state.settings.model

    def message(self, message: Message, turn: int, **extra: Any) -> records.MessageRecord:
        """The record of ``message`` (OpenAI format) as the next message of the session, in ``turn``,
        its tokens counted; ``extra``: more fields (``handle``, ``offloaded``, ``file``, ``written``)."""
        if self.redact_always:
            message = redact.default().value(message)
        return records.MessageRecord(seq=self.state.next_seq, turn=turn, message=message,
                                     tokens=count_message(message, self.model_name), **extra)

    def append(self, *items: Any) -> None:
        """Write ``items`` (records), then apply each to the state (a message record takes its seq when made)."""
        self.sink.write(items)
        for item in items:
            self.state.apply(item)

    def warn(self, source: str, text: str) -> Warned:
        """Record a note (transcript) and return the event that shows it (stderr)."""
        self.append(records.NoteRecord(turn=self.state.replies, source=source, text=text))
        return Warned(source, text)

    def materialize(self, entries: Sequence[Entry]) -> None:
        """Store the originals the view now points at by handle (a peek records them without writing)."""
        for entry in entries:
            handle = entry.handle
            if handle is None or handle in self.state.stored:
                continue
            call_id = str(entry.message.get("tool_call_id") or "")
            if self.sink.writes_files:
                record = store_text(self.store, handle, call_id, str(entry.message.get("content") or ""))
            else:
                record = records.OutputRecord(handle=handle, call_id=call_id, tool="", path="", bytes=0, lines=0,
                                              tokens=entry.tokens, sha256="")
            self.append(record)
