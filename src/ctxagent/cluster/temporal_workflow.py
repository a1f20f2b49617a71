"""The Temporal workflow of one ``ctxagent batch`` task: one coarse activity, :data:`ACTIVITY`, runs
or resumes the whole session, retried on another worker when one dies (docs/batch.md).

Kept import-light (the standard library and ``temporalio``, never ctxagent's agent or CLI) and
deterministic, so it could run in Temporal's workflow sandbox; it runs outside it (``sandboxed=False``)
because the sandbox's validation of the module cost ~0.8 s per worker start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

WORKFLOW = "ctxagent.session"
ACTIVITY = "ctxagent.run_session"
DEFAULT_HEARTBEAT_S = 30.0
RUN_LIMIT = timedelta(hours=24)  # one attempt's longest run; budgets (--max-wall-s) stop sessions sooner
ATTEMPTS = 5  # worker deaths (or a busy session lock) survived per task before its workflow fails


@dataclass
class SessionTask:
    """The workflow's input: a task of the tasks file. ``options``: ``ctxagent run``'s options by
    TaskLine key (batch/tasks.py); ``heartbeat_s``: seconds without a heartbeat after which
    Temporal takes the worker for dead and retries the session elsewhere."""

    session: str
    line: int
    text: str
    options: dict[str, Any] = field(default_factory=dict)
    heartbeat_s: float = DEFAULT_HEARTBEAT_S


@workflow.defn(name=WORKFLOW, sandboxed=False)  # see the module docstring
class SessionWorkflow:
    """Run one session to its end on some worker; the result is the run's bounded ``--json`` object."""

    @workflow.run
    async def run(self, task: SessionTask) -> dict[str, Any]:
        result: dict[str, Any] = await workflow.execute_activity(
            ACTIVITY, task, start_to_close_timeout=RUN_LIMIT, heartbeat_timeout=timedelta(seconds=task.heartbeat_s),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                                     maximum_interval=timedelta(seconds=30), maximum_attempts=ATTEMPTS),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            result_type=dict,
        )
        return result
