"""Sessions on disk: where they live, their names, their writer lock, and listing them.

Layout (DESIGN.md): ``$CTXAGENT_DATA_DIR`` or platformdirs' user data dir for ``ctxagent``, then
``sessions/<name>/transcript.jsonl`` and ``sessions/<name>/outputs/``. Directories are created
owner-only (0700), files 0600.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypedDict

from ctxagent.dirs import data_dir
from ctxagent.errors import CtxagentError, SessionBusyError, UsageError
from ctxagent.sessions import replica
from ctxagent.sessions.files import private_dir, replace_whole
from ctxagent.sessions.outcome import final_answer
from ctxagent.sessions.remote import SessionSync, Store, cache_key
from ctxagent.sessions.replica import AGENTS, fetch_heads
from ctxagent.sessions.store import OutputStore
from ctxagent.sessions.transcript import Transcript

if TYPE_CHECKING:
    from ctxagent.sessions.records import SessionHeader

NAME_RE = re.compile(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # no "..": never a path


def sessions_root(store_url: str | None = None) -> Path:
    """The folder holding one sub-folder per session: ``<data dir>/sessions``, or with the session
    store at ``store_url`` (an fsspec URL, sessions/remote.py) its cache, ``<data dir>/stores/<key>/sessions``."""
    if store_url is None:
        return data_dir() / "sessions"
    return data_dir() / "stores" / cache_key(store_url) / "sessions"


def check_name(name: str) -> str:
    """``name`` if it is a valid session name (1-128 letters, digits, ``.``, ``_``, ``-``, starting with
    a letter or digit, no ``..``: never a path), else ``UsageError``."""
    if not NAME_RE.fullmatch(name):
        raise UsageError(f"invalid session name {name!r}: use letters, digits, '.', '_' or '-' "
                         "(no '/', no '..', at most 128 characters)")
    return name


def new_name() -> str:
    """A fresh session name: ``YYYYMMDD-HHMMSS-xxxx`` (local time, 4 random hex digits)."""
    return time.strftime("%Y%m%d-%H%M%S-") + os.urandom(2).hex()


@dataclass
class Session:
    """One session directory. Use :meth:`writer` to hold the lock while appending. ``store_url``:
    the session store it lives in (an fsspec URL; the folder is then its cache), None: local disk."""

    name: str
    root: Path
    store_url: str | None = None
    _sync: Any = field(default=None, repr=False, compare=False)  # a writer's SessionSync (with a store)

    @classmethod
    def at(cls, name: str, store_url: str | None = None) -> Session:
        """The session called ``name`` (it may not exist yet) on local disk, or in the session store
        at ``store_url``: ``NAME``, or ``NAME/CHILD[/...]`` for a sub-agent's session
        (``<parent>/agents/<child>``). Raises ``UsageError`` on a bad name."""
        first, *children = name.split("/") if "/" in name and "" not in name.split("/") else [name]
        root = sessions_root(store_url) / check_name(first)
        if children and store_url and not (root / "transcript.jsonl").is_file():
            cls(first, root, store_url).pull()  # a sub-agent's session on a machine that never opened its parent
        for child in children:
            if not (root / "transcript.jsonl").is_file():  # a/b names a sub-agent of an existing a only
                check_name(name)
            root = root / AGENTS / check_name(child)
        return cls(name, root, store_url)

    def child(self, name: str) -> Session:
        """The session of this session's sub-agent ``name`` (it may not exist yet), in the same store."""
        return Session(f"{self.name}/{check_name(name)}", self.root / AGENTS / name, self.store_url)

    def children(self) -> list[Session]:
        """The sessions of this session's sub-agents, by name."""
        folder = self.root / AGENTS
        found = [p for p in folder.iterdir() if (p / "transcript.jsonl").is_file()] if folder.is_dir() else []
        return [self.child(p.name) for p in sorted(found)]

    def linked_outputs(self) -> list[Path]:
        """The output folders this session's handles may also name (read only): its ancestors',
        nearest first, then its descendants' (agent/delegate.py)."""
        ups, root = [], self.root
        while root.parent.name == AGENTS:
            root = root.parent.parent
            ups.append(root / "outputs")
        downs = sorted(self.root.glob(f"{AGENTS}/**/outputs")) if (self.root / AGENTS).is_dir() else []
        return ups + downs

    @property
    def transcript(self) -> Transcript:
        """The session's transcript; inside :meth:`writer` with a store, its appends are uploaded."""
        return Transcript(self.root / "transcript.jsonl", mirror=self._sync.upload if self._sync else None)

    @property
    def store(self) -> OutputStore:
        from ctxagent.sessions.redact import RedactingStore  # no secret reaches an output file

        return RedactingStore(self.root / "outputs", linked=self.linked_outputs)

    def exists(self) -> bool:
        return (self.root / "transcript.jsonl").exists()

    def require(self) -> Session:
        """``self`` if the session exists and its transcript holds something, else ``UsageError``
        (an emptied transcript must not be resumed as a new session with default settings)."""
        if not self.exists():
            raise UsageError(f"no session named {self.name!r} under {self.root.parent}")
        path = self.root / "transcript.jsonl"
        if path.stat().st_size == 0:
            raise UsageError(f"{path} is empty: the session's settings and history are gone, so it is not "
                             f"continued as a new session; 'ctxagent run --session {self.name} TASK' starts over")
        return self

    @contextmanager
    def writer(self) -> Iterator[Session]:
        """Hold this session's writer lock (one writer per session) for the ``with`` block.

        Raises ``SessionBusyError`` at once if another process holds it.
        """
        from ctxagent.sessions.lease import try_lock

        private_dir(self.root)  # 0700, and so are the data and sessions folders when we create them
        lock = try_lock(self.root / ".lock")
        if lock is None:
            raise SessionBusyError(f"session {self.name!r} is in use by another ctxagent process "
                                   f"(lock: {self.root / '.lock'}); wait for it to finish") from None
        try:
            if self.store_url is None:
                yield self
            else:  # the lease, the sync and the uploads of a session store
                with replica.leased(self.remote(), self._pull_children) as self._sync:
                    yield self
        finally:
            self._sync = None
            lock.release()

    def remote(self) -> Any:
        """This session's :class:`~ctxagent.sessions.remote.SessionSync` (the writer's in :meth:`writer`), or None."""
        if self._sync is not None or self.store_url is None:
            return self._sync
        key = "sessions/" + self.root.relative_to(sessions_root(self.store_url)).as_posix()
        return SessionSync(Store(self.store_url), key, self.root, self.name)

    def pull(self) -> Session:
        """With a store: bring this session's cache (and its sub-agents') up to the store unless a process
        here holds its writer lock. Returns ``self``. Raises ``CtxagentError`` when the store fails."""
        if (sync := self.remote()) is not None:
            replica.pull(sync, self._pull_children)
        return self

    def _pull_children(self, names: list[str]) -> None:
        _ = [self.child(name).pull() for name in names]

    def header(self) -> SessionHeader | None:
        """The session header record, read from the first line only (cheap)."""
        from ctxagent.sessions import records

        head = self.transcript.head()
        return head if isinstance(head, records.SessionHeader) else None

    def running(self) -> bool:
        """Whether another process holds this session's writer lock now (a run in progress)."""
        from ctxagent.sessions.lease import try_lock

        path = self.root / ".lock"
        if not path.exists():
            return False
        with contextlib.suppress(OSError):
            if (lock := try_lock(path)) is None:
                return True
            lock.release()
        return False


HEADER_ONLY_MAX_BYTES = 1 << 20  # a transcript this size or more certainly holds more than its header


def discard_if_unstarted(session: Session) -> None:
    """Remove the folder of a session this run created but never started (its setup failed: no
    transcript, or one with its header alone, e.g. a bad ``--allow``): the transcript, the lock
    file and the outputs folder, then the folder itself."""
    transcript = session.root / "transcript.jsonl"
    with contextlib.suppress(OSError):
        if transcript.stat().st_size >= HEADER_ONLY_MAX_BYTES or transcript.read_bytes().count(b"\n") > 1:
            return
    if (sync := session.remote()) is not None:  # a session store: its objects go too
        with contextlib.suppress(CtxagentError):
            replica.remove(sync)
        (session.root / ".store.json").unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        transcript.unlink(missing_ok=True)
        (session.root / ".lock").unlink(missing_ok=True)
        if (session.root / "outputs").is_dir():
            shutil.rmtree(session.root / "outputs")
        session.root.rmdir()


def list_sessions(store_url: str | None = None) -> list[Session]:
    """Every session on local disk or in the store at ``store_url``, most recently modified first
    (with a store, the cache gets the heads it lacks)."""
    root = sessions_root(store_url)
    if store_url is not None:
        fetch_heads(store_url, root, lambda name: bool(NAME_RE.fullmatch(name)))
    if not root.is_dir():
        return []
    found = [Session(p.name, p, store_url) for p in root.iterdir() if (p / "transcript.jsonl").is_file()]
    return sorted(found, key=lambda s: (s.root / "transcript.jsonl").stat().st_mtime, reverse=True)


def latest_session(store_url: str | None = None) -> Session:
    """The most recently written session that got a model reply (:func:`newest`), on local disk or
    in the store at ``store_url``; ``UsageError`` when there is none."""
    found, _ = newest(list_sessions(store_url))
    if found is None:
        raise UsageError(f"no sessions yet under {sessions_root(store_url)}; start one with 'ctxagent run'")
    return found


def newest(sessions: list[Session]) -> tuple[Session | None, list[Session]]:
    """The first of ``sessions`` (newest first) that got a model reply, and the ones before it that
    never did (a first try that failed: a bad key, a server that was down). When none got a reply,
    the first of all and no skipped ones; ``(None, [])`` for no sessions."""
    for i, session in enumerate(sessions):
        if replied(session):
            return session, sessions[:i]
    return (sessions[0] if sessions else None), []


def replied(session: Session) -> bool:
    """Whether the model ever replied in ``session``: a call's usage is recorded, or an assistant
    message is among its last records. Cheap: the cached totals and the transcript's tail."""
    from ctxagent.sessions import records

    return totals(session.root / "transcript.jsonl").tokens > 0 or any(
        isinstance(r, records.MessageRecord) and r.message.get("role") == "assistant"
        for r in session.transcript.tail(want=records.MessageRecord))


def started_in(session: Session) -> Path | None:
    """The working directory the session was started in (its header's ``workdir``, real path), or
    None (a session from before it was recorded, or no header)."""
    head = session.header()
    return Path(os.path.realpath(head.workdir)) if head is not None and head.workdir else None


class ListFacts(TypedDict):
    """What ``sessions list`` shows of a session (:func:`list_facts`)."""

    created: float | None
    model: str | None
    profile: str | None
    turns: int
    messages: int
    tokens: int
    cost_usd: float | None
    status: str
    last_used: float | None  # seconds since the epoch of the newest readable record


def list_facts(session: Session) -> ListFacts:
    """What ``sessions list`` shows of ``session`` (status ``running`` while a process holds the writer
    lock), read cheaply whatever the transcript's size: its header, its last records and the cached
    :func:`totals`."""
    from ctxagent.sessions import records

    head, sums = session.header(), totals(session.root / "transcript.jsonl")
    tail = session.transcript.tail(want=records.MessageRecord)
    messages = [r for r in tail if isinstance(r, records.MessageRecord)]
    return {
        "created": head.ts if head else None,
        "model": sums.model or (head.model if head else None),
        "profile": sums.profile or (head.profile if head else None),
        "turns": max((m.turn for m in messages), default=0),
        "messages": messages[-1].seq + 1 if messages else 0,
        "tokens": sums.tokens,
        "cost_usd": sums.cost_usd,
        "status": "running" if session.running() else status_of(tail),
        "last_used": tail[-1].ts if tail else None,
    }


def status_of(records_: list[Any]) -> str:
    """How the session stands after ``records_`` (the last ones are enough): ``answered`` when its
    last message is a final answer, whatever end records follow it (sessions/outcome.py), else the
    reason of an end record after the last message, else ``interrupted`` (or ``new`` without messages)."""
    from ctxagent.sessions import records

    if final_answer(records_) is not None:
        return "answered"
    last_end = max((i for i, r in enumerate(records_) if isinstance(r, records.EndRecord)), default=-1)
    last_msg = max((i for i, r in enumerate(records_) if isinstance(r, records.MessageRecord)), default=-1)
    return records_[last_end].reason if last_end > last_msg else ("interrupted" if last_msg >= 0 else "new")


CACHE = ".list-cache.json"  # beside the transcript: the totals of its first ``offset`` bytes
TOTAL_KINDS = (b'"kind":"usage"', b'"kind":"settings"')


@dataclass
class Totals:
    """Totals over a transcript's usage and settings records: tokens (prompt + completion), and the
    model and profile in force (None: the header's), cost in US dollars (None: no call had a price).
    ``offset``: bytes of whole lines counted."""

    offset: int = 0
    tokens: int = 0
    cost_usd: float | None = None
    model: str | None = None
    profile: str | None = None

    def add(self, record: Any) -> None:
        """Count ``record`` when it is a usage or a settings record."""
        from ctxagent.sessions import records

        if isinstance(record, records.UsageRecord):
            self.tokens += record.prompt_tokens + record.completion_tokens
            if record.cost_usd is not None:
                self.cost_usd = round((self.cost_usd or 0.0) + record.cost_usd, 6)
        elif isinstance(record, records.SettingsRecord):
            self.model = record.changes.get("model", self.model)
            self.profile = record.changes.get("profile", self.profile)


def totals(path: Path) -> Totals:
    """The :class:`Totals` of the transcript at ``path``. Only the bytes appended since the last call
    are read (the totals of the lines before are cached in ``CACHE`` beside it, owner-only), and
    only usage and settings lines are parsed, one line in memory at a time."""
    cache = path.with_name(CACHE)
    found = Totals()
    with contextlib.suppress(OSError, ValueError, TypeError):
        cached = json.loads(cache.read_text(encoding="utf-8"))
        found = Totals(**cached) if "cost_usd" in cached else found  # a cache from before cost_usd: count again
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, found.offset - 1))
            if found.offset and fh.read(1) != b"\n":
                found = Totals()  # rewritten or cut below what was counted: count again
            fh.seek(found.offset)
            before = found.offset
            _count(fh, found)
    except OSError:
        return Totals()
    if found.offset != before:
        with contextlib.suppress(OSError):  # a read-only data dir: counted again next time
            replace_whole(cache, json.dumps(asdict(found)))
    return found


def _count(fh: BinaryIO, found: Totals) -> None:
    """Add the usage and settings records of the whole lines from ``fh``'s position to ``found``."""
    from ctxagent.sessions import records

    for line in fh:
        if not line.endswith(b"\n"):
            break  # a torn last line: not counted, read again next time
        found.offset += len(line)
        if any(kind in line[:200] for kind in TOTAL_KINDS):
            with contextlib.suppress(ValueError):
                found.add(records.loads(line.strip(b"\x00\r\n")))
