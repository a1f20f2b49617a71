"""Run the real ``ctxagent`` CLI in a subprocess and write scripts for the scripted backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml


def ctxagent(*args: str, stdin: str | None = None, cwd: Path | None = None, timeout: float = 120,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m ctxagent ARGS`` with the test's environment (data dir, no network)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "ctxagent", *args], input=stdin if stdin is not None else "",
        capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env,
    )


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

    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def result_of(out: Any) -> dict[str, Any]:
    """The ``--json`` object a run printed (its last stdout line)."""
    return json.loads(out.stdout.strip().splitlines()[-1])
