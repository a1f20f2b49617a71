"""The pointer paper's two workflows (examples/grid, examples/extraction), run through the real CLI in
subprocesses with the scripted model, answers checked exactly, token counts sanity-checked."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import numpy as np

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"workflow_{path.parent.name}_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_grid_workflow_answers_exactly(tmp_path: Path) -> None:
    example = load(EXAMPLES / "grid" / "run.py")
    numbers = example.run(tmp_path)
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


def test_extraction_workflow_with_handles_and_inline(tmp_path: Path) -> None:
    example = load(EXAMPLES / "extraction" / "run.py")
    tools = load(EXAMPLES / "extraction" / "tools.py")
    numbers = example.run(tmp_path)
    expected = tools.ingredients(11)
    assert len(expected) == 7 and numbers["handles"]["answer"] == expected == numbers["inline"]["answer"]
    assert numbers["document_tokens"] > 20_000
    assert numbers["handles"]["offloaded"] == ["@sds", "@ingredients"]
    assert numbers["inline"]["offloaded"] == ["@ingredients"]  # the sheet stayed in the context
    assert numbers["context_tokens"] < 3_000
    assert numbers["inline_tokens"] > 2 * numbers["document_tokens"] and numbers["ratio"] > 10
