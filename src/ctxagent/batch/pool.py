"""The worker pool of ``ctxagent batch`` (cli/batch.py; docs/batch.md): a thread per worker starts a
task process (batch/forkserver.py) and waits for it, the main thread emits each result as it ends. On
Ctrl-C or SIGTERM nothing more starts and every running task gets SIGTERM (:meth:`Pool.stop`).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from ctxagent.batch.forkserver import TaskProcess, needs_litellm, starter
from ctxagent.batch.tasks import LIMIT_EXIT, STDERR_KEPT, Standing, Task, args_for, reported, standing

INTERRUPTED_EXIT = 130
NOT_STARTED = {"status": "interrupted", "exit_code": INTERRUPTED_EXIT, "skipped": True, "is_error": True}


@dataclass
class Tally:
    """What the batch has done so far: tasks by outcome, tokens (prompt + completion) and cost."""

    total: int
    done: int = 0
    answered: int = 0
    limited: int = 0  # stopped by a limit (LIMIT_EXIT)
    failed: int = 0
    skipped: int = 0
    running: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)

    def add(self, result: dict[str, Any]) -> None:
        self.done += 1
        status = str(result.get("status"))
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.skipped += bool(result.get("skipped"))
        if status == "answered":
            self.answered += 1
        elif result.get("exit_code") == LIMIT_EXIT:
            self.limited += 1
        else:
            self.failed += 1
        usage = result.get("usage") or {}
        self.tokens += int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
        self.cost_usd += float(usage.get("cost_usd") or 0.0)

    def line(self) -> str:
        return (f"{self.done}/{self.total} done ({self.answered} answered, {self.skipped} skipped, {self.limited} "
                f"stopped by a limit, {self.failed} failed), {self.running} running; {self.tokens:,} tokens, "
                f"${self.cost_usd:.4f}")

    def exit_code(self, interrupted: bool) -> int:
        """0 all answered; 3 the rest stopped by limits; 130 interrupted; else 1."""
        if interrupted:
            return INTERRUPTED_EXIT
        if self.failed:
            return 1
        return LIMIT_EXIT if self.limited else 0


class Pool:
    """Runs tasks ``workers`` at a time (see the module docstring); ``env``: the children's environment."""

    def __init__(self, workers: int, env: dict[str, str]):
        self.workers, self.env = workers, env
        self.stopping = threading.Event()
        self._procs: set[TaskProcess] = set()
        self._lock = threading.Lock()
        self._start: Callable[[Sequence[str]], TaskProcess] | None = None

    def run(self, tasks: Iterable[Task], emit: Callable[[dict[str, Any]], None]) -> bool:
        """Run every task, ``emit`` each result as it ends; True when interrupted (Ctrl-C, SIGTERM)."""
        pending = list(tasks)
        litellm = needs_litellm([t.options.get("model") for t in pending if t.error is None])
        with starter(self.env, litellm) as self._start, \
                ThreadPoolExecutor(self.workers, thread_name_prefix="ctxagent-batch") as pool:
            running: set[Future[dict[str, Any]]] = set()
            try:
                while pending or running:
                    while pending and len(running) < self.workers and not self.stopping.is_set():
                        running.add(pool.submit(self.one, pending.pop(0)))
                    done, running = _wait(running)
                    for future in done:
                        emit(future.result())
                    if self.stopping.is_set() and not running:
                        break
            except KeyboardInterrupt:
                self.stop()
                for future in _drain(running):
                    emit(future.result())
        return self.stopping.is_set()

    @property
    def running(self) -> int:
        """Tasks whose process is running now."""
        with self._lock:
            return len(self._procs)

    def stop(self) -> None:
        """Start nothing more; SIGTERM to every running task, which a run handles as Ctrl-C (each
        records ``interrupted``). Not SIGINT: a batch started with ``&`` from a script passes its
        tasks SIGINT ignored, as shells do for background jobs."""
        self.stopping.set()
        with self._lock:
            for proc in self._procs:
                proc.send_signal(signal.SIGTERM)

    def one(self, task: Task) -> dict[str, Any]:
        """Run ``task`` (or report it: a bad line, an answered session) and return its result object."""
        base = {"line": task.line, "session": task.session, "resumed": False}
        stand = standing(task) if task.error is None else Standing(error=task.error)
        if (done := reported(stand, base)) is not None:
            return done
        if self.stopping.is_set():
            return {**base, **NOT_STARTED}
        started = time.monotonic()
        assert self._start is not None, "Pool.one runs inside Pool.run"
        proc = self._start(args_for(task, stand.started))
        with self._lock:
            self._procs.add(proc)
            late = self.stopping.is_set()  # stop() ran while it started (the fork server may take seconds)
            if late:
                proc.send_signal(signal.SIGTERM)
        try:
            code, out, err = proc.finish()
        finally:
            with self._lock:
                self._procs.discard(proc)
        result = _parsed(out)
        if result is None and late:  # stopped before it ran: as a task the stop kept from starting
            return {**base, **NOT_STARTED}
        if result is None:
            result = {"status": "error", "error": (err or "no output").strip()[-STDERR_KEPT:], "is_error": True}
        return {**result, **base, "exit_code": code, "skipped": False,
                "resumed": stand.started and result.get("status") != "session_busy",
                "wall_s": round(time.monotonic() - started, 3)}


def _parsed(out: str) -> dict[str, Any] | None:
    """The ``--json`` object a run printed (its last stdout line), None when there is none."""
    for line in reversed(out.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        return value if isinstance(value, dict) else None
    return None


def _wait(running: set[Future[Any]]) -> tuple[set[Future[Any]], set[Future[Any]]]:
    """The futures done within a second, and those still running (short waits keep Ctrl-C prompt)."""
    if not running:  # wait() would sleep its whole timeout
        return set(), set()
    return wait(running, timeout=1.0, return_when=FIRST_COMPLETED)


def _drain(running: set[Future[Any]]) -> list[Future[Any]]:
    """Every running future, once it is done (a second Ctrl-C while waiting is ignored: the tasks
    are finishing their interrupted end records)."""
    finished: list[Future[Any]] = []
    while running:
        try:
            done, running = _wait(running)
        except KeyboardInterrupt:
            print("ctxagent batch: stopping; waiting for the running tasks to record where they stopped",
                  file=sys.stderr)
            continue
        finished += done
    return finished
