"""Folded-state snapshots (agent/snapshot.py): a state loaded from a snapshot and advanced by the
records after its mark is the state a fold of the whole transcript gives (ONE STATE), and a snapshot
that does not provably belong to the file and the code is never used."""

from __future__ import annotations

import functools
import importlib
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxagent.agent import snapshot
from ctxagent.agent.snapshot import load, open_state, state_file
from ctxagent.agent.state import fold
from ctxagent.sessions.transcript import Transcript, TranscriptWarning
from examplecount import examples

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `benchmarks` is a top-level folder of the repository, not installed
    sys.path.insert(0, str(ROOT))
resume_transcript = importlib.import_module("benchmarks.resume_transcript")


@functools.cache
def realistic_bytes() -> bytes:
    """A realistic transcript (benchmarks/resume_transcript.py: messages, usage, compaction, output
    and end records) of 250 messages, as bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        data: bytes = resume_transcript.write(Path(tmp) / "s", 250).read_bytes()
        return data


@pytest.fixture
def realistic() -> bytes:
    return realistic_bytes()


def whole(path: Path) -> object:
    return fold(Transcript(path).records(), transcript_path=str(path))


@settings(max_examples=examples(25), deadline=None)
@given(cut=st.floats(0, 1), torn=st.booleans())
def test_a_snapshot_plus_the_records_after_it_is_the_whole_fold(cut: float, torn: bool) -> None:
    realistic = realistic_bytes()
    lines = realistic.splitlines(keepends=True)
    k = round(cut * len(lines))
    with tempfile.TemporaryDirectory() as tmp, patch.object(snapshot, "SAVE_AFTER_BYTES", 0):
        path = Path(tmp) / "transcript.jsonl"
        path.write_bytes(b"".join(lines[:k]) + (lines[k][:7] if torn and k < len(lines) else b""))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TranscriptWarning)  # the torn line, set aside
            open_state(Transcript(path))
        assert (load(Transcript(path)) is not None) == (k > 0)
        path.write_bytes(realistic)  # the torn line completed, the rest appended
        assert open_state(Transcript(path)) == whole(path)
        assert load(Transcript(path)) is not None and open_state(Transcript(path)) == whole(path)


def snapshotted(realistic: bytes, tmp_path: Path) -> Path:
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(realistic)
    with patch.object(snapshot, "SAVE_AFTER_BYTES", 0):
        open_state(Transcript(path))
    assert load(Transcript(path)) is not None
    return path


def test_an_edit_before_the_mark_discards_the_snapshot(realistic: bytes, tmp_path: Path) -> None:
    path = snapshotted(realistic, tmp_path)
    edited = realistic.replace(b'"turn":3,', b'"turn":4,', 1)
    assert edited != realistic
    path.write_bytes(edited)
    assert load(Transcript(path)) is None
    assert open_state(Transcript(path)) == whole(path)


def test_a_snapshot_others_may_write_is_not_loaded(realistic: bytes, tmp_path: Path) -> None:
    path = snapshotted(realistic, tmp_path)
    assert state_file(Transcript(path)).stat().st_mode & 0o777 == 0o600
    assert state_file(Transcript(path)).parent.stat().st_mode & 0o777 == 0o700
    os.chmod(state_file(Transcript(path)), 0o666)  # a pickle runs code when loaded: only our own
    assert load(Transcript(path)) is None


def test_a_snapshot_of_other_code_or_a_damaged_one_is_not_loaded(realistic: bytes, tmp_path: Path) -> None:
    path = snapshotted(realistic, tmp_path)
    with patch.object(snapshot, "fingerprint", lambda: "another ctxagent"):
        assert load(Transcript(path)) is None
    target = state_file(Transcript(path))
    target.write_bytes(target.read_bytes()[:-100])
    assert load(Transcript(path)) is None
    target.write_bytes(b"not a pickle")
    assert load(Transcript(path)) is None and open_state(Transcript(path)) == whole(path)


def test_a_small_session_leaves_no_snapshot(realistic: bytes, tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(realistic)
    assert len(realistic) < snapshot.SAVE_AFTER_BYTES
    open_state(Transcript(path))
    assert not state_file(Transcript(path)).exists()


def test_warnings_after_a_snapshot_name_the_true_line(realistic: bytes, tmp_path: Path) -> None:
    path = snapshotted(realistic, tmp_path)
    lines = realistic.count(b"\n")
    with path.open("ab") as fh:
        fh.write(b'{"kind": "message", "seq": \n')
    with pytest.warns(TranscriptWarning, match=rf"transcript.jsonl:{lines + 1}: unreadable record"):
        open_state(Transcript(path))


def test_the_newest_compactions_and_the_counts_survive_a_snapshot(realistic: bytes, tmp_path: Path) -> None:
    path = snapshotted(realistic, tmp_path)
    records = Transcript(path).load()
    kept = [r for r in records if getattr(r, "kind", "") == "compaction"]
    state = open_state(Transcript(path))
    assert state.recent_compactions == kept[-10:] and sum(state.compactions.values()) == len(kept) > 10


def test_a_run_that_ends_brings_the_snapshot_up_to_date_and_delete_removes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clihelp import run_cli
    from ctxagent.sessions.session import Session

    monkeypatch.setattr(snapshot, "SAVE_AFTER_BYTES", 1)
    script = tmp_path / "hi.yaml"
    script.write_text("- content: hello\n", encoding="utf-8")
    out = run_cli("run", "--batch", "--session", "snap", "--model", f"scripted:{script}", "hi")
    assert out.exit_code == 0 and out.stdout.strip() == "hello"
    transcript = Session.at("snap").transcript
    loaded = load(transcript)
    assert loaded is not None and loaded[1].offset == transcript.path.stat().st_size  # up to the end record
    assert loaded[0] == whole(transcript.path) and loaded[0].last_end == "answered"
    assert run_cli("sessions", "delete", "snap", "--yes").exit_code == 0
    assert not state_file(transcript).exists()  # no cache of a deleted session stays behind


# What mutation testing (docs/mutation.md) found unasserted: where the cache lives, that a valid
# snapshot is actually used (not just harmless), the exact save threshold, refresh, save's answer,
# and which mode bits and bytes count.

def counted(seen: list[Any]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """An ``each`` for :func:`open_state` that records every record it folds."""
    def each(items: Iterator[Any]) -> Iterator[Any]:
        for item in items:
            seen.append(item)
            yield item
    return each


def halves(realistic: bytes) -> tuple[bytes, bytes]:
    """The realistic transcript cut at a line boundary two thirds in: a long head and a shorter rest."""
    lines = realistic.splitlines(keepends=True)
    k = 2 * len(lines) // 3
    head, rest = b"".join(lines[:k]), b"".join(lines[k:])
    assert 0 < len(rest) < len(head)
    return head, rest


def test_snapshots_live_in_the_data_dirs_cache(tmp_path: Path) -> None:
    from ctxagent.dirs import data_dir

    target = state_file(Transcript(tmp_path / "transcript.jsonl"))
    assert target.parent == data_dir() / "cache" / "states" and target.suffix == ".pickle"


def test_a_valid_snapshot_is_used_and_only_the_records_after_its_mark_are_folded(
        realistic: bytes, tmp_path: Path) -> None:
    head, rest = halves(realistic)
    path = snapshotted(head, tmp_path)
    path.write_bytes(head + rest)
    seen: list[Any] = []
    assert open_state(Transcript(path), each=counted(seen)) == whole(path)
    assert len(seen) == rest.count(b"\n")
    seen.clear()
    assert open_state(Transcript(path), snapshot=False, each=counted(seen)) == whole(path)
    assert len(seen) == realistic.count(b"\n")


def test_a_snapshot_is_saved_once_exactly_save_after_bytes_were_folded(realistic: bytes, tmp_path: Path) -> None:
    head, rest = halves(realistic)
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(head)
    with patch.object(snapshot, "SAVE_AFTER_BYTES", len(head)):
        open_state(Transcript(path))  # folded == the threshold: saved
        loaded = load(Transcript(path))
        assert loaded is not None and loaded[1].offset == len(head)
        path.write_bytes(head + rest)
        open_state(Transcript(path))  # only len(rest) < the threshold folded since: the snapshot stays
        loaded = load(Transcript(path))
        assert loaded is not None and loaded[1].offset == len(head)
    with patch.object(snapshot, "SAVE_AFTER_BYTES", len(rest)):
        open_state(Transcript(path))
        loaded = load(Transcript(path))
        assert loaded is not None and loaded[1] == snapshot.Mark(len(realistic), realistic.count(b"\n"))


def test_refresh_brings_the_snapshot_to_the_end_only_past_the_threshold(realistic: bytes, tmp_path: Path) -> None:
    head, rest = halves(realistic)
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(head)
    with patch.object(snapshot, "SAVE_AFTER_BYTES", len(head)):
        snapshot.refresh(path)  # no snapshot yet, the whole file is the threshold
        loaded = load(Transcript(path))
        assert loaded is not None and loaded[1].offset == len(head) and loaded[0] == whole(path)
        path.write_bytes(head + rest)
        snapshot.refresh(path)  # len(rest) written after it: below the threshold, left as it is
        loaded = load(Transcript(path))
        assert loaded is not None and loaded[1].offset == len(head)
    with patch.object(snapshot, "SAVE_AFTER_BYTES", len(rest)):
        snapshot.refresh(path)
        loaded = load(Transcript(path))
        assert loaded is not None and loaded[1].offset == len(realistic) and loaded[0] == whole(path)
    snapshot.refresh(tmp_path / "missing.jsonl")  # nothing to refresh: no error, no file
    assert not state_file(Transcript(tmp_path / "missing.jsonl")).exists()


def test_save_says_whether_it_wrote(realistic: bytes, tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(realistic)
    transcript = Transcript(path)
    state = fold(Transcript(path).records(), transcript_path=str(path))
    assert snapshot.save(state, transcript) is False  # no mark: nothing read yet
    transcript.mark = snapshot.Mark(len(realistic) + 10, 1)
    assert snapshot.save(state, transcript) is False  # the file is shorter than the mark
    assert not state_file(transcript).exists()
    transcript.mark = snapshot.Mark(len(realistic), realistic.count(b"\n"))
    assert snapshot.save(state, transcript) is True
    assert load(transcript) is not None
    state_file(transcript).unlink()
    cache = state_file(transcript).parent
    cache.rmdir()
    cache.write_bytes(b"")  # the cache directory cannot be made: a cache that is not there, no error
    assert snapshot.save(state, transcript) is False


@pytest.mark.parametrize(("mode", "used"), [(0o600, True), (0o644, True), (0o611, True), (0o601, True),
                                             (0o620, False), (0o602, False)])
def test_only_write_permission_for_others_disqualifies_a_snapshot(
        realistic: bytes, tmp_path: Path, mode: int, used: bool) -> None:
    path = snapshotted(realistic, tmp_path)
    os.chmod(state_file(Transcript(path)), mode)
    assert (load(Transcript(path)) is not None) == used


@pytest.mark.parametrize("where", ["first", "last"])
def test_an_edit_of_the_first_or_last_byte_before_the_mark_discards_the_snapshot(
        realistic: bytes, tmp_path: Path, where: str) -> None:
    with patch.object(snapshot, "HASH_BLOCK", 1):  # hashed a byte at a time: the last block is one byte
        path = snapshotted(realistic, tmp_path)
        at = 0 if where == "first" else len(realistic) - 1
        path.write_bytes(realistic[:at] + b" " + realistic[at + 1:])
        assert load(Transcript(path)) is None


def test_open_state_moves_a_torn_line_aside_only_when_asked_to_repair(realistic: bytes, tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(realistic + b'{"kind": "mess')
    with pytest.warns(TranscriptWarning, match="left in place"):
        open_state(Transcript(path))
    assert path.read_bytes().endswith(b'{"kind": "mess') and not (tmp_path / "transcript.torn-1.jsonl").exists()
    with pytest.warns(TranscriptWarning, match="moved to transcript.torn-1.jsonl"):
        open_state(Transcript(path), repair=True)
    assert path.read_bytes() == realistic and (tmp_path / "transcript.torn-1.jsonl").read_bytes() == b'{"kind": "mess'


def test_a_snapshot_of_a_transcript_deleted_by_hand_is_ignored_not_a_crash(realistic: bytes, tmp_path: Path) -> None:
    """Regression: ``rm -rf`` of a session folder left its snapshot in the cache, and the next run
    under that name crashed with FileNotFoundError while checking the snapshot against the file."""
    path = snapshotted(realistic, tmp_path)
    path.unlink()
    assert load(Transcript(path)) is None
    assert open_state(Transcript(path)) == whole(path)  # an empty state, as for a new session
