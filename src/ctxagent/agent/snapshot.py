"""Folded-state snapshots: open a long session without folding its whole transcript again.

A session's state is one fold over its records (ONE STATE, agent/state.py). For a 10,000-message
transcript (~20 MB) that fold takes ~0.4 s; the state it yields is small (the base view after its
compactions: ~1 MB). So the state is saved, as of a :class:`~ctxagent.sessions.transcript.Mark`
(a line boundary), once :data:`SAVE_AFTER_BYTES` were folded since the last save: when a session
is opened (:func:`open_state`) and when a run ends (:func:`refresh`). The next open loads it and
folds only the lines after the mark, which gives the same state as a whole fold, because records
are only ever appended and the fold is deterministic (a hypothesis test checks it).

A snapshot is used only when it provably belongs to this transcript and this code:

- the sha256 of the transcript's first ``mark.offset`` bytes equals the one saved (any edit of
  those lines, or another file under the same name, discards it);
- the fingerprint of the code that defines the state (the source of the fold's modules and the
  Python version) equals the one saved (a new ctxagent folds afresh);
- the file is the current user's and nobody else may write it (it is a pickle: loading one runs
  code, so only our own are loaded). Snapshots live in ``<data dir>/cache/states/``, never in a
  session store, and are written owner-only (0600) with an atomic rename.

Anything else (missing, unreadable, stale) means a whole fold, never an error: a snapshot is a
cache. Warnings of damaged lines before the mark are not repeated once a snapshot covers them (the
state keeps the repairs the fold made).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ctxagent.agent.state import SessionState, fold
from ctxagent.collector import collector_paused
from ctxagent.sessions.transcript import Mark, Transcript

SAVE_AFTER_BYTES = 1 << 20
"""Transcript bytes folded since the last snapshot (or the start) that make a new one worth saving
(1 MiB: ~500 records of a realistic session, ~10 ms to fold): below it a fold costs little, and
small sessions leave no cache files."""

FORMAT = 1
HASH_BLOCK = 1 << 20  # bytes hashed at a time


def state_file(transcript: Transcript) -> Path:
    """Where the snapshot of ``transcript`` is kept: ``<data dir>/cache/states/<hash of its path>.pickle``."""
    from ctxagent.dirs import data_dir

    key = hashlib.sha256(os.path.realpath(transcript.path).encode()).hexdigest()[:32]
    return data_dir() / "cache" / "states" / f"{key}.pickle"


def open_state(transcript: Transcript, *, repair: bool = False, snapshot: bool = True,
               each: Callable[[Iterator[Any]], Iterable[Any]] | None = None) -> SessionState:
    """The :class:`~ctxagent.agent.state.SessionState` of ``transcript``: its snapshot, when one
    is valid, with the records after its mark folded in; else (or with ``snapshot=False``) a fold
    of every record. Saves a new snapshot when :data:`SAVE_AFTER_BYTES` or more were folded.
    ``repair``: see :meth:`Transcript.records`; ``each`` wraps the stream of the records folded.

    Raises what :meth:`Transcript.records` raises (``TranscriptError`` for a damaged header).
    """
    state, since = (load(transcript) if snapshot else None) or (None, None)
    items = transcript.records(repair=repair, since=since)
    state = fold(each(items) if each else items, transcript_path=str(transcript.path), state=state)
    folded = transcript.mark.offset - (since.offset if since else 0) if transcript.mark else 0
    if folded and folded >= SAVE_AFTER_BYTES:
        save(state, transcript)
    return state


def refresh(path: Path) -> None:
    """Bring the snapshot of the transcript at ``path`` up to its end when :data:`SAVE_AFTER_BYTES`
    or more were written after it (a run that ends calls this: the next open then folds little).
    The state is folded from the file, never taken from the live run: the file holds the records as
    written (secrets redacted), and a snapshot must be what a fold of the file gives."""
    transcript = Transcript(path)
    meta = _meta(transcript)
    done = meta["offset"] if meta else 0
    try:
        if os.path.getsize(path) - done >= SAVE_AFTER_BYTES:
            open_state(transcript)
    except OSError:
        return


def forget(transcript: Transcript) -> None:
    """Delete the snapshot of ``transcript``, if any (``sessions delete``)."""
    state_file(transcript).unlink(missing_ok=True)


def save(state: SessionState, transcript: Transcript) -> bool:
    """Write ``state`` as the snapshot of ``transcript`` at ``transcript.mark`` (it must be the
    state of exactly the lines before the mark). False when it could not be written (no mark, a
    read-only cache, a full disk): nothing is lost, the next open folds more."""
    mark = transcript.mark
    if mark is None:
        return False
    try:
        digest = _prefix_digest(transcript.path, mark.offset)
        if digest is None:
            return False
        meta = {"format": FORMAT, "code": fingerprint(), "offset": mark.offset, "line": mark.line, "sha256": digest}
        from ctxagent.sessions.redact import private_dir

        target = state_file(transcript)
        private_dir(target.parent)  # 0700, like the sessions' folders
        part = target.with_name(f".{target.name}.{os.getpid()}")
        with open(part, "wb", opener=_private) as fh:
            pickle.dump(meta, fh, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.dump(state, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(part, target)
        return True
    except (OSError, pickle.PicklingError, RecursionError):
        return False


def load(transcript: Transcript) -> tuple[SessionState, Mark] | None:
    """The saved state of ``transcript`` and its mark, or None when there is none that is valid
    (see the module doc)."""
    meta = _meta(transcript, state=True)
    try:
        if meta is None or _prefix_digest(transcript.path, meta["offset"]) != meta["sha256"]:
            return None
    except OSError:  # the transcript is gone (a session folder deleted by hand, then run again)
        return None
    return meta["state"], Mark(meta["offset"], meta["line"])


UNREADABLE = (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, KeyError, TypeError,
              ValueError, IndexError)
"""What loading a damaged, foreign or stale pickle can raise (all mean: no snapshot)."""


def _meta(transcript: Transcript, *, state: bool = False) -> dict[str, Any] | None:
    """The snapshot's meta (format, code, offset, line, sha256), and with ``state`` its state under
    ``"state"``; None when there is no snapshot of this code that this user alone wrote."""
    try:
        with open(state_file(transcript), "rb") as fh:
            info = os.fstat(fh.fileno())
            if info.st_uid != os.getuid() or info.st_mode & 0o022:
                return None
            meta = pickle.load(fh)
            if not (isinstance(meta, dict) and meta.get("format") == FORMAT and meta.get("code") == fingerprint()):
                return None
            if state:
                with collector_paused():
                    meta["state"] = pickle.load(fh)
                if not isinstance(meta["state"], SessionState):
                    return None
            return meta
    except UNREADABLE:
        return None


@functools.cache
def fingerprint() -> str:
    """A hash of what a snapshot's meaning depends on: the source of the modules whose classes
    and fold make the state, and the Python version (pickle's and the classes' layout)."""
    from ctxagent import handles, messages
    from ctxagent.agent import activity, context, state
    from ctxagent.sessions import outcome, records
    from ctxagent.strategies import base, pipeline

    digest = hashlib.sha256(repr(sys.version_info[:2]).encode())
    for module in (state, context, activity, records, outcome, messages, handles, base, pipeline,
                   sys.modules[__name__]):
        digest.update(Path(str(module.__file__)).read_bytes())
    return digest.hexdigest()


def _prefix_digest(path: Path, size: int) -> str | None:
    """sha256 of the first ``size`` bytes of ``path`` (None when the file is shorter)."""
    digest = hashlib.sha256()
    left = size
    with open(path, "rb") as fh:
        while left > 0:
            block = fh.read(min(HASH_BLOCK, left))
            if not block:
                return None
            digest.update(block)
            left -= len(block)
    return digest.hexdigest()


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)
