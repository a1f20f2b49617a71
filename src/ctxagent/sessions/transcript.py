"""The append-only JSONL transcript of one session.

ROUNDTRIP (DESIGN.md): one record per physical line; reading back yields exactly what was written;
a torn last line (a crash mid-write) is set aside with a warning, never a failed resume.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class TranscriptWarning(UserWarning):
    """A transcript line could not be read and was set aside."""


class Transcript:
    """Reads and appends the records of ``path`` (``<session>/transcript.jsonl``).

    Appends are flushed and fsynced before :meth:`append` returns, so a record is on disk before
    the next model request is sent. The caller holds the session's writer lock.
    """

    def __init__(self, path: Path):
        self.path = path

    def load(self, *, repair: bool = False) -> list[Any]:
        """Every readable record, oldest first.

        A line that does not parse is skipped with a :class:`TranscriptWarning`. With
        ``repair=True`` (writers only), a torn last line — bytes after the last newline — is moved
        to ``transcript.torn-<n>.jsonl`` beside the transcript and cut off, so the next append starts
        on a clean line. Missing file: empty list.
        """
        from ctxagent.sessions import records  # pydantic: imported on first use, not at start-up

        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        cut = data.rfind(b"\n") + 1
        if cut < len(data):
            self._set_aside(data[cut:], repair=repair)
            data = data[:cut]
        out: list[Any] = []
        for number, line in enumerate(data.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                out.append(records.loads(line))
            except ValueError as err:
                warnings.warn(
                    f"{self.path}:{number}: unreadable record skipped ({str(err)[:120]})",
                    TranscriptWarning,
                    stacklevel=2,
                )
        return out

    def _set_aside(self, torn: bytes, *, repair: bool) -> None:
        where = "left in place (read-only)"
        if repair:
            n = 1
            while (side := self.path.with_name(f"transcript.torn-{n}.jsonl")).exists():
                n += 1
            with open(side, "wb", opener=_private) as out:
                out.write(torn)
            with open(self.path, "r+b") as fh:
                fh.truncate(os.path.getsize(self.path) - len(torn))
                fh.flush()
                os.fsync(fh.fileno())
            where = f"moved to {side.name}"
        warnings.warn(
            f"{self.path}: torn last line ({len(torn)} bytes) set aside, {where}",
            TranscriptWarning,
            stacklevel=3,
        )

    def append(self, items: Iterable[Any], redactor: Any = None) -> None:
        """Append ``items`` (records), one line each, then flush and fsync once.

        Every string of every record is redacted first with ``redactor`` (default: the process's,
        ``ctxagent.sessions.redact.default()``, which reads the environment); the file is created
        owner-only (0600).
        """
        from ctxagent.sessions import redact  # secrets become [REDACTED:kind] before they are written

        redactor = redactor or redact.default()
        text = "".join(redact.dumps(r, redactor) + "\n" for r in items)
        if not text:
            return
        with open(self.path, "a", encoding="utf-8", opener=_private) as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())


def _private(path: str, flags: int) -> int:
    """``open`` opener creating files owner-only (0600)."""
    return os.open(path, flags, 0o600)
