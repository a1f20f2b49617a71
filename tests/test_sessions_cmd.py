"""``ctxagent sessions list|show|delete|rename|export``, ``--version``, completion and the demo, on the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from typer.testing import CliRunner

from clihelp import call, ctxagent, script
from ctxagent.cli import app
from ctxagent.errors import UsageError
from ctxagent.sessions.session import Session, sessions_root

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
    code = ("import sys, runpy\n"
            "for argv in (['--version'], ['sessions', '--help'], ['profiles', '--help'], ['sessions', 'list'],"
            " ['profiles', 'list']):\n"
            "    sys.argv = ['ctxagent', *argv]\n"
            "    try:\n        runpy.run_module('ctxagent', run_name='__main__')\n"
            "    except SystemExit:\n        pass\n"
            "    assert 'litellm' not in sys.modules, argv\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


# -- the demo ---------------------------------------------------------------------------------------

def test_the_demo_runs_twice_in_one_data_dir(tmp_path):
    """A second ``make demo`` with CTXAGENT_DATA_DIR set resumed the first session: "script exhausted"."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "CTXAGENT_DATA_DIR": str(tmp_path / "data")}
    for _ in range(2):
        out = subprocess.run(["bash", str(ROOT / "examples/prices/demo.sh")], capture_output=True, text=True,
                             env=env, timeout=120, stdin=subprocess.DEVNULL)
        assert out.returncode == 0, out.stderr
        assert "input_cost_per_token 2.5e-06" in out.stdout
    names = sorted(p.name for p in (tmp_path / "data" / "sessions").iterdir())
    assert len(names) == 2 and all(n.startswith("prices-demo-") for n in names), names


def test_the_readme_lists_the_new_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Sessions and profiles commands", 1)[1].split("\n### ", 1)[0]
    for command in ("sessions show", "sessions export", "sessions rename", "sessions delete", "profiles list",
                    "profiles show", "profiles schema", "--version"):
        assert command in section, command
