"""What a session does with a session store (sessions/remote.py) when it opens, is listed, deleted or
renamed, as functions of its folder: ``sessions/session.py`` stays the map of the local layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ctxagent.errors import UsageError
from ctxagent.sessions.files import private_dir
from ctxagent.sessions.remote import SessionSync, Store, segment_name

AGENTS = "agents"  # the folder of a session's sub-agent sessions


@contextmanager
def leased(sync: SessionSync, children: Callable[[list[str]], None]) -> Iterator[SessionSync]:
    """Take the session's lease, pull the cache and the sub-agents (``children(names)``), fence stale
    writers, and yield ``sync`` until the block ends; then upload what is left, snapshot, release.
    Raises ``SessionBusyError`` (another writer holds it) and ``CtxagentError`` (the store failed)."""
    from ctxagent.sessions.lease import Lease

    lease = Lease(sync)
    lease.take()
    try:
        sync.pull(writer=True)
        sync.fence()
        children(sync.store.names(sync.remote(AGENTS)))
        sync.guard = lease.check
        yield sync
        if not sync.fenced and sync.root.is_dir():
            sync.push_outputs()  # outputs written after the last step
            sync.snapshot()
    finally:
        lease.release(drop=sync.removed)


def pull(sync: SessionSync, children: Callable[[list[str]], None]) -> None:
    """Bring the cache of ``sync`` up to the store unless a process here holds the session's writer
    lock (its cache is the newest), then its sub-agents' (``children(names)``)."""
    from ctxagent.sessions.lease import try_lock

    if not sync.root.exists() and not sync.store.names(sync.remote()):
        return  # not in the store either
    private_dir(sync.root)
    if (lock := try_lock(sync.root / ".lock")) is None:
        return
    try:
        sync.pull(writer=False)
    finally:
        lock.release()
    children(sync.store.names(sync.remote(AGENTS)))


def fetch_heads(url: str, root: Path, valid: Callable[[str], bool]) -> None:
    """Put in the cache ``root`` the first segment of every session of the store it lacks (one
    listing, then the heads read concurrently): enough for ``sessions list``; opening a session
    brings the rest. ``valid``: whether a folder name is a session name."""
    store = Store(url)
    missing = [n for n in store.names(store.path("sessions")) if valid(n)
               and not (root / n / "transcript.jsonl").exists()]
    paths = {n: store.path("sessions", n, "segments", segment_name(1)) for n in missing}
    heads = store.read_many(list(paths.values()), missing_ok=True)
    for name, path in paths.items():
        data = heads.get(path.split("://", 1)[-1])
        if data:
            sync = SessionSync(store, f"sessions/{name}", root / name, name)
            private_dir(sync.root)
            sync._append_local([(1, data)])
            sync.state.save(sync.root)


def remove(sync: SessionSync) -> None:
    """Delete the session's objects (segments, outputs, sub-agents, lease); the caller holds the lease."""
    sync.removed = True
    sync.store.remove(sync.remote(), recursive=True)


def copy(sync: SessionSync, into: SessionSync) -> None:
    """Copy the session's objects but its lease to ``into``'s place (server-side where the store
    can). Raises ``UsageError`` when that place holds objects."""
    if sync.store.names(into.remote()):
        raise UsageError(f"a session named {into.name!r} exists already in {sync.store.url}")
    for folder in ("segments", "snapshots", "outputs", AGENTS):
        if sync.store.names(sync.remote(folder)):
            with sync.store.failing(f"copying {sync.remote(folder)}"):
                sync.store.fs.copy(sync.remote(folder), into.remote(folder), recursive=True)
