"""The pointer paper's grid workflow, run for real through the ctxagent CLI with a scripted model.

    python examples/grid/run.py          # from the repository root (needs numpy)
    python examples/grid/run.py --json   # the numbers as one JSON object

``ctxagent run`` gets the two tools of ``tools.py`` with ``--tools``: ``make_grid`` returns a seeded
128x128x128 float32 array, stored as ``@grid`` (``.npy``); ``locate`` takes it by handle three
times (maximum, minimum, then the cell at ``@max/index``, a sub-handle). The model never sees the
grid, only a one-line description. The answer names handles; the CLI resolves them. This script
then checks the answer exactly against numpy, and reports the context tokens of the run (the sum
of the prompt tokens of every request, from the transcript's usage records) next to an *estimate*
of what the grid alone would cost inline as a JSON list (the tokens of one 128x128 slice, times 128).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
SEED, SIZE = 7, 128  # as in script.yaml
TASK = (f"Generate the {SIZE}x{SIZE}x{SIZE} grid with seed {SEED}, then report the coordinates and value "
        "of its maximum and its minimum.")


def tools_module() -> ModuleType:
    """``examples/grid/tools.py``, imported by path (it is not a package)."""
    spec = importlib.util.spec_from_file_location("ctxagent_example_grid_tools", HERE / "tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def command(session: str, answer_file: Path) -> list[str]:
    """The ``ctxagent run`` command line of the workflow."""
    tools = HERE / "tools.py"
    return [sys.executable, "-m", "ctxagent", "run", "--json", "--session", session,
            "--model", f"scripted:{HERE / 'script.yaml'}", "--profile", str(HERE / "profile.yaml"),
            "--tools", f"{tools}:make_grid", "--tools", f"{tools}:locate", "--output", str(answer_file), TASK]


def prompt_tokens(data_dir: Path, session: str) -> list[int]:
    """Prompt tokens of each request of the session, from its usage records."""
    transcript = data_dir / "sessions" / session / "transcript.jsonl"
    records = [json.loads(line) for line in transcript.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r["prompt_tokens"] for r in records if r.get("kind") == "usage"]


def expected_answer(grid: Any) -> str:
    """The answer the CLI must print, computed with numpy alone."""
    import numpy as np

    cells = {name: [int(i) for i in np.unravel_index(int(fn(grid)), grid.shape)]
             for name, fn in (("max", np.argmax), ("min", np.argmin))}
    value = {name: json.dumps(float(grid[tuple(cell)])) for name, cell in cells.items()}
    return (f"Maximum {value['max']} at {json.dumps(cells['max'])}; minimum {value['min']} at "
            f"{json.dumps(cells['min'])}; the cell at {json.dumps(cells['max'])} reads back {value['max']}.")


def inline_estimate(grid: Any) -> int:
    """Tokens of the grid as a JSON list (as the paper serialized it), estimated: one slice
    ``grid[0]`` counted exactly with the run's tokenizer, times the number of slices."""
    from ctxagent import count_text

    return count_text(json.dumps(grid[0].tolist())) * grid.shape[0] + 2


def run(data_dir: Path | None = None, session: str = "grid") -> dict[str, Any]:
    """Run the workflow in ``data_dir`` (a new temporary one by default); returns its numbers.

    Raises ``RuntimeError`` when ctxagent fails.
    """
    data_dir = Path(data_dir or tempfile.mkdtemp(prefix="ctxagent-grid-"))
    data_dir.mkdir(parents=True, exist_ok=True)  # --output is checked before the run: its folder must exist
    answer_file = data_dir / f"{session}-answer.txt"
    env = {**os.environ, "CTXAGENT_DATA_DIR": str(data_dir)}
    started = time.perf_counter()
    proc = subprocess.run(command(session, answer_file), capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"ctxagent exited {proc.returncode}:\n{proc.stderr}")
    result = json.loads(proc.stdout)
    answer = answer_file.read_text(encoding="utf-8").strip()
    grid = tools_module().make_grid(SEED, SIZE)
    requests = prompt_tokens(data_dir, session)
    inline = inline_estimate(grid)
    return {
        "workflow": "grid", "session": session, "data_dir": str(data_dir), "answer": answer,
        "expected": expected_answer(grid), "exact": answer == expected_answer(grid),
        "handles": result.get("handles", []), "requests": len(requests), "context_tokens": sum(requests),
        "inline_tokens": inline, "inline_estimated": True, "ratio": inline / max(1, sum(requests)),
        "grid_bytes": int(grid.nbytes), "wall_s": round(wall, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    args = parser.parse_args(argv)
    numbers = run()
    if args.json:
        print(json.dumps(numbers, indent=2))
    else:
        print(f"answer (handles resolved by the CLI): {numbers['answer']}")
        print(f"exact match with numpy: {numbers['exact']}")
        print(f"context tokens with handles: {numbers['context_tokens']:,} over {numbers['requests']} requests")
        print(f"the grid inline as a JSON list: ~{numbers['inline_tokens']:,} tokens (estimate: one slice "
              f"counted, times {SIZE}); ratio ~{numbers['ratio']:,.0f}x")
        print(f"wall time {numbers['wall_s']} s; session 'grid' kept under {numbers['data_dir']} "
              f"(CTXAGENT_DATA_DIR={numbers['data_dir']} ctxagent inspect outputs --session grid)")
    return 0 if numbers["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
