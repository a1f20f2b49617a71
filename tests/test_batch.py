"""``ctxagent batch``: many sessions from a JSONL file, each its own process, idempotent re-runs,
one bad task never stopping the others, Ctrl-C leaving every session resumable."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clihelp import call, ctxagent, script
from ctxagent.batch.tasks import command_for, read_tasks
from ctxagent.sessions import records
from ctxagent.sessions.session import Session


def batch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ctxagent batch ARGS`` in ``tmp_path``: the command in this process (tests/clihelp.py), each task in
    its own ``ctxagent`` subprocess, as always."""
    return ctxagent("batch", *args, cwd=tmp_path)


def results(out: str) -> dict[str, dict]:
    return {(r := json.loads(line))["session"]: r for line in out.splitlines()}


def write_tasks(path: Path, lines: list) -> Path:
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def answered_as_a_batch_would(tmp_path: Path, tasks: Path, **options: str) -> None:
    """The sessions a first ``ctxagent batch TASKS`` (with ``options``, e.g. ``allow="shell"``) leaves
    when every task answers: each task's own command line and environment, as the batch starts its
    process (batch/tasks.py command_for), run in this process. For tests whose point is what a later
    batch does with those sessions (a task process costs ~1 s of CPU)."""
    for task in read_tasks(tasks, options):
        command = command_for(task, started=False)
        assert command[:3] == [sys.executable, "-m", "ctxagent"]
        out = ctxagent(*command[3:], cwd=tmp_path, env={"CTXAGENT_HEARTBEAT_S": "86400"})  # the pool's env
        assert out.returncode == 0 and json.loads(out.stdout.splitlines()[-1])["status"] == "answered", out.stderr


def test_a_batch_runs_every_task_reports_each_and_a_bad_one_stops_no_other(tmp_path):
    ok = script(tmp_path / "ok.yaml", [{"tool_calls": [call("s", "shell", command="echo hi")]}, "done"])
    long = script(tmp_path / "long.yaml", [{"tool_calls": [call("a", "shell", command="echo 1")]},
                                          {"tool_calls": [call("b", "shell", command="echo 2")]}, "late"])
    tasks = write_tasks(tmp_path / "jobs.jsonl", [
        {"task": "one", "model": ok},
        {"task": "two", "model": ok, "session": "second"},
        {"task": "three", "model": long, "max_turns": 1},
        {"task": "four", "model": ok, "profile": "no-such-profile"},
        '{"tsk": "a typo", "session": "typo"}',
        "",
        "not json at all",
    ])
    out = batch(tmp_path, str(tasks), "--workers", "3", "--allow", "shell")
    assert out.returncode == 1, out.stderr  # a failed task (bad profile, bad lines)
    got = results(out.stdout)
    assert set(got) == {"jobs-1", "second", "jobs-3", "jobs-4", "typo", "jobs-7"}
    assert got["jobs-1"]["status"] == got["second"]["status"] == "answered"
    assert got["jobs-1"]["answer"] == "done" and got["jobs-1"]["usage"]["calls"] == 2
    assert got["jobs-3"]["status"] == "max_turns" and got["jobs-3"]["exit_code"] == 3
    assert got["jobs-4"]["status"] == "profile_error" and "no-such-profile" in got["jobs-4"]["error"]
    assert got["typo"]["status"] == "usage_error" and "jobs.jsonl:5: task: Field required" in got["typo"]["error"]
    assert got["jobs-7"]["exit_code"] == 2 and "jobs.jsonl:7" in got["jobs-7"]["error"]
    assert "6/6 done (2 answered, 0 skipped, 1 stopped by a limit, 3 failed)" in out.stderr

    # the same command again: answered sessions skipped, the stopped one resumed
    again = batch(tmp_path, str(tasks), "--workers", "3", "--allow", "shell")
    got = results(again.stdout)
    assert got["jobs-1"]["skipped"] and got["jobs-1"]["answer"] == "done"
    assert got["jobs-3"]["resumed"] and got["jobs-3"]["status"] == "max_turns"  # its own max_turns: 1 a run
    third = results(batch(tmp_path, str(tasks), "--allow", "shell").stdout)
    assert third["jobs-3"]["status"] == "answered" and third["jobs-3"]["answer"] == "late"
    assert len([r for r in Session.at("jobs-1").transcript.records() if isinstance(r, records.EndRecord)]) == 1


def test_exit_3_when_every_task_that_did_not_answer_was_stopped_by_a_limit(tmp_path):
    ok = script(tmp_path / "ok.yaml", ["done"])
    long = script(tmp_path / "long.yaml", [{"tool_calls": [call("a", "shell", command="echo 1")]}, "late"])
    tasks = write_tasks(tmp_path / "t.jsonl", [{"task": "a", "model": ok},
                                               {"task": "b", "model": long, "allow": ["shell", "read_file"]}])
    out = batch(tmp_path, str(tasks), "--max-turns", "1")
    assert out.returncode == 3, out.stderr
    out = batch(tmp_path, str(tasks), "--no-lessons")
    assert out.returncode == 0 and results(out.stdout)["t-2"]["status"] == "answered"


def test_two_tasks_naming_one_session_are_refused_before_anything_runs(tmp_path):
    tasks = write_tasks(tmp_path / "t.jsonl", [{"task": "a", "session": "x"}, {"task": "b", "session": "x"}])
    out = batch(tmp_path, str(tasks))
    assert out.returncode == 2 and "t.jsonl:2: session 'x' is also line 1's" in out.stderr
    assert not Session.at("x").exists()


def test_ctrl_c_stops_the_running_tasks_and_the_same_command_finishes_them(tmp_path):
    slow = script(tmp_path / "slow.yaml", [{"tool_calls": [call("s", "shell", command="sleep 30")]}, "woke"])
    tasks = write_tasks(tmp_path / "t.jsonl", [{"task": f"t{i}", "model": slow} for i in range(4)])
    proc = subprocess.Popen([sys.executable, "-m", "ctxagent", "batch", str(tasks), "--workers", "2", "--allow",
                             "shell"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30  # until both shell calls are sleeping (their calls are recorded first)
    while time.monotonic() < deadline and not all(calling(f"t-{i}") for i in (1, 2)):
        time.sleep(0.1)
    time.sleep(0.5)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.monotonic() - started < 15
    got = results(out)
    assert {got[f"t-{i}"]["status"] for i in (1, 2)} == {"interrupted"}
    assert not Session.at("t-3").exists() and not Session.at("t-4").exists()  # nothing new started
    for i in (1, 2):
        assert list(Session.at(f"t-{i}").transcript.records())[-1].reason == "interrupted"

    script(tmp_path / "slow.yaml", [{"tool_calls": [call("s", "shell", command="true")]}, "woke"])  # new tasks: fast
    out = batch(tmp_path, str(tasks), "--workers", "2", "--allow", "shell")
    assert out.returncode == 0, out.stderr
    assert {r["status"] for r in results(out.stdout).values()} == {"answered"}


def calling(name: str) -> bool:
    """Whether session ``name`` has recorded a reply with tool calls (its tools run after that)."""
    return any(isinstance(r, records.MessageRecord) and r.message.get("tool_calls")
               for r in Session.at(name).transcript.records())


def interrupted_before_its_task(name: str, model: str, workdir: Path) -> None:
    """Leave session ``name`` as a run leaves it when Ctrl-C or SIGTERM arrives after its header
    was written but before its task was: the header and an ``interrupted`` end record. The run's
    own code writes them (a signal while it shows a notice, before it records the task)."""
    from ctxagent.agent.config import RunConfig
    from ctxagent.agent.setup import open_runner

    session = Session.at(name)
    with session.writer():
        runner = open_runner(session, RunConfig(profile_spec=None, model_spec=model, api_base=None, path="batch",
                             workdir=workdir, lessons=False))
        runner.notices = [("test", "the signal arrives while this is shown")]
        run = runner.run("the task")
        next(run)
        with pytest.raises(KeyboardInterrupt):
            run.throw(KeyboardInterrupt())


def test_a_task_interrupted_before_its_session_recorded_it_runs_on_the_re_run_not_nothing_left_to_do(tmp_path):
    """Regression (test_ctrl_c_stops_the_running_tasks_and_the_same_command_finishes_them, flaky):
    a signal between a session's header and its task left an ``interrupted`` end record, so the
    re-run resumed the session, which has no task: "nothing left to do", and the task never ran.
    Also when the system message was recorded before the signal."""
    model = script(tmp_path / "s.yaml", ["the answer"])
    interrupted_before_its_task("t-1", model, tmp_path)
    interrupted_before_its_task("t-2", model, tmp_path)
    transcript = Session.at("t-2").transcript
    lines = transcript.path.read_bytes().splitlines(keepends=True)
    system = {"role": "system", "content": "You are terse."}
    line = records.dumps(records.MessageRecord(seq=0, turn=0, message=system, tokens=5)).encode() + b"\n"
    transcript.path.write_bytes(lines[0] + line + b"".join(lines[1:]))  # header, system message, the rest
    for name, messages in (("t-1", 0), ("t-2", 1)):  # no task; the last record an interrupted end
        left = list(Session.at(name).transcript.records())
        assert isinstance(left[0], records.SessionHeader) and left[-1].reason == "interrupted"
        assert sum(isinstance(r, records.MessageRecord) for r in left) == messages

    tasks = write_tasks(tmp_path / "t.jsonl", [{"task": "first task", "model": model},
                                               {"task": "second task", "model": model}])
    out = batch(tmp_path, str(tasks))
    assert out.returncode == 0, out.stdout + out.stderr
    got = results(out.stdout)
    for name, task in (("t-1", "first task"), ("t-2", "second task")):
        assert got[name]["status"] == "answered" and got[name]["answer"] == "the answer", got[name]
        assert not got[name]["skipped"] and not got[name]["resumed"] and got[name]["usage"]["calls"] == 1
        messages = [r.message for r in Session.at(name).transcript.records() if isinstance(r, records.MessageRecord)]
        assert [(m["role"], m["content"]) for m in messages[1:]] == [("user", task), ("assistant", "the answer")]
        assert messages[0]["role"] == "system"


def test_a_session_killed_after_its_answer_before_its_end_record_is_reported_answered_not_run(tmp_path):
    """Regression: a task whose run was killed (kill -9) after recording its answer but before its
    end record, or stopped by a signal there (an ``interrupted`` end after the answer), was resumed
    by the re-run, and ``resume`` refused it ("nothing left to do"): a usage error, not the answer."""
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("a", "shell", command="echo a")]}, "the answer"])
    tasks = write_tasks(tmp_path / "t.jsonl", [{"task": "killed", "model": model},
                                               {"task": "stopped", "model": model}])
    answered_as_a_batch_would(tmp_path, tasks, allow="shell")
    for name in ("t-1", "t-2"):
        path = Session.at(name).transcript.path
        lines = path.read_bytes().splitlines(keepends=True)
        answer = max(i for i, line in enumerate(lines) if b'"role":"assistant"' in line)
        assert b'"tool_calls"' not in lines[answer] and b'"kind":"end"' in b"".join(lines[answer:])
        path.write_bytes(b"".join(lines[:answer + 1]))  # what kill -9 leaves right after the answer
    Session.at("t-2").transcript.append([records.EndRecord(reason="interrupted", turn=2, detail="a signal")])
    before = {name: Session.at(name).transcript.path.read_bytes() for name in ("t-1", "t-2")}

    out = batch(tmp_path, str(tasks), "--allow", "shell")
    assert out.returncode == 0, out.stdout + out.stderr
    got = results(out.stdout)
    for name in ("t-1", "t-2"):
        assert got[name]["status"] == "answered" and got[name]["answer"] == "the answer", got[name]
        assert got[name]["skipped"] and got[name]["exit_code"] == 0
        assert Session.at(name).transcript.path.read_bytes() == before[name]  # no model call, nothing run


def test_a_line_that_now_holds_another_task_is_refused_not_given_the_old_answer(tmp_path):
    """Regressions (trial): a line inserted above others shifted every default session name, and the
    re-run reported the old answers for the new tasks; a task starting with '-' was read as an
    option; a NUL in a task crashed the whole batch."""
    ok = script(tmp_path / "ok.yaml", ["answer"])
    tasks = write_tasks(tmp_path / "t.jsonl", [{"task": "question A", "model": ok}])
    answered_as_a_batch_would(tmp_path, tasks)
    write_tasks(tasks, [{"task": "question NEW", "model": ok}, {"task": "question A", "model": ok},
                        {"task": "-v: what does this flag do?", "model": ok, "session": "dash"},
                        {"task": "nul\u0000here", "model": ok}])
    out = batch(tmp_path, str(tasks))
    got = results(out.stdout)
    assert got["t-1"]["status"] == "usage_error" and "holds another task ('question A')" in got["t-1"]["error"]
    assert got["t-2"]["status"] == "answered" and not got["t-2"]["skipped"]
    assert got["dash"]["status"] == "answered"
    assert got["t-4"]["status"] == "usage_error" and "t.jsonl:4: task" in got["t-4"]["error"]
    assert all("resumed" in r and "skipped" in r for r in got.values())


def test_sigterm_stops_the_tasks_of_a_batch_started_in_the_background_of_a_script(tmp_path):
    """Regression (trial): a shell starts background jobs with SIGINT ignored, and the tasks inherit
    that, so forwarding SIGINT stopped nothing; the tasks now get SIGTERM."""
    slow = script(tmp_path / "slow.yaml", [{"tool_calls": [call("s", "shell", command="sleep 30")]}, "woke"])
    tasks = write_tasks(tmp_path / "t.jsonl", [{"task": f"t{i}", "model": slow} for i in range(2)])
    proc = subprocess.Popen([sys.executable, "-m", "ctxagent", "batch", str(tasks), "--allow", "shell"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # as `cmd &`
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(Session.at(f"t-{i}").exists() for i in (1, 2)):
        time.sleep(0.1)
    time.sleep(1.5)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.monotonic() - started < 15
    assert {r["status"] for r in results(out).values()} == {"interrupted"}


@pytest.mark.parametrize("fork", ["1", "0"])
def test_each_task_runs_in_its_batchs_folder_and_environment_forked_or_not(tmp_path, fork):
    """Tasks are forked from a fork server (batch/forkserver.py) that outlives one batch in a process
    that runs several (a program embedding the app; this suite): it was started in another folder with
    another environment. Each task must still run where, and with what, its own batch runs.
    ``CTXAGENT_BATCH_FORK=0``: each task a new ``python -m ctxagent`` process, the same way."""
    for n in (1, 2):
        here = tmp_path / f"batch{n}"
        here.mkdir()
        probe = "pwd -P; echo v=$CTX_PROBE; readlink /proc/$PPID/fd/0"
        model = script(here / "m.yaml", [{"tool_calls": [call("s", "shell", command=probe)]}, "done"])
        tasks = write_tasks(here / f"t{n}.jsonl", [{"task": "where am I", "model": model}])
        out = ctxagent("batch", str(tasks), "--allow", "shell", cwd=here,
                       env={"CTX_PROBE": f"value-{n}", "CTXAGENT_BATCH_FORK": fork})
        assert out.returncode == 0, out.stderr
        assert results(out.stdout)[f"t{n}-1"]["answer"] == "done"
        result = next(r.message["content"] for r in Session.at(f"t{n}-1").transcript.records()
                      if isinstance(r, records.MessageRecord) and r.message["role"] == "tool")
        assert str(here.resolve()) in result and f"v=value-{n}" in result, result
        assert result.rstrip().endswith("/dev/null"), result  # the task's stdin, not the batch's


def test_the_fork_server_ignores_ctrl_c_from_its_start_and_holds_none_of_the_batchs_streams(tmp_path):
    """Found by a new user: a Ctrl-C at the terminal while the fork server was still importing (the
    standard library's server ignores SIGINT only after its imports) killed it, and the batch ended
    with exit 1 and no results instead of 130; and after a ``kill -9`` of the batch, a reader of its
    output waited until the last task ended, because the server held the batch's stdout. The server
    now ignores SIGINT and puts stdin, stdout and stderr on /dev/null before its imports
    (batch/preload.py, the first module it preloads)."""
    import os

    model = script(tmp_path / "m.yaml", ["done"])
    out = ctxagent("batch", str(write_tasks(tmp_path / "t.jsonl", [{"task": "hi", "model": model}])),
                   env={"CTXAGENT_BATCH_FORK": "1"})
    assert out.returncode == 0, out.stderr
    [pid] = _fork_servers()  # started by this batch, or by an earlier one in this process: it outlives them
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    assert ignored & (1 << (signal.SIGINT - 1)), status
    assert [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in (0, 1, 2)] == ["/dev/null"] * 3


def _fork_servers() -> list[int]:
    """The pids of this process's ``multiprocessing`` fork servers (children running its ``main``)."""
    import os

    found = []
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and b"multiprocessing.forkserver" in command:
            found.append(int(entry.name))
    return found
