"""The one activity of the Temporal backend: run or resume a whole session on this worker, as the
``ctxagent run`` process ``ctxagent batch`` starts (batch/tasks.py), under :mod:`ctxagent.mcp_tools.guard`,
heartbeating (docs/batch.md, "Many machines"). A busy session, or a run that ended without a result,
raises a retryable error: Temporal runs the activity again, here or on another worker.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import signal
import sys
import time
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from ctxagent.batch.tasks import STDERR_KEPT, Task, command_for, reported, standing
from ctxagent.cluster.temporal_workflow import ACTIVITY, SessionTask
from ctxagent.mcp_tools import guard

ANSWER_KEPT = 4000  # characters of an answer a result carries; the rest stays in the session
RESULT_MAX = 32_000  # bytes of a result's JSON at most (Temporal warns at 256 KB, fails at 2 MB)
ESSENTIAL = ("session", "line", "status", "answer", "answer_chars", "answer_truncated", "see", "turns",
             "usage", "exit_code", "skipped", "resumed", "is_error", "error", "wall_s", "worker", "attempt")
GRACE_S = 10.0  # seconds a stopped run gets to record its end before the guard kills its group
LINE_MAX = 1 << 28  # bytes of one stdout line read at most (the last one holds the whole answer)


def bounded(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` small enough for a Temporal payload: the answer cut to :data:`ANSWER_KEPT`
    characters (``answer_chars`` its length, ``see`` the command that prints it all), ``error`` to
    ``STDERR_KEPT``; past :data:`RESULT_MAX` bytes only the :data:`ESSENTIAL` keys are kept."""
    out = dict(result)
    answer = out.get("answer")
    if isinstance(answer, str) and len(answer) > ANSWER_KEPT:
        out.update(answer=answer[:ANSWER_KEPT], answer_chars=len(answer), answer_truncated=True,
                   see=f"ctxagent inspect transcript --session {out.get('session')} (its last message)")
    if isinstance(out.get("error"), str):
        out["error"] = out["error"][-STDERR_KEPT:]
    if len(json.dumps(out, ensure_ascii=False).encode()) > RESULT_MAX:
        out = {key: out[key] for key in ESSENTIAL if key in out}
        out["trimmed"] = True
    return out


class SessionActivity:
    """The activity (:meth:`run_session`) with the environment its runs get (``env``), the
    worker's name (``identity``, in each result's ``worker``) and the session store the sessions
    live in (``store``, an fsspec URL; None: what each task names, else local disk)."""

    def __init__(self, env: dict[str, str], identity: str, store: str | None = None):
        self.env, self.identity, self.store = env, identity, store

    @activity.defn(name=ACTIVITY)
    async def run_session(self, spec: SessionTask) -> dict[str, Any]:
        """Run or resume ``spec``'s session; its bounded result object (see the module docstring).
        Raises ``ApplicationError`` (retryable) when the session is busy or the run left no result."""
        info = activity.info()
        task = Task(spec.line, spec.session, {**spec.options, **({"store": self.store} if self.store else {})},
                    spec.text)
        base = {"line": task.line, "session": task.session, "resumed": False, "worker": self.identity,
                "attempt": info.attempt}
        stand = await asyncio.to_thread(standing, task)
        if (done := reported(stand, base)) is not None:
            return bounded(done)
        _log(f"{task.session}: {'resuming' if stand.started else 'starting'} (attempt {info.attempt})")
        started = time.monotonic()
        try:
            code, result, stderr = await self._run(command_for(task, stand.started, output="stream-json"),
                                                   spec.heartbeat_s)
        except asyncio.CancelledError:
            _log(f"{task.session}: stopped (cancelled, or this worker is stopping)")
            raise
        if result is None:
            raise ApplicationError(f"session {task.session}: the run ended (exit {code}) without a result: "
                                   f"{stderr.strip()[-STDERR_KEPT:] or 'no output'}", type="NoResult")
        if result.get("status") == "session_busy":
            raise ApplicationError(f"session {task.session}: {result.get('error')}", type="SessionBusy")
        _log(f"{task.session}: {result.get('status')} (exit {code})")
        result.pop("type", None)  # stream-json's last event is the --json object with "type": "result"
        return bounded({**result, **base, "exit_code": code, "skipped": False,
                        "resumed": stand.started, "wall_s": round(time.monotonic() - started, 3)})

    async def _run(self, command: list[str], heartbeat_s: float) -> tuple[int, dict[str, Any] | None, str]:
        """Run ``command`` under the guard, heartbeating; its exit code, result event and stderr's tail.
        Cancelled (the workflow cancelled, the worker stopping): SIGTERM to the run, which records
        an ``interrupted`` end; the cancellation goes on once it has stopped."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-S", guard.__file__, str(os.getpid()), str(GRACE_S), *command,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=self.env, start_new_session=True, limit=LINE_MAX)
        progress: dict[str, Any] = {"turn": 0}
        tail: collections.deque[str] = collections.deque(maxlen=64)
        ticker = asyncio.create_task(_tick(progress, heartbeat_s))
        try:
            result, _ = await asyncio.gather(_events(proc, progress), _drain(proc, tail))
            code = await proc.wait()
        except asyncio.CancelledError:
            await _stop(proc)
            raise
        finally:
            ticker.cancel()
        return code, result, "".join(tail)


async def _events(proc: asyncio.subprocess.Process, progress: dict[str, Any]) -> dict[str, Any] | None:
    """Read the run's stream-json events; heartbeat each turn; the ``result`` event (None without one)."""
    assert proc.stdout is not None
    result = None
    while line := await proc.stdout.readline():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "turn.completed":
            progress["turn"] = event.get("turn")
            activity.heartbeat(dict(progress))
        elif kind == "result":
            result = event
    return result


async def _drain(proc: asyncio.subprocess.Process, tail: collections.deque[str]) -> None:
    """Keep the last lines of the run's stderr (a failed run's result says why)."""
    assert proc.stderr is not None
    while line := await proc.stderr.readline():
        tail.append(line.decode("utf-8", "replace")[:STDERR_KEPT])


async def _tick(progress: dict[str, Any], heartbeat_s: float) -> None:
    """Heartbeat every ``heartbeat_s / 4`` seconds: the worker is alive, even in a long tool call."""
    while True:
        activity.heartbeat(dict(progress))
        await asyncio.sleep(max(0.2, heartbeat_s / 4))


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM to the guard (which passes it on) and wait until the run has ended."""
    if proc.returncode is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            return
    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
        await asyncio.shield(asyncio.wait_for(proc.wait(), GRACE_S + 5))


def _log(text: str) -> None:
    print(f"ctxagent worker: {text}", file=sys.stderr, flush=True)
