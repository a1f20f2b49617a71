"""ROUNDTRIP: one record per line, read back exactly; torn last lines set aside, never fatal."""

from __future__ import annotations

import json
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxagent.errors import SessionBusyError, UsageError
from ctxagent.sessions import records
from ctxagent.sessions.session import Session, check_name, list_sessions, summarize
from ctxagent.sessions.transcript import Transcript, TranscriptWarning

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)
message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]), "content": text})


@settings(max_examples=60, deadline=None)
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


def test_list_and_summarize_newest_first():
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
    facts = summarize(Session.at("one").transcript.load())
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
