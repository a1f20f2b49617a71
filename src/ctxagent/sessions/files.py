"""Owner-only files of a session's folder: folders made 0700, files 0600, written synced or whole."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def _private(path: str, flags: int) -> int:
    """``open`` opener creating files owner-only (0600)."""
    return os.open(path, flags, 0o600)


def private_dir(path: Path) -> Path:
    """Create ``path`` and its missing parents owner-only (0700); existing ones are left alone."""
    for folder in reversed([path, *path.parents]):
        if not folder.exists():
            with contextlib.suppress(FileExistsError):  # made meanwhile by another process
                folder.mkdir(mode=0o700)
    return path


def write_synced(path: Path, mode: str, *chunks: bytes) -> None:
    """Write ``chunks`` to ``path`` (opened in binary ``mode``, created 0600), then flush and fsync."""
    with open(path, mode, opener=_private) as fh:
        fh.writelines(chunks)
        fh.flush()
        os.fsync(fh.fileno())


def replace_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: to a temporary file beside it (0600), renamed
    over it. Raises ``OSError`` (the temporary file removed where that is possible)."""
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(temp, "w", encoding="utf-8", opener=_private) as fh:
            fh.write(text)
        os.replace(temp, path)
    except OSError:
        with contextlib.suppress(OSError):  # a read-only data dir: unlink fails too (EROFS), even for a missing file
            temp.unlink(missing_ok=True)
        raise
