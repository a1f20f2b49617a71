"""Task processes of ``ctxagent batch`` forked from a server that imported ctxagent once (docs/batch.md;
what a new process spends on imports: FIELD-NOTES.md), through ``multiprocessing``'s public API only
(``set_forkserver_preload``). A forked task's ``atexit`` handlers do not run: :func:`_task` closes its
MCP servers itself (litellm's handlers flush callbacks ctxagent does not set). POSIX only; elsewhere,
or with ``CTXAGENT_BATCH_FORK=0``, each task is a new ``python -m ctxagent`` process (:class:`SpawnedTask`).
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import multiprocessing.connection
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

PRELOAD = ("ctxagent.batch.preload", "ctxagent.cli.run", "ctxagent.agent.setup", "ctxagent.agent.runner",
           "ctxagent.tools.toolset")
"""What the fork server imports for every task, in order: first its own set-up (batch/preload.py),
then the modules a ``run`` or ``resume`` loads."""
LITELLM_MODULE = "ctxagent.batch.preload_litellm"
"""What it imports too when a task may call a provider (litellm, imported the way a run imports it)."""


class SpawnedTask:
    """A task as a new ``python -m ctxagent`` process (the fallback)."""

    def __init__(self, args: Sequence[str], env: dict[str, str]):
        self._proc = subprocess.Popen([sys.executable, "-m", "ctxagent", *args], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                      start_new_session=True)  # Ctrl-C reaches it through the pool, once

    def send_signal(self, sig: int) -> None:
        self._proc.send_signal(sig)  # nothing once it has ended (Popen polls first)

    def finish(self) -> tuple[int, str, str]:
        with self._proc as proc:
            out, err = proc.communicate()
        return proc.returncode, out, err


_STATUS = threading.Lock()
"""Held while a task process starts or its exit status is read. The fork server sends a task's
status once, on the task's sentinel socket; ``Process.start`` polls every other running process
(``multiprocessing.process._cleanup``), so a start in one worker thread could read a status that a
join in another is reading, and one of them would get the other's half (or 255)."""


class ForkedTask:
    """A task forked from the fork server; its stdout and stderr go to files under ``folder``.

    The fork server, not the pool, is the task's parent (it reaps it), so a signal goes through a
    pidfd where Linux has them: it can never reach another process that took the pid since.
    """

    def __init__(self, context: Any, args: Sequence[str], env: dict[str, str], folder: Path, name: str):
        self._out, self._err = folder / f"{name}.out", folder / f"{name}.err"
        self._proc = context.Process(target=_task, args=(list(args), env, str(self._out), str(self._err)),
                                     daemon=False)
        with _STATUS:
            self._proc.start()
        self._pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):  # no pidfds (not Linux, old kernel), or it ended
            self._pidfd = os.pidfd_open(self._proc.pid)
        self._ended = False
        self._lock = threading.Lock()  # a signal is never sent through a pidfd being closed

    def send_signal(self, sig: int) -> None:
        with self._lock, contextlib.suppress(ProcessLookupError, OSError):  # it may have just ended
            if self._ended:
                return
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)
            else:
                os.kill(self._proc.pid, sig)

    def finish(self) -> tuple[int, str, str]:
        try:
            multiprocessing.connection.wait([self._proc.sentinel])  # ended: its status is on the way
            with _STATUS:
                self._proc.join()
                code = self._proc.exitcode
        finally:
            with self._lock:
                self._ended = True
                if self._pidfd is not None:
                    os.close(self._pidfd)
        self._proc.close()
        out, err = (_read(path) for path in (self._out, self._err))
        return (1 if code is None else code), out, err


TaskProcess = SpawnedTask | ForkedTask
"""A running task: ``send_signal`` while it runs, then ``finish()`` waits for it to end and gives
``(exit code, stdout, stderr)`` (the code is ``-N`` when signal N ended it, as ``subprocess`` reports it)."""


@contextlib.contextmanager
def starter(env: dict[str, str], litellm: bool) -> Iterator[Callable[[Sequence[str]], TaskProcess]]:
    """The function that starts a ``ctxagent`` command line (without the program name) as a task
    process of one batch with ``env``, forked when possible (see the module docstring). ``litellm``:
    whether a task may call a provider (the fork server then imports litellm too). The folder of the
    tasks' output files is removed at the end."""
    context = _fork_context(litellm) if env.get("CTXAGENT_BATCH_FORK", "1") != "0" else None
    if context is None:
        yield lambda args: SpawnedTask(args, env)
        return
    numbers = itertools.count(1)
    with tempfile.TemporaryDirectory(prefix="ctxagent-batch-") as folder:
        yield lambda args: ForkedTask(context, args, env, Path(folder), f"task-{next(numbers)}")


def needs_litellm(models: Sequence[str | None]) -> bool:
    """Whether tasks with these ``--model`` values may call a provider: any but ``scripted:`` models
    (a task without one takes its model from its session, profile or config: maybe a provider)."""
    return any(not (model or "").startswith("scripted:") for model in models)


def _fork_context(litellm: bool) -> Any:
    """The fork server context, with what its server preloads; None where there is none. A server
    already running in this process (an earlier batch) is kept, with what it preloaded."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*PRELOAD, *([LITELLM_MODULE] if litellm else [])])
    return context


def _task(args: list[str], env: dict[str, str], out: str, err: str) -> None:
    """The body of a forked task process: what ``python -m ctxagent ARGS`` would do, with exactly
    ``env``, stdin on /dev/null (as a new process of the pool gets it), stdout and stderr in the files
    ``out`` and ``err`` (multiprocessing has already moved it to the folder the pool started it from:
    its preparation data)."""
    os.setsid()
    written = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, written), (2, err, written)):
        target = os.open(path, flags, 0o600)
        os.dup2(target, fd)
        os.close(target)
    os.environ.clear()
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from ctxagent import cli

    try:
        cli.main(args)
    finally:
        hub = sys.modules.get("ctxagent.mcp_tools.hub")  # what the run's atexit handler would close
        if hub is not None:
            hub.close_all()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
