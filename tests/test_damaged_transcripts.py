"""Damaged or foreign transcripts (issue 10): load, check, repair, report; never send an invalid request.

Each test is named after a failure seen on main. Real files and the real CLI; the model is a local
FakeOpenAI that rejects PAIR-breaking requests with HTTP 400, as strict providers do.
"""

from __future__ import annotations

import json
import os
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import pytest

from clihelp import ctxagent, script, tool_messages
from ctxagent.agent.state import REPAIR_SOURCE, fold
from ctxagent.messages import pair_violations, tool_call
from ctxagent.sessions import records
from ctxagent.sessions.session import Session, list_facts
from ctxagent.sessions.transcript import Transcript, TranscriptError, TranscriptWarning

BIG = "word " * 1200  # ~1,200 tokens of tool output


def transcript(name: str) -> Path:
    return Path(os.environ["CTXAGENT_DATA_DIR"]) / "sessions" / name / "transcript.jsonl"


def profile(tmp_path: Path, window: int) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(f"context_window: {window}\nmax_output_tokens: 300\nretries: 0\ntools: [read_file]\n"
                    "pipelines:\n  batch:\n    - strategy: truncate\n", encoding="utf-8")
    return str(path)


def write(name: str, messages: list[dict[str, Any]], *, model: str = "scripted:none", api_base: str | None = None,
          profile_: str = "default", window: int = 100_000, extra: list[Any] = ()) -> Path:
    """A session written by hand: header, then ``messages`` as message records (seq 0.., turn by replies)."""
    path = transcript(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    items: list[Any] = [records.SessionHeader(name=name, model=model, profile=profile_, context_window=window,
                                              api_base=api_base, workdir=str(path.parent))]
    turn = 0
    for seq, message in enumerate(messages):
        turn += message["role"] == "assistant"
        items.append(records.MessageRecord(seq=seq, turn=max(turn, 1), tokens=len(json.dumps(message)) // 4,
                                           message=message))
    path.write_text("".join(records.dumps(r) + "\n" for r in [*items, *extra]), encoding="utf-8")
    return path


def reply(*ids: str, content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content,
            "tool_calls": [tool_call(i, "read_file", json.dumps({"path": f"{i}.txt"})) for i in ids]}


def result(call_id: str | None, content: str) -> dict[str, Any]:
    message = {"role": "tool", "content": content}
    return message if call_id is None else {**message, "tool_call_id": call_id}


HEAD = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "read both files"}]


# -- PAIR: results grouped with their call by id, never by position ---------------------------------

def test_result_of_an_earlier_reply_under_truncation_is_sent_after_its_call(tmp_path, fake_openai):
    """(a) ``A1[x1] A2[x2] T(x1) T(x2)`` with truncation dropping A1 kept T(x1): every request was rejected."""
    server = fake_openai([{"content": "done"}])
    write("late", [*HEAD, reply("x1", content="first"), reply("x2", content="second"), result("x1", BIG),
                   result("x2", BIG)], model="openai/fake", api_base=server.base_url,
          profile_=profile(tmp_path, 3_600), window=3_600)
    out = ctxagent("resume", "--batch", "--session", "late")
    assert (out.returncode, out.stdout, server.rejected) == (0, "done\n", []), out.stderr
    sent = server.requests[-1]["messages"]
    assert pair_violations(sent) == []
    ids = [m.get("tool_call_id") for m in sent if m["role"] == "tool"]
    assert ids == ["x2"]  # truncation dropped A1 together with its result
    assert "dropped from this view" in json.dumps(sent)


def test_result_of_an_earlier_reply_moves_behind_its_call_in_the_view():
    """(a) without truncation: the view is A1 T(x1) A2 T(x2), ordered by seq slot, and says so once."""
    path = write("order", [*HEAD, reply("x1"), reply("x2"), result("x1", "one"), result("x2", "two")])
    state = fold(Transcript(path).load())
    view = state.context.view
    assert [e.message.get("tool_call_id") or e.role for e in view] == ["system", "user", "assistant", "x1",
                                                                        "assistant", "x2"]
    assert [e.start for e in view] == [0, 1, 2, 3, 4, 5] and pair_violations([e.message for e in view]) == []
    assert state.open_calls == [] and len(state.repair_notes()) == 1
    assert "#4" in state.repairs[0] and "#2" in state.repairs[0]


def test_result_without_id_answers_the_only_pending_call(tmp_path, fake_openai):
    """(b) ``A[k1,k2] T(k1) T(no id)``: every resume sent (k1), (no id), (k2 interrupted) and was rejected."""
    server = fake_openai([{"content": "done"}, {"content": "again"}])
    path = write("noid", [*HEAD, reply("k1", "k2"), result("k1", "one"), result(None, "two")], model="openai/fake",
                 api_base=server.base_url, profile_=profile(tmp_path, 50_000), window=50_000)
    for answer in ("done", "again"):
        out = ctxagent("resume", "--batch", "--session", "noid", "go on")
        assert (out.returncode, out.stdout, server.rejected) == (0, answer + "\n", []), out.stderr
        sent = server.requests[-1]["messages"]
        assert [(m["tool_call_id"], m["content"]) for m in sent if m["role"] == "tool"] == [("k1", "one"),
                                                                                             ("k2", "two")]
    assert b"interrupted" not in path.read_bytes()


def test_pending_call_of_an_earlier_reply_gets_its_interrupted_result_behind_it(tmp_path, fake_openai):
    """``A1[x1] A2[x2] T(x2)``: x1 was never answered; its synthetic result goes right after A1."""
    server = fake_openai([{"content": "done"}])
    write("open", [*HEAD, reply("x1"), reply("x2"), result("x2", "two")], model="openai/fake",
          api_base=server.base_url, profile_=profile(tmp_path, 50_000), window=50_000)
    out = ctxagent("resume", "--batch", "--session", "open")
    assert (out.returncode, server.rejected) == (0, []), out.stderr
    sent = server.requests[-1]["messages"]
    assert [m.get("tool_call_id") or m["role"] for m in sent[2:]] == ["assistant", "x1", "assistant", "x2"]
    assert sent[3]["content"].startswith("[ctxagent] interrupted")


def test_orphan_and_duplicate_results_are_left_out_of_the_view_with_a_note():
    path = write("orphan", [*HEAD, reply("a"), result("a", "one"), result("a", "again"), result("zz", "who?"),
                            {"role": "user", "content": "next"}])
    state = fold(Transcript(path).load())
    view = [e.message for e in state.context.view]
    assert pair_violations(view) == [] and [m.get("content") for m in view if m["role"] == "tool"] == ["one"]
    assert [n.text.split(" (")[0] for n in state.repair_notes()] == ["tool result #4", "tool result #5"]


def test_repair_notes_are_recorded_once():
    """The fold repairs on every open; once a note records a repair it is not reported again."""
    messages = [*HEAD, reply("k1", "k2"), result("k1", "one"), result(None, "two")]
    path = write("notes", messages)
    notes = fold(Transcript(path).load()).repair_notes()
    assert len(notes) == 1 and notes[0].source == REPAIR_SOURCE and "'k2'" in notes[0].text
    Transcript(path).append(notes)
    again = fold(Transcript(path).load())
    assert again.repair_notes() == [] and again.open_calls == []


def test_pair_repairs_are_recorded_in_the_transcript_and_warned_once(tmp_path, fake_openai):
    """The repair of (b) is a note record (source "transcript repair") and a stderr warning, once."""
    server = fake_openai([{"content": "done"}, {"content": "again"}])
    write("said", [*HEAD, reply("k1", "k2"), result("k1", "one"), result(None, "two")], model="openai/fake",
          api_base=server.base_url, profile_=profile(tmp_path, 50_000), window=50_000)
    first = ctxagent("resume", "--batch", "--session", "said", "go on")
    assert first.returncode == 0 and "warning: session said: tool result #4 has no call id" in first.stderr
    second = ctxagent("resume", "--batch", "--session", "said", "more")
    assert second.returncode == 0 and "has no call id" not in second.stderr
    notes = [json.loads(line) for line in transcript("said").read_bytes().splitlines() if b'"kind":"note"' in line]
    assert [n["source"] for n in notes] == [REPAIR_SOURCE] and "'k2'" in notes[0]["text"]


# -- damaged records anywhere in the file ----------------------------------------------------------

def lines_of(name: str) -> list[bytes]:
    return transcript(name).read_bytes().splitlines(keepends=True)


def test_nul_padding_before_a_record_is_stripped_with_a_warning_naming_the_line():
    path = write("nul", [*HEAD, {"role": "assistant", "content": "hi"}])
    lines = lines_of("nul")
    path.write_bytes(b"".join([*lines[:2], b"\x00" * 4096 + lines[2], b"\x00" * 512 + b"\n", lines[3]]))
    with pytest.warns(TranscriptWarning) as seen:
        items = Transcript(path).load(repair=True)
    assert [type(r).__name__ for r in items] == ["SessionHeader", "MessageRecord", "MessageRecord", "MessageRecord"]
    text = " ".join(str(w.message) for w in seen)
    assert f"{path}:3: 4096 NUL bytes" in text and f"{path}:4: only NUL bytes" in text


def test_half_written_line_in_the_middle_is_set_aside_and_the_session_continues_warned_once(tmp_path):
    """Also a regression: ``resume`` printed the line's warning twice (the command and the run each
    read the transcript)."""
    model = tmp_path / "s.yaml"
    model.write_text('- {content: "second answer"}\n', encoding="utf-8")
    path = write("torn", [*HEAD, {"role": "assistant", "content": "first answer"}], model=f"scripted:{model}",
                 extra=[records.EndRecord(reason="answered", turn=1)])
    lines = lines_of("torn")
    path.write_bytes(b"".join([*lines[:3], lines[3][:25] + b"\n", *lines[4:]]))  # the reply, half-written
    out = ctxagent("resume", "--batch", "--session", "torn", "and now?")
    assert (out.returncode, out.stdout) == (0, "second answer\n"), out.stderr
    assert out.stderr.count(f"{path}:4: unreadable record skipped") == 1, out.stderr
    head = json.loads(path.read_bytes().splitlines()[0])
    assert head["model"] == f"scripted:{model}"


@pytest.mark.parametrize(("message", "why"), [
    ({"role": "assistant", "content": 42}, "content is int, not text, null or a list of parts"),
    ({"role": "assistant", "content": None, "tool_calls": {"id": "x"}}, "tool_calls is dict, not a list"),
    ({"role": "assistant", "content": None, "tool_calls": [{"id": 7, "function": {}}]}, "tool call 0 is not"),
    ({"role": ["user"], "content": "hi"}, "role is not a string"),
    ({"role": "tool", "content": "x", "tool_call_id": {"a": 1}}, "tool_call_id is not a string"),
])
def test_a_record_whose_message_has_the_wrong_json_types_is_set_aside_naming_its_line(tmp_path, message, why):
    """A message whose content was a number, or whose tool calls were an object, gave a traceback on
    every resume and inspect."""
    model = tmp_path / "s.yaml"
    model.write_text('- {content: "first answer"}\n- {content: "second answer"}\n', encoding="utf-8")
    path = write("types", [*HEAD, {"role": "assistant", "content": "first answer"}], model=f"scripted:{model}")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"kind": "message", "seq": 3, "turn": 1, "tokens": 1, "message": message}) + "\n")
    for args in (("inspect", "transcript", "--session", "types"), ("inspect", "context", "--session", "types"),
                 ("resume", "--batch", "--session", "types", "and now?")):
        out = ctxagent(*args)
        assert out.returncode == 0, (args, out.stderr)
        assert f"{path}:5: unreadable record skipped (message: " in out.stderr and why in out.stderr, out.stderr
    assert out.stdout == "second answer\n"


def test_a_json_line_nested_100000_deep_is_set_aside_naming_its_line(tmp_path):
    model = tmp_path / "s.yaml"
    model.write_text('- {content: "first answer"}\n- {content: "second answer"}\n', encoding="utf-8")
    path = write("deep", [*HEAD, {"role": "assistant", "content": "first answer"}], model=f"scripted:{model}")
    for deep in ("[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000):
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f'{{"kind":"message","seq":3,"turn":1,"tokens":1,"message":{deep}}}\n')
    for args in (("inspect", "transcript", "--session", "deep"), ("sessions", "list"),
                 ("resume", "--batch", "--session", "deep", "and now?")):
        out = ctxagent(*args)
        assert out.returncode == 0, (args, out.stderr)
    assert f"{path}:5: unreadable record skipped (" in out.stderr and f"{path}:6: unreadable" in out.stderr
    assert "recursion limit" in out.stderr and out.stdout == "second answer\n"


def test_tool_call_arguments_nested_100000_deep_are_an_error_result_and_the_session_resumes(tmp_path):
    """Arguments text the model nested deeper than the JSON parser goes: a RecursionError in the
    gate, the loop guard and the lessons, on the run and on every resume of the session."""
    deep = "[" * 100_000 + "]" * 100_000
    model = script(tmp_path / "s.yaml", [{"tool_calls": [{"id": "d", "name": "read_file", "arguments": deep}]},
                                         "first answer", "second answer"])
    out = ctxagent("run", "--batch", "--session", "deeparg", "--model", model, "go")
    assert (out.returncode, out.stdout) == (0, "first answer\n"), out.stderr
    assert tool_messages("deeparg")["d"].startswith("ERROR: the arguments of read_file are not valid JSON")
    out = ctxagent("resume", "--batch", "--session", "deeparg", "more")
    assert (out.returncode, out.stdout) == (0, "second answer\n"), out.stderr
    assert ctxagent("sessions", "export", "deeparg", "--format", "markdown").returncode == 0


def test_corrupt_header_refuses_resume_instead_of_starting_a_new_session():
    """A damaged line 1 made ``resume`` start a new session in the same file, with the default model."""
    path = write("hdr", [*HEAD, {"role": "assistant", "content": "hi"}], model="openai/gpt-4o")
    lines = lines_of("hdr")
    path.write_bytes(lines[0][:40] + b"\x00\x00garbage\n" + b"".join(lines[1:]))
    before = path.read_bytes()
    out = ctxagent("resume", "--batch", "--session", "hdr", "more")
    assert out.returncode == 2
    assert f"{path}:1: the session header is damaged" in out.stderr and "not continued as a new session" in out.stderr
    assert path.read_bytes() == before  # nothing written: no second header, no default model
    with pytest.raises(TranscriptError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Transcript(path).load(repair=True)


def test_unknown_record_kinds_warn_once_per_kind_not_per_line():
    path = write("future", [*HEAD])
    with open(path, "a", encoding="utf-8") as fh:
        for i in range(50):
            fh.write(json.dumps({"kind": "thought", "ts": 1.0, "n": i}) + "\n")
        fh.write(json.dumps({"kind": "vote", "ts": 1.0}) + "\n")
    with pytest.warns(TranscriptWarning) as seen:
        assert len(Transcript(path).load()) == 3
    texts = [str(w.message) for w in seen]
    assert len(texts) == 2 and "50 record(s) of unknown kind 'thought'" in texts[0] and "'vote'" in texts[1]


# -- sessions list reads only what it needs ---------------------------------------------------------

def big_session(name: str, messages: int, size: int) -> Path:
    path = write(name, HEAD, extra=[records.SettingsRecord(model="scripted:later")])
    body = "x" * size
    with open(path, "a", encoding="utf-8") as fh:
        for seq in range(2, messages + 2):
            fh.write(records.dumps(records.MessageRecord(seq=seq, turn=seq, tokens=size // 4,
                                                         message={"role": "assistant", "content": body})) + "\n")
            fh.write(records.dumps(records.UsageRecord(turn=seq, model="m", prompt_tokens=10, completion_tokens=1,
                                                       estimated_prompt_tokens=10)) + "\n")
    return path


def test_sessions_list_of_a_large_transcript_reads_header_tail_and_cached_totals():
    """``sessions list`` read all 103 MB of a transcript into 383 MB of memory."""
    path = big_session("huge", 2_000, 20_000)  # ~40 MB
    session = Session.at("huge")
    tracemalloc.start()
    facts = list_facts(session)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert path.stat().st_size > 40_000_000 and peak < 2_000_000, peak
    loaded = Transcript(path).load()  # the facts of every record, read the slow way
    assert facts == {"created": loaded[0].ts, "model": "scripted:later",  # a settings record far from both ends
                     "profile": "default", "turns": 2001, "messages": 2002, "tokens": 22_000, "cost_usd": None,
                     "status": "answered", "last_used": loaded[-1].ts}
    before = bytes_read()
    assert list_facts(session) == facts
    assert bytes_read() - before < 300_000  # the second listing: line 1, the tail, the cache; not 40 MB


def bytes_read() -> int:
    """Bytes this process has read so far (Linux ``/proc/self/io``, every read system call)."""
    with open("/proc/self/io", encoding="ascii") as fh:
        return int(next(line for line in fh if line.startswith("rchar:")).split()[1])


def test_sessions_list_tells_a_running_session_from_an_interrupted_one():
    write("busy", [*HEAD, reply("a")])
    session = Session.at("busy")
    with session.writer():
        out = ctxagent("sessions", "list", "--json")
        assert json.loads(out.stdout)["status"] == "running", out.stderr
    out = ctxagent("sessions", "list", "--json")
    assert json.loads(out.stdout)["status"] == "interrupted", out.stderr
