"""``ctxagent batch TASKS.jsonl``: many sessions at once, each its own ``ctxagent run --batch --json``
process (batch/pool.py) or on a Temporal cluster's ``ctxagent worker`` processes (docs/batch.md).
temporalio is imported only when a command uses it; a missing extra is a usage error that says what to install.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxagent.cli.options import RunOptions, use_store, with_run_options
from ctxagent.errors import UsageError


class Backend(StrEnum):
    pool = "pool"
    temporal = "temporal"


class Cluster(StrEnum):
    temporal = "temporal"


AddressOpt = Annotated[str, typer.Option("--address", envvar="CTXAGENT_TEMPORAL_ADDRESS",
                                         help="The Temporal server (frontend), HOST:PORT.")]
TaskQueueOpt = Annotated[str, typer.Option("--task-queue", help="The Temporal task queue the sessions go through.")]
NamespaceOpt = Annotated[str, typer.Option("--namespace", help="The Temporal namespace.")]


OPTIONS = ("model", "profile", "api_base", "max_turns", "allow", "allow_all", "context_window", "timeout",
           "max_input_tokens", "max_output_tokens_total", "max_cost_usd", "max_wall_s", "mcp_config", "no_lessons",
           "store")
"""The options of ``run`` that ``batch`` takes too, given to every task under its line's own."""


@with_run_options(*OPTIONS)
def batch(
    opts: RunOptions,
    tasks_file: Annotated[Path, typer.Argument(help="JSONL: one object per line with at least \"task\".",
                                               metavar="TASKS.jsonl", show_default=False)],
    workers: Annotated[int | None, typer.Option("--workers", "-w", min=1, max=64, show_default="2",
                                                help="Tasks running at once (each a ctxagent process).")] = None,
    backend: Annotated[Backend, typer.Option("--backend", help="pool: processes on this machine; temporal: "
                                             "the `ctxagent worker` processes of a Temporal cluster.")] = Backend.pool,
    address: AddressOpt = "localhost:7233",
    task_queue: TaskQueueOpt = "ctxagent",
    namespace: NamespaceOpt = "default",
    heartbeat_s: Annotated[float, typer.Option("--heartbeat-s", min=1, help="temporal: seconds without a "
                                               "heartbeat before a worker is taken for dead and its session "
                                               "resumes on another.")] = 30.0,
) -> None:
    """Run every task of a JSONL file, each in its own session, several at once (docs/batch.md).
    Answered sessions are skipped on a re-run; the others resume."""
    from ctxagent.batch.pool import Pool, Tally  # here, not at import: `ctxagent --help` stays fast
    from ctxagent.batch.tasks import read_tasks

    defaults: dict[str, Any] = {key: getattr(opts, key) for key in OPTIONS}
    defaults.update(allow_all=opts.allow_all or None, no_lessons=opts.no_lessons or None,
                    mcp_config=str(opts.mcp_config.resolve()) if opts.mcp_config else None)
    defaults = {k: v for k, v in defaults.items() if v is not None}
    tasks = read_tasks(tasks_file, defaults)
    tally = Tally(len(tasks))
    pool: Any
    if backend == Backend.temporal:
        if workers is not None:
            raise UsageError("--workers is for --backend pool; with temporal, each `ctxagent worker "
                             "--concurrency N` decides how many sessions it runs")

        require_temporal()
        from ctxagent.cluster.temporal_submit import Submitter

        pool = Submitter(address, namespace, task_queue, heartbeat_s)
    else:
        pool = Pool(workers or 2, {**os.environ, "CTXAGENT_HEARTBEAT_S": "86400"})  # a task's stderr is not shown
    with _progress(tally) as show:
        def emit(result: dict[str, Any]) -> None:
            tally.add(result)
            tally.running = pool.running
            sys.stdout.write(json.dumps(result, ensure_ascii=False) + "\n")
            sys.stdout.flush()
            show(f"{result['session']} {result.get('status')}")

        interrupted = pool.run(tasks, emit)
    _summary(tally, interrupted)
    raise typer.Exit(tally.exit_code(interrupted))


@contextlib.contextmanager
def _progress(tally: Any) -> Iterator[Callable[[str], None]]:
    """``show(event)``: on a terminal, a progress bar with each event printed above it; else a line on stderr."""
    if not sys.stderr.isatty():
        yield lambda event: print(f"ctxagent batch: {event} · {tally.line()}", file=sys.stderr, flush=True)
        return
    from ctxagent.cli.console import progress_bar

    with progress_bar() as bar:
        task = bar.add_task(tally.line(), total=tally.total)

        def show(event: str) -> None:
            bar.console.print(f"{event}")
            bar.update(task, completed=tally.done, description=tally.line())

        yield show


def _summary(tally: Any, interrupted: bool) -> None:
    """The final counts on stderr: one line, then the tasks by status."""
    print(f"ctxagent batch: {tally.line()}" + (" · interrupted: run the same command again to resume"
                                                if interrupted else ""), file=sys.stderr)
    if tally.statuses:
        print("ctxagent batch: by status: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.statuses.items())),
              file=sys.stderr)


def worker(
    backend: Annotated[Cluster, typer.Option("--backend", help="The cluster engine (only temporal for now).")]
    = Cluster.temporal,
    address: AddressOpt = "localhost:7233",
    task_queue: TaskQueueOpt = "ctxagent",
    namespace: NamespaceOpt = "default",
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, max=256,
                                             help="Sessions this worker runs at once (each a ctxagent process).")] = 2,
    store: Annotated[str | None, typer.Option(
        "--store", callback=use_store, help="Where the sessions live (an fsspec URL): every worker of a cluster "
                        "needs the same one. Default: $CTXAGENT_STORE, else this machine's data folder.")] = None,
) -> None:
    """Run the sessions that `ctxagent batch --backend temporal` submits, until SIGTERM or Ctrl-C
    (the running sessions then resume on another worker)."""
    require_temporal()
    from ctxagent.cluster.temporal_worker import serve

    serve(address, namespace, task_queue, concurrency, store)


def require_temporal() -> None:
    """Raises ``UsageError`` when the ``temporal`` extra (temporalio) is not installed."""
    import importlib.util

    if importlib.util.find_spec("temporalio") is None:
        raise UsageError("the temporal backend needs the temporalio package: pip install 'ctxagent[temporal]'")
