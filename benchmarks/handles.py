"""Numbers for handles: the pointer paper's two workflows, run for real through the ctxagent CLI with a
scripted model (examples/grid, examples/extraction). Run: ``python -m benchmarks.handles [--json]``.

For each workflow: the context tokens of the run with handles (the sum of the prompt tokens of every
request, from the transcript's usage records), the tokens the same run costs with the value inline
(grid: *estimated*, it cannot fit any window: one 128x128 slice serialized as a JSON list and counted,
times 128; extraction: *measured*, a second real run whose tool-result limit keeps the sheet in the
context and passes it by value), their ratio, the wall time of each run, and whether the answer
matched exactly. The paper's own numbers are printed alongside for reference.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PAPER = {"grid": "paper: ~20.8M tokens inline (estimated) vs ~1,234 with pointers",
         "extraction": "paper: ~6,411 tokens inline vs ~841 with pointers (7.6x)"}


def example(name: str) -> ModuleType:
    """``examples/NAME/run.py``, imported by path (the examples are not a package)."""
    path = EXAMPLES / name / "run.py"
    spec = importlib.util.spec_from_file_location(f"ctxagent_bench_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(quick: bool = False) -> dict[str, Any]:
    """Both workflows in a temporary data folder; one summary dict per workflow. ``quick`` changes
    nothing (both take seconds)."""
    with tempfile.TemporaryDirectory(prefix="ctxagent-bench-handles-") as tmp:
        grid = example("grid").run(Path(tmp) / "grid")
        extraction = example("extraction").run(Path(tmp) / "extraction")
    return {
        "grid": {
            "context_tokens_with_handles": grid["context_tokens"], "requests": grid["requests"],
            "tokens_inline": grid["inline_tokens"], "inline": "estimated (JSON list, one slice counted x 128)",
            "ratio": round(grid["ratio"], 1), "wall_s": grid["wall_s"], "exact_answer": grid["exact"],
            "reference": PAPER["grid"],
        },
        "extraction": {
            "context_tokens_with_handles": extraction["context_tokens"], "requests": extraction["handles"]["requests"],
            "tokens_inline": extraction["inline_tokens"], "inline": "measured (a real run with the sheet inline)",
            "document_tokens": extraction["document_tokens"], "ratio": round(extraction["ratio"], 1),
            "wall_s": extraction["wall_s"], "inline_wall_s": extraction["inline_wall_s"],
            "exact_answer": extraction["exact"], "reference": PAPER["extraction"],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.handles", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    numbers = run()
    if args.json:
        print(json.dumps(numbers, indent=2))
    else:
        print(f"{'workflow':<11} {'with handles':>13} {'inline':>12} {'ratio':>9} {'wall':>8}  exact  inline is")
        for name, row in numbers.items():
            wall = f"{row['wall_s']:.2f} s"
            print(f"{name:<11} {row['context_tokens_with_handles']:>13,} {row['tokens_inline']:>12,} "
                  f"{row['ratio']:>8,.1f}x {wall:>8}  {row['exact_answer']!s:<5}  {row['inline']}")
        print("tokens: the sum of prompt tokens over the run's requests (tiktoken o200k, as the scripted model "
              "reports them)")
        extraction = numbers["extraction"]
        print(f"extraction: the sheet is {extraction['document_tokens']:,} tokens; the inline run took "
              f"{extraction['inline_wall_s']:.2f} s")
        for row in numbers.values():
            print(row["reference"])
    return 0 if all(row["exact_answer"] for row in numbers.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
