"""The append-only JSONL transcript of one session.

ROUNDTRIP (DESIGN.md): one record per physical line; reading back yields exactly what was written. A
damaged record is set aside with a warning naming the file and the line, and the session continues
from the rest (docs/usage.md "Crash safety"); a session whose header (line 1) is unreadable is refused
to a writer (:class:`TranscriptError`), never restarted as a new session with default settings.

Also :func:`set_aside`, which moves a transcript's damaged or unsynced end beside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from ctxagent.errors import UsageError, first_error
from ctxagent.sessions.files import replacing, write_synced

NUL = b"\x00"
TAIL_BYTES = 64 * 1024  # what :meth:`Transcript.tail` reads first (bytes); doubled until a record fits
BLOCK = 1024 * 1024  # bytes :meth:`Transcript.records` reads at a time


class TranscriptWarning(UserWarning):
    """A transcript line could not be read and was set aside."""


class TranscriptError(UsageError):
    """A transcript a writer cannot continue safely (its header is unreadable): exit 2."""


@dataclass
class Transcript:
    """Reads and appends the records of ``path`` (``<session>/transcript.jsonl``). The caller of
    :meth:`append` holds the session's writer lock; ``mirror`` receives the bytes of each append after
    the fsync, before it returns (the session store uploads them as one segment: sessions/remote.py)."""

    path: Path
    mirror: Callable[[bytes], None] | None = None

    def load(self, *, repair: bool = False) -> list[Any]:
        """Every readable record, oldest first, as a list: :meth:`records` collected."""
        return list(self.records(repair=repair))

    def records(self, *, repair: bool = False) -> Iterator[Any]:
        """Every readable record, oldest first, streamed (memory: one block of lines, about 1 MiB).
        Damaged lines are set aside with a :class:`TranscriptWarning` naming ``file:line``. With
        ``repair=True`` (writers only), a torn last line is moved to ``transcript.torn-<n>.jsonl`` and
        cut off, so the next append starts on a clean line. Missing file: nothing.

        Raises ``TranscriptError`` with ``repair=True`` when line 1 (the header) is unreadable and
        later records exist (a writer would otherwise start a new session in this file).
        """
        if not self.path.exists():
            return
        reader = _Reader(self.path)
        with open(self.path, "rb") as fh:
            for number, line in _lines(fh, self.path, repair):
                record = reader.parse(number, line)
                if record is None:
                    continue
                if repair and reader.first_error:  # line 1 unreadable, a record after it read
                    raise TranscriptError(
                        f"{self.path}:1: the session header is damaged ({reader.first_error}); the session's "
                        "settings (model, profile, context window) are unknown, so it is not continued as a new "
                        "session. Restore line 1, or move the file aside to start over under this name "
                        f"(mv {self.path} {self.path}.damaged)")
                yield record
        reader.report_unknown()

    def head(self) -> Any | None:
        """The first record (normally the header), read from the first line only; None if unreadable."""
        with contextlib.suppress(OSError), open(self.path, "rb") as fh:
            return _quiet(fh.readline())
        return None

    def tail(self, nbytes: int = TAIL_BYTES, want: type = object) -> list[Any]:
        """The readable records in the last ``nbytes`` of the file (doubled until a record of type
        ``want`` is among them, or the whole file is read), oldest first; damaged lines are skipped
        silently: a cheap peek (``sessions list``), not a load. Missing or unreadable file: []."""
        try:
            size = os.path.getsize(self.path)
            with open(self.path, "rb") as fh:
                while True:
                    start = max(0, size - nbytes)
                    fh.seek(start)
                    lines = fh.read(size - start).split(b"\n")[1 if start else 0:-1]
                    found = [r for r in map(_quiet, lines) if r is not None]
                    if start == 0 or any(isinstance(r, want) for r in found):
                        return found
                    nbytes *= 2
        except OSError:
            return []

    def append(self, items: Iterable[Any], redactor: Any = None) -> None:
        """Append ``items`` (records), one line each, with every string redacted by ``redactor``
        (default: :func:`ctxagent.sessions.redact.default`), then flush and fsync once: a record is
        on disk before the next model request is sent. The file is created owner-only (0600)."""
        from ctxagent.sessions import redact  # secrets become [REDACTED:kind] before they are written

        redactor = redactor or redact.default()
        text = "".join(redact.dumps(r, redactor) + "\n" for r in items)
        if not text:
            return
        data = text.encode("utf-8")
        if self.path.exists():
            write_synced(self.path, "ab", data)
        else:  # the first lines appear whole or not at all: a kill leaves no empty transcript (resume refuses one)
            with replacing(self.path) as part:
                write_synced(part, "wb", data)
        if self.mirror is not None:
            self.mirror(data)


def _lines(fh: Any, path: Path, repair: bool) -> Iterator[tuple[int, bytes]]:
    """``(line number, line)`` of every complete line of ``fh`` (with its newline), read about
    :data:`BLOCK` bytes at a time (memory: a block and the longest line); a torn last line (no
    newline) is set aside instead (moved by a writer: ``repair``)."""
    number = 0
    while lines := fh.readlines(BLOCK):
        for line in lines:
            number += 1
            if line[-1:] != b"\n":
                set_aside(path, len(line), "torn last line", "torn-" if repair else None, stacklevel=4)
                return
            yield number, line


class _Reader:
    """Parses lines into records, warning about damaged ones (one warning per unknown kind)."""

    def __init__(self, path: Path):
        from ctxagent.sessions import records

        self.path = path
        self.unknown: dict[str, list[int]] = {}  # kind -> line numbers
        self.first_error = ""  # why line 1 could not be read, if it could not
        self.loads = records.loads

    def parse(self, number: int, line: bytes) -> Any | None:
        """The record on line ``number`` (with or without its newline), or None when it was set aside."""
        if NUL not in line and not line.endswith(b"\r\n"):  # an intact line: parsed whole, as it is
            try:
                return self.loads(line)
            except ValueError:
                pass
        return self._parse(number, line.removesuffix(b"\n"))

    def _parse(self, number: int, line: bytes) -> Any | None:
        cleaned = _clean(line)
        if not cleaned.strip():
            if line.strip():
                self._warn(number, "only NUL bytes (padding left by a crash)")
                self.first_error = self.first_error or ("only NUL bytes" if number == 1 else "")
            return None
        if b"\x00" in line:
            self._warn(number, f"{line.count(NUL)} NUL bytes of padding removed around the record")
        try:
            return self.loads(cleaned)
        except ValueError as err:
            kind = _kind_of(cleaned)
            if kind is not None and kind not in known_kinds():
                self.unknown.setdefault(kind, []).append(number)
                return None
            why = _why(err)
            if number == 1:
                self.first_error = why
            self._warn(number, f"unreadable record skipped ({why})")
            return None

    def _warn(self, number: int, what: str) -> None:
        warnings.warn(f"{self.path}:{number}: {what}", TranscriptWarning, stacklevel=5)

    def report_unknown(self) -> None:
        """One warning per record kind this version does not know."""
        for kind, numbers in self.unknown.items():
            more = f" and {len(numbers) - 1} more" if len(numbers) > 1 else ""
            warnings.warn(f"{self.path}: {len(numbers)} record(s) of unknown kind {kind!r} skipped "
                          f"(line {numbers[0]}{more}); written by a newer ctxagent?", TranscriptWarning,
                          stacklevel=4)


def known_kinds() -> frozenset[str]:
    """The record kinds this version reads (``kind`` of every record type)."""
    from ctxagent.sessions import records

    union = get_args(records.Record)[0]
    return frozenset(cls.model_fields["kind"].default for cls in get_args(union))


def _why(err: ValueError) -> str:
    """Why a line is no record, in one short line: pydantic's first error with where it is in the
    record (``message.content: ...``), else the error's text; at most 160 characters."""
    from pydantic import ValidationError

    if isinstance(err, ValidationError) and err.errors():
        where, what = first_error(err, skip=1)  # the first part is the record kind (the union's tag)
        return f"{where + ': ' if where else ''}{what}"[:160]
    return str(err)[:160]


def _clean(line: bytes) -> bytes:
    """``line`` without NUL padding (before or after the record) and a stray carriage return."""
    return line.strip(b"\x00").rstrip(b"\r").strip(b"\x00")


def _kind_of(line: bytes) -> str | None:
    """The ``kind`` of a JSON object line, or None when the line is not one."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return None
    kind = value.get("kind") if isinstance(value, dict) else None
    return kind if isinstance(kind, str) else None


def _quiet(line: bytes) -> Any | None:
    """The record on ``line`` (NUL padding and a carriage return ignored), None when it is not one."""
    from ctxagent.sessions import records

    with contextlib.suppress(ValueError):
        return records.loads(_clean(line))
    return None


def set_aside(path: Path, size: int, why: str, kind: str | None, stacklevel: int = 3) -> None:
    """Set aside the last ``size`` bytes of the transcript at ``path`` (``why``: what they are) with a
    warning: moved to ``transcript.<kind>N.jsonl`` beside it (the first free N) and cut from the
    transcript, or with no ``kind`` (a reader's) left in place."""
    where = "left in place (read-only)"
    if kind is not None:
        n = 1
        while (side := path.with_name(f"transcript.{kind}{n}.jsonl")).exists():
            n += 1
        with open(path, "r+b") as fh:
            fh.seek(-size, os.SEEK_END)
            write_synced(side, "xb", fh.read())
            fh.truncate(fh.tell() - size)
            os.fsync(fh.fileno())
        where = f"moved to {side.name}"
    warnings.warn(f"{path}: {why} ({size} bytes) set aside, {where}", TranscriptWarning, stacklevel=stacklevel)
