"""The pointer paper's two workflows (examples/grid, examples/extraction), run through the real CLI
with the scripted model, answers checked exactly, token counts sanity-checked.

The examples start ``python -m ctxagent run ...``; here the CLI runs that command line in this process
(``in_process``): a process start is ~1 s of CPU per run, and what these tests check is the workflow,
not how a process ends (tests about that start real ones: test_mcp's kill -9 and Ctrl-C among them)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

from clihelp import ctxagent

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"workflow_{path.parent.name}_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def in_process(example: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Make ``example`` run its ``python -m ctxagent ARGS`` commands with the CLI in this process (its
    ``env`` as given; exit code, stdout and stderr as a subprocess gives them); the commands run."""
    commands: list[list[str]] = []

    def run(command: list[str], *, env: dict[str, str] | None = None, **_: Any) -> subprocess.CompletedProcess[str]:
        assert command[:3] == [sys.executable, "-m", "ctxagent"], command
        commands.append(command)
        changed = {k: v for k, v in (env or {}).items() if os.environ.get(k) != v}
        return ctxagent(*command[3:], env=changed)

    monkeypatch.setattr(example, "subprocess", SimpleNamespace(run=run))
    return commands


def test_grid_workflow_answers_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    example = load(EXAMPLES / "grid" / "run.py")
    commands = in_process(example, monkeypatch)
    numbers = example.run(tmp_path)
    assert len(commands) == 1
    grid = np.random.default_rng(7).random((128, 128, 128), dtype=np.float32)  # independent of tools.py
    top = [int(i) for i in np.unravel_index(int(np.argmax(grid)), grid.shape)]
    low = [int(i) for i in np.unravel_index(int(np.argmin(grid)), grid.shape)]
    top_value, low_value = json.dumps(float(grid[tuple(top)])), json.dumps(float(grid[tuple(low)]))
    assert numbers["answer"] == (f"Maximum {top_value} at {json.dumps(top)}; minimum {low_value} at "
                                 f"{json.dumps(low)}; the cell at {json.dumps(top)} reads back {top_value}.")
    assert numbers["exact"]
    assert {h["handle"] for h in numbers["handles"]} == {"@max/value", "@max/index", "@min/value", "@min/index",
                                                        "@check/value"}
    stored = np.load(tmp_path / "sessions" / "grid" / "outputs" / "grid.npy")
    np.testing.assert_array_equal(stored, grid)
    assert numbers["requests"] == 4 and 500 < numbers["context_tokens"] < 5_000
    assert numbers["inline_tokens"] > 10_000_000 and numbers["ratio"] > 1_000


def test_extraction_workflow_with_handles_and_inline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    example = load(EXAMPLES / "extraction" / "run.py")
    tools = load(EXAMPLES / "extraction" / "tools.py")
    commands = in_process(example, monkeypatch)
    numbers = example.run(tmp_path)
    assert len(commands) == 2
    expected = tools.ingredients(11)
    assert len(expected) == 7 and numbers["handles"]["answer"] == expected == numbers["inline"]["answer"]
    assert numbers["document_tokens"] > 20_000
    assert numbers["handles"]["offloaded"] == ["@sds", "@ingredients"]
    assert numbers["inline"]["offloaded"] == ["@ingredients"]  # the sheet stayed in the context
    assert numbers["context_tokens"] < 3_000
    assert numbers["inline_tokens"] > 2 * numbers["document_tokens"] and numbers["ratio"] > 10
