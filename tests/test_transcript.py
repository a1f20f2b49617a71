"""ROUNDTRIP: one record per line, read back exactly; torn last lines set aside, never fatal."""

from __future__ import annotations

import json
import time
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ctxagent.errors import SessionBusyError, UsageError
from ctxagent.sessions import records
from ctxagent.sessions.session import Session, check_name, list_facts, list_sessions
from ctxagent.sessions.transcript import Transcript, TranscriptError, TranscriptWarning
from examplecount import examples

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)
message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]), "content": text})


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(message, max_size=20))
def test_roundtrip_any_text(tmp_path_factory, msgs):
    path = tmp_path_factory.mktemp("t") / "transcript.jsonl"
    written = [records.MessageRecord(seq=i, turn=i, tokens=1, message=m) for i, m in enumerate(msgs)]
    Transcript(path).append(written)
    assert Transcript(path).load() == written
    lines = path.read_text(encoding="utf-8").count("\n") if written else 0
    assert lines == len(written)  # one physical line each


def test_line_separators_inside_content_stay_on_one_line(tmp_path):
    path = tmp_path / "transcript.jsonl"
    rec = records.MessageRecord(seq=0, turn=1, tokens=1, message={"role": "user", "content": "a\u2028b\nc\rd\x85"})
    Transcript(path).append([rec])
    assert len(path.read_bytes().split(b"\n")) == 2
    assert Transcript(path).load() == [rec]


def test_torn_last_line_is_set_aside_with_repair(tmp_path):
    path = tmp_path / "transcript.jsonl"
    good = records.MessageRecord(seq=0, turn=1, tokens=1, message={"role": "user", "content": "hi"})
    Transcript(path).append([good])
    with open(path, "ab") as fh:
        fh.write(b'{"kind":"message","seq":1,"tur')
    with pytest.warns(TranscriptWarning, match="torn last line"):
        assert Transcript(path).load(repair=True) == [good]
    assert (tmp_path / "transcript.torn-1.jsonl").read_bytes() == b'{"kind":"message","seq":1,"tur'
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Transcript(path).load() == [good]  # repaired: no warning the second time


def test_torn_line_read_only_load_does_not_modify(tmp_path):
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(b'{"kind":"end","reason":"answered","turn":1,"ts":1.0}\n{"kind":')
    with pytest.warns(TranscriptWarning):
        assert len(Transcript(path).load()) == 1
    assert path.read_bytes().endswith(b'{"kind":')


def test_garbage_line_in_the_middle_is_skipped_not_fatal(tmp_path):
    path = tmp_path / "transcript.jsonl"
    line = json.dumps({"kind": "end", "reason": "answered", "turn": 1, "ts": 1.0})
    path.write_text(f"{line}\nnot json at all\n{line}\n", encoding="utf-8")
    with pytest.warns(TranscriptWarning, match=":2: unreadable"):
        assert len(Transcript(path).load()) == 2


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "..", "a..b", "/abs", ".hidden", "x" * 200])
def test_bad_session_names_are_refused(bad):
    with pytest.raises(UsageError):
        check_name(bad)


def test_writer_lock_is_exclusive(tmp_path):
    session = Session.at("locked")
    with session.writer(), pytest.raises(SessionBusyError, match="in use"), Session.at("locked").writer():
        pass


def test_session_dirs_are_owner_only():
    session = Session.at("private")
    with session.writer():
        session.transcript.append([records.EndRecord(reason="answered", turn=0)])
    assert session.root.stat().st_mode & 0o077 == 0


def test_list_facts_newest_first():
    for name in ("one", "two"):
        s = Session.at(name)
        with s.writer():
            s.transcript.append([
                records.SessionHeader(name=name, model="scripted:x", profile="default", context_window=1000),
                records.MessageRecord(seq=0, turn=1, tokens=3, message={"role": "user", "content": "q"}),
                records.UsageRecord(turn=1, model="m", prompt_tokens=10, completion_tokens=5,
                                    estimated_prompt_tokens=9),
                records.EndRecord(reason="answered", turn=1),
            ])
    assert [s.name for s in list_sessions()] == ["two", "one"]
    facts = list_facts(Session.at("one"))
    assert (facts["turns"], facts["tokens"], facts["status"]) == (1, 15, "answered")


def test_a_kill_during_the_first_append_never_leaves_an_empty_transcript(tmp_path, monkeypatch):
    """Regression (the crash harness): a kill between creating transcript.jsonl and writing its
    header left an empty file, which resume refuses; the first lines now appear by a rename."""
    import os as os_module

    transcript = Transcript(tmp_path / "transcript.jsonl")
    header = records.SessionHeader(name="s", model="m", profile="default", context_window=1000)

    def killed(fd: int) -> None:
        raise KeyboardInterrupt  # the process dies before the data is durable

    monkeypatch.setattr(os_module, "fsync", killed)
    with pytest.raises(KeyboardInterrupt):
        transcript.append([header])
    assert not transcript.path.exists()
    monkeypatch.undo()
    transcript.append([header])
    assert transcript.path.read_text().count("\n") == 1 and oct(transcript.path.stat().st_mode & 0o777) == "0o600"


# What mutation testing (docs/mutation.md) found unasserted: tail's window, the torn-line side files,
# the header check of writers, the reasons and line numbers warnings give, and non-object lines.

def end(turn: int, note: str = "") -> records.EndRecord:
    return records.EndRecord(reason="answered", turn=turn, detail=note, ts=1.0)


def test_tail_reads_whole_records_at_the_end_and_doubles_until_it_finds_one_of_want(tmp_path):
    path = tmp_path / "transcript.jsonl"
    header = records.SessionHeader(name="t", model="m", profile="default", context_window=1000, ts=1.0)
    ends = [end(n, "words with spaces in them") for n in range(1, 40)]
    Transcript(path).append([header, *ends])
    assert Transcript(path).tail(nbytes=10 * path.stat().st_size) == [header, *ends]  # all of it, line 1 too
    line = len(records.dumps(ends[-1])) + 1
    last = Transcript(path).tail(nbytes=3 * line + line // 2)  # 3.5 lines: the cut one is not read
    assert last == ends[-3:]
    with open(path, "ab") as fh:
        fh.write(b'{"kind": "end", "rea')  # a torn last line: ignored, silently
    assert Transcript(path).tail(nbytes=3 * line + line // 2 + 20) == ends[-3:]
    assert Transcript(path).tail(nbytes=line, want=records.SessionHeader) == [header, *ends]
    assert Transcript(path).tail(nbytes=line, want=records.PinRecord) == [header, *ends]  # none: the whole file
    assert Transcript(tmp_path / "missing.jsonl").tail() == []


def test_head_is_the_first_record_or_none(tmp_path):
    path = tmp_path / "transcript.jsonl"
    header = records.SessionHeader(name="t", model="m", profile="default", context_window=1000, ts=1.0)
    Transcript(path).append([header, end(1)])
    assert Transcript(path).head() == header
    path.write_bytes(b"\x00\x00" + path.read_bytes())  # NUL padding before it is stripped
    assert Transcript(path).head() == header
    path.write_bytes(b"garbage\n" + path.read_bytes())
    assert Transcript(path).head() is None and Transcript(tmp_path / "missing.jsonl").head() is None


def test_each_torn_line_gets_its_own_owner_only_side_file(tmp_path):
    path = tmp_path / "transcript.jsonl"
    Transcript(path).append([end(1)])
    for n, torn in enumerate([b'{"kind": "end", "re', b'{"kind": "mess'], start=1):
        with open(path, "ab") as fh:
            fh.write(torn)
        with pytest.warns(TranscriptWarning, match=rf"torn last line \({len(torn)} bytes\) set aside, "
                                                   rf"moved to transcript.torn-{n}.jsonl"):
            assert Transcript(path).load(repair=True) == [end(1)]
        side = tmp_path / f"transcript.torn-{n}.jsonl"
        assert side.read_bytes() == torn and side.stat().st_mode & 0o777 == 0o600
    with open(path, "ab") as fh:
        fh.write(b'{"kind": "')
    with pytest.warns(TranscriptWarning, match=r"set aside, left in place \(read-only\)"):
        assert Transcript(path).load() == [end(1)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "transcript.jsonl", "transcript.torn-1.jsonl", "transcript.torn-2.jsonl"]


@pytest.mark.parametrize("line1", [b"\x00\x00\x00", b'{"kind": "session", "name": '])
def test_an_unreadable_header_is_refused_to_a_writer_and_skipped_by_a_reader(tmp_path, line1):
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(line1 + b"\n" + records.dumps(end(1)).encode() + b"\n")
    why = "only NUL bytes"
    if not line1.startswith(b"\x00"):
        with pytest.raises(ValueError) as parse:
            records.loads(line1)
        why = parse.value.errors()[0]["msg"]  # the parser's reason (no field: the line is no JSON)
    with pytest.raises(TranscriptError) as err, warnings.catch_warnings():
        warnings.simplefilter("ignore", TranscriptWarning)
        Transcript(path).load(repair=True)
    assert str(err.value).startswith(f"{path}:1: the session header is damaged ({why}); ")
    assert "the session's settings (model, profile, context window) are unknown, so it is not continued as a new " \
           f"session. Restore line 1, or move the file aside to start over under this name (mv {path} {path}.damaged)" \
           in str(err.value)
    with pytest.warns(TranscriptWarning, match="transcript.jsonl:1: "):
        assert Transcript(path).load() == [end(1)]


@pytest.mark.parametrize("line2", [b"\x00\x00\x00", b'{"kind": "end", "turn": '])
def test_a_damaged_second_line_is_no_damaged_header(tmp_path, line2):
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(records.dumps(end(1)).encode() + b"\n" + line2 + b"\n" + records.dumps(end(2)).encode() + b"\n")
    with pytest.warns(TranscriptWarning, match="transcript.jsonl:2: "):
        assert Transcript(path).load(repair=True) == [end(1), end(2)]


def test_an_unreadable_record_is_named_with_the_field_and_the_parsers_reason(tmp_path):
    """The warning gave the first 120 characters of pydantic's text: the union's name, not the field."""
    path = tmp_path / "transcript.jsonl"
    bad = b'{"kind": "end", "reason": "answered", "turn": "first"}'
    path.write_bytes(records.dumps(end(1)).encode() + b"\n" + bad + b"\n")
    with pytest.raises(ValidationError) as err:
        records.loads(bad)
    reason = err.value.errors()[0]["msg"]
    with pytest.warns(TranscriptWarning) as seen:
        assert Transcript(path).load() == [end(1)]
    assert [str(w.message) for w in seen] == [f"{path}:2: unreadable record skipped (turn: {reason})"]


@pytest.mark.parametrize("line", [b"[1, 2]", b'"end"', b'{"kind": 5}', b'{"kind": "end", "turn": []}'])
def test_a_line_that_is_no_record_of_a_known_kind_is_unreadable_not_of_an_unknown_kind(tmp_path, line):
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(records.dumps(end(1)).encode() + b"\n" + line + b"\n")
    with pytest.warns(TranscriptWarning) as seen:
        assert Transcript(path).load() == [end(1)]
    assert [str(w.message).split(" (")[0] for w in seen] == [f"{path}:2: unreadable record skipped"]


def test_records_of_unknown_kinds_are_reported_with_their_first_line(tmp_path):
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(b"".join([records.dumps(end(1)).encode() + b"\n", b'{"kind": "thought"}\n',
                               records.dumps(end(2)).encode() + b"\n", b'{"kind": "thought"}\n' * 2,
                               b'{"kind": "vote"}\n', b'{"kind": "wish"}\n' * 2]))
    with pytest.warns(TranscriptWarning) as seen:
        assert Transcript(path).load() == [end(1), end(2)]
    newer = "written by a newer ctxagent?"
    assert [str(w.message) for w in seen] == [
        f"{path}: 3 record(s) of unknown kind 'thought' skipped (line 2 and 2 more); {newer}",
        f"{path}: 1 record(s) of unknown kind 'vote' skipped (line 6); {newer}",
        f"{path}: 2 record(s) of unknown kind 'wish' skipped (line 7 and 1 more); {newer}"]


def test_records_are_read_only_by_default(tmp_path):
    path = tmp_path / "transcript.jsonl"
    transcript = Transcript(path)
    transcript.append([end(1), end(2)])
    size = path.stat().st_size
    with open(path, "ab") as fh:
        fh.write(b'{"kind": "end", "re')
    with pytest.warns(TranscriptWarning, match="left in place"):
        assert list(transcript.records()) == [end(1), end(2)]
    assert path.stat().st_size == size + 19


def test_a_mirror_receives_the_bytes_of_each_append(tmp_path):
    path = tmp_path / "transcript.jsonl"
    got: list[bytes] = []
    transcript = Transcript(path, mirror=got.append)
    transcript.append([end(1)])
    transcript.append([])  # nothing to write: no file change, nothing mirrored
    transcript.append([end(2), end(3)])
    assert got == [path.read_bytes()[:len(got[0])], path.read_bytes()[len(got[0]):]] and len(got[1].splitlines()) == 2


def test_a_record_timestamp_is_the_current_time_to_the_millisecond():
    for _ in range(20):
        before = round(time.time(), 3)
        stamp = records.now()
        after = round(time.time(), 3)
        assert isinstance(stamp, float) and before <= stamp <= after and stamp == round(stamp, 3)
    assert before <= records.EndRecord(reason="answered", turn=0).ts <= round(time.time(), 3)


def test_a_record_line_holds_any_value_in_its_json_form():
    """``dumps`` serializes in pydantic's JSON mode: bytes in a message become text, not a TypeError."""
    record = records.MessageRecord(seq=0, turn=1, tokens=1, message={"role": "tool", "content": b"caf\xc3\xa9"})
    line = records.dumps(record)
    assert json.loads(line)["message"] == {"role": "tool", "content": "café"}
    assert '"café"' in line and "\n" not in line
