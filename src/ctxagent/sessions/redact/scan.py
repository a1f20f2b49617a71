"""One pass over a stored output: its size, lines and sha256, and where a secret may start.

A :class:`Prefilter` is a hyperscan database (compiled once per process and set of exact values) of
:data:`~ctxagent.sessions.redact.rules.PREFILTERS` and the exact secret values: every match of a secret
shape starts with a match of one of them, so the Python patterns (~100 MB/s) need only verify the
*windows* where a prefilter matched (hyperscan runs at GB/s), and replace exactly what they replace
alone (tests/test_scan_engine.py checks this on random text). :func:`measure` streams a file once and
returns its :class:`~ctxagent.tools.preview.FileStats` with the windows, hashing in a second thread
(hashlib and hyperscan release the GIL). Without the ``hyperscan`` package, or with
``CTXAGENT_SCAN=python``, :func:`prefilter` returns None and the Python patterns scan everything.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ctxagent.sessions.redact.engine import Windows
from ctxagent.sessions.redact.rules import PREFILTERS
from ctxagent.tools.preview import FileStats

CHUNK_BYTES = 2 * 1024 * 1024  # read, hashed and scanned at a time
THREAD_MIN_BYTES = 8 * 1024 * 1024  # smaller files are hashed in the calling thread
MAX_WINDOWS = 200_000  # more prefilter matches than this: the Python patterns scan everything
ENGINE_ENV = "CTXAGENT_SCAN"  # "python": no prefilter (the fallback path, for tests and benchmarks)


@dataclass(frozen=True)
class Measured:
    """A file's stats and the windows (absolute, sorted, disjoint) where a secret may start;
    ``windows`` is None when there were too many prefilter matches to list (scan everything)."""

    stats: FileStats
    windows: Windows | None


class Prefilter:
    """A hyperscan streaming database of the prefilters and ``exacts`` (bytes, matched exactly).
    Raises ``hyperscan.error`` when a pattern does not compile (a bug: they are fixed text)."""

    def __init__(self, exacts: Sequence[bytes]):
        import hyperscan

        self._hs = hyperscan
        patterns = [pattern.encode("latin-1") for _, pattern, _ in PREFILTERS]
        flags = [hyperscan.HS_FLAG_CASELESS if "i" in flag else 0 for flag, _, _ in PREFILTERS]
        self.widths = [width or _max_width(pattern) for _, pattern, width in PREFILTERS]
        # a C string: every byte escaped (a NUL or a "(" would not do raw)
        patterns += ["".join(f"\\x{byte:02x}" for byte in value).encode("ascii") for value in exacts]
        flags += [0] * len(exacts)
        self.widths += [len(value) for value in exacts]
        self.db = hyperscan.Database(mode=hyperscan.HS_MODE_STREAM)
        self.db.compile(expressions=patterns, ids=list(range(len(patterns))), flags=flags)
        self._scratch = threading.local()  # a scratch space is used by one scan at a time
        self._closing = threading.Lock()

    def scratch(self) -> Any:
        """This thread's scratch space for the database."""
        scratch = getattr(self._scratch, "space", None)
        if scratch is None:
            scratch = self._scratch.space = self._hs.Scratch(self.db)
        return scratch

    @contextmanager
    def stream(self, hits: _Hits) -> Iterator[Callable[[bytes], None]]:
        """A function that scans the next chunk of one stream, reporting to ``hits`` (until they are too
        many to list), with this thread's scratch space. The stream is closed by hand: the binding's
        ``close`` crashes when given a scratch space (hyperscan 0.9.1 parses its arguments in the wrong
        order), so it closes with the database's own, one thread at a time."""
        scratch = self.scratch()
        handler = hits.add  # referenced here while the stream lives: the binding keeps no reference
        stream = self.db.stream(match_event_handler=handler)
        stream.__enter__()  # hs_open_stream

        def scan(chunk: bytes) -> None:
            if not hits.dense:
                stream.scan(chunk, scratch=scratch, match_event_handler=handler)

        try:
            yield scan
        finally:
            with self._closing:
                stream.close(match_event_handler=handler)

    def windows(self, data: bytes) -> Windows | None:
        """The windows of ``data`` (see :class:`Measured`)."""
        hits = _Hits(self.widths)
        with self.stream(hits) as scan:
            scan(data)
        return hits.merged()


def _max_width(pattern: str) -> int:
    """The longest text ``pattern`` can match (raises ``ValueError`` when unbounded)."""
    parser: Any = importlib.import_module("re._parser")  # Python's own regex parser knows the width
    width = int(parser.parse(pattern).getwidth()[1])
    if width >= parser.MAXREPEAT:
        raise ValueError(f"prefilter {pattern!r} is unbounded: give its width")
    return width


@dataclass
class _Hits:
    """Collects prefilter matches as windows: a match ending at ``end`` of pattern ``i`` means a
    secret may start in ``[end - widths[i], end)``."""

    widths: list[int]
    found: Windows = field(default_factory=Windows)
    dense: bool = False

    def add(self, pattern: int, start: int, end: int, flags: int, context: object) -> None:
        if len(self.found) >= MAX_WINDOWS:
            self.dense = True
        else:
            self.found.add(max(0, end - self.widths[pattern]), end)

    def merged(self) -> Windows | None:
        return None if self.dense else self.found.finish()


_compiled = lru_cache(maxsize=8)(Prefilter)


def prefilter(exacts: Sequence[bytes]) -> Prefilter | None:
    """The prefilter for ``exacts`` (compiled once per process), or None without hyperscan or
    with ``CTXAGENT_SCAN=python`` in the environment."""
    if os.environ.get(ENGINE_ENV, "").lower() == "python":
        return None
    try:
        import hyperscan  # noqa: F401
    except ImportError:  # no wheel for this platform: the Python patterns scan everything
        return None
    try:
        return _compiled(tuple(exacts))
    except Exception as err:  # hyperscan.error: a database it cannot build here (e.g. an old CPU)
        warnings.warn(f"secret scan without its prefilter (slower): {err}", RuntimeWarning, stacklevel=2)
        return None


class Digester:
    """Size, newlines, last byte and sha256 of a stream of chunks (the stats of a file as it is written);
    the hash runs in a second thread when ``threaded`` (hashlib releases the GIL), one chunk behind the
    caller at most."""

    def __init__(self, threaded: bool = False):
        self.sha = hashlib.sha256()
        self.size = self.newlines = 0
        self.last = b""
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ctxagent-sha256") if threaded else None
        self._pending: Future[None] | None = None

    def update(self, chunk: bytes) -> None:
        if not chunk:
            return
        if self._pool is None:
            self.sha.update(chunk)
        else:
            self._wait()
            self._pending = self._pool.submit(self.sha.update, chunk)
        self.size += len(chunk)
        self.newlines += chunk.count(b"\n")
        self.last = chunk[-1:]

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def stats(self) -> FileStats:
        self._wait()
        if self._pool is not None:
            self._pool.shutdown()
        return FileStats(self.size, self.newlines + (1 if self.last not in (b"", b"\n") else 0),
                         self.sha.hexdigest())


def measure(path: Path, pre: Prefilter | None = None) -> Measured:
    """Stats of the file at ``path`` and, with ``pre``, its windows (one streaming pass; without
    ``pre`` the windows are None). Raises ``OSError``."""
    digest = Digester(threaded=path.stat().st_size >= THREAD_MIN_BYTES)
    hits = _Hits(pre.widths if pre is not None else [])
    scanning: AbstractContextManager[Callable[[bytes], None]] = (
        nullcontext(lambda chunk: None) if pre is None else pre.stream(hits))
    with open(path, "rb") as fh, scanning as scan:
        while chunk := fh.read(CHUNK_BYTES):
            digest.update(chunk)
            scan(chunk)
    return Measured(digest.stats(), None if pre is None else hits.merged())


# --- scanning a spool file while the tool writes it ---------------------------------------------

IDLE_GIVE_UP_S = 60.0  # a follower that sees no new bytes for this long stops (adopt then measures)
POLL_S = (0.002, 0.05)  # the follower's wait when it has caught up: first, then at most (doubling)


class Follower:
    """Measures a file (as :func:`measure`) in a daemon thread while another process writes it, so the
    scan runs beside the tool, not after it; :meth:`finish` waits for the rest. The thread stops by
    itself, with no result, when the file is deleted or renamed, or stops growing for a minute."""

    def __init__(self, path: Path, pre: Prefilter):
        self.path = path
        self.prefilter = pre
        self._fh = open(path, "rb", buffering=0)  # noqa: SIM115 (closed by the thread)
        self._done = threading.Event()
        self._cancelled = False
        self._result: Measured | None = None
        self._thread = threading.Thread(target=self._run, name="ctxagent-scan", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def finish(self) -> Measured | None:
        """The measurement of the whole file, once its writer is done (None: the thread gave up or
        failed; measure it again)."""
        self._done.set()
        self._thread.join()
        return self._result

    def cancel(self) -> None:
        """Stop reading (the file is not to be scanned) and wait for the thread to end."""
        self._cancelled = True
        self.finish()

    def _run(self) -> None:
        digest = Digester(threaded=True)
        hits = _Hits(self.prefilter.widths)
        try:
            with self._fh, self.prefilter.stream(hits) as scan:
                if self._follow(digest, scan):
                    self._result = Measured(digest.stats(), hits.merged())
        except Exception:  # the caller measures again: None says so
            self._result = None
        finally:
            if self._result is None:
                digest.stats()  # the hashing thread ends

    def _still_named(self) -> bool:
        """Whether the spool path still names the file being read (not deleted, not renamed away)."""
        with suppress(OSError):
            return os.path.samestat(os.stat(self.path), os.fstat(self._fh.fileno()))
        return False

    def _follow(self, digest: Digester, scan: Callable[[bytes], None]) -> bool:
        """Read to the end of the file each time it grows, until :meth:`finish`; False when the
        file was deleted or went idle."""
        wait, idle = POLL_S[0], 0.0
        while True:
            done = self._done.is_set()  # read before the last read: the writer is done by then
            chunk = b"" if self._cancelled else self._fh.read(CHUNK_BYTES)
            if chunk:
                digest.update(chunk)
                scan(chunk)
                wait, idle = POLL_S[0], 0.0
                continue
            if done:
                return not self._cancelled
            if idle >= IDLE_GIVE_UP_S or not self._still_named():
                return False
            self._done.wait(wait)
            idle += wait
            wait = min(wait * 2, POLL_S[1])
