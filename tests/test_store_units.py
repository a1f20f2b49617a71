"""The session store's pieces in process, on a ``file://`` store (fsspec's local filesystem,
create-only with ``xb``): the lease's take, renew, check and release, and the sync's pull (lost,
torn and foreign local bytes), snapshots, fence and upload. Milliseconds each; the S3 and CLI
paths are in test_store_remote.py."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from ctxagent.dirs import data_dir
from ctxagent.errors import CtxagentError, SessionBusyError, UsageError
from ctxagent.handles import new_handle
from ctxagent.sessions import records, remote
from ctxagent.sessions.lease import Lease, host_name, lease_seconds
from ctxagent.sessions.remote import SessionSync, Store, SyncState, segment_name
from ctxagent.sessions.session import Session, list_sessions, sessions_root
from ctxagent.sessions.store import OutputStore
from ctxagent.sessions.transcript import TranscriptWarning


def _sync(tmp_path: Path, name: str = "s", store: Store | None = None) -> SessionSync:
    store = store or Store((tmp_path / "store").as_uri())
    return SessionSync(store, f"sessions/{name}", tmp_path / "cache" / name, name)


def _lease_dir(tmp_path: Path, name: str = "s") -> Path:
    return tmp_path / "store" / "sessions" / name / "lease"


def _leases(tmp_path: Path, name: str = "s") -> dict[int, dict[str, object]]:
    folder = _lease_dir(tmp_path, name)
    return {int(p.name.split(".")[0]): json.loads(p.read_text()) for p in folder.iterdir()} if folder.is_dir() else {}


def _write_lease(tmp_path: Path, number: int, **fields: object) -> None:
    folder = _lease_dir(tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    data = {"owner": "other", "host": "elsewhere", "pid": 1, "expires": time.time() + 60, "released": False,
            **fields}
    (folder / f"{number:012d}.json").write_text(json.dumps(data))


def _line(reason: str, turn: int = 1) -> bytes:
    return records.dumps(records.EndRecord(reason=reason, turn=turn)).encode() + b"\n"


# --- the lease -------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["abc", "0", "-3", "nan"])
def test_lease_seconds_refuses_what_is_not_a_positive_number(raw, monkeypatch):
    monkeypatch.setenv("CTXAGENT_LEASE_SECONDS", raw)
    with pytest.raises(UsageError, match="CTXAGENT_LEASE_SECONDS"):
        lease_seconds()
    monkeypatch.setenv("CTXAGENT_LEASE_SECONDS", " 2.5 ")
    assert lease_seconds() == 2.5


def test_a_live_lease_of_another_host_is_busy_and_names_its_holder(tmp_path):
    _write_lease(tmp_path, 3, host="build-7", pid=4242)
    with pytest.raises(SessionBusyError, match=r"build-7 \(pid 4242\)"):
        Lease(_sync(tmp_path), seconds=60).take()
    assert list(_leases(tmp_path)) == [3]  # nothing written


def test_a_lease_of_this_host_is_free_once_its_process_is_dead(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXAGENT_HOST", "here")
    assert host_name() == "here"
    _write_lease(tmp_path, 1, host="here", pid=os.getpid())  # alive: busy
    with pytest.raises(SessionBusyError):
        Lease(_sync(tmp_path), seconds=60).take()
    dead = subprocess.Popen(["true"])
    dead.wait()
    _write_lease(tmp_path, 2, host="here", pid=dead.pid)
    lease = Lease(_sync(tmp_path), seconds=60)
    lease.take()
    try:
        assert lease.number == 3 and _leases(tmp_path)[3]["owner"] == lease.owner
        assert 2 not in _leases(tmp_path)  # the older number deleted
    finally:
        lease.release()
    assert _leases(tmp_path)[4]["released"] is True


def test_a_pid_the_system_cannot_hold_counts_as_alive(tmp_path, monkeypatch):
    """os.kill overflows: the holder cannot be ruled dead, so the lease stays busy."""
    monkeypatch.setenv("CTXAGENT_HOST", "here")
    _write_lease(tmp_path, 1, host="here", pid=2**70)
    with pytest.raises(SessionBusyError):
        Lease(_sync(tmp_path), seconds=60).take()


def test_an_unreadable_newest_lease_counts_as_no_lease(tmp_path):
    _lease_dir(tmp_path).mkdir(parents=True)
    (_lease_dir(tmp_path) / f"{5:012d}.json").write_text("{not json")
    lease = Lease(_sync(tmp_path), seconds=60)
    lease.take()
    lease.release()
    assert _leases(tmp_path)[7]["released"] is True and lease.number == 7


class _RacedStore(Store):
    """A file store on which another writer creates ``lease/<n>`` right after this one lists it."""

    def names(self, folder: str) -> list[str]:
        found = super().names(folder)
        if folder.endswith("/lease"):
            taken = remote.numbers(found)
            nxt = (taken[-1] if taken else 0) + 1
            with open(f"{folder}/{nxt:012d}.json", "x") as fh:
                json.dump({"owner": "racer", "host": "x", "pid": 1, "expires": time.time() + 60,
                           "released": False}, fh)
        return found


def test_a_lease_taken_by_another_writer_between_the_listing_and_the_create_is_refused(tmp_path):
    store = _RacedStore((tmp_path / "store").as_uri())
    (tmp_path / "store" / "sessions" / "s" / "lease").mkdir(parents=True)
    with pytest.raises(SessionBusyError, match="just taken by another"):
        Lease(_sync(tmp_path, store=store), seconds=60).take()
    assert _leases(tmp_path)[1]["owner"] == "racer"


def test_renew_and_check_extend_the_lease_and_a_lost_race_fences_the_writer(tmp_path):
    sync = _sync(tmp_path)
    lease = Lease(sync, seconds=60)
    lease.take()
    lease._stop.set()  # no renewer thread ticking during the test
    lease.check()  # far from expiry: nothing written
    assert (lease.number, sorted(_leases(tmp_path))) == (1, [1])
    lease.expires = time.time()  # past half its time: check renews now
    lease.check()
    assert (lease.number, sorted(_leases(tmp_path))) == (2, [2]) and lease.expires > time.time() + 50
    _write_lease(tmp_path, 3, owner="thief")  # someone took the session over
    lease.renew()
    assert "taken over by another writer" in sync.fenced
    with pytest.raises(SessionBusyError, match="taken over"):
        lease.check()
    lease.renew()  # fenced: writes nothing more
    lease.release()
    assert sorted(_leases(tmp_path)) == [2, 3] and _leases(tmp_path)[3]["owner"] == "thief"


def _store_unreachable(tmp_path: Path) -> None:
    """The session's key is a file: creating under it fails with an OSError (not 'it exists')."""
    lease = _lease_dir(tmp_path)
    for p in lease.iterdir():
        p.unlink()
    lease.rmdir()
    lease.parent.rename(lease.parent.with_name("moved"))
    lease.parent.write_text("in the way")


def _taken_then_unreachable(tmp_path):
    """A 60 s lease taken (its renewer thread stopped), then the store made unreachable."""
    sync = _sync(tmp_path)
    lease = Lease(sync, seconds=60)
    lease.take()
    lease._stop.set()
    _store_unreachable(tmp_path)
    return sync, lease


def test_a_renewal_the_store_refuses_is_retried_until_the_lease_has_run_out(tmp_path):
    sync, lease = _taken_then_unreachable(tmp_path)
    lease.renew()  # still within its time: try again at the next tick
    assert sync.fenced == "" and lease.number == 1
    lease.expires = time.time() - 1
    lease.renew()
    assert "could not be renewed" in sync.fenced and "failed" in sync.fenced
    lease.release()  # fenced: nothing to release


def test_release_of_a_lease_never_taken_marks_the_next_number_released(tmp_path):
    lease = Lease(_sync(tmp_path), seconds=60)
    lease.release()
    assert _leases(tmp_path) == {1: {"owner": lease.owner, "host": host_name(), "pid": os.getpid(),
                                     "expires": 0.0, "released": True}}


def test_a_lease_time_under_one_second_is_allowed_and_the_host_defaults_to_the_machine_name(monkeypatch):
    monkeypatch.setenv("CTXAGENT_LEASE_SECONDS", "0.5")
    assert lease_seconds() == 0.5
    monkeypatch.delenv("CTXAGENT_LEASE_SECONDS")
    assert lease_seconds() == 30.0
    monkeypatch.delenv("CTXAGENT_HOST", raising=False)
    assert host_name() == socket.gethostname()
    monkeypatch.setenv("CTXAGENT_HOST", "  ")  # blank: the machine's name too
    assert host_name() == socket.gethostname()


def test_a_busy_lease_says_how_long_it_runs_and_what_to_do(tmp_path):
    _write_lease(tmp_path, 1, host="build-7", pid=4242, expires=time.time() + 90)
    with pytest.raises(SessionBusyError) as caught:
        Lease(_sync(tmp_path), seconds=60).take()
    store = (tmp_path / "store").as_uri()
    assert str(caught.value) == (f"session 's' is in use by ctxagent on build-7 (pid 4242); its lease in {store} runs "
                                 "90 s more unless renewed: wait for that run to finish")


def test_a_released_lease_is_free_before_its_expiry_and_one_without_an_expiry_has_expired(tmp_path):
    _write_lease(tmp_path, 1, released=True)  # expires in 60 s, but released
    first = Lease(_sync(tmp_path), seconds=60)
    first.take()
    first._stop.set()
    assert first.number == 2
    _write_lease(tmp_path, 3, expires=None)
    (_lease_dir(tmp_path) / f"{3:012d}.json").write_text(json.dumps(
        {"owner": "other", "host": "elsewhere", "pid": 1, "released": False}))  # no "expires" at all
    second = Lease(_sync(tmp_path), seconds=60)
    second.take()
    second._stop.set()
    assert second.number == 4


def test_a_lease_of_this_host_without_a_pid_is_not_ruled_dead(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXAGENT_HOST", "here")
    (_lease_dir(tmp_path)).mkdir(parents=True)
    (_lease_dir(tmp_path) / f"{1:012d}.json").write_text(json.dumps(
        {"owner": "other", "host": "here", "expires": time.time() + 60, "released": False}))
    with pytest.raises(SessionBusyError, match=r"on here \(pid None\)"):
        Lease(_sync(tmp_path), seconds=60).take()


def test_taking_and_renewing_write_a_live_lease_of_this_process(tmp_path):
    lease = Lease(_sync(tmp_path), seconds=60)
    lease.take()
    lease._stop.set()
    mine = {"owner": lease.owner, "host": host_name(), "pid": os.getpid(), "released": False}
    held = _leases(tmp_path)[1]
    assert {k: v for k, v in held.items() if k != "expires"} == mine and held["expires"] == lease.expires
    assert time.time() + 55 < lease.expires <= time.time() + 60
    lease.renew()
    held = _leases(tmp_path)
    assert list(held) == [2] and {k: v for k, v in held[2].items() if k != "expires"} == mine
    lease.release()


def test_the_renewer_is_a_daemon_thread_renewing_every_third_of_the_lease_time(tmp_path):
    lease = Lease(_sync(tmp_path), seconds=1.5)  # a renewal every 0.5 s
    lease.take()
    try:
        assert lease._thread is not None and lease._thread.daemon and lease._thread.name == "lease-s"
        deadline = time.monotonic() + 1.4  # before 3 x 1.5 s; a renewer that never ticks fails too
        while lease.number < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lease.number >= 2
    finally:
        lease.release()
    assert lease._thread is not None and not lease._thread.is_alive()


def test_check_renews_once_less_than_half_the_lease_time_is_left(tmp_path):
    lease = Lease(_sync(tmp_path), seconds=60)
    lease.take()
    lease._stop.set()
    lease.expires = time.time() + 32  # more than half left: nothing to do
    lease.check()
    assert lease.number == 1
    lease.expires = time.time() + 24  # 0.4 of its time left: renewed
    lease.check()
    assert lease.number == 2 and sorted(_leases(tmp_path)) == [2]
    lease.release()


class _UndeletableStore(Store):
    """A file store whose deletes fail (as a store that refuses them fails: ``CtxagentError``)."""

    def remove(self, path: str, *, recursive: bool = False) -> None:
        raise CtxagentError(f"session store {self.url}: deleting {path} failed: denied")


def test_an_older_lease_that_cannot_be_deleted_is_left_and_the_newer_one_holds(tmp_path):
    _write_lease(tmp_path, 1, released=True)
    lease = Lease(_sync(tmp_path, store=_UndeletableStore((tmp_path / "store").as_uri())), seconds=60)
    lease.take()
    lease._stop.set()
    lease.renew()
    assert lease.number == 3 and sorted(_leases(tmp_path)) == [1, 2, 3]
    lease.release()
    assert _leases(tmp_path)[4]["released"] is True


def test_a_release_the_store_refuses_leaves_the_lease_to_expire(tmp_path):
    sync, lease = _taken_then_unreachable(tmp_path)
    lease.release()  # no error: best effort
    assert sync.fenced == "" and lease.number == 1


def test_release_with_drop_deletes_the_lease(tmp_path):
    lease = Lease(_sync(tmp_path), seconds=60)
    lease.take()
    lease.release(drop=True)
    assert _leases(tmp_path) == {}


class _VanishingStore(Store):
    """A file store on which the holder deletes the newest lease right after it is listed, twice."""

    vanish = 2

    def names(self, folder: str) -> list[str]:
        found = super().names(folder)
        if folder.endswith("/lease") and found and self.vanish:
            self.vanish -= 1
            newest = max(found)
            os.replace(f"{folder}/{newest}", f"{folder}/{int(newest.split('.')[0]) + 1:012d}.json")
        return found


def test_a_lease_deleted_between_the_listing_and_the_read_is_listed_again(tmp_path):
    _write_lease(tmp_path, 1, released=True)
    lease = Lease(_sync(tmp_path, store=_VanishingStore((tmp_path / "store").as_uri())), seconds=60)
    lease.take()  # lists 1 (gone: 2), then 2 (gone: 3), then reads 3
    lease._stop.set()
    assert lease.number == 4
    lease.release()


# --- the store -------------------------------------------------------------------------------


def test_a_store_url_of_an_unknown_protocol_is_a_usage_error():
    with pytest.raises(UsageError, match=r"nosuch://bucket.*ctxagent\[s3\]"):
        Store("nosuch://bucket/prefix")


@pytest.mark.parametrize(("url", "slug"), [
    ("s3://Bucket/team", "s3-Bucket-team"),  # letters of both cases kept, each run of the rest one dash
    ("file:///tmp/x.", "file-tmp-x"),  # no dash or dot at either end
    ("s3://a-very-long-bucket-name-for-testing/with/a/deep/prefix/Here",
     "name-for-testing-with-a-deep-prefix-Here"),  # the last 40 characters
    ("s3://bucket/abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH", "efghijklmnopqrstuvwxyz0123456789ABCDEFGH"),
    ("s3://b/BOX", "s3-b-BOX"),  # only dashes and dots are stripped
    ("///", "store"),  # nothing left: a fixed word
])
def test_the_cache_folder_of_a_store_is_named_by_the_end_of_its_url_and_its_hash(url, slug):
    assert remote.cache_key(url) == f"{slug}-{hashlib.sha256(url.encode()).hexdigest()[:12]}"


@pytest.mark.parametrize(("value", "url"), [
    (" s3://b/team/ ", "s3://b/team"),  # spaces, then slashes at the end only
    ("s3://b/BOX/", "s3://b/BOX"),
    ("/srv/store//", "/srv/store"),
    ("  ", None), ("/", None), ("", None),
])
def test_the_store_url_comes_from_the_environment_without_a_trailing_slash(value, url, monkeypatch):
    """Read at the command line's edge only (cli/options.py), then passed on: ``--store`` first."""
    from ctxagent.cli.options import use_store

    monkeypatch.setenv("CTXAGENT_STORE", value)
    assert use_store(None) == url
    assert use_store("s3://given/") == "s3://given"  # --store wins over the environment


def test_store_errors_are_translated_once_and_existing_objects_are_not_overwritten(tmp_path):
    url = f"file://{tmp_path}/a store"  # a space in the path: object keys are whole paths, not words
    store = Store(url)
    base = tmp_path / "a store"
    source = tmp_path / "big.out"
    source.write_bytes(b"first")
    assert store.create(store.path("outputs", "big.out"), source) is True
    source.write_bytes(b"second")
    assert store.create(store.path("outputs", "big.out"), source) is False
    assert store.create(store.path("outputs", "other.out"), source) is True  # into a folder that exists
    assert (base / "outputs" / "big.out").read_bytes() == b"first"
    assert (base / "outputs" / "other.out").read_bytes() == b"second"
    (base / "file").write_text("x")
    under = store.path("file", "sub")
    why = f"[Errno 20] Not a directory: '{under}"
    for call, what in [(lambda: store.create(f"{under}/a", b""), f"writing {under}/a"),
                       (lambda: store.create(f"{under}/a", source), f"writing {under}/a"),
                       (lambda: store.names(under), f"listing {under}"),
                       (lambda: store.read_many([under, store.path("file")]), f"reading {under}"),
                       (lambda: store.remove(under), f"deleting {under}")]:
        with pytest.raises(CtxagentError) as err:
            call()
        assert str(err.value).startswith(f"session store {url}: {what} failed: {why}"), str(err.value)
    assert store.read_many([]) == {}
    assert store.names(store.path("nowhere")) == []
    found = store.path("outputs", "big.out")
    assert store.read_many([found, store.path("outputs", "none")], missing_ok=True) == {found: b"first"}
    with pytest.raises(FileNotFoundError):  # passes unchanged
        store.read_many([store.path("outputs", "none")])
    store.remove(store.path("outputs", "none"))  # a missing object is no error
    store.remove(found)
    assert store.names(store.path("outputs")) == ["other.out"]


@pytest.mark.parametrize("name", ["storeX", "store "])
def test_an_objects_path_is_under_the_stores_root_whatever_the_root_ends_in(name, tmp_path):
    store = Store(f"file://{tmp_path}/{name}/")
    assert store.path("sessions", "s") == f"{tmp_path}/{name}/sessions/s"


def test_only_an_s3_store_is_written_with_an_atomic_put(tmp_path):
    assert Store("s3://bucket/team").atomic_pipe and Store("s3a://bucket/team").atomic_pipe
    assert not Store("memory://team").atomic_pipe and not Store(f"file://{tmp_path}/team").atomic_pipe


def test_the_sync_state_is_saved_owner_only_and_an_old_one_without_a_snapshot_is_read(tmp_path):
    SyncState(3, 10, 2).save(tmp_path)
    assert (tmp_path / remote.STATE).stat().st_mode & 0o777 == 0o600
    assert SyncState.load(tmp_path) == SyncState(3, 10, 2)
    (tmp_path / remote.STATE).write_text('{"segments": 3, "bytes": 10}')
    assert SyncState.load(tmp_path) == SyncState(3, 10, 0)
    assert [p.name for p in tmp_path.iterdir()] == [remote.STATE]  # no temporary file left


# --- the sync: pull, snapshot, fence, upload -------------------------------------------------


def _writer(tmp_path: Path, name: str, lines: list[bytes], url: str) -> Path:
    """A session written through a writer in the store at ``url`` (one segment per line); returns
    its local transcript."""
    header = records.SessionHeader(name=name, model="scripted:x", profile="default", context_window=1000)
    with Session.at(name, url).writer() as session:
        session.transcript.append([header])
        for line in lines:
            session.transcript.append([records.loads(line.strip())])
    return Session.at(name, url).transcript.path


@pytest.fixture
def on_store(tmp_path) -> Path:
    return tmp_path / "store"


def test_a_reader_leaves_a_cache_with_unsynced_lines_alone(on_store, tmp_path):
    url = on_store.as_uri()
    local = _writer(tmp_path, "r", [], url)
    before = local.read_bytes() + _line("local only")
    local.write_bytes(before)  # a live writer's step not uploaded yet
    Session.at("r", url).pull()
    assert local.read_bytes() == before and not list(local.parent.glob("transcript.*-*.jsonl"))


def test_a_cache_that_lost_synced_bytes_starts_over_from_the_store(on_store, tmp_path):
    url = on_store.as_uri()
    local = _writer(tmp_path, "l", [_line("one")], url)
    full = local.read_bytes()
    local.write_bytes(full[:10])  # shorter than what it had synced
    with pytest.warns(TranscriptWarning) as caught:
        Session.at("l", url).pull()
    assert [str(w.message) for w in caught] == [
        f"{local}: a cache shorter than what it had synced (10 bytes) set aside, moved to transcript.cache-1.jsonl"]
    assert local.read_bytes() == full
    assert (local.parent / "transcript.cache-1.jsonl").read_bytes() == full[:10]
    assert (local.parent / "transcript.cache-1.jsonl").stat().st_mode & 0o777 == 0o600
    local.write_bytes(b"")  # emptied: no bytes to set aside
    Session.at("l", url).pull()
    assert local.read_bytes() == full


def test_a_torn_last_line_is_set_aside_beside_earlier_ones(on_store, tmp_path):
    url = on_store.as_uri()
    local = _writer(tmp_path, "t", [], url)
    synced = local.read_bytes()
    (local.parent / "transcript.torn-1.jsonl").write_bytes(b"an earlier one")
    local.write_bytes(synced + b'{"kind":"end","rea')
    with pytest.warns(TranscriptWarning) as caught, Session.at("t", url).writer():
        pass
    assert [str(w.message) for w in caught] == [
        f"{local}: torn last line (18 bytes) set aside, moved to transcript.torn-2.jsonl"]
    assert local.read_bytes() == synced
    assert (local.parent / "transcript.torn-2.jsonl").read_bytes() == b'{"kind":"end","rea'


def test_snapshots_are_left_every_64_segments_and_a_new_machine_starts_from_the_newest(
        on_store, tmp_path, monkeypatch):
    url = on_store.as_uri()
    lines = [_line(f"step {i}", i) for i in range(remote.SNAPSHOT_EVERY)]
    local = _writer(tmp_path, "snap", lines, url)
    snaps = on_store / "sessions" / "snap" / "snapshots"
    assert [p.name for p in snaps.iterdir()] == [segment_name(remote.SNAPSHOT_EVERY + 1)]  # the header, then the lines
    with Session.at("snap", url).writer() as session:  # 64 more: a newer snapshot replaces it
        for i, line in enumerate(lines):
            session.transcript.append([records.loads(line.strip().replace(b"step", b"more"))])
            assert i < remote.SNAPSHOT_EVERY
    newest = sorted(p.name for p in snaps.iterdir())
    assert len(newest) == 1 and newest[0] > segment_name(remote.SNAPSHOT_EVERY + 1)
    for segment in (on_store / "sessions" / "snap" / "segments").iterdir():  # only the snapshot holds them
        if segment.name <= newest[0]:
            segment.unlink()
    monkeypatch.setenv("CTXAGENT_DATA_DIR", str(tmp_path / "machine-b"))
    other = Session.at("snap", url).pull().transcript.path
    assert other.read_bytes() == local.read_bytes()
    assert SyncState.load(other.parent).snapshot == int(newest[0].split(".")[0])


def test_a_fence_that_finds_its_number_taken_pulls_the_late_segment_and_takes_the_next(tmp_path):
    sync = _sync(tmp_path)
    sync.root.mkdir(parents=True)
    mine = _line("mine")
    sync.transcript.write_bytes(mine)  # the transcript's append, then its mirror
    sync.upload(mine)
    late = tmp_path / "store" / "sessions" / "s" / "segments" / segment_name(2)
    late.write_bytes(_line("a stale writer's late step"))
    sync.fence()
    assert sync.state.segments == 3 and sync.transcript.read_bytes() == mine + late.read_bytes()
    assert (late.parent / segment_name(3)).read_bytes() == b""


def test_upload_asks_the_guard_first_and_a_fenced_writer_uploads_nothing(tmp_path):
    sync = _sync(tmp_path)
    sync.root.mkdir(parents=True)
    asked: list[int] = []
    sync.guard = lambda: asked.append(sync.state.segments)
    sync.upload(_line("one"))
    assert asked == [0] and sync.state.segments == 1
    sync.fenced = "taken over"
    with pytest.raises(SessionBusyError, match="taken over"):
        sync.upload(_line("two"))
    assert sorted(p.name for p in (tmp_path / "store" / "sessions" / "s" / "segments").iterdir()) == [
        segment_name(1)]


def _step(sync: SessionSync, line: bytes) -> None:
    """What a writer's append does: the line to the local transcript, then its mirror uploads it."""
    with open(sync.transcript, "ab") as fh:
        fh.write(line)
    sync.upload(line)


def test_a_snapshot_is_left_from_64_segments_on_of_the_synced_bytes_only_and_best_effort(tmp_path):
    sync = _sync(tmp_path)
    sync.root.mkdir(parents=True)
    snaps = tmp_path / "store" / "sessions" / "s" / "snapshots"
    for i in range(remote.SNAPSHOT_EVERY - 1):
        _step(sync, _line(f"step {i}", i))
    sync.snapshot()
    assert not snaps.exists()  # 63 segments: not yet
    _step(sync, _line("step 63", 63))
    synced = sync.transcript.read_bytes()
    with open(sync.transcript, "ab") as fh:
        fh.write(_line("appended, not uploaded yet"))
    sync.snapshot()
    assert {p.name: p.read_bytes() for p in snaps.iterdir()} == {segment_name(64): synced}
    assert (sync.state.snapshot, SyncState.load(sync.root).snapshot) == (64, 64)
    sync.transcript.write_bytes(synced)
    for i in range(6):
        _step(sync, _line(f"more {i}", i))
    sync.snapshot()  # 70 segments, 6 since the last snapshot
    assert [p.name for p in snaps.iterdir()] == [segment_name(64)]
    sync.state.snapshot = 6  # 64 since "the last one", but this writer was fenced
    sync.fenced = "taken over"
    sync.snapshot()
    assert [p.name for p in snaps.iterdir()] == [segment_name(64)]
    sync.fenced = ""
    (tmp_path / "store" / "sessions" / "s" / "segments" / segment_name(64)).unlink()  # only the snapshot has it
    local = sync.transcript.read_bytes()
    sync.transcript.write_bytes(local[:10])  # this cache lost bytes: it starts over from the newest snapshot
    again = _sync(tmp_path)
    with pytest.warns(TranscriptWarning):
        again.pull(writer=False)
    assert again.transcript.read_bytes() == local
    newest = len((tmp_path / "store" / "sessions" / "s" / "segments" / segment_name(70)).read_bytes())
    assert SyncState.load(again.root) == SyncState(70, len(local), 64, newest)
    fresh = _sync(tmp_path)
    fresh.root = tmp_path / "machine-b" / "s"  # a new machine: from the snapshot too, into a file made 0600
    fresh.pull(writer=False)
    assert fresh.transcript.read_bytes() == local and fresh.transcript.stat().st_mode & 0o777 == 0o600
    assert SyncState.load(fresh.root) == SyncState(70, len(local), 64, newest)


def _refusing_store(url: str, method: str, refuses: Callable[[str], bool] = lambda _path: True) -> Store:
    """A real store whose filesystem raises ``OSError("<method> refused")`` from ``method`` (``makedirs``,
    ``copy``) when ``refuses(its first argument)``: a full or read-only store, a server-side copy refused.
    Every other call goes to the real filesystem."""
    store = Store(url)
    real = store.fs

    class _Fs:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

    def refused(path: str, *args: object, **kwargs: object) -> object:
        if refuses(path):
            raise OSError(f"{method} refused")
        return getattr(real, method)(path, *args, **kwargs)

    fs = _Fs()
    setattr(fs, method, refused)
    store.fs = fs
    return store


def test_a_snapshot_the_store_refuses_is_left_out_and_the_writer_goes_on(tmp_path):
    sync = _sync(tmp_path, store=_refusing_store((tmp_path / "store").as_uri(), "makedirs",
                                              lambda path: path.endswith("/snapshots")))
    sync.root.mkdir(parents=True)
    for i in range(remote.SNAPSHOT_EVERY):
        _step(sync, _line(f"step {i}", i))
    sync.snapshot()
    assert sync.state.snapshot == 0 and SyncState.load(sync.root).snapshot == 0


def test_a_writers_pull_counts_the_lines_the_store_got_and_uploads_the_rest_as_one_segment(tmp_path):
    sync = _sync(tmp_path)
    sync.root.mkdir(parents=True)
    first, second, third, fourth = (_line(f"line {i}", i) for i in range(4))
    _step(sync, first)
    with open(sync.transcript, "ab") as fh:  # appended and uploaded, killed before the state was saved
        fh.write(second + third)
    sync.store.create(sync.remote("segments", segment_name(2)), second)
    sync.store.create(sync.remote("segments", segment_name(3)), third)
    with open(sync.transcript, "ab") as fh:  # then two lines the store never got and a torn one
        fh.write(fourth + first + b"{")
    again = _sync(tmp_path)
    with pytest.warns(TranscriptWarning) as caught:
        again.pull(writer=True)
    assert [str(w.message) for w in caught] == [
        f"{again.transcript}: torn last line (1 bytes) set aside, moved to transcript.torn-1.jsonl"]
    whole = first + second + third + fourth + first
    assert again.transcript.read_bytes() == whole
    assert (again.root / "transcript.torn-1.jsonl").read_bytes() == b"{"
    segments = tmp_path / "store" / "sessions" / "s" / "segments"
    assert [p.read_bytes() for p in sorted(segments.iterdir())] == [first, second, third, fourth + first]
    assert SyncState.load(again.root) == SyncState(4, len(whole), 0, len(fourth + first)) == again.state
    with open(again.transcript, "ab") as fh:  # two whole lines the store never got, nothing torn
        fh.write(second + third)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is set aside
        again.pull(writer=True)
    assert sorted(p.name for p in again.root.glob("transcript.*-*.jsonl")) == ["transcript.torn-1.jsonl"]
    assert [p.read_bytes() for p in sorted(segments.iterdir())][4:] == [second + third]
    assert SyncState.load(again.root) == SyncState(5, len(whole + second + third), 0, len(second + third))


def test_a_writer_whose_next_segment_is_taken_is_fenced_and_says_so(tmp_path):
    sync = _sync(tmp_path)
    sync.root.mkdir(parents=True)
    _step(sync, _line("one"))
    sync.store.create(sync.remote("segments", segment_name(2)), _line("another writer's"))
    why = (f"session 's' was taken over by another writer (segment 2 exists in {sync.store.url}); this process "
           "stops, everything it wrote before is in the store")
    with pytest.raises(SessionBusyError) as err:
        sync.upload(_line("two"))
    assert str(err.value) == why and sync.fenced == why and sync.state.segments == 1


def test_outputs_are_pushed_and_pulled_as_whole_files_by_final_name_once(tmp_path):
    sync = _sync(tmp_path)
    outputs = sync.root / "outputs"
    (outputs / "folder.out").mkdir(parents=True)
    (outputs / "a.out").write_bytes(b"a")
    (outputs / ".spool-1").write_bytes(b"half")
    sync.push_outputs()
    stored = tmp_path / "store" / "sessions" / "s" / "outputs"
    assert sync.uploaded == {"a.out"} and [p.name for p in stored.iterdir()] == ["a.out"]
    (stored / ".partial").write_bytes(b"another writer's spool")
    (stored / "b.out").write_bytes(b"b")
    other = _sync(tmp_path, "s")
    other.root = tmp_path / "machine-b" / "s"
    other.pull(writer=False)
    got = other.root / "outputs"
    assert {p.name: p.read_bytes() for p in got.iterdir()} == {"a.out": b"a", "b.out": b"b"}
    assert {p.stat().st_mode & 0o777 for p in got.iterdir()} == {0o600}
    assert other.uploaded == {".partial", "a.out", "b.out"}
    inode = (got / "a.out").stat().st_ino
    other.pull(writer=False)
    assert (got / "a.out").stat().st_ino == inode  # had it: not downloaded again
    (stored / "c.out").write_bytes(b"c")
    (got / ".download-c.out").mkdir()  # the temporary name is taken: the download fails
    with pytest.raises(CtxagentError) as err:
        other.pull(writer=False)
    assert str(err.value).startswith(f"session store {other.store.url}: downloading outputs failed: ")


# --- sessions/store.py: the output store (files named by handle) -------------------------------


def test_an_output_file_is_named_by_its_handle_and_what_is_no_handle_is_refused(tmp_path):
    store = OutputStore(tmp_path / "outputs")
    assert store.path_of("@read1") == tmp_path / "outputs" / "read1.out"
    assert store.path_of("@a.2", ".json") == tmp_path / "outputs" / "a.2.json"
    with pytest.raises(UsageError) as caught:
        store.path_of("read1")
    assert str(caught.value) == "not a handle: 'read1' (handles look like @abc123)"


def test_spooled_put_and_copied_outputs_are_whole_files_under_their_handle(tmp_path):
    root = tmp_path / "deep" / "s" / "outputs"  # no parent exists yet
    store = OutputStore(root)
    fd, spooled = store.spool()
    assert spooled.parent == root and spooled.name.startswith(".spool-")
    os.write(fd, b"streamed")
    os.close(fd)
    assert store.adopt(spooled, "@a") == root / "a.out" and not spooled.exists()
    assert store.put_bytes("@b", b"bytes") == root / "b.out"
    assert store.put_bytes("@c", b"{}", ".json", durable=False) == root / "c.json"
    source = tmp_path / "source.txt"
    source.write_bytes(b"copied")
    assert store.put_file("@d", source) == root / "d.out" and source.read_bytes() == b"copied"
    fd, spooled = store.spool()
    os.close(fd)
    assert store.adopt(spooled, "@e", ".npy") == root / "e.npy"
    assert {p.name: p.read_bytes() for p in root.iterdir()} == {  # no temporary file left
        "a.out": b"streamed", "b.out": b"bytes", "c.json": b"{}", "d.out": b"copied", "e.npy": b""}


def test_handles_are_listed_oldest_first_and_found_here_before_the_linked_stores(tmp_path):
    root, other = tmp_path / "outputs", tmp_path / "parent-outputs"
    store = OutputStore(root, linked=lambda: [other])
    assert store.handles() == [] and store.find("@a") is None
    root.mkdir()
    other.mkdir()
    for name, mtime in [("b.out", 2), ("a.json", 2), ("c.npy", 1), ("c.meta.json", 0), ("m.meta.json", 0),
                        (".spool-x", 0), ("bad!.out", 0), ("notes.txt", 0), ("e.json", 3), ("e.out", 3)]:
        (root / name).write_text(name)
        os.utime(root / name, (mtime, mtime))
    for name in ("z.npy", "z.meta.json", "e.out"):
        (other / name).write_text("linked " + name)
    assert store.handles() == ["@c", "@a", "@b", "@e"]  # by time, then by name; values only, linked not listed
    assert [(handle, path, stat.st_size) for handle, path, stat in store.value_files()] == [  # in one scan
        ("@c", root / "c.npy", 5), ("@a", root / "a.json", 6), ("@b", root / "b.out", 5), ("@e", root / "e.out", 5)]
    assert store.find("@a") == root / "a.json" and store.find("@c") == root / "c.npy"
    assert store.find("@e") == root / "e.out"  # .out first, and this store first
    assert store.find("@z") == other / "z.npy" and store.find("@m") is None
    assert store.meta_path("@c") == root / "c.meta.json"  # its own
    assert store.meta_path("@z") == other / "z.meta.json"  # beside the linked value
    assert store.meta_path("@n") == root / "n.meta.json"  # nowhere: where it will be written
    assert OutputStore(root).meta_path("@z") == root / "z.meta.json"  # no linked stores
    assert OutputStore(root).find("@z") is None
    assert store.taken("@c") and store.taken("@m") and not store.taken("@z")  # a sidecar takes it too
    (root / "z.meta.json").write_text("{}")  # its own sidecar, the value only in a linked store: its own
    assert store.meta_path("@z") == root / "z.meta.json"
    assert new_handle("call m", store) == "@callm" and new_handle("m", store) == "@m.2"
    (root / "m.2.out").write_text("")
    assert new_handle("m", store) == "@m.3"


def test_clean_spools_removes_what_a_killed_process_left_and_counts_it(tmp_path):
    store = OutputStore(tmp_path / "outputs")
    assert store.clean_spools() == 0 and not store.root.exists()
    fd, _ = store.spool()
    os.close(fd)
    (store.root / "a.out.redacting").write_text("half")
    (store.root / "a.out").write_text("kept")
    assert store.clean_spools() == 2
    assert [p.name for p in store.root.iterdir()] == ["a.out"]


# --- sessions/session.py with a store ------------------------------------------------------------


def test_with_a_store_sessions_live_in_its_cache_and_have_a_sync(on_store, tmp_path):
    url = on_store.as_uri()
    assert Session.at("x", url).remote() is not None
    assert sessions_root(url) == data_dir() / "stores" / remote.cache_key(url) / "sessions"
    sync = Session.at("x", url).remote()
    assert (sync.name, sync.root, sync.store.url) == ("x", sessions_root(url) / "x", url)


def test_a_new_machine_lists_the_stores_sessions_and_opens_a_sub_agent_of_one_it_never_opened(
        on_store, tmp_path, monkeypatch):
    url = on_store.as_uri()
    _writer(tmp_path, "p", [_line("parent")], url)
    with Session.at("p/c", url).writer() as child:
        child.transcript.append([records.EndRecord(reason="child", turn=1)])
    bad = on_store / "sessions" / "bad..name" / "segments"
    bad.mkdir(parents=True)
    (bad / segment_name(1)).write_bytes(_line("not a session name"))
    monkeypatch.setenv("CTXAGENT_DATA_DIR", str(tmp_path / "machine-b"))
    opened = Session.at("p/c", url)  # its parent pulled first, and the parent's sub-agents with it
    assert opened.root == sessions_root(url) / "p" / "agents" / "c"
    assert [r.reason for r in opened.transcript.load() if isinstance(r, records.EndRecord)] == ["child"]
    monkeypatch.setenv("CTXAGENT_DATA_DIR", str(tmp_path / "machine-c"))
    assert [s.name for s in list_sessions(url)] == ["p"] and not (sessions_root(url) / "bad..name").exists()
    assert not (sessions_root(url) / "p" / "agents").exists()  # the list fetched the head only
    Session.at("p", url).pull()  # a reader's pull brings the sub-agents too
    assert (sessions_root(url) / "p" / "agents" / "c" / "transcript.jsonl").is_file()


def test_a_store_given_on_the_command_line_is_passed_on_and_never_put_in_the_environment(tmp_path, monkeypatch):
    """Issue 35: ``--store`` set ``$CTXAGENT_STORE`` for the whole process, so every session the
    process opened afterwards (a library caller's, a test's) went to that store. It is read at the
    command line's edge and given to the sessions, their sub-agents and the batch's tasks."""
    from clihelp import run_cli, script
    from ctxagent.batch.tasks import Task, args_for, standing

    monkeypatch.delenv("CTXAGENT_STORE", raising=False)
    url = (tmp_path / "store").as_uri()
    model = script(tmp_path / "s.yaml", ["done"])
    out = run_cli("run", "--batch", "--store", url, "--session", "s", "--model", model, "go")
    assert (out.exit_code, out.stdout) == (0, "done\n") and "CTXAGENT_STORE" not in os.environ
    assert (tmp_path / "store" / "sessions" / "s" / "segments").is_dir() and not Session.at("s").exists()
    assert Session.at("s", url).exists()
    assert [json.loads(line)["name"] for line in run_cli("sessions", "--store", url, "list", "--json")
            .stdout.splitlines()] == ["s"]
    assert run_cli("sessions", "list", "--json").stdout == ""  # local disk: no session
    task = Task(1, "s", {"store": url}, "go")
    assert args_for(task, True)[-2:] == ["--store", url] and standing(task).answer == "done"


def test_without_a_store_a_session_has_no_sync():
    assert Session.at("x").remote() is None and sessions_root() == data_dir() / "sessions"


# --- sessions/replica.py: a reader's pull, the heads for `sessions list`, delete and rename ------


def test_a_reader_pull_of_a_session_nowhere_makes_nothing_and_of_a_local_only_one_asks_for_its_children(tmp_path):
    from ctxagent.sessions import replica

    asked: list[list[str]] = []
    sync = _sync(tmp_path, "nowhere")
    replica.pull(sync, asked.append)
    assert not sync.root.exists() and asked == []
    local = _sync(tmp_path, "local")
    local.root.mkdir(parents=True)
    replica.pull(local, asked.append)
    assert asked == [[]]
    assert (local.root / ".lock").stat().st_mode & 0o777 == 0o600  # the writer lock, made owner-only


def test_a_reader_pull_uploads_no_unsynced_line_of_the_cache(tmp_path):
    from ctxagent.sessions import replica

    sync = _sync(tmp_path, "u")
    first = _line("first")
    sync.store.create(sync.remote("segments", segment_name(1)), first)
    replica.pull(sync, lambda names: None)
    unsynced = _line("a live writer's step")
    with open(sync.transcript, "ab") as fh:
        fh.write(unsynced)
    replica.pull(sync, lambda names: None)
    assert sync.store.names(sync.remote("segments")) == [segment_name(1)]
    assert sync.transcript.read_bytes() == first + unsynced


def test_a_failed_copy_names_the_folder_it_was_copying(tmp_path):
    from ctxagent.sessions import replica

    store = _refusing_store((tmp_path / "store").as_uri(), "copy")
    sync = _sync(tmp_path, "old", store)
    store.create(sync.remote("segments", segment_name(1)), b"x")
    with pytest.raises(CtxagentError) as err:
        replica.copy(sync, _sync(tmp_path, "new", store))
    assert str(err.value) == f"session store {store.url}: copying {sync.remote('segments')} failed: copy refused"


def test_a_reader_pull_leaves_a_session_a_local_writer_holds_alone(tmp_path):
    from filelock import FileLock

    from ctxagent.sessions import replica

    store = Store((tmp_path / "store").as_uri())
    stored = _line("stored")
    store.create(store.path("sessions", "s", "segments", segment_name(1)), stored)
    asked: list[list[str]] = []
    sync = _sync(tmp_path, "s", store)
    sync.root.mkdir(parents=True)
    with FileLock(str(sync.root / ".lock")):
        replica.pull(sync, asked.append)
    assert not sync.transcript.exists() and asked == []
    replica.pull(sync, asked.append)
    assert sync.transcript.read_bytes() == stored and asked == [[]]


def test_fetch_heads_puts_the_first_segment_of_each_missing_session_in_the_cache(tmp_path):
    from ctxagent.sessions import replica

    store = Store((tmp_path / "store").as_uri())
    a1 = _line("a1")
    store.create(store.path("sessions", "a", "segments", segment_name(1)), a1)
    store.create(store.path("sessions", "a", "segments", segment_name(2)), _line("a2"))
    store.create(store.path("sessions", "b", "segments", segment_name(1)), _line("b in the store"))
    store.create(store.path("sessions", "nohead", "lease", "000000000001.json"), b"{}")
    store.create(store.path("sessions", "bad", "segments", segment_name(1)), _line("bad"))
    root = tmp_path / "cache"
    (root / "b").mkdir(parents=True)
    b_here = _line("b here")
    (root / "b" / "transcript.jsonl").write_bytes(b_here)
    replica.fetch_heads(store.url, root, lambda name: name != "bad")
    assert (root / "a" / "transcript.jsonl").read_bytes() == a1
    assert (SyncState.load(root / "a").segments, SyncState.load(root / "a").bytes) == (1, len(a1))
    assert (root / "b" / "transcript.jsonl").read_bytes() == b_here  # not fetched again
    assert not (root / "nohead").exists() and not (root / "bad").exists()


def test_remove_deletes_the_sessions_objects_and_says_so_to_the_lease(tmp_path):
    from ctxagent.sessions import replica

    sync = _sync(tmp_path, "gone")
    sync.store.create(sync.remote("segments", segment_name(1)), _line("one"))
    sync.store.create(sync.remote("agents", "c", "segments", segment_name(1)), _line("child"))
    other = _sync(tmp_path, "kept", sync.store)
    other.store.create(other.remote("segments", segment_name(1)), _line("kept"))
    replica.remove(sync)
    assert sync.removed is True and sync.store.names(sync.remote()) == []
    assert sync.store.names(sync.store.path("sessions")) == ["kept"]


def test_copy_copies_every_folder_but_the_lease_and_refuses_a_taken_place(tmp_path):
    from ctxagent.sessions import replica

    sync = _sync(tmp_path, "old")
    for folder in ("segments", "snapshots", "outputs", "agents/c/segments", "lease"):
        sync.store.create(sync.remote(*folder.split("/"), "x"), folder.encode())
    into = _sync(tmp_path, "new", sync.store)
    replica.copy(sync, into)
    copied = tmp_path / "store" / "sessions" / "new"
    assert sorted(p.relative_to(copied).as_posix() for p in copied.rglob("x")) == [
        "agents/c/segments/x", "outputs/x", "segments/x", "snapshots/x"]
    assert (copied / "agents" / "c" / "segments" / "x").read_bytes() == b"agents/c/segments"
    with pytest.raises(UsageError) as err:
        replica.copy(_sync(tmp_path, "other", sync.store), into)
    assert str(err.value) == f"a session named 'new' exists already in {sync.store.url}"
    half = _sync(tmp_path, "half", sync.store)
    half.store.create(half.remote("segments", "x"), b"only segments")
    replica.copy(half, _sync(tmp_path, "half2", sync.store))
    assert [p.name for p in (tmp_path / "store" / "sessions" / "half2").iterdir()] == ["segments"]


def test_a_writer_of_a_session_the_store_lost_takes_no_segment_and_leaves_no_lease(tmp_path):
    """The writer's side of a stale cache (a reader's pull usually says it first): it fenced the next
    segment number of a session the store no longer had, a fragment no machine could open."""
    from ctxagent.sessions import replica

    sync = _sync(tmp_path)
    sync.root.mkdir(parents=True)
    for i in range(3):
        _step(sync, _line(f"step {i}", i))
    for segment in (tmp_path / "store" / "sessions" / "s" / "segments").iterdir():
        segment.unlink()  # deleted on another machine
    stale = _sync(tmp_path)
    with pytest.raises(UsageError, match=r"has no segment of it any more .* the store's state wins: this machine's "
                                         "stale cache was moved to"), replica.leased(stale, lambda names: None):
        raise AssertionError("never yielded")
    assert [p.name for p in (tmp_path / "store" / "sessions" / "s").rglob("*") if p.is_file()] == []
    assert not sync.root.exists() and next(p.name for p in (tmp_path / "stale").iterdir()).startswith("s-")


def test_a_stale_cache_that_cannot_be_moved_aside_is_named_for_removal(tmp_path):
    sync = _sync(tmp_path)
    sync.root.mkdir(parents=True)
    _step(sync, _line("step", 1))
    (tmp_path / "store" / "sessions" / "s" / "segments" / segment_name(1)).unlink()
    (tmp_path / "stale").write_text("a file where the folder goes")
    with pytest.raises(UsageError, match=rf"stale cache {sync.root} could not be moved aside .*; remove it"):
        _sync(tmp_path).pull(writer=False)
