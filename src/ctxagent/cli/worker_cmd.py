"""``ctxagent worker --backend temporal``: one machine's share of a cluster's sessions.

Light at import (``ctxagent --help`` never imports temporalio): the backend is imported when the
command runs, and a missing extra is a usage error that says what to install.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from ctxagent.cli.options import use_store
from ctxagent.errors import UsageError


class Backend(StrEnum):
    temporal = "temporal"


BackendOpt = Annotated[Backend, typer.Option("--backend", help="The cluster engine (only temporal for now).")]
AddressOpt = Annotated[str, typer.Option("--address", envvar="CTXAGENT_TEMPORAL_ADDRESS",
                                         help="The Temporal server (frontend), HOST:PORT.")]
TaskQueueOpt = Annotated[str, typer.Option("--task-queue", help="The Temporal task queue the sessions go through.")]
NamespaceOpt = Annotated[str, typer.Option("--namespace", help="The Temporal namespace.")]


def worker(
    backend: BackendOpt = Backend.temporal,
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
