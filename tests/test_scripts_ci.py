"""ctxagent in scripts and CI (issue 33): a task argument never waits on stdin, a reader that leaves
early is not a failure, refused calls say why, ``--quiet``, ``run --help``, ``config show``.

Real processes where the process is the point (an idle pipe, a ``while read`` loop, ``| head``):
bash and ``python -m ctxagent``; the rest through the CLI in this process (tests/clihelp.py)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import click
import yaml

from clihelp import call, ctxagent, records, result_of, script
from ctxagent.profile import load_profile

CTXAGENT = f"{shlex.quote(sys.executable)} -m ctxagent"


def users(session: str) -> list[str]:
    return [r["message"]["content"] for r in records(session) if r["kind"] == "message"
            and r["message"]["role"] == "user"]


def test_a_task_argument_never_blocks_on_an_idle_stdin(tmp_path):
    """A CI runner (or another program) starts the run with stdin an open pipe nobody writes to: the
    run waited for the pipe to close (killed by `timeout 15` with exit 124, nothing printed)."""
    model = script(tmp_path / "s.yaml", [{"content": "done without stdin"}])
    with subprocess.Popen([sys.executable, "-m", "ctxagent", "run", "--batch", "--session", "idle", "--model",
                           model, "the task"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        try:
            code = proc.wait(timeout=60)  # the pipe stays open and silent the whole time
        finally:
            proc.kill()
        out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    assert (code, out) == (0, "done without stdin\n"), err
    assert users("idle") == ["the task"]  # nothing of stdin attached


def test_a_while_read_loop_over_a_file_runs_every_task(tmp_path):
    """`while read t; do ctxagent run --batch "$t"; done < tasks.txt`: the first run read the rest of
    the file as piped input, and only one of three tasks ran."""
    model = script(tmp_path / "s.yaml", [{"content": "ok"}])
    (tmp_path / "tasks.txt").write_text("task one\ntask two\ntask three\n", encoding="utf-8")
    loop = (f'n=0; while read t; do n=$((n+1)); {CTXAGENT} run --batch --session "t$n" --model {shlex.quote(model)} '
            '"$t" || echo "failed: $?"; done < tasks.txt')
    out = subprocess.run(["bash", "-c", loop], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.stdout == "ok\nok\nok\n", out.stderr
    assert [users(f"t{n}") for n in (1, 2, 3)] == [["task one"], ["task two"], ["task three"]]


def test_piped_data_is_still_attached_to_a_task_and_is_the_task_when_none_is_given(tmp_path):
    model = script(tmp_path / "s.yaml", [{"content": "ok"}])
    cases = {"pipe-task": f"printf 'alpha\\nbeta\\n' | {CTXAGENT} run --batch --session pipe-task --model {model} "
                          "summarize",
             "file-task": f"{CTXAGENT} run --batch --session file-task --model {model} summarize < data.txt",
             "pipe-only": f"echo 'the task from a pipe' | {CTXAGENT} run --batch --session pipe-only --model {model}"}
    (tmp_path / "data.txt").write_text("gamma\n", encoding="utf-8")
    for command in cases.values():
        out = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert (out.returncode, out.stdout) == (0, "ok\n"), out.stderr
    assert users("pipe-task") == ["summarize\n\n[stdin]\nalpha\nbeta"]
    assert users("file-task") == ["summarize\n\n[stdin]\ngamma"]
    assert users("pipe-only") == ["the task from a pipe"]
    idle = subprocess.run(["bash", "-c", f"(sleep 5) | {CTXAGENT} run --batch --model {model}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CTXAGENT_STDIN_WAIT_S": "0.2"})
    assert idle.returncode == 2 and "stdin had nothing within 0.2 s" in idle.stderr and "'-' waits" in idle.stderr


def test_an_answered_run_piped_into_head_exits_141_never_1(tmp_path):
    """`ctxagent run ... | head -1` exited 1, the code of real failures: typer's main turns EPIPE into 1."""
    answer = "\n".join(f"answer line {i}" for i in range(20_000))  # ~300 KB: more than a pipe holds
    model = script(tmp_path / "s.yaml", [{"content": answer}])
    line = f"{CTXAGENT} run --batch --session h --model {model} task | head -1; echo \"rc=${{PIPESTATUS[0]}}\""
    out = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.stdout == "answer line 0\nrc=141\n", out.stderr
    assert "Traceback" not in out.stderr and "error" not in out.stderr
    calls = [call(f"c{i}", "list_dir", path=".") for i in range(800)]  # a transcript rich shows in ~150 KB
    out = ctxagent("run", "--batch", "--session", "many", "--model",
                   script(tmp_path / "m.yaml", [{"tool_calls": calls}, "done"]), "task", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for session, shown in (("h", "--json"), ("many", "")):  # JSON lines, and rich's table (rich exited 1 on EPIPE)
        listed = subprocess.run(["bash", "-c", f"{CTXAGENT} inspect transcript {shown} --session {session} | "
                                               "head -c 10; echo \" rc=${PIPESTATUS[0]}\""],
                                cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert listed.stdout.endswith(" rc=141\n"), (shown, listed.stderr)


def test_refused_and_failed_calls_say_why_and_json_lists_the_denials(tmp_path):
    """Progress said `error` without the reason, and `--json` had no list of refused calls: the README's
    `jq -r .answer` example exited 0 with both tool calls denied."""
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("c1", "shell", command="echo hi"), call("c2", "read_file", path="/etc/hostname"),
                        call("c3", "read_file", path="missing.txt")]},
        {"content": "could not"}])
    out = ctxagent("run", "--json", "--session", "den", "--model", model, "go", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    denials = result_of(out)["permission_denials"]
    assert [(d["tool_name"], d["tool_use_id"], d["tool_input"]) for d in denials] == [
        ("shell", "c1", {"command": "echo hi"}), ("read_file", "c2", {"path": "/etc/hostname"})]
    assert "batch runs never prompt; rerun with --allow shell" in denials[0]["reason"]
    assert "outside the working directory" in denials[1]["reason"]
    lines = [line for line in out.stderr.splitlines() if line.startswith("  tool ")]
    assert lines[0].startswith('  tool shell({"command": "echo hi"}) denied by profile permissions: shell is')
    assert " denied by profile permissions: read_file path '/etc/hostname'" in lines[1]
    assert lines[2].startswith('  tool read_file({"path": "missing.txt"}) error: no such file: missing.txt')
    results = {r["message"]["tool_call_id"]: r["message"]["content"] for r in records("den")
               if r["kind"] == "message" and r["message"]["role"] == "tool"}
    assert denials[0]["reason"] == results["c1"].removeprefix("ERROR: ")  # what the model read
    allowed = ctxagent("run", "--json", "--allow", "shell", "--session", "den2", "--model",
                       script(tmp_path / "t.yaml", [{"tool_calls": [call("c1", "shell", command="echo hi")]}, "ok"]),
                       "go", cwd=tmp_path)
    assert result_of(allowed)["permission_denials"] == []
    failed = ctxagent("run", "--json", "--session", "bad name!", "go")  # failed before the run: the same keys
    assert failed.returncode == 2 and result_of(failed)["permission_denials"] == []


def test_quiet_prints_only_the_answer_or_only_the_json(tmp_path):
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("c1", "shell", command="echo hi")]}, "the answer"])
    out = ctxagent("run", "--batch", "--quiet", "--session", "q1", "--model", model, "go", cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, "the answer\n", "")
    both = ctxagent("run", "--json", "-q", "--session", "q2", "--model", model, "go", cwd=tmp_path)
    assert both.stderr == "" and result_of(both)["answer"] == "the answer" and result_of(both)["permission_denials"]
    assert json.loads(both.stdout)["status"] == "answered"
    failed = ctxagent("run", "--batch", "--quiet", "--session", "q3", "--model", "scripted:/nonexistent.yaml", "go")
    assert failed.returncode == 2 and failed.stderr.startswith("ctxagent: error: cannot read script")  # still said


def test_progress_shows_the_prompt_tokens_and_the_reply_reserve_apart(tmp_path):
    """`5399/128000 tokens` for a 1,047-token prompt: the figure counted the reply's reserve unsaid."""
    model = script(tmp_path / "s.yaml", [{"content": "ok"}])
    out = ctxagent("run", "--output-format", "stream-json", "--session", "tok", "--model", model, "hi", cwd=tmp_path)
    events = [json.loads(line) for line in out.stdout.splitlines()]
    started = next(e for e in events if e["type"] == "turn.started")
    usage = next(e for e in events if e["type"] == "turn.completed")["usage"]
    profile = load_profile("default")
    reserve = profile.reply_tokens(128_000) + profile.margin_tokens  # a scripted model's window
    assert started["reserved_tokens"] == reserve and started["prompt_tokens"] == usage["prompt_tokens"]
    assert started["context_tokens"] == started["prompt_tokens"] + reserve
    assert (f"turn 1: asking the model ({usage['prompt_tokens']:,} prompt tokens + {reserve:,} reserved for the "
            f"reply, of a 128,000-token window; 2 messages)") in out.stderr


def _help_examples(text: str) -> list[list[str]]:
    """The ``ctxagent`` command lines of the examples in a command's help (after a pipe, before a redirect)."""
    found = []
    for line in text.splitlines():
        if "ctxagent run " in line and not line.startswith("Usage:"):
            command = line[line.index("ctxagent run "):].split(" > ")[0]
            found.append(shlex.split(command)[1:])
    return found


def test_run_help_shows_the_defaults_and_two_examples_that_parse():
    out = ctxagent("run", "--help")
    text = " ".join(out.stdout.split())
    profile = load_profile("default")
    for shown in (f"max_turns: {profile.max_turns} in the default profile", f"{profile.model} in the default profile",
                  f"timeout_s: {profile.timeout_s:g} in the default profile", "[default: (text)]",
                  "the newest session started in this directory", "[default: (the current directory"):
        assert shown in text, shown
    examples = _help_examples(out.stdout)
    assert len(examples) == 2 and examples[1][:3] == ["run", "--batch", "--quiet"]
    from ctxagent.cli import app

    root = click.Context(__import__("typer").main.get_command(app))
    for example in examples:  # every option of an example is one `run` has, with a value of the right type
        command = root.command.get_command(root, "run")
        command.make_context("run", example[1:], parent=root)


def test_config_show_prints_the_model_a_run_actually_uses(tmp_path):
    """`config show` printed `model - (default)`; a new run then used the profile's model."""
    out = ctxagent("config", "show", cwd=tmp_path)
    assert "model           openai/gpt-4o-mini  (profile default)" in out.stdout
    assert "profile         default\n" in out.stdout  # not "default  (default)"
    model = script(tmp_path / "s.yaml", [{"content": "from the profile's model"}])
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"extends": "default", "model": model,
                                                     "context_window": 20_000}), encoding="utf-8")
    env = {"CTXAGENT_PROFILE": str(tmp_path / "p.yaml")}
    shown = json.loads(ctxagent("config", "show", "--json", cwd=tmp_path, env=env).stdout)
    assert shown["model"] == {"value": model, "source": f"profile {tmp_path / 'p.yaml'}"}
    assert shown["context_window"]["value"] == 20_000
    ran = ctxagent("run", "--json", "--session", "cfg", "go", cwd=tmp_path, env=env)
    assert (result_of(ran)["model"], result_of(ran)["answer"]) == (shown["model"]["value"], "from the profile's model")

