"""Sessions per minute of ``ctxagent batch`` on this machine (issue 14, part 1: the process pool).
Run: ``python -m benchmarks.batch [--tasks N] [--litellm] [--json] [--backend temporal]`` (temporal:
the pool against Temporal workers, benchmarks/batch_temporal.py).

N scripted tasks (default 200), each a new session of two model calls and one shell command, run
with 1, 2 and 4 workers in fresh data folders, each task forked from the batch's fork server
(batch/forkserver.py) and, for comparison, each a new ``python -m ctxagent`` process
(``CTXAGENT_BATCH_FORK=0``); then the same command again (every session answered, so every task is
skipped: the cost of an idempotent re-run). ``--litellm``: the tasks call a local OpenAI-compatible
server through litellm (``ctxagent.testing.FakeOpenAI``) instead of a ``scripted:`` model, so each
new process imports litellm (~7 s of CPU here) where a forked one does not. Reported per worker count
and way of starting: wall time, sessions per minute, and the coordination cost: wall time x workers
/ tasks minus one task's own time (median), i.e. what the pool adds per task beyond running it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks import report

WORKERS = (1, 2, 4)


REPLIES: list[Any] = [{"tool_calls": [{"id": "s", "name": "shell", "arguments": {"command": "echo done"}}]},
                      {"content": "answered"}]
MODES = {"forked": "1", "new process": "0"}  # CTXAGENT_BATCH_FORK


def _tasks(folder: Path, n: int, api_base: str | None = None) -> Path:
    """The tasks file: ``scripted:`` tasks, or with ``api_base`` tasks of a litellm model served there
    (task ``i`` holds ``<i>``: the server's route to its own two replies)."""
    script = folder / "task.yaml"
    script.write_text(yaml.safe_dump(REPLIES))
    model = {"model": "openai/gpt-4o-mini", "api_base": api_base} if api_base else {"model": f"scripted:{script}"}
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps({"task": f"task <{i}>", **model}) + "\n" for i in range(n)))
    return path


def _batch(tasks: Path, workers: int, data: Path, fork: str = "1") -> tuple[float, list[dict[str, Any]]]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ctxagent", "batch", str(tasks), "--workers", str(workers),
                           "--allow", "shell"], capture_output=True, text=True, cwd=tasks.parent, timeout=3600,
                          env={**os.environ, "CTXAGENT_DATA_DIR": str(data), "CTXAGENT_BATCH_FORK": fork,
                               "OPENAI_API_KEY": "sk-local"}, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"ctxagent batch exited {proc.returncode}: {proc.stderr[-2000:]}")
    return wall, [json.loads(line) for line in proc.stdout.splitlines()]


def run(quick: bool = False, tasks: int = 200, litellm: bool = False) -> dict[str, Any]:
    """One row per worker count and way of starting tasks (``quick``: 24 tasks)."""
    from ctxagent.testing import FakeOpenAI

    n = 24 if quick else tasks
    rows = []
    with tempfile.TemporaryDirectory(prefix="ctxagent-bench-batch-") as tmp:
        folder = Path(tmp)
        for workers, (mode, fork) in itertools.product(WORKERS, MODES.items()):
            data = folder / f"data-{workers}-{fork}"
            with FakeOpenAI(routes={f"<{i}>": list(REPLIES) for i in range(n)}) as server:
                path = _tasks(folder, n, server.base_url if litellm else None)
                wall, results = _batch(path, workers, data, fork)
                again, skipped = _batch(path, workers, data, fork)
            per_task = statistics.median(r["wall_s"] for r in results)
            rows.append({"workers": workers, "start": mode, "tasks": n, "wall_s": round(wall, 2),
                         "sessions_per_minute": round(60 * n / wall, 1),
                         "task_process_s": round(per_task, 3),
                         "coordination_s_per_task": round(wall * workers / n - per_task, 3),
                         "answered": sum(r["status"] == "answered" for r in results),
                         "rerun_wall_s": round(again, 2), "rerun_skipped": sum(bool(r["skipped"]) for r in skipped)})
    return {"rows": rows, "cpus": os.cpu_count(), "litellm": litellm}


HEADER = ["workers", "task start", "tasks", "wall", "sessions/min", "one task's process (median)", "pool cost per task",
          "answered", "re-run (all skipped)"]


def tables(data: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The results as ``(title, header, rows of cells)``."""
    rows = [[str(r["workers"]), r["start"], str(r["tasks"]), f"{r['wall_s']:.1f} s", f"{r['sessions_per_minute']:.1f}",
             f"{r['task_process_s']:.2f} s", f"{r['coordination_s_per_task']:+.3f} s", str(r["answered"]),
             f"{r['rerun_wall_s']:.1f} s ({r['rerun_skipped']} skipped)"] for r in data["rows"]]
    kind = "litellm (local server)" if data.get("litellm") else "scripted"
    return [(f"Issue 14: ctxagent batch, {kind} 2-call tasks, {data['cpus']} CPUs", HEADER, rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batch", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--litellm", action="store_true", help="tasks call a local server through litellm")
    parser.add_argument("--backend", choices=("pool", "temporal"), default="pool",
                        help="temporal: the pool against Temporal workers, and a worker killed (batch_temporal.py)")
    parser.add_argument("--kill-only", action="store_true", help="with --backend temporal: only the kill run")
    args = parser.parse_args(argv)
    if args.backend == "temporal":
        from benchmarks import batch_temporal

        data = batch_temporal.run(tasks=args.tasks, kill_only=args.kill_only)
        render = batch_temporal.tables
    else:
        data, render = run(tasks=args.tasks, litellm=args.litellm), tables
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(report.titled(render(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
