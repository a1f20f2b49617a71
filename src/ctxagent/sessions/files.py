"""Owner-only files of a session's folder: folders made 0700, files 0600, written synced or whole."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
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


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` for the block to write (the block creates it 0600 and fsyncs it),
    renamed over ``path`` when the block ends and removed when it raises: ``path`` is the old file or the
    new one whole. Raises ``OSError``."""
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        yield temp
        os.replace(temp, path)
    finally:
        with contextlib.suppress(OSError):  # a read-only data dir: unlink fails too (EROFS), even for a missing file
            temp.unlink(missing_ok=True)


def replace_whole(path: Path, text: str | Iterable[str]) -> None:
    """Write ``text`` (or its chunks, streamed) to ``path`` whole or not at all (0600, fsynced before the
    rename: :func:`replacing`). Raises ``OSError``."""
    with replacing(path) as temp, open(temp, "w", encoding="utf-8", opener=_private) as fh:
        fh.writelines([text] if isinstance(text, str) else text)
        fh.flush()
        os.fsync(fh.fileno())
