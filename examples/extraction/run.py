"""The pointer paper's extraction workflow, run for real through the ctxagent CLI with a scripted model.

    python examples/extraction/run.py          # from the repository root
    python examples/extraction/run.py --json   # the numbers as one JSON object

Two real runs of ``ctxagent run`` with the tools of ``tools.py`` (``--tools``):

1. *handles*: ``make_sds`` returns a ~27,000-token safety data sheet; it is over the tool-result
   limit, so it is offloaded as ``@sds`` and the model sees a short preview; ``extract_ingredients``
   takes it by handle; the answer ``@ingredients`` is printed by the CLI as JSON.
2. *inline* (the paper's baseline): a profile whose tool-result limit is above the sheet keeps it
   in the context, and the model passes it to ``extract_ingredients`` by value (the script is written
   with the whole sheet as the call's argument).

Both answers are checked exactly against the generator; the context tokens of each run (the sum of
the prompt tokens of every request, from the transcript's usage records) are measured, not estimated.
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

import yaml

HERE = Path(__file__).resolve().parent
PRODUCT, SEED = "Solvent blend SB-200", 11  # as in script.yaml
TASK = f"List the ingredients of {PRODUCT} (name, CAS and EC numbers, concentration) from its safety data sheet."


def tools_module() -> ModuleType:
    """``examples/extraction/tools.py``, imported by path (it is not a package)."""
    spec = importlib.util.spec_from_file_location("ctxagent_example_extraction_tools", HERE / "tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inline_script(path: Path, document: str) -> Path:
    """The baseline's script: the same replies, the sheet passed by value instead of by handle."""
    replies = yaml.safe_load((HERE / "script.yaml").read_text(encoding="utf-8"))
    replies[1]["tool_calls"][0]["arguments"] = {"document": document}
    path.write_text(yaml.safe_dump(replies, sort_keys=False, allow_unicode=True, width=10**9), encoding="utf-8")
    return path


def run_once(data_dir: Path, session: str, script: Path, profile: Path) -> dict[str, Any]:
    """One ``ctxagent run --json``; returns the answer printed by the CLI, tokens and wall time.

    Raises ``RuntimeError`` when ctxagent fails.
    """
    tools = HERE / "tools.py"
    answer_file = data_dir / f"{session}-answer.json"
    cmd = [sys.executable, "-m", "ctxagent", "run", "--json", "--session", session, "--model", f"scripted:{script}",
           "--profile", str(profile), "--tools", f"{tools}:make_sds", "--tools", f"{tools}:extract_ingredients",
           "--output", str(answer_file), TASK]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "CTXAGENT_DATA_DIR": str(data_dir)})
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"ctxagent exited {proc.returncode}:\n{proc.stderr}")
    transcript = data_dir / "sessions" / session / "transcript.jsonl"
    records = [json.loads(line) for line in transcript.read_text(encoding="utf-8").splitlines() if line.strip()]
    prompts = [r["prompt_tokens"] for r in records if r.get("kind") == "usage"]
    return {"answer": json.loads(answer_file.read_text(encoding="utf-8")), "requests": len(prompts),
            "context_tokens": sum(prompts), "per_request": prompts, "wall_s": round(wall, 3),
            "offloaded": [r["handle"] for r in records if r.get("kind") == "output"]}


def run(data_dir: Path | None = None) -> dict[str, Any]:
    """Both runs in ``data_dir`` (a new temporary one by default); returns their numbers."""
    data_dir = Path(data_dir or tempfile.mkdtemp(prefix="ctxagent-extraction-"))
    data_dir.mkdir(parents=True, exist_ok=True)  # --output is checked before the run: its folder must exist
    tools = tools_module()
    document = tools.make_sds(PRODUCT, SEED)
    expected = tools.ingredients(SEED)
    handles = run_once(data_dir, "extraction", HERE / "script.yaml", HERE / "profile.yaml")
    inline = run_once(data_dir, "extraction-inline", inline_script(data_dir / "script-inline.yaml", document),
                      HERE / "profile-inline.yaml")
    from ctxagent import count_text

    return {
        "workflow": "extraction", "data_dir": str(data_dir), "document_tokens": count_text(document),
        "expected": expected, "handles": handles, "inline": inline,
        "exact": handles["answer"] == expected and inline["answer"] == expected,
        "context_tokens": handles["context_tokens"], "inline_tokens": inline["context_tokens"],
        "inline_estimated": False, "ratio": inline["context_tokens"] / max(1, handles["context_tokens"]),
        "wall_s": handles["wall_s"], "inline_wall_s": inline["wall_s"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    args = parser.parse_args(argv)
    numbers = run()
    if args.json:
        print(json.dumps(numbers, indent=2))
    else:
        names = ", ".join(row["name"] for row in numbers["handles"]["answer"])
        print(f"ingredients (the CLI printed @ingredients as JSON): {names}")
        print(f"exact match with the generator, both runs: {numbers['exact']}")
        print(f"the sheet: {numbers['document_tokens']:,} tokens")
        for label in ("handles", "inline"):
            run_ = numbers[label]
            print(f"context tokens {label + ':':9} {run_['context_tokens']:>7,} over {run_['requests']} requests "
                  f"{run_['per_request']}, wall {run_['wall_s']} s")
        print(f"ratio inline / handles: {numbers['ratio']:.1f}x; sessions kept under {numbers['data_dir']}")
    return 0 if numbers["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
