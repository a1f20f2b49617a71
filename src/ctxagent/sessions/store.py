"""The output store: offloaded tool outputs of one session, as files named by handle
(:mod:`ctxagent.handles`): ``<session>/outputs/<handle without @><suffix>``, ``.out`` for text and raw
bytes, ``.json`` for JSON values, ``.npy`` for numpy arrays (``ctxagent.tools.values``), with a
``.meta.json`` sidecar. Handles resolve in their own session's store first, then in the *linked*
stores (read only: a sub-agent's parent's, a parent's children's), so agents pass handles, not values.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ctxagent.errors import UsageError
from ctxagent.handles import HANDLE_RE
from ctxagent.sessions.files import private_dir

if TYPE_CHECKING:
    from ctxagent.tools.preview import FileStats

SUFFIXES = (".out", ".json", ".npy")  # value files, in lookup order
META_SUFFIX = ".meta.json"
SPOOL_PREFIX = ".spool-"  # a file a tool is still writing: adopted under a handle, or deleted


class OutputStore:
    """Files of offloaded outputs under ``root`` (``<session>/outputs``), bytes exactly as the tool
    produced them; a file under its final name is whole (written aside, then renamed)."""

    def __init__(self, root: Path, linked: Callable[[], Sequence[Path]] | None = None):
        self.root = root
        self.linked = linked  # more output folders read (never written) when a handle is not here

    def path_of(self, handle: str, suffix: str = ".out") -> Path:
        """The file that holds (or will hold) ``handle``'s output in the format of ``suffix``.
        Raises ``UsageError`` for a malformed handle."""
        if not HANDLE_RE.match(handle):
            raise UsageError(f"not a handle: {handle!r} (handles look like @abc123)")
        return self.root / f"{handle[1:]}{suffix}"

    def find(self, handle: str) -> Path | None:
        """The existing value file of ``handle`` (any of :data:`SUFFIXES`), or None. Raises
        ``UsageError`` for a malformed handle."""
        for root in (self.root, *(self.linked() if self.linked else ())):
            for suffix in SUFFIXES:
                path = root / self.path_of(handle, suffix).name
                if path.is_file():
                    return path
        return None

    def meta_path(self, handle: str) -> Path:
        """The metadata sidecar of ``handle`` (JSON): beside its value file when that is in a linked
        store, else in this one. Raises ``UsageError`` for a malformed handle."""
        own = self.path_of(handle, META_SUFFIX)
        if self.linked is None or own.exists():
            return own
        found = self.find(handle)
        return own if found is None else found.with_name(own.name)

    def handles(self) -> list[str]:
        """Every handle with a value file in the store, oldest first."""
        return [handle for handle, _, _ in self.value_files()]

    def value_files(self) -> list[tuple[str, Path, os.stat_result]]:
        """``(handle, value file, its stat)`` of every handle with a value file in this store (linked
        stores not listed), oldest first (modification time, then handle); of a handle with more than
        one value file, the one :meth:`find` returns. One scan of the folder, one stat a file."""
        if not self.root.is_dir():
            return []
        found: dict[str, tuple[int, str, os.stat_result]] = {}
        with os.scandir(self.root) as entries:
            for entry in entries:
                name = entry.name
                rank = next((i for i, s in enumerate(SUFFIXES) if name.endswith(s)), None)
                if rank is None or name.startswith(".") or name.endswith(META_SUFFIX):
                    continue
                handle = "@" + name[: -len(SUFFIXES[rank])]
                if HANDLE_RE.match(handle) and rank < found.get(handle, (len(SUFFIXES),))[0]:
                    with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                        found[handle] = (rank, entry.path, entry.stat())
        ordered = sorted(found.items(), key=lambda item: (item[1][2].st_mtime, item[0]))
        return [(handle, Path(path), stat) for handle, (_, path, stat) in ordered]

    def taken(self, handle: str) -> bool:
        """Whether ``handle`` has a value file or a sidecar in this store (linked ones not counted)."""
        return any(self.path_of(handle, s).exists() for s in (*SUFFIXES, META_SUFFIX))

    def __contains__(self, handle: object) -> bool:
        """``handle in store``: :meth:`taken` (so the store is the container :func:`new_handle` wants)."""
        return isinstance(handle, str) and self.taken(handle)

    def spool(self) -> tuple[int, Path]:
        """``(fd, path)`` of a new temporary file inside the store, for a tool to stream its output
        into (0600, in a folder created 0700); :meth:`adopt` moves it under a handle, or the caller
        deletes it."""
        private_dir(self.root)
        fd, name = tempfile.mkstemp(prefix=SPOOL_PREFIX, dir=self.root)
        return fd, Path(name)

    @contextlib.contextmanager
    def open_spool(self) -> Iterator[tuple[BinaryIO, Path]]:
        """``(binary file, path)`` of a new :meth:`spool` file open for writing, closed on leaving the
        block; the file is deleted when the block raises."""
        fd, path = self.spool()
        try:
            with os.fdopen(fd, "wb") as fh:
                yield fh, path
        except BaseException:
            path.unlink(missing_ok=True)
            raise

    def clean_spools(self) -> int:
        """Delete the spool files a killed process left behind (call with the writer lock held);
        returns how many there were."""
        if not self.root.is_dir():
            return 0
        # ".redacting": the temporary name of a redacted copy before sessions/files.replacing (older versions)
        stale = [p for p in self.root.iterdir() if p.name.startswith(SPOOL_PREFIX) or p.name.endswith(".redacting")]
        for path in stale:
            path.unlink(missing_ok=True)
        return len(stale)

    def adopt(self, spooled: Path, handle: str, suffix: str = ".out") -> Path:
        """Move a spooled file (same filesystem) under ``handle``; returns the final path."""
        final = self.path_of(handle, suffix)
        os.replace(spooled, final)
        return final

    def adopt_measured(self, spooled: Path, handle: str, suffix: str = ".out") -> tuple[Path, FileStats | None]:
        """:meth:`adopt`, and the stats of the file (bytes, lines, sha256) when adopting it measured
        them, as the redacting store's secret scan does (None: not measured; read the file for them)."""
        return self.adopt(spooled, handle, suffix), None

    def put_bytes(self, handle: str, data: bytes, suffix: str = ".out", *, durable: bool = True) -> Path:
        """Write ``data`` under ``handle`` in a ``suffix`` file; returns the path. ``durable``: fsync
        first (a copy of text the fsynced transcript already holds, a masked tool result, may skip it)."""
        fd, temp = OutputStore.spool(self)  # written aside, then renamed: a file under its final name is whole
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            return OutputStore.adopt(self, temp, handle, suffix)
        finally:
            temp.unlink(missing_ok=True)

    def put_file(self, handle: str, source: Path, suffix: str = ".out") -> Path:
        """Copy ``source`` under ``handle`` in a ``suffix`` file (whole or not at all); returns the path."""
        fd, temp = OutputStore.spool(self)  # a plain temporary file: no tool streams into it
        os.close(fd)
        try:
            self._copy(source, temp)
            return OutputStore.adopt(self, temp, handle, suffix)
        finally:
            temp.unlink(missing_ok=True)

    def _copy(self, source: Path, target: Path) -> None:
        shutil.copyfile(source, target)

