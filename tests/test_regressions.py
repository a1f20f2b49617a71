"""Regression tests, each named after a failure a first user found (see the closing notes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clihelp import call, ctxagent, records, run_cli, script, tool_messages


def data() -> Path:
    return Path(os.environ["CTXAGENT_DATA_DIR"])


def test_nul_byte_in_a_file_tool_path_is_a_tool_error_not_a_crash(tmp_path):
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("n1", "read_file", path="nul\u0000byte"), call("n2", "list_dir", path="a\u0000b")]},
        {"content": "survived"},
    ])
    out = ctxagent("run", "--batch", "--session", "nul", "--model", model, "x", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "survived\n"), out.stderr
    results = tool_messages("nul")
    assert results["n1"].startswith("ERROR") and results["n2"].startswith("ERROR")


def test_catastrophic_regex_in_grep_output_gives_up_instead_of_hanging(tmp_path, monkeypatch):
    """In process, with grep_output's time budget cut from 10 s to 1 s: the point is that the search gives
    up at its budget (a wall-clock deadline) instead of backtracking without end, not the budget's size;
    waiting out the real 10 s cost 10 s of CPU and, on a busy machine, failed the run's time check."""
    from ctxagent.tools import patterns

    monkeypatch.setattr(patterns, "SECONDS", 1.0)
    monkeypatch.chdir(tmp_path)
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("gen", "shell", command="python3 -c \"print(('x' * 5000 + chr(10)) * 200)\"")]},
        {"tool_calls": [call("g", "grep_output", handle="@gen", pattern="(x+x+)+y")]},
        {"content": "gave up"},
    ])
    started = time.monotonic()
    out = run_cli("run", "--batch", "--allow", "shell", "--session", "redos", "--model", model, "x")
    assert (out.exit_code, out.stdout) == (0, "gave up\n"), out.stderr
    assert time.monotonic() - started < 60  # a 1 s search, not a hang (the rest is the run, on a busy machine)
    message = tool_messages("redos")["g"]
    assert "too slow" in message and "gave up after 1 s" in message


def test_sigterm_kills_the_shell_process_group_and_leaves_the_session_resumable(tmp_path):
    marker = tmp_path / "still-running"
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("slow", "shell", command=f"sleep 4; touch {marker}")]},
        {"content": "after resume"},
    ])
    proc = subprocess.Popen([sys.executable, "-m", "ctxagent", "run", "--batch", "--allow", "shell", "--session",
                             "term", "--model", model, "go"], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    transcript = data() / "sessions" / "term" / "transcript.jsonl"
    deadline = time.monotonic() + 30
    while not (transcript.exists() and "slow" in transcript.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    time.sleep(4.5)
    assert not marker.exists(), "the shell command outlived ctxagent"
    out = ctxagent("resume", "--batch", "--session", "term", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "after resume\n"), out.stderr


def test_an_empty_reply_is_a_provider_error_not_an_answer(tmp_path):
    model = script(tmp_path / "s.yaml", [{}])
    out = ctxagent("run", "--json", "--session", "empty", "--model", model, "x")
    assert out.returncode == 4
    assert json.loads(out.stdout)["status"] == "provider_error"


def test_failed_setup_leaves_no_session_behind(tmp_path):
    good = script(tmp_path / "good.yaml", [{"content": "ok"}])
    assert ctxagent("run", "--batch", "--session", "good", "--model", good, "x").returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools: [no_such_tool]\n", encoding="utf-8")
    assert ctxagent("run", "--batch", "--session", "junk", "--profile", str(bad), "--model", good, "x").returncode == 2
    assert ctxagent("run", "--batch", "--session", "junk2", "--model", "scripted:/no/such.yaml", "x").returncode == 2
    listed = [json.loads(line)["name"] for line in ctxagent("sessions", "list", "--json").stdout.splitlines()]
    assert listed == ["good"]


def test_a_scripted_session_resumes_from_another_directory(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "s.yaml").write_text("- content: one\n- content: two\n", encoding="utf-8")
    assert ctxagent("run", "--batch", "--session", "rel", "--model", "scripted:s.yaml", "x",
                    cwd=tmp_path / "a").returncode == 0
    out = ctxagent("resume", "--batch", "--session", "rel", "again", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "two\n"), out.stderr


def test_json_status_uses_the_end_record_words_and_counts_turns_on_failure(tmp_path):
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("a", "list_dir", path=".")]}, {"content": "x"}])
    out = ctxagent("run", "--json", "--session", "lim", "--max-turns", "1", "--model", model, "x", cwd=tmp_path)
    result = json.loads(out.stdout)
    assert (out.returncode, result["status"], result["turns"]) == (3, "max_turns", 1)
    assert result["usage"]["prompt_tokens"] > 0
    ends = [r["reason"] for r in records("lim") if r["kind"] == "end"]
    assert ends == ["max_turns"]
    busy = ctxagent("inspect", "transcript", "--session", "ghost")
    assert busy.returncode == 2


@pytest.mark.parametrize("args", [["run", "--batch", ""], ["run", "--batch", "   "],
                                  ["run", "--batch", "--session", "", "x"],
                                  ["run", "--batch", "--workdir", "/no/such/dir", "x"]])
def test_blank_task_blank_session_and_missing_workdir_are_usage_errors(tmp_path, args):
    model = script(tmp_path / "s.yaml", [{"content": "never"}])
    out = ctxagent(*args, "--model", model)
    assert out.returncode == 2, out.stderr
    assert not (data() / "sessions").exists() or not any((data() / "sessions").glob("*/transcript.jsonl"))


def test_an_oversized_task_is_refused_before_it_is_written(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text("context_window: 2000\nmax_output_tokens: 200\n", encoding="utf-8")
    model = script(tmp_path / "s.yaml", [{"content": "a"}, {"content": "b"}])
    assert ctxagent("run", "--batch", "--session", "big", "--profile", str(profile), "--model", model,
                    "small task").returncode == 0
    out = ctxagent("resume", "--batch", "--session", "big", "-", stdin="word " * 5000)
    assert out.returncode == 5 and "protected part" in out.stderr
    out = ctxagent("resume", "--batch", "--session", "big", "a small follow-up")
    assert (out.returncode, out.stdout) == (0, "b\n"), out.stderr


def test_data_dir_that_is_a_file_gives_one_line_not_a_traceback(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x", encoding="utf-8")
    model = script(tmp_path / "s.yaml", [{"content": "never"}])
    out = ctxagent("run", "--batch", "--model", model, "x", env={"CTXAGENT_DATA_DIR": str(afile)})
    assert out.returncode == 1 and "Traceback" not in out.stderr and out.stderr.startswith("ctxagent: error:")


def test_a_deleted_profile_file_resumes_from_the_copy_in_the_header(tmp_path):
    profile = tmp_path / "mine.yaml"
    profile.write_text("max_turns: 5\ncontext_window: 50000\n", encoding="utf-8")
    model = script(tmp_path / "s.yaml", [{"content": "one"}, {"content": "two"}])
    assert ctxagent("run", "--batch", "--session", "gone", "--profile", str(profile), "--model", model,
                    "x").returncode == 0
    profile.unlink()
    out = ctxagent("resume", "--batch", "--session", "gone", "again")
    assert (out.returncode, out.stdout) == (0, "two\n"), out.stderr
    assert "copy kept in the session header" in out.stderr
    assert ctxagent("inspect", "context", "--session", "gone").returncode == 0


def test_sessions_list_showed_the_profile_a_session_started_with_after_resume_changed_it(tmp_path):
    first = tmp_path / "p1.yaml"
    first.write_text("context_window: 50000\n", encoding="utf-8")
    second = tmp_path / "p2.yaml"
    second.write_text("context_window: 40000\n", encoding="utf-8")
    model = script(tmp_path / "s.yaml", [{"content": "one"}, {"content": "two"}])
    started = ctxagent("run", "--batch", "--session", "chg", "--profile", str(first), "--model", model, "x")
    assert started.returncode == 0
    assert ctxagent("resume", "--batch", "--session", "chg", "--profile", str(second), "y").returncode == 0
    listed = [json.loads(line) for line in ctxagent("sessions", "list", "--json").stdout.splitlines()]
    assert [s["profile"] for s in listed if s["name"] == "chg"] == [str(second)]


def test_resume_json_of_an_unknown_session_printed_no_json():
    out = ctxagent("resume", "--session", "nosuch", "--json")
    assert out.returncode == 2
    assert json.loads(out.stdout)["status"] == "usage_error"


def test_json_usage_said_zero_dollars_when_the_price_was_unknown(tmp_path, fake_openai):
    server = fake_openai([{"content": "one"}])
    profile = tmp_path / "p.yaml"
    profile.write_text("context_window: 16000\n", encoding="utf-8")
    out = ctxagent("run", "--json", "--session", "cost", "--model", "openai/not-in-the-price-map", "--api-base",
                   server.base_url, "--profile", str(profile), "x", env={"OPENAI_API_KEY": "sk-local-test"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["usage"]["cost_usd"] is None


def test_a_later_truncation_note_named_the_turns_of_the_note_it_replaced(tmp_path):
    from ctxagent.messages import tool_call
    from ctxagent.strategies.base import Budget, Entry, StrategyContext
    from ctxagent.strategies.truncate import TruncateStep

    view = [Entry({"role": "system", "content": "s"}, 2, 0, 0, 0), Entry({"role": "user", "content": "t"}, 2, 1, 1, 1),
            Entry({"role": "user", "content": "[ctxagent] earlier note"}, 30, 2, 9, 5, kind="truncate")]
    for n in range(6, 12):
        seq = 10 + 2 * (n - 6)
        view.append(Entry({"role": "assistant", "content": None, "tool_calls": [tool_call(f"c{n}", "shell", "{}")]},
                          20, seq, seq, n))
        view.append(Entry({"role": "tool", "tool_call_id": f"c{n}", "content": "x" * 900}, 300, seq + 1, seq + 1, n))
    ctx = StrategyContext(budget=Budget(window=2_000, tools=10, reserved=10, target=0.3, trigger=0.8))
    note = next(e for e in TruncateStep().apply(view, ctx).view if e.kind == "truncate")
    assert note.message["content"].startswith("[ctxagent] ") and "#2-#" in note.message["content"]
    assert "turns 5-" not in note.message["content"]


def test_a_task_refused_before_the_first_request_left_no_end_record(tmp_path):
    """The task is not written (it could only brick the session), but the run's end is: status
    context_overflow, not 'new'."""
    profile = tmp_path / "tiny.yaml"
    profile.write_text("context_window: 3000\nmax_output_tokens: 2000\n", encoding="utf-8")
    model = script(tmp_path / "s.yaml", [{"content": "one"}])
    out = ctxagent("run", "--batch", "--session", "tiny", "--profile", str(profile), "--model", model, "x")
    assert out.returncode == 5, out.stderr
    kinds = [r["kind"] for r in records("tiny") if r["kind"] != "note"]  # a note: the tool schemas' share
    assert kinds == ["session", "end"]
    listed = [json.loads(line) for line in ctxagent("sessions", "list", "--json").stdout.splitlines()]
    assert [s["status"] for s in listed if s["name"] == "tiny"] == ["context_overflow"]
