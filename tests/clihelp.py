"""Run the real ``ctxagent`` CLI (in this process or a subprocess) and write scripts for the scripted backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import yaml


def ctxagent(*args: str, stdin: str | None = None, cwd: Path | None = None, timeout: float = 120,
             env: dict[str, str] | None = None, process: bool = False) -> subprocess.CompletedProcess[str]:
    """``ctxagent ARGS`` with the test's environment (data dir, no network): its exit code, stdout
    and stderr.

    In this process by default: :func:`ctxagent.cli.invoke` (the entry point's own error mapping and
    exit codes) under click's isolation (``stdin`` as standard input, standard output and error
    captured), in ``cwd`` and with ``env`` added, all put back afterwards. A ``python -m ctxagent``
    start costs ~1 s of CPU (more once litellm is imported), and most tests check what a command
    does, not how a process ends. ``process=True`` runs it in a subprocess (``timeout`` seconds):
    for what only a process shows (its exit path, signals, imports, the console encoding)."""
    if process:
        full_env = {**os.environ, **(env or {})}
        return subprocess.run(
            [sys.executable, "-m", "ctxagent", *args], input=stdin if stdin is not None else "",
            capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env,
        )
    return _in_process(list(args), stdin or "", cwd, env or {})


def _in_process(args: list[str], stdin: str, cwd: Path | None, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import tempfile

    from click.testing import CliRunner

    from ctxagent.cli import invoke

    before = Path.cwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with CliRunner().isolation(env=env) as (out, err, _), warnings.catch_warnings(), \
                tempfile.TemporaryFile("w+", encoding="utf-8", errors="surrogateescape") as piped:
            piped.write(stdin)  # standard input as a redirected file, as `ctxagent ... < file` gives it
            piped.seek(0)
            sys.stdin = piped
            new_interpreter_warning_filters()
            try:
                code = invoke(args)
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
            stdout, stderr = out.getvalue(), err.getvalue()
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(["ctxagent", *args], code, stdout.decode("utf-8", "replace"),
                                       stderr.decode("utf-8", "replace"))


FIXED_SYSTEM_PROMPT = (
    "You are a careful agent working from a command line. Use the tools to find facts; do not guess values. "
    "Large tool outputs are saved to files and shown as a preview with a handle (like @abc123): read or search "
    "them with read_output and grep_output. When you are done, reply with the final answer and no tool call.")
"""The default system prompt until issue 32: tests whose sessions are sized to the prompt's tokens (where
compactions fall) give it in their profile, so a new default prompt does not move them."""


def script(path: Path, replies: list[Any]) -> str:
    """Write a scripted-model YAML file; returns the ``scripted:PATH`` model string."""
    path.write_text(yaml.safe_dump(replies, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return f"scripted:{path}"


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    """One scripted tool call."""
    return {"id": call_id, "name": name, "arguments": arguments}


def records(session: str) -> list[dict[str, Any]]:
    """The session's transcript records as plain dicts, via ``inspect transcript --json``."""
    out = ctxagent("inspect", "transcript", "--session", session, "--json")
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def tool_messages(session: str) -> dict[str, str]:
    """Tool result content by call id."""
    return {r["message"]["tool_call_id"]: r["message"]["content"] for r in records(session)
            if r["kind"] == "message" and r["message"]["role"] == "tool"}


def run_cli(*args: str) -> Any:
    """The real CLI in this process (Typer's runner): its ``exit_code``, ``stdout`` and ``stderr``."""
    from typer.testing import CliRunner

    from ctxagent.cli import app

    with warnings.catch_warnings():
        new_interpreter_warning_filters()
        return CliRunner().invoke(app, list(args), catch_exceptions=False)


def new_interpreter_warning_filters() -> None:
    """The warning filters a new interpreter starts with, not pytest's ``error``: a library's warning
    (litellm builds pydantic models on first use, and pydantic warns about one of them) is a line on
    stderr for the CLI, never an exception in the middle of a command. Use inside ``catch_warnings``."""
    warnings.resetwarnings()
    for quiet in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.simplefilter("ignore", quiet)


def result_of(out: Any) -> dict[str, Any]:
    """The ``--json`` object a run printed (its last stdout line)."""
    return json.loads(out.stdout.strip().splitlines()[-1])
