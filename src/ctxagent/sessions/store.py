"""The output store: offloaded tool outputs of one session, as files, named by handle.

A *handle* is the short, stable name of an offloaded output: ``@`` followed by the tool call id
with every character outside ``[A-Za-z0-9_-]`` removed, cut to its last 12 characters
(``call_9f8XkQ2mZbL0aYv7`` gives ``@kQ2mZbL0aYv7``; a scripted call ``read1`` gives ``@read1``).
It derives only from the call id, so a scripted turn can name the output of an earlier scripted
call. Files live at ``<session>/outputs/<handle without @>.out``; handles resolve only inside
their own session's store.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from ctxagent.errors import UsageError

HANDLE_RE = re.compile(r"^@[A-Za-z0-9_-]{1,32}(?:\.[0-9]+)?$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def handle_for(call_id: str) -> str:
    """The handle of the output of tool call ``call_id`` (deterministic; see module docstring)."""
    cleaned = _UNSAFE.sub("", call_id)[-12:] or "out"
    return "@" + cleaned


class OutputStore:
    """Files of offloaded outputs under ``root`` (``<session>/outputs``).

    Sizes are bytes. Files are written whole, bytes exactly as the tool produced them.
    """

    def __init__(self, root: Path):
        self.root = root

    def path_of(self, handle: str) -> Path:
        """The file that holds ``handle``'s output. Raises ``UsageError`` for a malformed handle."""
        if not HANDLE_RE.match(handle):
            raise UsageError(f"not a handle: {handle!r} (handles look like @abc123)")
        return self.root / f"{handle[1:]}.out"

    def unique_handle(self, call_id: str) -> str:
        """``handle_for(call_id)``, suffixed ``.2``, ``.3``... if that name is already taken."""
        base = handle_for(call_id)
        handle, n = base, 1
        while self.path_of(handle).exists():
            n += 1
            handle = f"{base}.{n}"
        return handle

    def spool(self) -> tuple[int, Path]:
        """A new temporary file inside the store, for a tool to stream its output into.

        Returns ``(fd, path)``; :meth:`adopt` moves it under a handle, or the caller deletes it.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".spool-", dir=self.root)
        return fd, Path(name)

    def adopt(self, spooled: Path, handle: str) -> Path:
        """Move a spooled file (same filesystem) under ``handle``; returns the final path."""
        final = self.path_of(handle)
        os.replace(spooled, final)
        return final

    def put_bytes(self, handle: str, data: bytes) -> Path:
        """Write ``data`` under ``handle`` (fsynced); returns the path."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.path_of(handle)
        with open(final, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return final

    def put_file(self, handle: str, source: Path) -> Path:
        """Copy ``source`` under ``handle``; returns the path."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.path_of(handle)
        shutil.copyfile(source, final)
        return final
