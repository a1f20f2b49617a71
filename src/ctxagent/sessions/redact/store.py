"""Secrets kept off disk where outputs are stored: :class:`RedactingStore`. A spool file is scanned
while the tool writes it (:class:`.scan.Follower`), so adopting it has little left to read, and the
stats measured on the way come back with it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ctxagent.sessions.redact import scan
from ctxagent.sessions.redact.redactor import Redactor, default, redact_file
from ctxagent.sessions.store import OutputStore
from ctxagent.tools.preview import FileStats

UNREDACTED_SUFFIXES = (".npy",)  # binary formats whose bytes a replacement would corrupt


class RedactingStore(OutputStore):
    """The output store of a session with secrets kept out of its files: every file it writes or adopts
    is redacted first (numpy ``.npy`` files excepted: their bytes are not text), 0600 in a 0700 folder.
    A spool file is unredacted until :meth:`adopt`; :meth:`clean_spools` removes those a kill left."""

    def __init__(self, root: Path, redactor: Redactor | None = None, linked: Any = None):
        super().__init__(root, linked)
        self._redactor = redactor
        self._followers: dict[Path, scan.Follower] = {}  # spool files scanned while being written

    @property
    def redactor(self) -> Redactor:
        return self._redactor or default()

    def spool(self) -> tuple[int, Path]:
        """:meth:`OutputStore.spool`; with the prefilter, scanned while the tool writes it (:class:`.scan.Follower`)."""
        fd, path = super().spool()
        pre = self.redactor.prefilter
        if pre is not None:
            self._followers = {p: f for p, f in self._followers.items() if f.alive}  # deleted spools
            self._followers[path] = scan.Follower(path, pre)
        return fd, path

    def put_bytes(self, handle: str, data: bytes, suffix: str = ".out", *, durable: bool = True) -> Path:
        if not suffix.endswith(UNREDACTED_SUFFIXES):
            data = self.redactor.data(data)
        return super().put_bytes(handle, data, suffix, durable=durable)

    def adopt_measured(self, spooled: Path, handle: str, suffix: str = ".out") -> tuple[Path, FileStats | None]:
        follower = self._followers.pop(spooled, None)
        stats = None
        if suffix.endswith(UNREDACTED_SUFFIXES):
            if follower is not None:
                follower.cancel()
        else:
            redactor = self.redactor
            measured = follower.finish() if follower is not None else None
            stats = redact_file(spooled, redactor,
                                measured if follower and follower.prefilter is redactor.prefilter else None)[1]
        os.chmod(spooled, 0o600)
        return OutputStore.adopt(self, spooled, handle, suffix), stats

    def adopt(self, spooled: Path, handle: str, suffix: str = ".out") -> Path:
        return self.adopt_measured(spooled, handle, suffix)[0]

    def _copy(self, source: Path, target: Path) -> None:  # put_file: no follower, the copy is the scan
        self.redactor.copy_file(source, target)
