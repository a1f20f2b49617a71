"""Sessions on disk: where they live, their names, their writer lock, and listing them.

Layout (DESIGN.md): ``$CTXAGENT_DATA_DIR`` or platformdirs' user data dir for ``ctxagent``, then
``sessions/<name>/transcript.jsonl`` and ``sessions/<name>/outputs/``. Directories are created
owner-only (0700), files 0600.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxagent.errors import SessionBusyError, UsageError
from ctxagent.sessions.store import OutputStore
from ctxagent.sessions.transcript import Transcript

if TYPE_CHECKING:
    from ctxagent.sessions.records import SessionHeader

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def data_dir() -> Path:
    """``$CTXAGENT_DATA_DIR`` if set, else platformdirs' user data dir for ``ctxagent``."""
    env = os.environ.get("CTXAGENT_DATA_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("ctxagent", appauthor=False))


def sessions_root() -> Path:
    """The folder holding one sub-folder per session."""
    return data_dir() / "sessions"


def check_name(name: str) -> str:
    """Return ``name`` if it is a valid session name, else raise ``UsageError``.

    Valid: 1–128 characters of letters, digits, ``.``, ``_``, ``-``, starting with a letter or
    digit — so no path separators and no ``..``.
    """
    if not NAME_RE.match(name) or ".." in name:
        raise UsageError(
            f"invalid session name {name!r}: use letters, digits, '.', '_' or '-' "
            "(no '/', no '..', at most 128 characters)"
        )
    return name


def new_name() -> str:
    """A fresh session name: ``YYYYMMDD-HHMMSS-xxxx`` (local time, 4 random hex digits)."""
    return time.strftime("%Y%m%d-%H%M%S-") + os.urandom(2).hex()


@dataclass
class Session:
    """One session directory. Use :meth:`writer` to hold the lock while appending."""

    name: str
    root: Path

    @classmethod
    def at(cls, name: str) -> Session:
        """The session called ``name`` (it may not exist yet). Raises ``UsageError`` on a bad name."""
        return cls(check_name(name), sessions_root() / name)

    @property
    def transcript(self) -> Transcript:
        return Transcript(self.root / "transcript.jsonl")

    @property
    def store(self) -> OutputStore:
        from ctxagent.sessions.redact import RedactingStore  # no secret reaches an output file

        return RedactingStore(self.root / "outputs")

    def exists(self) -> bool:
        return (self.root / "transcript.jsonl").exists()

    def require(self) -> Session:
        """``self`` if the session exists, else ``UsageError`` naming the sessions folder."""
        if not self.exists():
            raise UsageError(f"no session named {self.name!r} under {self.root.parent}")
        return self

    @contextmanager
    def writer(self) -> Iterator[Session]:
        """Hold this session's writer lock (one writer per session) for the ``with`` block.

        Raises ``SessionBusyError`` at once if another process holds it.
        """
        from filelock import FileLock, Timeout

        from ctxagent.sessions.redact import private_dir

        private_dir(self.root)  # 0700, and so are the data and sessions folders when we create them
        lock = FileLock(str(self.root / ".lock"), mode=0o600)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise SessionBusyError(
                f"session {self.name!r} is in use by another ctxagent process "
                f"(lock: {self.root / '.lock'}); wait for it to finish"
            ) from None
        try:
            yield self
        finally:
            lock.release()

    def header(self) -> SessionHeader | None:
        """The session header record, read from the first line only (cheap)."""
        from ctxagent.sessions import records

        try:
            with open(self.root / "transcript.jsonl", encoding="utf-8") as fh:
                first = fh.readline()
            head = records.loads(first)
        except (OSError, ValueError):
            return None
        return head if isinstance(head, records.SessionHeader) else None


def list_sessions() -> list[Session]:
    """Every session, most recently modified first."""
    root = sessions_root()
    if not root.is_dir():
        return []
    found = [Session(p.name, p) for p in root.iterdir() if (p / "transcript.jsonl").is_file()]
    return sorted(found, key=lambda s: (s.root / "transcript.jsonl").stat().st_mtime, reverse=True)


def latest_session() -> Session:
    """The most recently written session; ``UsageError`` when there is none."""
    found = list_sessions()
    if not found:
        raise UsageError(f"no sessions yet under {sessions_root()}; start one with 'ctxagent run'")
    return found[0]


def summarize(records_: list[Any]) -> dict[str, Any]:
    """Name-independent facts of a loaded transcript: created, turns, tokens, status, messages."""
    from ctxagent.sessions import records

    head = next((r for r in records_ if isinstance(r, records.SessionHeader)), None)
    changes = [r for r in records_ if isinstance(r, records.SettingsRecord)]  # resumes that changed them
    model = next((c.model for c in reversed(changes) if c.model), head.model if head else None)
    profile = next((c.profile for c in reversed(changes) if c.profile), head.profile if head else None)
    messages = [r for r in records_ if isinstance(r, records.MessageRecord)]
    usage = [r for r in records_ if isinstance(r, records.UsageRecord)]
    last_end = max((i for i, r in enumerate(records_) if isinstance(r, records.EndRecord)), default=-1)
    last_msg = max((i for i, r in enumerate(records_) if isinstance(r, records.MessageRecord)), default=-1)
    status = records_[last_end].reason if last_end > last_msg else ("interrupted" if last_msg >= 0 else "new")
    return {
        "created": head.ts if head else None,
        "model": model,
        "profile": profile,
        "turns": max((m.turn for m in messages), default=0),
        "messages": len(messages),
        "tokens": sum(u.prompt_tokens + u.completion_tokens for u in usage),
        "status": status,
    }
