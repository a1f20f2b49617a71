"""One writer per session: on this machine a file lock (:func:`try_lock`, the one module that imports
filelock), across machines a lease made of create-only objects in the store (docs/batch.md, "Sessions
in an object store").

``URL/sessions/NAME/lease/<number>.json`` holds ``{owner, host, pid, expires, released}`` (``expires``:
seconds since the epoch, by the holder's clock); the newest number is the lease in force. Taking,
renewing and releasing each create the next number, so of two machines racing exactly one wins; older
numbers are deleted (best effort). Clocks sharing a store must agree to well under the lease time.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from ctxagent.errors import CtxagentError, SessionBusyError, UsageError
from ctxagent.sessions.remote import DIGITS, SessionSync, numbers

LEASE_ENV = "CTXAGENT_LEASE_SECONDS"
DEFAULT_SECONDS = 30.0


def try_lock(path: Path) -> FileLock | None:
    """The lock file at ``path`` (created 0600), taken without waiting; None when another process
    holds it. The caller releases it. Raises ``OSError`` when the file cannot be opened."""
    lock = FileLock(str(path), mode=0o600)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None
    return lock


def waiting_lock(path: Path, timeout_s: float) -> FileLock:
    """The lock file at ``path`` (created 0600), for a ``with`` block that waits for it up to
    ``timeout_s`` seconds (then ``filelock.Timeout``, a ``TimeoutError``)."""
    return FileLock(str(path), timeout=timeout_s, mode=0o600)


def lease_seconds() -> float:
    """The lease time in seconds (``$CTXAGENT_LEASE_SECONDS``, default 30). Raises ``UsageError``."""
    raw = os.environ.get(LEASE_ENV, "").strip()
    with contextlib.suppress(ValueError):
        if (value := float(raw) if raw else DEFAULT_SECONDS) > 0:
            return value
    raise UsageError(f"{LEASE_ENV}={raw!r}: give a number of seconds above 0")


def host_name() -> str:
    return os.environ.get("CTXAGENT_HOST", "").strip() or socket.gethostname()


def _alive(pid: int) -> bool:
    try:
        with contextlib.suppress(PermissionError, OverflowError, ValueError):  # another user's, or an odd pid: alive
            os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class Lease:
    """The lease of the session synced by ``sync``; :meth:`take`, then :meth:`release`."""

    sync: SessionSync
    seconds: float = field(default_factory=lease_seconds)
    owner: str = field(default_factory=lambda: uuid.uuid4().hex)
    number: int = 0
    expires: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the renewer thread vs check()
    _thread: threading.Thread | None = None

    def _path(self, number: int) -> str:
        return self.sync.remote("lease", f"{number:0{DIGITS}d}.json")

    def _newest(self) -> tuple[int, dict[str, Any]]:
        """The newest lease's number and content (0 and {} when there is none)."""
        for _ in range(5):  # the holder may delete the one just listed: list again
            found = numbers(self.sync.store.names(self.sync.remote("lease")))
            if not found:
                return 0, {}
            with contextlib.suppress(FileNotFoundError, KeyError, ValueError):
                data = self.sync.store.read_many([self._path(found[-1])])
                return found[-1], json.loads(next(iter(data.values())))
        return found[-1], {}

    def take(self) -> None:
        """Take the lease and start renewing it. Raises ``SessionBusyError`` while another writer
        holds a live lease, or when another writer took it first."""
        number, held = self._newest()
        if held and not self._free(held):
            left = held.get("expires", 0) - time.time()
            raise SessionBusyError(
                f"session {self.sync.name!r} is in use by ctxagent on {held.get('host')} (pid {held.get('pid')}); "
                f"its lease in {self.sync.store.url} runs {left:.0f} s more unless renewed: wait for that run "
                "to finish")
        if not self._create(number + 1, released=False):
            raise SessionBusyError(f"session {self.sync.name!r} was just taken by another ctxagent process")
        self._thread = threading.Thread(target=self._renew_loop, name=f"lease-{self.sync.name}", daemon=True)
        self._thread.start()

    def _free(self, held: dict[str, Any]) -> bool:
        if held.get("released") or float(held.get("expires", 0)) < time.time():
            return True
        return held.get("host") == host_name() and not _alive(int(held.get("pid", 0)))

    def _create(self, number: int, *, released: bool) -> bool:
        expires = 0.0 if released else time.time() + self.seconds
        data = {"owner": self.owner, "host": host_name(), "pid": os.getpid(), "expires": expires,
                "released": released}
        if not self.sync.store.create(self._path(number), json.dumps(data).encode()):
            return False
        previous, self.number, self.expires = self.number, number, expires
        for old in {previous, number - 1} - {0}:
            with contextlib.suppress(CtxagentError):  # best effort: the newest number is the lease
                self.sync.store.remove(self._path(old))
        return True

    def renew(self) -> None:
        """Extend the lease by its time; a lost race fences this writer (``sync.fenced``)."""
        with self._lock:
            if self.sync.fenced:
                return
            try:
                ok = self._create(self.number + 1, released=False)
            except Exception as err:  # the store unreachable: try again at the next tick
                if time.time() > self.expires:
                    self.sync.fenced = f"session {self.sync.name!r}: the lease could not be renewed ({err})"
                return
            if not ok:
                self.sync.fenced = (f"session {self.sync.name!r} was taken over by another writer (its lease in "
                                    f"{self.sync.store.url} was renewed by someone else); this process stops")

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            self.renew()

    def check(self) -> None:
        """Before a write: renew now if the lease is about to run out (a stalled renewer), and raise
        ``SessionBusyError`` if this writer has been fenced."""
        if not self.sync.fenced and time.time() > self.expires - self.seconds / 2:
            self.renew()
        if self.sync.fenced:
            raise SessionBusyError(self.sync.fenced)

    def release(self, *, drop: bool = False) -> None:
        """Stop renewing and mark the lease released (best effort: a failure leaves it to expire);
        ``drop``: delete it instead (the session's objects were just deleted)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.sync.fenced:
            return
        with self._lock, contextlib.suppress(Exception):
            if drop:
                self.sync.store.remove(self._path(self.number))
            else:
                self._create(self.number + 1, released=True)
