"""Sessions per minute of ``ctxagent batch`` on this machine (issue 14, part 1: the process pool).
Run: ``python -m benchmarks.batch [--tasks N] [--json] [--backend temporal]`` (temporal: the pool
against Temporal workers, benchmarks/batch_temporal.py).

N scripted tasks (default 200), each a new session of two model calls and one shell command, run
with 1, 2 and 4 workers in fresh data folders; then the same command again (every session answered,
so every task is skipped: the cost of an idempotent re-run). Reported per worker count: wall time,
sessions per minute, and the coordination cost: wall time x workers / tasks minus one task's own
process time (median), i.e. what the pool adds per task beyond running it. Each task is its own
``ctxagent`` process: ~0.3 s of interpreter and imports on the scripted path, ~3.6 s more on the
litellm path (FIELD-NOTES), which a long-lived worker would save.
"""

from __future__ import annotations

import argparse
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


def _tasks(folder: Path, n: int) -> Path:
    script = folder / "task.yaml"
    script.write_text(yaml.safe_dump([{"tool_calls": [{"id": "s", "name": "shell",
                                                         "arguments": {"command": "echo done"}}]}, "answered"]))
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps({"task": f"task {i}", "model": f"scripted:{script}"}) + "\n" for i in range(n)))
    return path


def _batch(tasks: Path, workers: int, data: Path) -> tuple[float, list[dict[str, Any]]]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ctxagent", "batch", str(tasks), "--workers", str(workers),
                           "--allow", "shell"], capture_output=True, text=True, cwd=tasks.parent, timeout=3600,
                          env={**os.environ, "CTXAGENT_DATA_DIR": str(data)}, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"ctxagent batch exited {proc.returncode}: {proc.stderr[-2000:]}")
    return wall, [json.loads(line) for line in proc.stdout.splitlines()]


def run(quick: bool = False, tasks: int = 200) -> dict[str, Any]:
    """One row per worker count (``quick``: 24 tasks)."""
    n = 24 if quick else tasks
    rows = []
    with tempfile.TemporaryDirectory(prefix="ctxagent-bench-batch-") as tmp:
        folder = Path(tmp)
        path = _tasks(folder, n)
        for workers in WORKERS:
            data = folder / f"data-{workers}"
            wall, results = _batch(path, workers, data)
            again, skipped = _batch(path, workers, data)
            per_task = statistics.median(r["wall_s"] for r in results)
            rows.append({"workers": workers, "tasks": n, "wall_s": round(wall, 2),
                         "sessions_per_minute": round(60 * n / wall, 1),
                         "task_process_s": round(per_task, 3),
                         "coordination_s_per_task": round(wall * workers / n - per_task, 3),
                         "answered": sum(r["status"] == "answered" for r in results),
                         "rerun_wall_s": round(again, 2), "rerun_skipped": sum(bool(r["skipped"]) for r in skipped)})
    return {"rows": rows, "cpus": os.cpu_count()}


HEADER = ["workers", "tasks", "wall", "sessions/min", "one task's process (median)", "pool cost per task",
          "answered", "re-run (all skipped)"]


def tables(data: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The results as ``(title, header, rows of cells)``."""
    rows = [[str(r["workers"]), str(r["tasks"]), f"{r['wall_s']:.1f} s", f"{r['sessions_per_minute']:.1f}",
             f"{r['task_process_s']:.2f} s", f"{r['coordination_s_per_task']:+.3f} s", str(r["answered"]),
             f"{r['rerun_wall_s']:.1f} s ({r['rerun_skipped']} skipped)"] for r in data["rows"]]
    return [(f"Issue 14: ctxagent batch, scripted 2-call tasks, {data['cpus']} CPUs", HEADER, rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batch", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--backend", choices=("pool", "temporal"), default="pool",
                        help="temporal: the pool against Temporal workers, and a worker killed (batch_temporal.py)")
    parser.add_argument("--kill-only", action="store_true", help="with --backend temporal: only the kill run")
    args = parser.parse_args(argv)
    if args.backend == "temporal":
        from benchmarks import batch_temporal

        data = batch_temporal.run(tasks=args.tasks, kill_only=args.kill_only)
        render = batch_temporal.tables
    else:
        data, render = run(tasks=args.tasks), tables
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(report.titled(render(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
