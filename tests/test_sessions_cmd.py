"""``ctxagent sessions list|show|delete|rename|export``, ``--version``, completion and the demo, on the real CLI."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clihelp import call, ctxagent, script
from ctxagent.cli import app
from ctxagent.errors import UsageError
from ctxagent.messages import tool_call
from ctxagent.sessions import records
from ctxagent.sessions.outcome import final_answer, is_answer, recorded_answer, recorded_task
from ctxagent.sessions.session import (
    Session,
    Totals,
    check_name,
    latest_session,
    list_facts,
    list_sessions,
    new_name,
    sessions_root,
    status_of,
    totals,
)
from ctxagent.sessions.transcript import Transcript

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, input: str | None = None):
    """The CLI in this process; an error the app raises is left on ``result.exception``."""
    return CliRunner().invoke(app, list(args), input=input)


def ok(*args: str) -> str:
    result = cli(*args)
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def small_profile(tmp_path: Path) -> str:
    """A profile that extends the default and offloads any tool result over 100 tokens."""
    path = tmp_path / "small.yaml"
    path.write_text("extends: default\ntool_result_limit: 100\n", encoding="utf-8")
    return str(path)


def start(tmp_path: Path, name: str, replies: list, task: str = "go", *extra: str) -> None:
    model = script(tmp_path / f"{name}.yaml", replies)
    out = cli("run", "--batch", "--allow", "shell", "--session", name, "--model", model, *extra, task)
    assert out.exit_code == 0, (out.output, out.exception)


def two_answers(tmp_path: Path, name: str) -> None:
    """A session that answered once after one offloaded shell call; its script holds one more answer."""
    start(tmp_path, name, [{"tool_calls": [call("big", "shell", command="seq 1 400")]},
                           {"content": "first ``` answer"}, {"content": "second answer"}],
          "count", "--profile", small_profile(tmp_path))


# -- list -------------------------------------------------------------------------------------------

def test_list_adds_last_used_and_cost_and_never_cuts_a_name_when_piped(tmp_path):
    long = "a-session-name-long-enough-that-a-narrow-table-would-cut-it-" + "x" * 40
    start(tmp_path, long, [{"content": "done"}])
    rows = [json.loads(line) for line in ok("sessions", "list", "--json").splitlines()]
    assert [r["name"] for r in rows] == [long]
    row = rows[0]
    assert row["last_used"] >= row["created"] and row["status"] == "answered" and row["turns"] == 1
    assert "cost_usd" in row  # a scripted model has a price of 0 (litellm knows none: None)
    assert long in ok("sessions", "list")  # CliRunner's stdout is not a terminal
    piped = ctxagent("sessions", "list", env={"COLUMNS": "40"})
    assert piped.returncode == 0 and long in piped.stdout and "scripted:" in piped.stdout, piped.stdout


# -- show -------------------------------------------------------------------------------------------

def test_show_reports_settings_status_usage_and_outputs(tmp_path):
    two_answers(tmp_path, "shown")
    facts = json.loads(ok("sessions", "show", "shown", "--json"))
    assert facts["name"] == facts["started_as"] == "shown"
    assert facts["status"] == "answered" and facts["turns"] == 2 and facts["messages"] == 5
    assert facts["outputs"] == 1 and facts["output_bytes"] > 1000
    assert facts["calls"] == 2 and facts["tokens"] == facts["prompt_tokens"] + facts["completion_tokens"] > 0
    assert facts["settings"]["profile"].endswith("small.yaml") and facts["settings"]["path"] == "batch"
    assert facts["settings"]["model"].startswith("scripted:") and facts["created"] <= facts["last_used"]
    assert facts["runs"] == 1
    text = ok("sessions", "show")  # the most recent session by default
    for expected in ("session        shown\n", "status         answered", "outputs        1 offloaded",
                     "turns          2 (5 messages"):
        assert expected in text, text


def test_show_counts_every_model_call_a_usage_record_sums(tmp_path):
    """A sub-agent's spend is one usage record summing all its calls: ``sessions show`` counted it as one
    call while ``inspect transcript`` counted them all."""
    sub = records.UsageRecord(turn=1, model="m", prompt_tokens=30, completion_tokens=5, estimated_prompt_tokens=30,
                              cost_usd=None, calls=3)
    _session("spent", _header("spent"), _msg(0, "user"), _usage(10, 2, 0.5), sub, _msg(1, "assistant", "done"))
    facts = json.loads(ok("sessions", "show", "spent", "--json"))
    assert (facts["calls"], facts["tokens"], facts["prompt_tokens"], facts["cost_usd"]) == (4, 47, 40, 0.5)


def test_show_and_export_of_an_unknown_session_are_usage_errors():
    for args in (["sessions", "show", "ghost"], ["sessions", "export", "ghost"], ["sessions", "delete", "ghost"],
                 ["sessions", "rename", "ghost", "other"]):
        result = cli(*args, "--yes") if "delete" in args else cli(*args)
        assert isinstance(result.exception, UsageError) and "no session named 'ghost'" in str(result.exception)
    out = ctxagent("sessions", "show", "../escape")
    assert out.returncode == 2 and "invalid session name" in out.stderr


# -- rename -----------------------------------------------------------------------------------------

def test_rename_moves_the_folder_and_resume_continues_under_the_new_name(tmp_path):
    two_answers(tmp_path, "before")
    assert "renamed session before to after" in ctxagent("sessions", "rename", "before", "after").stderr
    assert not (sessions_root() / "before").exists() and (sessions_root() / "after" / "outputs").is_dir()
    out = ctxagent("resume", "--batch", "--session", "after", "and again?")
    assert (out.returncode, out.stdout) == (0, "second answer\n"), out.stderr
    facts = json.loads(ok("sessions", "show", "after", "--json"))
    assert (facts["started_as"], facts["turns"], facts["runs"], facts["outputs"]) == ("before", 3, 2, 1)
    assert "(started as before)" in ok("sessions", "show", "after")
    grep = ctxagent("inspect", "output", "@big", "--session", "after")  # outputs resolve by handle
    assert grep.returncode == 0 and "400" in grep.stdout, grep.stderr


def test_rename_refuses_a_taken_or_bad_name(tmp_path):
    start(tmp_path, "one", [{"content": "a"}])
    start(tmp_path, "two", [{"content": "b"}])
    result = cli("sessions", "rename", "one", "two")
    assert isinstance(result.exception, UsageError) and "exists already" in str(result.exception)
    out = ctxagent("sessions", "rename", "one", "../up")
    assert out.returncode == 2 and "invalid session name" in out.stderr
    out = ctxagent("sessions", "rename", "one", "two/child")  # not into another session's folder
    assert out.returncode == 2 and "invalid session name" in out.stderr
    for args in (["rename", "one/child", "three"], ["delete", "one/child", "--yes"]):
        out = ctxagent("sessions", *args)
        assert out.returncode == 2 and "sub-agent's session" in out.stderr, out.stderr
    assert {r["name"] for r in map(json.loads, ok("sessions", "list", "--json").splitlines())} == {"one", "two"}


# -- delete -----------------------------------------------------------------------------------------

def test_delete_needs_yes_without_a_terminal_and_removes_the_folder(tmp_path):
    two_answers(tmp_path, "gone")
    out = ctxagent("sessions", "delete", "gone")
    assert out.returncode == 2 and "without --yes" in out.stderr
    assert (sessions_root() / "gone" / "transcript.jsonl").exists()
    out = ctxagent("sessions", "delete", "gone", "--yes")
    assert out.returncode == 0 and "deleted session gone" in out.stderr, out.stderr
    assert not (sessions_root() / "gone").exists()
    assert ok("sessions", "list", "--json") == ""
    assert not [p for p in sessions_root().parent.iterdir() if p.name.startswith(".deleting-")]


def test_delete_asks_on_a_terminal(tmp_path, monkeypatch):
    from ctxagent.cli import sessions

    monkeypatch.setattr(sessions, "on_terminal", lambda: True)
    start(tmp_path, "asked", [{"content": "a"}])
    result = cli("sessions", "delete", "asked", input="n\n")
    assert result.exit_code == 1 and "Delete session 'asked'" in result.output
    assert Session.at("asked").exists()
    result = cli("sessions", "delete", "asked", input="y\n")
    assert result.exit_code == 0 and not Session.at("asked").root.exists()


def test_delete_and_rename_refuse_while_a_run_holds_the_session(tmp_path):
    start(tmp_path, "busy", [{"content": "a"}])
    with Session.at("busy").writer():
        for args in (["sessions", "delete", "busy", "--yes"], ["sessions", "rename", "busy", "free"]):
            out = ctxagent(*args)
            assert out.returncode == 1 and "in use by another ctxagent process" in out.stderr, out.stderr
    assert Session.at("busy").exists() and not (sessions_root() / "free").exists()


def test_delete_takes_several_names_and_older_than(tmp_path):
    """`sessions delete` took one name; a failed first try or a pile of old sessions took one command each."""
    for name in ("a", "b", "c", "old1", "old2"):
        start(tmp_path, name, [{"content": name}])
    for name in ("old1", "old2"):
        path = sessions_root() / name / "transcript.jsonl"
        os.utime(path, (time.time() - 10 * 86_400,) * 2)  # last used ten days ago
    out = ctxagent("sessions", "delete", "a", "b", "--yes")
    assert out.returncode == 0 and out.stderr.count("deleted session") == 2, out.stderr
    out = ctxagent("sessions", "delete", "--older-than", "7d", "--yes")
    assert out.returncode == 0 and "deleted session old1" in out.stderr and "deleted session old2" in out.stderr
    assert [s.name for s in list_sessions()] == ["c"]
    out = ctxagent("sessions", "delete", "--older-than", "7d", "--yes")
    assert out.returncode == 0 and "no session was last used more than 7d ago" in out.stderr
    for bad in ("7", "x1d", "-1d", "3y", "nand", "infd"):  # float() reads "nan" and "inf"
        out = ctxagent("sessions", "delete", "--older-than", bad, "--yes")
        assert out.returncode == 2 and "give a number and a unit" in out.stderr, bad
    out = ctxagent("sessions", "delete", "c", "nope", "--yes")  # an unknown name: nothing is deleted
    assert out.returncode == 2 and "no session named 'nope'" in out.stderr and Session.at("c").exists()
    assert ctxagent("sessions", "delete", "--yes").returncode == 2


def test_delete_of_several_deletes_the_free_ones_and_says_which_is_busy(tmp_path):
    for name in ("free", "held"):
        start(tmp_path, name, [{"content": name}])
    with Session.at("held").writer():
        out = ctxagent("sessions", "delete", "free", "held", "--yes")
    assert out.returncode == 1 and "in use by another ctxagent process" in out.stderr
    assert not Session.at("free").root.exists() and Session.at("held").exists()


def test_fork_copies_a_session_to_branch_from(tmp_path):
    """There was no way to try another direction from a session without losing the first."""
    two_answers(tmp_path, "trunk")
    before = (sessions_root() / "trunk" / "transcript.jsonl").read_bytes()
    out = ctxagent("sessions", "fork", "trunk", "branch")
    assert out.returncode == 0 and "forked session trunk as branch" in out.stderr, out.stderr
    assert (sessions_root() / "branch" / "transcript.jsonl").read_bytes() == before
    assert not (sessions_root() / "branch" / ".lock").exists()
    grep = ctxagent("inspect", "output", "@big", "--session", "branch")  # its outputs came along
    assert grep.returncode == 0 and "400" in grep.stdout, grep.stderr
    out = ctxagent("resume", "--batch", "--session", "branch", "another way?")
    assert (out.returncode, out.stdout) == (0, "second answer\n"), out.stderr
    assert (sessions_root() / "trunk" / "transcript.jsonl").read_bytes() == before  # the trunk stays as it was
    assert ctxagent("sessions", "fork", "trunk", "branch").returncode == 2  # taken
    assert ctxagent("sessions", "fork", "nope", "other").returncode == 2


def test_fork_of_a_session_being_written_copies_whole_lines_only(tmp_path):
    start(tmp_path, "live", [{"content": "a"}])
    path = sessions_root() / "live" / "transcript.jsonl"
    whole = path.read_bytes()
    with open(path, "ab") as fh:
        fh.write(b'{"kind":"note","source":"x","te')  # a line being appended
    assert ctxagent("sessions", "fork", "live", "copy").returncode == 0
    assert (sessions_root() / "copy" / "transcript.jsonl").read_bytes() == whole


def _in(folder: Path, name: str, tmp_path: Path, replies: list) -> None:
    folder.mkdir(exist_ok=True)
    model = script(tmp_path / f"{name}.yaml", replies)
    out = ctxagent("run", "--batch", "--session", name, "--model", model, "task", cwd=folder)
    assert out.returncode in (0, 4), out.stderr


def test_resume_without_a_session_continues_this_directorys_newest_not_another_projects(tmp_path):
    """Run in project A, `resume` continued B's session (the newest of any project) and edited B's files."""
    a, b = tmp_path / "a", tmp_path / "b"
    _in(a, "in-a", tmp_path, [{"content": "a1"}, {"content": "a2"}])
    _in(b, "in-b", tmp_path, [{"content": "b1"}, {"content": "b2"}])
    out = ctxagent("resume", "--batch", "more", cwd=a)
    assert (out.returncode, out.stdout) == (0, "a2\n"), out.stderr
    assert f"resuming session in-a, started in {a.resolve()}" in out.stderr
    os.utime(sessions_root() / "in-b" / "transcript.jsonl")  # b is the newest of all again
    out = ctxagent("resume", "--batch", "--last", "more", cwd=a)  # the global choice, asked for
    assert (out.returncode, out.stdout) == (0, "b2\n") and f"started in {b.resolve()}" in out.stderr
    elsewhere = tmp_path / "c"
    elsewhere.mkdir()
    out = ctxagent("resume", "--batch", "more", cwd=elsewhere)
    assert out.returncode == 2 and f"no session was started in {elsewhere.resolve()}" in out.stderr
    assert "'ctxagent resume --last' continues the newest of all (in-b" in out.stderr


def test_a_session_the_model_never_replied_in_is_not_the_latest(tmp_path):
    """A failed first try (the model never replied) became the latest session, and resume continued it."""
    _in(tmp_path, "good", tmp_path, [{"content": "g1"}, {"content": "g2"}])
    _in(tmp_path, "failed", tmp_path, [])  # script exhausted at once: exit 4, no reply
    out = ctxagent("resume", "--batch", "again", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "g2\n"), out.stderr
    assert "passed over 1 newer one(s) the model never replied in: failed" in out.stderr
    assert latest_session() == Session.at("good")
    delete = ctxagent("sessions", "delete", "good", "--yes")
    assert delete.returncode == 0
    assert latest_session() == Session.at("failed")  # the only one left: the latest after all


# -- export -----------------------------------------------------------------------------------------

def test_export_jsonl_is_the_transcript_records(tmp_path):
    two_answers(tmp_path, "ex")
    exported = ok("sessions", "export", "ex", "--format", "jsonl")
    assert exported == ctxagent("inspect", "transcript", "--session", "ex", "--json").stdout
    lines = (sessions_root() / "ex" / "transcript.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(x) for x in exported.splitlines()] == [json.loads(x) for x in lines]
    target = tmp_path / "out.jsonl"
    out = ctxagent("sessions", "export", "ex", "-o", str(target))
    assert out.returncode == 0 and out.stdout == "" and target.read_text(encoding="utf-8") == exported


def test_export_markdown_is_a_readable_transcript(tmp_path):
    two_answers(tmp_path, "md")
    text = ok("sessions", "export", "md", "--format", "markdown")
    assert text.startswith("# Session md\n")
    assert "## user · turn 1 · #1" in text and "\ncount\n" in text
    assert "call `shell` (big):\n\n```json\n{\n  \"command\": \"seq 1 400\"\n}\n```" in text
    assert "result of `shell` (big, @big (offloaded))" in text
    assert "first ``` answer" in text and "*run ended: answered at turn 2*" in text
    fences = [line for line in text.splitlines() if line.startswith("```")]
    assert len(fences) % 2 == 0  # every block closed: the answer's ``` cannot open one


def test_export_openai_is_the_next_request(tmp_path):
    two_answers(tmp_path, "oa")
    messages = json.loads(ok("sessions", "export", "oa", "--format", "openai"))
    context = json.loads(ctxagent("inspect", "context", "--session", "oa", "--json").stdout)
    assert [m["role"] for m in messages] == [m["message"]["role"] for m in context["messages"]]
    assert messages[0]["role"] == "system" and messages[-1] == {"role": "assistant", "content": "first ``` answer"}
    call_msg = next(m for m in messages if m.get("tool_calls"))
    assert call_msg["content"] == ""  # as the OpenAI wire carries a call without text
    assert call_msg["tool_calls"][0]["function"]["name"] == "shell"
    assert all(set(m) <= {"role", "content", "tool_calls", "tool_call_id", "name"} for m in messages), messages
    result = cli("sessions", "export", "oa", "--format", "xml")
    assert result.exit_code == 2


# -- the root command -------------------------------------------------------------------------------

def test_version_and_completion():
    assert ok("--version") == f"ctxagent {version('ctxagent')}\n"
    result = CliRunner().invoke(app, [], prog_name="ctxagent", env={
        "_CTXAGENT_COMPLETE": "complete_bash", "COMP_WORDS": "ctxagent sessions re", "COMP_CWORD": "2"})
    assert result.output.split() == ["rename"]
    result = CliRunner().invoke(app, [], prog_name="ctxagent", env={
        "_CTXAGENT_COMPLETE": "complete_bash", "COMP_WORDS": "ctxagent pro", "COMP_CWORD": "1"})
    assert result.output.split() == ["profiles"]
    assert "--install-completion" in ok("--help")


def test_new_commands_start_without_litellm():
    code = ("import sys\nfrom ctxagent.cli import invoke\n"  # main() would end the process after one command
            "for argv in (['--version'], ['sessions', '--help'], ['profiles', '--help'], ['sessions', 'list'],"
            " ['profiles', 'list']):\n"
            "    assert invoke(argv) == 0, argv\n"
            "    assert 'litellm' not in sys.modules, argv\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_the_usage_page_lists_the_new_commands():
    page = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    section = page.split("## Sessions and profiles commands", 1)[1].split("\n## ", 1)[0]
    for command in ("sessions show", "sessions export", "sessions rename", "sessions delete", "profiles list",
                    "profiles show", "profiles schema", "--version"):
        assert command in section, command


# -- sessions/session.py and sessions/outcome.py, on real records and folders (issue 17) ------------


def _refused(call, *args) -> str:
    """The message of the ``UsageError`` that ``call(*args)`` raises."""
    with pytest.raises(UsageError) as caught:
        call(*args)
    return str(caught.value)


def _header(name: str = "s", model: str = "m0", profile: str = "p0") -> records.SessionHeader:
    return records.SessionHeader(name=name, model=model, profile=profile, context_window=1000, ts=100.5)


def _msg(seq: int, role: str, content: str | None = "x", turn: int = 1, **extra: object) -> records.MessageRecord:
    return records.MessageRecord(seq=seq, turn=turn, tokens=1, message={"role": role, "content": content, **extra})


def _usage(prompt: int, completion: int, cost: float | None = None) -> records.UsageRecord:
    return records.UsageRecord(turn=1, model="m", prompt_tokens=prompt, completion_tokens=completion,
                               estimated_prompt_tokens=prompt, cost_usd=cost)


def _end(reason: str) -> records.EndRecord:
    return records.EndRecord(reason=reason, turn=1)


def test_a_final_answer_is_the_last_message_from_the_assistant_without_tool_calls():
    calls = [{"id": "c", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]
    assert is_answer({"role": "assistant", "content": "a"}) and is_answer({"role": "assistant", "tool_calls": []})
    assert not is_answer({"role": "user", "content": "a"}) and not is_answer({"role": "tool", "content": "a"})
    assert not is_answer({"role": "assistant", "content": "a", "tool_calls": calls})
    assert final_answer([]) is None and final_answer([_header(), _end("answered")]) is None
    assert final_answer([_msg(0, "user"), _msg(1, "assistant", "the answer"), _end("interrupted")]) == "the answer"
    assert final_answer([_msg(0, "assistant", None)]) == ""  # no content: an empty answer
    assert final_answer([_msg(0, "assistant", "old"), _msg(1, "user", "more?")]) is None
    assert final_answer([_msg(0, "assistant", "calls", tool_calls=calls)]) is None


def test_the_status_is_the_answer_else_the_end_after_the_last_message_else_interrupted_or_new():
    assert status_of([]) == "new" and status_of([_header()]) == "new"
    assert status_of([_msg(0, "user")]) == "interrupted"
    assert status_of([_header(), _msg(0, "user")]) == "interrupted"
    assert status_of([_end("max_turns")]) == "max_turns"
    assert status_of([_msg(0, "user"), _end("max_turns")]) == "max_turns"
    assert status_of([_end("provider_error"), _msg(0, "user")]) == "interrupted"  # an older run's end
    assert status_of([_msg(0, "user"), _msg(1, "assistant", "done"), _end("interrupted")]) == "answered"
    assert status_of([_msg(0, "assistant", "done"), _end("max_cost")]) == "answered"


def test_list_facts_fold_the_header_the_settings_changes_the_usage_and_the_status():
    def facts(name: str, items: list) -> dict:
        session = Session.at(name)
        if items:
            session.root.mkdir(parents=True)
            session.transcript.append(items)
        return dict(list_facts(session))

    assert facts("none", []) == {"created": None, "model": None, "profile": None, "turns": 0, "messages": 0,
                                 "tokens": 0, "cost_usd": None, "status": "new", "last_used": None}
    plain = [_header(), _msg(0, "user", turn=1), _usage(10, 5), _msg(1, "assistant", "a", turn=2)]
    assert facts("plain", plain) == {"created": 100.5, "model": "m0", "profile": "p0", "turns": 2, "messages": 2,
                                     "tokens": 15, "cost_usd": None, "status": "answered", "last_used": plain[-1].ts}
    changed = [_header(), records.SettingsRecord(model="m1"), records.SettingsRecord(profile="p2"),
               records.SettingsRecord(model="m3"), records.SettingsRecord(context_window=5),
               _msg(0, "user", turn=4), _usage(10, 5, 0.1), _usage(1, 1), _usage(2, 0, 0.0000004)]
    assert facts("changed", changed) == {"created": 100.5, "model": "m3", "profile": "p2", "turns": 4, "messages": 1,
                                         "tokens": 19, "cost_usd": 0.1, "status": "interrupted",
                                         "last_used": changed[-1].ts}


def test_recorded_task_and_answer_are_read_from_the_transcript(tmp_path):
    transcript = Transcript(tmp_path / "t.jsonl")
    assert recorded_task(transcript) is None and recorded_answer(transcript) is None
    transcript.append([_header(), _msg(0, "system", "rules"), _end("interrupted")])
    assert recorded_task(transcript) is None and recorded_answer(transcript) is None
    transcript.append([_msg(1, "user", None), _msg(2, "user", "second"), _msg(3, "assistant", "done")])
    assert recorded_task(transcript) == "" and recorded_answer(transcript) == "done"
    other = Transcript(tmp_path / "u.jsonl")
    other.append([_header(), _msg(0, "user", "the task"),
                  _msg(1, "assistant", "calls", tool_calls=[tool_call("c", "shell", "{}")])])
    assert recorded_task(other) == "the task" and recorded_answer(other) is None


def _session(name: str, *recs: records.BaseModel) -> Session:
    session = Session.at(name)
    with session.writer():
        session.transcript.append(list(recs))
    return session


def test_list_facts_read_the_header_the_tail_and_the_totals(tmp_path):
    session = _session("facts", _header("facts"), records.SettingsRecord(model="m1"), _msg(0, "user", turn=1),
                       _usage(10, 5, 0.25), _msg(1, "assistant", "a", turn=3), _usage(1, 2), _end("answered"))
    assert list_facts(session) == {"created": 100.5, "model": "m1", "profile": "p0", "turns": 3, "messages": 2,
                                   "tokens": 18, "cost_usd": 0.25, "status": "answered",
                                   "last_used": session.transcript.load()[-1].ts}
    empty = Session.at("empty")
    empty.root.mkdir(parents=True)
    (empty.root / "transcript.jsonl").write_bytes(b"")
    assert list_facts(empty) == {"created": None, "model": None, "profile": None, "turns": 0, "messages": 0,
                                 "tokens": 0, "cost_usd": None, "status": "new", "last_used": None}
    with session.writer():
        assert list_facts(session)["status"] == "running"
    plain = _session("plain", _header("plain"), *(_msg(i, "user", turn=i) for i in range(3)))
    assert list_facts(plain) == {"created": 100.5, "model": "m0", "profile": "p0", "turns": 2, "messages": 3,
                                 "tokens": 0, "cost_usd": None, "status": "interrupted",
                                 "last_used": plain.transcript.load()[-1].ts}


def test_the_answer_and_the_message_count_are_found_behind_a_long_run_of_other_records():
    """More than the first 64 KiB ``tail`` reads follows the last message: it reads on until it finds one."""
    session = _session("long", _header("long"), _msg(0, "user", "q"), _msg(1, "assistant", "the answer"),
                       *(records.NoteRecord(turn=1, source="test", text="n" * 1000) for _ in range(100)))
    assert (session.root / "transcript.jsonl").stat().st_size > 100_000
    assert recorded_answer(session.transcript) == "the answer"
    assert list_facts(session)["messages"] == 2 and list_facts(session)["status"] == "answered"


def test_totals_count_usage_and_settings_lines_once_and_cache_them_owner_only(tmp_path):
    path = tmp_path / "transcript.jsonl"
    lines = [records.dumps(r).encode() + b"\n" for r in (
        _header(), _usage(10, 5, 0.1), records.SettingsRecord(profile="p1"), _msg(0, "user"), _usage(3, 4, 0.2))]
    path.write_bytes(b"".join(lines) + b'{"kind":"usage","tu')  # a torn last line: not counted yet
    found = totals(path)
    assert found == Totals(offset=sum(map(len, lines)), tokens=22, cost_usd=0.3, model=None, profile="p1")
    cache = tmp_path / ".list-cache.json"
    assert json.loads(cache.read_text()) == dataclasses.asdict(found) and cache.stat().st_mode & 0o777 == 0o600
    assert not list(tmp_path.glob(".list-cache.json.*"))  # the temporary file was renamed
    cache.write_text(json.dumps({**dataclasses.asdict(found), "tokens": 1000}))  # only new bytes are read
    assert totals(path).tokens == 1000
    more = records.dumps(records.SettingsRecord(model="m2")).encode() + b"\n\x00\x00" + records.dumps(
        _usage(1, 1)).encode() + b"\r\n"
    path.write_bytes(b"".join(lines) + more)  # the torn line replaced by whole ones (one NUL-padded)
    assert totals(path) == Totals(offset=sum(map(len, lines)) + len(more), tokens=1002, cost_usd=0.3, model="m2",
                                  profile="p1")
    path.write_bytes(lines[0] + lines[1][:-1] + b" \n")  # rewritten: the cached offset is no line end now
    assert totals(path) == Totals(offset=len(lines[0]) + len(lines[1]) + 1, tokens=15, cost_usd=0.1)


def test_totals_start_over_without_a_usable_cache_and_are_empty_without_a_transcript(tmp_path):
    path = tmp_path / "transcript.jsonl"
    assert totals(path) == Totals() and not (tmp_path / ".list-cache.json").exists()
    line = records.dumps(_usage(10, 5, 0.1)).encode() + b"\n"
    path.write_bytes(line)
    cache = tmp_path / ".list-cache.json"
    for stale in (f'{{"offset": {len(line)}, "tokens": 99}}', "not json", '{"offset": 0, "tokens": 1, '
                  '"cost_usd": null, "bogus": 1}'):  # from before cost_usd, unreadable, of another shape: count again
        cache.write_text(stale)
        assert totals(path) == Totals(offset=len(line), tokens=15, cost_usd=0.1)
    cache.write_text(json.dumps({"offset": len(line), "tokens": 15, "cost_usd": 0.1, "model": None,
                                 "profile": None}))
    before = cache.stat().st_mtime_ns
    assert totals(path).tokens == 15 and cache.stat().st_mtime_ns == before  # nothing new: not rewritten
    kind_late = (b'{"ts":1.0,"detail":"' + b"x" * 200 + b'","kind":"usage","turn":1,"model":"m","prompt_tokens":7,'
                 b'"completion_tokens":0,"estimated_prompt_tokens":7}\n')
    bad = b'{"kind":"usage","turn":"not a number"}\n'
    tiny = records.dumps(_usage(1, 0, 0.0000004)).encode() + b"\n"
    path.write_bytes(line + kind_late + bad + tiny)
    assert totals(path) == Totals(offset=len(line + kind_late + bad + tiny), tokens=16,
                                  cost_usd=0.1)  # neither of the two counted, the line after them is; 6 decimals


def test_a_session_name_is_checked_and_a_bad_one_is_refused_with_the_rules():
    assert check_name("a.b_c-9") == "a.b_c-9" and check_name("x" * 128) == "x" * 128
    for bad in ("", ".hidden", "a/b", "a..b", "x" * 129, "-a", "abc\n"):  # "$" matched before a final newline
        assert _refused(check_name, bad) == (f"invalid session name {bad!r}: use letters, digits, '.', '_' or '-' "
                                             "(no '/', no '..', at most 128 characters)")
    day = time.strftime("%Y%m%d")
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", new_name()) and new_name()[:8] in {day, time.strftime("%Y%m%d")}
    assert len({new_name() for _ in range(20)}) > 1  # random digits


def test_sub_agent_sessions_live_under_agents_and_link_their_ancestors_outputs():
    parent = _session("p", _header("p"))
    child = parent.child("c")
    assert (child.name, child.root) == ("p/c", parent.root / "agents" / "c")
    assert Session.at("p/c") == child and Session.at("p") == parent
    assert "invalid session name '../x'" in _refused(parent.child, "../x")
    for bad in ("nobody/c", "p//c", "p/"):  # a/b needs an existing a; an empty part: the whole name is refused
        assert _refused(Session.at, bad).startswith(f"invalid session name {bad!r}:")
    assert _refused(Session.at, "p/../x").startswith("invalid session name '..':")
    assert parent.children() == [] and parent.linked_outputs() == []
    with child.writer():
        child.transcript.append([_header("p/c")])
    grandchild = Session.at("p/c/g")
    assert grandchild.root == parent.root / "agents" / "c" / "agents" / "g"
    with grandchild.writer():
        grandchild.transcript.append([_header("g")])
    (parent.root / "agents" / "a-no-transcript").mkdir()
    _session("p/b", _header("b"))
    assert parent.children() == [Session.at("p/b"), child]
    for s in (parent, child, grandchild, Session.at("p/b")):
        (s.root / "outputs").mkdir(exist_ok=True)
    assert grandchild.linked_outputs() == [child.root / "outputs", parent.root / "outputs"]
    assert parent.linked_outputs() == sorted([child.root / "outputs", grandchild.root / "outputs",
                                              parent.root / "agents" / "b" / "outputs"])


def test_require_refuses_a_missing_or_emptied_session_but_not_a_one_byte_one():
    missing = Session.at("gone")
    assert _refused(missing.require) == f"no session named 'gone' under {sessions_root()}"
    missing.root.mkdir(parents=True)
    path = missing.root / "transcript.jsonl"
    path.write_bytes(b"")
    assert _refused(missing.require) == (f"{path} is empty: the session's settings and history are gone, so it is not "
                                         "continued as a new session; 'ctxagent run --session gone TASK' starts over")
    path.write_bytes(b"\n")
    assert missing.require() is missing


def test_the_header_is_line_one_when_it_is_a_session_header():
    assert Session.at("h").header() is None
    session = _session("h", _header("h"), _end("answered"))
    assert session.header() == _header("h")
    assert _session("e", _end("answered")).header() is None


def test_running_is_whether_another_holder_has_the_writer_lock():
    session = _session("lock", _header("lock"))
    assert (session.root / ".lock").exists() and session.running() is False
    fresh = Session.at("fresh")
    fresh.root.mkdir(parents=True)
    assert fresh.running() is False and not (fresh.root / ".lock").exists()  # no lock file: none made
    with session.writer():
        assert session.running() is True
    assert session.running() is False
    (fresh.root / ".lock").mkdir()  # a lock that cannot be opened: no run holds it
    assert fresh.running() is False


def test_the_latest_session_is_the_newest_and_none_is_a_usage_error():
    assert _refused(latest_session) == f"no sessions yet under {sessions_root()}; start one with 'ctxagent run'"
    old = _session("old", _header("old"))
    os.utime(old.root / "transcript.jsonl", (1, 1))
    _session("new", _header("new"))
    assert latest_session() == Session.at("new") and [s.name for s in list_sessions()] == ["new", "old"]


def on_read_only(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ctxagent ARGS`` in a subprocess that sees ``folder`` read-only: owner write bits off for
    another user, a read-only bind mount in a mount namespace of its own for root (whom file modes
    do not stop); skipped where neither can be had."""
    command = [sys.executable, "-m", "ctxagent", *args]
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")]}
        try:
            for p in modes:
                p.chmod(modes[p] & ~0o222)
            return subprocess.run(command, capture_output=True, text=True, timeout=60)
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
    script_ = 'mount --bind -o ro "$1" "$1" && shift && exec "$@"'
    out = subprocess.run(["unshare", "-m", "sh", "-c", script_, "sh", str(folder), *command],
                         capture_output=True, text=True, timeout=60)
    if "mount" in out.stderr.split(":", 1)[0] or "unshare" in out.stderr.split(":", 1)[0]:
        pytest.skip(f"no read-only mount here: {out.stderr.strip()}")
    return out


def test_sessions_list_works_on_a_read_only_data_dir(tmp_path):
    """It exited 1 with "Read-only file system": it wrote its totals cache beside each transcript."""
    model = script(tmp_path / "s.yaml", ["an answer"])
    assert ctxagent("run", "--batch", "--session", "ro", "--model", model, "go").returncode == 0
    data = Path(os.environ["CTXAGENT_DATA_DIR"])
    assert not list((data / "sessions" / "ro").glob(".list-cache*"))  # so the list must write one
    out = on_read_only(data, "sessions", "list", "--json")
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["name"] for line in out.stdout.splitlines()] == ["ro"]
    assert not list((data / "sessions" / "ro").glob(".list-cache*"))


def test_a_snapshot_pickle_planted_in_the_data_dir_runs_no_code_on_inspect_or_resume(tmp_path):
    """Issue 36: a model granted ``write_file`` in a workdir holding the data dir planted
    ``<data dir>/cache/states/<key>.pickle`` (an older ctxagent's folded-state snapshot), and the
    next open of the session unpickled it: its code ran. A session now opens by folding its
    transcript, and nothing is unpickled."""
    import hashlib
    import pickle

    model = script(tmp_path / "m.yaml", ["first", "second"])
    assert cli("run", "--batch", "--session", "s", "--model", model, "go").exit_code == 0
    transcript = Session.at("s").transcript.path
    marker = tmp_path / "code-ran"

    class Payload:
        def __reduce__(self) -> tuple:
            return (Path.touch, (marker,))

    planted = pickle.dumps(Payload())
    key = hashlib.sha256(os.path.realpath(transcript).encode()).hexdigest()[:32]  # where snapshots were kept
    states = Path(os.environ["CTXAGENT_DATA_DIR"]) / "cache" / "states"
    states.mkdir(parents=True)
    (states / f"{key}.pickle").write_bytes(planted)
    assert cli("inspect", "context", "--session", "s").exit_code == 0
    assert cli("resume", "--batch", "--session", "s", "--model", model, "more").exit_code == 0
    assert not marker.exists()
    pickle.loads(planted)  # the payload does run code when unpickled
    assert marker.exists()
