"""``ctxagent worker --backend temporal``: run the sessions a Temporal task queue hands out, up to
``concurrency`` at once, each a ``ctxagent run`` process (:mod:`.temporal_activity`) on the session
store ``store`` (an fsspec URL, the same for every worker; docs/batch.md, "Many machines").
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from datetime import timedelta

from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from ctxagent.cluster.temporal_activity import SessionActivity
from ctxagent.cluster.temporal_workflow import SessionWorkflow
from ctxagent.errors import UsageError

CONNECT_TIMEOUT = timedelta(seconds=10)


async def connect(address: str, namespace: str) -> Client:
    """A ``temporalio.client.Client`` for ``address`` (HOST:PORT). Raises ``UsageError`` when the
    server cannot be reached or the namespace does not exist."""
    try:
        return await Client.connect(address, namespace=namespace, connect_timeout=CONNECT_TIMEOUT)
    except (RPCError, RuntimeError, OSError) as err:
        raise UsageError(f"cannot reach the Temporal server at {address} (namespace {namespace!r}): {err}") from err


def serve(address: str, namespace: str, task_queue: str, concurrency: int, store: str | None) -> None:
    """Run the worker until SIGTERM or Ctrl-C (see the module docstring). Raises ``UsageError``
    when the server cannot be reached."""
    asyncio.run(_serve(address, namespace, task_queue, concurrency, store))


async def _serve(address: str, namespace: str, task_queue: str, concurrency: int, store: str | None) -> None:
    client = await connect(address, namespace)
    identity = f"{os.getpid()}@{socket.gethostname()}"
    runs = SessionActivity({**os.environ, "CTXAGENT_HEARTBEAT_S": "86400"}, identity, store)  # stderr: not shown
    worker = Worker(client, task_queue=task_queue, workflows=[SessionWorkflow], activities=[runs.run_session],
                    max_concurrent_activities=concurrency, identity=identity,
                    graceful_shutdown_timeout=timedelta(0))  # stop at once: the sessions resume elsewhere
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, stop.set)
    print(f"ctxagent worker {identity}: running up to {concurrency} sessions from task queue {task_queue!r} "
          f"at {address} (namespace {namespace!r}); Ctrl-C stops", file=sys.stderr, flush=True)
    async with worker:
        await stop.wait()
        print("ctxagent worker: stopping; the running sessions record where they stopped and resume on another "
              "worker", file=sys.stderr, flush=True)
