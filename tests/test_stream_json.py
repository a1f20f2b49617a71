"""``--output-format stream-json`` (cli/stream.py) against its shipped JSON Schema, on real runs;
``--context-window``, ``--timeout`` and piped stdin (issue 16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clihelp import call, ctxagent, records, result_of, run_cli, script
from ctxagent.sessions.session import Session

jsonschema = pytest.importorskip("jsonschema")
SCHEMA = json.loads((Path(__file__).parents[1] / "src/ctxagent/cli/events.schema.json").read_text(encoding="utf-8"))
MODEL = "openai/gpt-4o-mini"


def events_of(stdout: str) -> list[dict]:
    """Every stdout line as an event, each checked against the schema."""
    validator = jsonschema.Draft202012Validator(SCHEMA)
    events = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    for event in events:
        errors = [e.message for e in validator.iter_errors(event)]
        assert not errors, (event, errors)
    return events


def profile(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "p.yaml"
    path.write_text("context_window: 50000\nmax_output_tokens: 200\nretries: 0\n"
                    "permissions: {kinds: {exec: allow}}\n" + extra, encoding="utf-8")
    return str(path)


def test_every_event_of_a_real_run_matches_the_schema(tmp_path, fake_openai):
    server = fake_openai([
        {"tool_calls": [{"id": "big", "name": "shell", "arguments": {"command": "seq 1 100000"}}]},
        {"tool_calls": [{"id": "g1", "name": "grep_output", "arguments": {"handle": "@big", "pattern": "^77777$"}}]},
        {"content": "found 77777"},
    ])
    out = run_cli("run", "--output-format", "stream-json", "--session", "st", "--model", MODEL, "--api-base",
                  server.base_url, "--profile", profile(tmp_path), "--max-input-tokens", "4500", "look")
    assert out.exit_code == 0, out.stdout
    events = events_of(out.stdout)
    types = [e["type"] for e in events]
    assert types[0] == "session.started" and types[-1] == "result" and types[-2] == "run.finished"
    assert events[-1]["answer"] == "found 77777" and events[-1]["is_error"] is False
    assert types.count("turn.started") == types.count("turn.completed") == 3
    results = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "tool_result"]
    assert results[0]["handle"] == "@big" and results[0]["chars"] < 10_000  # the preview, not 590 KB
    started = [e["item"]["id"] for e in events if e["type"] == "item.started"]
    assert started == ["big", "g1"]
    assert types.index("item.started") < types.index("item.completed", types.index("item.started"))
    assert any(e["type"] == "warning" and e["source"] == "budget" for e in events), events[-1]["usage"]


def test_a_budget_stop_and_a_usage_error_end_the_stream_with_error_and_result(tmp_path, fake_openai):
    server = fake_openai([{"tool_calls": [{"id": f"c{i}", "name": "shell", "arguments": {"command": f"seq {i}"}}]}
                          for i in range(1, 9)])
    out = run_cli("run", "--output-format", "stream-json", "--session", "stop", "--model", MODEL, "--api-base",
                  server.base_url, "--profile", profile(tmp_path), "--max-input-tokens", "3000", "go")
    events = events_of(out.stdout)
    assert out.exit_code == 3 and [e["type"] for e in events][-2:] == ["error", "result"]
    assert events[-2]["status"] == events[-1]["status"] == "budget"
    assert any(e["type"] == "compaction" and e["strategy"] == "checkpoint" for e in events)
    bad = ctxagent("run", "--output-format=stream-json", "--session", "bad/name", "x")  # main()'s error path
    events = events_of(bad.stdout)
    assert bad.returncode == 2 and [e["type"] for e in events] == ["error", "result"]
    assert events[-1]["status"] == "usage_error"


def test_output_format_json_is_json_and_conflicts_are_refused(tmp_path):
    model = script(tmp_path / "s.yaml", [{"content": "hi"}])
    out = run_cli("run", "--output-format", "json", "--session", "j", "--model", model, "x")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "hi")
    clash = ctxagent("run", "--json", "--output-format", "stream-json", "--model", model, "x")
    assert clash.returncode == 2 and "cannot go with" in clash.stderr
    other = ctxagent("run", "--output-format", "yaml", "--model", model, "x")
    assert other.returncode == 2 and "give text, json or stream-json" in other.stderr


def test_context_window_flag_lets_an_unmapped_model_run_and_is_kept(tmp_path, fake_openai):
    server = fake_openai([{"content": "one"}, {"content": "two"}])
    base = ["--model", "openai/my-local-model", "--api-base", server.base_url]
    refused = run_cli("run", "--json", "--session", "w0", *base, "x")
    assert refused.exit_code == 2 and "--context-window" in result_of(refused)["error"]
    out = run_cli("run", "--json", "--session", "w", *base, "--context-window", "16000", "x")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "one"), out.stdout
    assert next(Session.at("w").transcript.records()).context_window == 16000
    again = run_cli("resume", "--json", "--session", "w", "more")  # the recorded window: no flag needed
    assert (again.exit_code, result_of(again)["answer"]) == (0, "two"), again.stdout


def test_timeout_flag_bounds_one_model_request(tmp_path, fake_openai):
    server = fake_openai([{"content": "late", "delay_s": 3}])
    out = run_cli("run", "--json", "--session", "t", "--model", MODEL, "--api-base", server.base_url,
                  "--profile", profile(tmp_path), "--timeout", "0.5", "x")
    assert out.exit_code == 4 and "timed out" in result_of(out)["error"].lower(), out.stdout


def test_piped_stdin_is_attached_to_the_task_and_offloaded_when_large(tmp_path):
    model = script(tmp_path / "s.yaml", [{"content": "small ok"}])
    out = ctxagent("run", "--json", "--session", "p1", "--model", model, "summarize", stdin="alpha\nbeta\n",
                   process=True)  # a real pipe; the runs below read a redirected file (in this process)
    assert out.returncode == 0, out.stderr
    user = [r for r in records("p1") if r["kind"] == "message"][1]["message"]["content"]
    assert user == "summarize\n\n[stdin]\nalpha\nbeta"
    big = "\n".join(f"line {i} value {i * 3}" for i in range(15_000))  # 330 KB: over redactor.FAST_MIN_BYTES too
    model = script(tmp_path / "t.yaml", [{"tool_calls": [call("g", "grep_output", handle="@stdin",
                                                                pattern="^line 5432 ")]}, {"content": "done"}])
    out = ctxagent("run", "--json", "--session", "p2", "--model", model, "find line 5432", stdin=big)
    assert out.returncode == 0, out.stderr
    recs = records("p2")
    assert any(r["kind"] == "output" and r["handle"] == "@stdin" for r in recs)
    user = [r for r in recs if r["kind"] == "message"][1]["message"]["content"]
    assert len(user) < 10_000 and "@stdin" in user
    found = next(r for r in recs if r["kind"] == "message" and r["message"]["role"] == "tool")["message"]["content"]
    assert "value 16296" in found
    dash = ctxagent("run", "--json", "--session", "p3", "--model", model, "-", stdin="the task itself")
    assert dash.returncode == 0 and [r for r in records("p3") if r["kind"] == "message"][1]["message"][
        "content"] == "the task itself"


def test_a_litellm_run_ending_loses_no_output_and_keeps_its_exit_code(tmp_path, fake_openai):
    """After its last event the process ends with the interpreter's own teardown (it once skipped it
    with ``os._exit``): stdout must still hold every event, and a failing run its exit code. One
    process (an import of litellm costs ~4 s of CPU): a tool call answered, then a provider error."""
    server = fake_openai([{"tool_calls": [{"id": "e1", "name": "shell", "arguments": {"command": "echo fine"}}]},
                          {"error": {"status": 401, "message": "bad key"}}])
    out = ctxagent("run", "--output-format", "stream-json", "--session", "x1", "--model", MODEL, "--api-base",
                   server.base_url, "--profile", profile(tmp_path), "hi", env={"OPENAI_API_KEY": "sk-local"},
                   process=True)
    events = events_of(out.stdout)
    assert out.returncode == 4, out.stderr
    assert [e["type"] for e in events][-2:] == ["error", "result"] and events[-1]["status"] == "provider_error"
    results = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "tool_result"]
    assert [r["call_id"] for r in results] == ["e1"] and "fine" in results[0]["text"], events


def test_a_misspelled_model_gets_a_did_you_mean():
    out = ctxagent("run", "--json", "--model", "openai/gpt-4o-mnii", "x")
    assert out.returncode == 2
    assert "did you mean openai/gpt-4o-mini" in result_of(out)["error"]


def test_stream_json_on_the_interactive_path_reads_messages_from_the_terminal(tmp_path):
    """A terminal on stdin, events on stdout: each typed message is an event too, and every event
    matches the schema."""
    import os
    import pty
    import subprocess
    import sys

    model = script(tmp_path / "s.yaml", [{"content": "first"}, {"content": "second"}])
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "ctxagent", "run", "--output-format", "stream-json", "--session",
                             "si", "--model", model, "hello"], stdin=slave, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    os.close(slave)
    assert proc.stdout is not None
    lines = []
    while '"first"' not in "".join(lines):
        lines.append(proc.stdout.readline())
    os.write(master, b"and then?\n")
    while '"second"' not in "".join(lines):
        lines.append(proc.stdout.readline())
    os.write(master, b"\n")
    # the rest through the same buffer: readline() may have read the next events already, and communicate()
    # would read the pipe itself, past them (under load the events after "second" were lost that way)
    rest = proc.stdout.read()
    proc.stdout.close()
    proc.wait(timeout=60)
    os.close(master)
    events = events_of("".join(lines) + rest)
    assert proc.returncode == 0
    assert [e["item"]["text"] for e in events if e["type"] == "item.completed"
            and e["item"]["type"] == "user_message"] == ["and then?"]
    types = [e["type"] for e in events]  # the whole list in the message: a run once lacked one run.finished
    assert types.count("run.finished") == 2 and types[-1] == "result", types
    assert events[0]["path"] == "interactive"
