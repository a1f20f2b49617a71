"""What ``run`` and ``resume`` read from standard input, and when: never by waiting without bound (an open
pipe nobody writes to: openai/codex#20919). See docs/batch.md, "What is read from stdin"."""

from __future__ import annotations

import os
import select
import stat
import sys
import time

from ctxagent.cli import process

WAIT_S = 1.0
"""Seconds after the command's start within which piped data must begin to be read with a task
argument (``CTXAGENT_STDIN_WAIT_S`` changes it). A producer started with ctxagent (``cat log |``,
``git diff |``) has written by then; an idle pipe costs a run at most this long."""
IDLE_S = 10.0
"""Seconds the writer of a pipe that already sent data may stay quiet before reading stops."""
CHUNK = 1 << 16


def wait_s() -> float:
    """:data:`WAIT_S`, or ``$CTXAGENT_STDIN_WAIT_S`` (seconds, ``>= 0``) when set to a number."""
    try:
        return max(0.0, float(os.environ.get("CTXAGENT_STDIN_WAIT_S", WAIT_S)))
    except ValueError:
        return WAIT_S


def piped() -> bytes | None:
    """The bytes piped into stdin that are ours to read (docs/batch.md), or None."""
    try:
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError, AttributeError):
        return None
    if sys.stdin.isatty():
        return None
    if stat.S_ISREG(mode):
        return _from_file(fd)
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        return None
    started = process.STARTED if process.STARTED is not None else time.monotonic()
    if not _readable(fd, max(0.0, started + wait_s() - time.monotonic())):
        return None  # an open pipe nobody writes to: not waited for
    return _drain(fd)


def _from_file(fd: int) -> bytes | None:
    """A redirected file, read from its start; None when it was read from before (a ``while read`` loop's)."""
    try:
        if os.lseek(fd, 0, os.SEEK_CUR) != 0:
            return None
    except OSError:
        return None
    return sys.stdin.buffer.read()


def _readable(fd: int, timeout_s: float) -> bool:
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    except (OSError, ValueError):
        return False


def _drain(fd: int) -> bytes:
    """Read ``fd`` (data is waiting) to its end, or until the writer is quiet for :data:`IDLE_S`."""
    parts: list[bytes] = []
    while True:
        chunk = os.read(fd, CHUNK)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        if not _readable(fd, IDLE_S):
            got = sum(len(p) for p in parts)
            print(f"ctxagent: note: stdin sent {got:,} bytes, then nothing for {IDLE_S:.0f} s without closing; "
                  "using what came ('-' as the task reads stdin to its end)", file=sys.stderr)
            return b"".join(parts)
