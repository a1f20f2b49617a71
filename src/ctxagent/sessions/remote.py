"""Sessions in an object store (any fsspec URL): the store is the durable copy, the local session
folder (``<data dir>/stores/<slug>-<hash>/sessions/NAME/``) a cache. Layout and guarantees: docs/batch.md,
"Sessions in an object store".

Object stores have no append, so every write is create-only (``If-None-Match: *`` on S3): a segment
number is written once, by one writer. A writer that finds its next number taken has been fenced
(another machine took the session over): it stops with :class:`~ctxagent.errors.SessionBusyError`.
``.store.json`` beside the transcript records how much of it the store holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ctxagent.errors import CtxagentError, SessionBusyError, UsageError
from ctxagent.sessions.files import private_dir, replace_whole, write_synced
from ctxagent.sessions.transcript import set_aside

STATE = ".store.json"  # beside the transcript: {"segments": N, "bytes": B} of it that the store holds
SNAPSHOT_EVERY = 64  # segments since the last snapshot that make a writer leave a new one
DIGITS = 12
PIPE_MAX_BYTES = 64 * 1024 * 1024  # files under this size are sent in one atomic put where the store has one


def cache_key(url: str) -> str:
    """The folder name, under ``<data dir>/stores/``, of the cache of the store at ``url``: the end of
    its :func:`shown` form without userinfo and query (where credentials travel), then a digest of
    the whole URL (two stores, two folders)."""
    public = re.sub(r"[?#].*$", "", re.sub(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", r"\1", shown(url), flags=re.I))
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", public.replace("[REDACTED:", ""))[-40:].strip("-.") or "store"
    return f"{slug}-{hashlib.sha256(url.encode()).hexdigest()[:12]}"


def shown(url: str) -> str:
    """``url`` as messages show it: its secrets (a password, a token in the query) as markers."""
    from ctxagent.sessions.redact import default

    return default().text(url)


def segment_name(number: int) -> str:
    return f"{number:0{DIGITS}d}.jsonl"


class Store:
    """An fsspec filesystem and the root path of the store at ``url``. Raises ``UsageError`` when the
    URL's protocol is unknown or its package is not installed (``pip install 'ctxagent[s3]'``)."""

    def __init__(self, url: str):
        try:
            from fsspec.core import url_to_fs
            from fsspec.utils import get_protocol

            # no listings cache: an existence check must see what another machine wrote a moment ago
            self.fs, self.root = url_to_fs(url, use_listings_cache=False)
        except (ImportError, ValueError) as err:
            raise UsageError(f"session store {shown(url)!r}: {shown(str(err))} (the extras: ctxagent[s3], [gcs], "
                             "[azure])") from err
        self.url = shown(url)  # in messages only: the filesystem above holds what it needs
        self.atomic_pipe = get_protocol(url) in ("s3", "s3a")  # s3fs's pipe_file(mode="create"): If-None-Match: *

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @contextmanager
    def failing(self, what: str) -> Iterator[None]:
        """Translate the store's errors (OSError, botocore's, aiohttp's...) into ``CtxagentError``
        naming ``what`` was done; ``FileNotFoundError`` and ``FileExistsError`` pass unchanged."""
        try:
            yield
        except (FileNotFoundError, FileExistsError, CtxagentError):
            raise
        except Exception as err:  # the vendor's errors, translated once, here
            raise CtxagentError(f"session store {self.url}: {what} failed: {shown(str(err))}") from err

    def create(self, path: str, source: Path | bytes) -> bool:
        """Write ``source`` (bytes, or a file's, streamed on stores that have no atomic put and on S3
        from :data:`PIPE_MAX_BYTES` on) at ``path`` unless an object is there already; returns whether
        it was written (False: it existed, nothing changed). Raises ``CtxagentError`` when the store fails."""
        with contextlib.suppress(FileExistsError), self.failing(f"writing {path}"):
            if self.atomic_pipe and (isinstance(source, bytes) or source.stat().st_size < PIPE_MAX_BYTES):
                self.fs.pipe_file(path, source if isinstance(source, bytes) else source.read_bytes(), mode="create")
                return True
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            with (io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb") as src,
                  self.fs.open(path, "xb") as dst):
                shutil.copyfileobj(src, dst, 1024 * 1024)
            return True
        return False

    def names(self, folder: str) -> list[str]:
        """The names of the objects directly in ``folder`` (none when it does not exist)."""
        with contextlib.suppress(FileNotFoundError), self.failing(f"listing {folder}"):
            found = self.fs.ls(folder, detail=False, refresh=True)
            return sorted(str(p).rstrip("/").rsplit("/", 1)[-1] for p in found)
        return []

    def size(self, path: str) -> int | None:
        """The size in bytes of the object at ``path`` (one HEAD request on S3), None when there is none."""
        with contextlib.suppress(FileNotFoundError), self.failing(f"reading {path}"):
            return int(self.fs.info(path)["size"])
        return None

    def read_many(self, paths: list[str], *, missing_ok: bool = False) -> dict[str, bytes]:
        """``{path without protocol: bytes}`` of ``paths`` (fetched concurrently where the store
        can); ``missing_ok``: paths with no object are left out instead of failing."""
        if not paths:
            return {}
        with self.failing(f"reading {paths[0]}"):
            found = self.fs.cat(paths, on_error="omit" if missing_ok else "raise")
        return {_strip(k): v for k, v in found.items()}  # a list given: always a dict

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Delete the object (or, ``recursive``, the folder) at ``path``; a missing one is no error."""
        with contextlib.suppress(FileNotFoundError), self.failing(f"deleting {path}"):
            self.fs.rm(path, recursive=recursive)


def _strip(path: str) -> str:
    return path.split("://", 1)[-1]


def numbers(names: list[str]) -> list[int]:
    """The segment (or lease) numbers among object ``names``, ascending."""
    return sorted(int(n.split(".", 1)[0]) for n in names if re.fullmatch(rf"\d{{{DIGITS}}}\.jsonl?", n))


@dataclass
class SyncState:
    """How much of the local transcript the store holds: ``segments`` objects, ``bytes`` of it."""

    segments: int = 0
    bytes: int = 0
    snapshot: int = 0  # the segments the newest snapshot known here holds
    last: int | None = None  # bytes of segment number ``segments`` (None: not known, a state from before it)

    @classmethod
    def load(cls, root: Path) -> SyncState:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads((root / STATE).read_text(encoding="utf-8"))
            last = data.get("last")
            return cls(int(data["segments"]), int(data["bytes"]), int(data.get("snapshot", 0)),
                       None if last is None else int(last))
        return cls()

    def save(self, root: Path) -> None:
        replace_whole(root / STATE, json.dumps(asdict(self)))

    def advance(self, number: int, size: int) -> None:
        """Segment ``number``, of ``size`` bytes, is the newest the store and the cache share."""
        self.segments, self.last = number, size
        self.bytes += size


@dataclass
class SessionSync:
    """The store side of one session folder ``root`` whose objects are under ``key`` in ``store``
    (``sessions/NAME`` or ``sessions/NAME/agents/CHILD``): :meth:`pull` for readers and writers,
    :meth:`fence`, then :meth:`upload` for each appended step (the transcript's ``mirror``), for a writer."""

    store: Store
    key: str
    root: Path
    name: str
    state: SyncState = field(default_factory=SyncState)
    uploaded: set[str] = field(default_factory=set)  # output file names the store holds
    fenced: str = ""  # why this writer may not write any more (set by the lease's renewer too)
    removed: bool = False  # the session's objects were deleted (sessions delete, rename)
    guard: Callable[[], None] | None = None  # called before each segment upload (the lease's check)

    @property
    def transcript(self) -> Path:
        return self.root / "transcript.jsonl"

    def remote(self, *parts: str) -> str:
        return self.store.path(self.key, *parts)

    # -- reading the store into the cache -------------------------------------------------------
    def pull(self, *, writer: bool) -> None:
        """Append the segments the cache lacks to the local transcript and download the outputs
        it lacks. A writer also deals with what a crash left locally past the synced bytes: lines
        the store has are counted, lines the store never got are uploaded (when the store has
        nothing newer) or set aside (it has: another machine continued the session); a torn last
        line is set aside. A reader leaves such a cache alone (it may be a live writer's)."""
        self.state = SyncState.load(self.root)
        self._check_still_there()
        size = self.transcript.stat().st_size if self.transcript.exists() else 0
        if size < self.state.bytes:  # the cache lost bytes it had synced: start it over from the store
            if size:
                set_aside(self.transcript, size, "a cache shorter than what it had synced", "cache-")
            self.state, size = SyncState(), 0
        tail = self._read_from(self.state.bytes) if size > self.state.bytes else b""
        if tail and not writer:
            return
        if not size:
            self._from_snapshot()
        new = self._new_segments()
        private_dir(self.root)
        complete, torn = tail[: tail.rfind(b"\n") + 1], tail[tail.rfind(b"\n") + 1:]
        if torn:
            set_aside(self.transcript, len(torn), "torn last line", "torn-")
        paths = [self.remote("segments", segment_name(n)) for n in new]
        data = self.store.read_many(paths)
        chunks = [(n, data[_strip(p)]) for n, p in zip(new, paths, strict=True)]
        while chunks and complete.startswith(chunks[0][1]):  # lines of ours that reached the store
            number, chunk = chunks.pop(0)
            complete = complete[len(chunk):]
            self.state.advance(number, len(chunk))
        if complete and chunks:  # the store moved on without these lines
            set_aside(self.transcript, len(complete), "lines the session store never got (another machine continued "
                      "the session)", "unsynced-")
        elif complete:  # the step a crash kept from the store: ours, and nobody wrote since
            self._upload_segment(complete, self.state.segments + 1)
        self._append_local(chunks)
        self.state.save(self.root)
        self._pull_outputs()

    def _check_still_there(self) -> None:
        """The store's state wins over a stale cache: when the store lost the newest segment this cache
        synced, or holds another one in its place (deleted, then started again), the cache is moved aside
        and ``UsageError`` says so. Without the check a resume uploaded its steps after a fresh segment
        number: a fragment with no header, which no machine could open, and exit 0. One HEAD request."""
        number = self.state.segments
        if not number:
            return
        found = self.store.size(self.remote("segments", segment_name(number)))
        if found is not None and self.state.last in (None, found):
            return
        self.removed = True  # a writer's lease is deleted, not released: nothing of ours stays in the store
        what = ("has no segment of it any more (deleted or emptied on another machine)" if found is None else
                "holds another session under its name (deleted, then started again on another machine)")
        moved = self._stale_aside()
        raise UsageError(f"session {self.name!r}: the session store {self.store.url} {what}, while this machine's "
                         f"cache had synced {number} segments of it; the store's state wins: {moved}. Run the "
                         "command again to use the session the store holds, or start a new one")

    def _stale_aside(self) -> str:
        """Move the session's cache folder to ``<cache>/stale/<name>-<time>`` (out of the sessions
        listed); what happened, in words."""
        base = self.root.parents[len(self.key.split("/")) - 1]  # the folder holding sessions/
        side = base / "stale" / f"{self.key.removeprefix('sessions/').replace('/', '~')}-{int(time.time())}"
        try:
            side.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.root.rename(side)
        except OSError as err:
            return f"this machine's stale cache {self.root} could not be moved aside ({err.strerror or err}); remove it"
        return f"this machine's stale cache was moved to {side}"

    def _from_snapshot(self) -> None:
        """An empty cache starts from the store's newest snapshot, when there is one."""
        found = numbers(self.store.names(self.remote("snapshots")))
        if not found:
            return
        private_dir(self.root)
        data = self.store.read_many([self.remote("snapshots", segment_name(found[-1]))])
        self._append_local([(found[-1], next(iter(data.values())))])
        self.state.snapshot, self.state.last = found[-1], None  # the segment's own size is not the snapshot's

    def snapshot(self) -> None:
        """Leave ``snapshots/<N>.jsonl``, the synced transcript in one object, when
        :data:`SNAPSHOT_EVERY` segments or more came since the last one (best effort)."""
        if self.fenced or self.state.segments - self.state.snapshot < SNAPSHOT_EVERY:
            return
        with open(self.transcript, "rb") as fh:
            data = fh.read(self.state.bytes)
        with contextlib.suppress(CtxagentError):
            self.store.create(self.remote("snapshots", segment_name(self.state.segments)), data)
            old, self.state.snapshot = self.state.snapshot, self.state.segments
            self.state.save(self.root)
            if old:
                self.store.remove(self.remote("snapshots", segment_name(old)))

    def _new_segments(self) -> list[int]:
        """The numbers of the store's segments past the cache's (one existence check when none)."""
        if self.store.size(self.remote("segments", segment_name(self.state.segments + 1))) is None:
            return []
        return [n for n in numbers(self.store.names(self.remote("segments"))) if n > self.state.segments]

    def _read_from(self, offset: int) -> bytes:
        with open(self.transcript, "rb") as fh:
            fh.seek(offset)
            return fh.read()

    def _append_local(self, chunks: list[tuple[int, bytes]]) -> None:
        """Append downloaded segments ``(number, bytes)`` to the local transcript (created 0600)."""
        if not chunks:
            return
        write_synced(self.transcript, "ab", *(chunk for _, chunk in chunks))
        for number, chunk in chunks:
            self.state.advance(number, len(chunk))

    def _pull_outputs(self) -> None:
        """Download the outputs the store has and the cache lacks (each to a temporary name, then
        renamed: a name in the folder is always a whole file)."""
        remote = set(self.store.names(self.remote("outputs")))
        folder = self.root / "outputs"
        local = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
        self.uploaded = remote
        missing = sorted(n for n in remote - local if not n.startswith("."))
        if not missing:
            return
        private_dir(folder)
        temps = [folder / f".download-{n}" for n in missing]
        with self.store.failing("downloading outputs"):
            self.store.fs.get([self.remote("outputs", n) for n in missing], [str(t) for t in temps])
        for name, temp in zip(missing, temps, strict=True):
            os.chmod(temp, 0o600)
            os.replace(temp, folder / name)

    # -- writing ------------------------------------------------------------------------------
    def fence(self) -> None:
        """Claim the next segment number with an empty segment, so a stale writer whose lease expired can
        write nothing more; when its late segment took the number first, pull it and try the next."""
        while self.state.segments:
            if self.store.create(self.remote("segments", segment_name(self.state.segments + 1)), b""):
                self.state.advance(self.state.segments + 1, 0)
                self.state.save(self.root)
                return
            self.pull(writer=True)

    def upload(self, data: bytes) -> None:
        """The transcript's mirror: upload the outputs not in the store yet, then ``data`` (one fsynced
        append) as the next segment. Raises ``SessionBusyError`` when this writer has been fenced."""
        if self.guard is not None:
            self.guard()
        if self.fenced:
            raise SessionBusyError(self.fenced)
        self.push_outputs()
        self._upload_segment(data, self.state.segments + 1)
        self.state.save(self.root)

    def _upload_segment(self, data: bytes, number: int) -> None:
        if not self.store.create(self.remote("segments", segment_name(number)), data):
            self.fenced = (f"session {self.name!r} was taken over by another writer (segment {number} exists in "
                           f"{self.store.url}); this process stops, everything it wrote before is in the store")
            raise SessionBusyError(self.fenced)
        self.state.advance(number, len(data))

    def push_outputs(self) -> None:
        """Upload the output files (final names only: spools and partial files start with ``.``)
        the store does not hold yet, each create-only (an existing object is the same file)."""
        folder = self.root / "outputs"
        if not folder.is_dir():
            return
        with os.scandir(folder) as entries:
            fresh = sorted(e.name for e in entries if e.name not in self.uploaded and not e.name.startswith(".")
                           and e.is_file())
        for name in fresh:
            with contextlib.suppress(FileNotFoundError):  # deleted meanwhile (clean outputs)
                self.store.create(self.remote("outputs", name), folder / name)
                self.uploaded.add(name)
