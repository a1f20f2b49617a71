"""``ctxagent batch --backend temporal``: submit every task as a workflow whose id is its session
name, report each as it ends, with the result objects of the process pool (batch/pool.py) plus
``worker`` and ``attempt``. Ctrl-C or SIGTERM cancels the workflows it started (docs/batch.md).
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable, Iterable
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import CancelledError, WorkflowAlreadyStartedError

from ctxagent.batch.pool import INTERRUPTED_EXIT, NOT_STARTED
from ctxagent.batch.tasks import Task
from ctxagent.cluster.temporal_worker import connect
from ctxagent.cluster.temporal_workflow import SessionTask, SessionWorkflow

TASK_MAX = 128 * 1024  # bytes of a task's workflow input at most (Temporal warns at 256 KB, fails at 2 MB)
STARTS_AT_ONCE = 16  # workflow starts in flight at once


class Submitter:
    """Runs tasks on a Temporal cluster (see the module docstring); ``Pool``'s interface."""

    def __init__(self, address: str, namespace: str, task_queue: str, heartbeat_s: float):
        self.address, self.namespace, self.task_queue, self.heartbeat_s = address, namespace, task_queue, heartbeat_s
        self.running = 0  # workflows started and not ended
        self.stopping = False

    def run(self, tasks: Iterable[Task], emit: Callable[[dict[str, Any]], None]) -> bool:
        """Submit every task, ``emit`` each result as it ends; True when interrupted (Ctrl-C,
        SIGTERM). Raises ``UsageError`` when the server cannot be reached."""
        return asyncio.run(self._run(list(tasks), emit))

    async def _run(self, tasks: list[Task], emit: Callable[[dict[str, Any]], None]) -> bool:
        client = await connect(self.address, self.namespace)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        gate = asyncio.Semaphore(STARTS_AT_ONCE)
        started: list[WorkflowHandle[Any, Any]] = []

        async def one(task: Task) -> dict[str, Any]:
            async with gate:
                if stop.is_set():
                    return _base(task, **NOT_STARTED)
                handle = await self._start(client, task)
            if isinstance(handle, dict):
                return handle
            started.append(handle)
            if stop.is_set():  # started while the others were being cancelled
                await handle.cancel()
            self.running += 1
            try:
                return await _outcome(task, handle)
            finally:
                self.running -= 1

        async def cancel_on_stop() -> None:
            await stop.wait()
            self.stopping = True
            await asyncio.gather(*(h.cancel() for h in list(started)), return_exceptions=True)

        canceller = asyncio.create_task(cancel_on_stop())
        waiting = [asyncio.ensure_future(one(task)) for task in tasks]  # started in file order (the gate is FIFO)
        for next_result in asyncio.as_completed(waiting):
            emit(await next_result)
        canceller.cancel()
        return self.stopping

    async def _start(self, client: Client, task: Task) -> Any:
        """The handle of ``task``'s new workflow, or its result when it cannot start (a bad line, a
        task too long for a payload, its session already running on the cluster)."""
        if task.error is not None:
            return _base(task, status="usage_error", error=task.error, exit_code=2)
        spec = SessionTask(task.session, task.line, task.text, task.options, self.heartbeat_s)
        size = len(json.dumps(spec.__dict__, ensure_ascii=False).encode())
        if size > TASK_MAX:
            return _base(task, status="usage_error", exit_code=2,
                         error=f"line {task.line}: the task is {size:,} bytes, more than a workflow carries here "
                               f"({TASK_MAX:,}); put the text in a file and name the file in the task")
        try:
            return await client.start_workflow(
                SessionWorkflow.run, spec, id=task.session, task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE)
        except WorkflowAlreadyStartedError:
            return _base(task, status="session_busy", exit_code=1,
                         error=f"session {task.session!r} is already running on the cluster (workflow id "
                               f"{task.session!r}); wait for it, or cancel it: temporal workflow cancel "
                               f"--workflow-id {task.session}")


async def _outcome(task: Task, handle: WorkflowHandle[Any, dict[str, Any]]) -> dict[str, Any]:
    """The workflow's result, or a result object saying how it failed (cancelled: ``interrupted``)."""
    try:
        return await handle.result()
    except WorkflowFailureError as err:
        if isinstance(err.cause, CancelledError):
            return _base(task, status="interrupted", exit_code=INTERRUPTED_EXIT)
        return _base(task, status="error", exit_code=1, error=_causes(err))


def _causes(err: BaseException) -> str:
    """An error and its causes, as one line (the activity's last failure is the innermost)."""
    parts: list[str] = []
    current: BaseException | None = err
    while current is not None and len(parts) < 5:
        parts.append(str(current) or type(current).__name__)
        current = current.__cause__
    return ": ".join(parts)


def _base(task: Task, **fields: Any) -> dict[str, Any]:
    return {"line": task.line, "session": task.session, "resumed": False, "skipped": False, "is_error": True,
            **fields}
