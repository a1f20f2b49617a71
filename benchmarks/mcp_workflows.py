"""The pointer paper's two workflows with their tools served over MCP (issue 13): tokens with handles vs
inline, in the same run. Run: ``python -m benchmarks.mcp_workflows [--json] [--grid-size N]``.

The tools of examples/grid and examples/extraction run in a real MCP server written with the SDK
(examples/mcp/server.py, over stdio); ctxagent mirrors them (``wf__make_grid``...), the scripted model
plays the examples' scripts with those names. For each workflow:

- *with handles*: the sum of the prompt tokens of every request (the transcript's usage records);
- *inline*: extraction, **measured**: a second real run whose tool-result limit keeps the sheet in
  the context, the model passing it to the extraction tool by value; grid, **counted**: the tokens
  of the grid result exactly as the server sent it (compact JSON, counted with the run's tokenizer),
  once (it cannot be sent at all: it is many times any window);
- whether the answer matched numpy / the generator exactly, and the wall time.

The grid is 64x64x64 by default, not the paper's 128: the MCP SDK's server takes ~100 s to serialize
and validate the 2-million-float list a 128 grid is (measured here), ctxagent's part is seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.handles import example as example_of

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SERVER = EXAMPLES / "mcp" / "server.py"
GRID_SIZE = 64
RENAMES = {"make_grid": "wf__make_grid", "locate": "wf__locate", "make_sds": "wf__make_sds",
           "extract_ingredients": "wf__extract_ingredients"}


def _script(source: Path, target: Path, **arguments: Any) -> Path:
    """The example's script with the MCP tool names (and the call arguments given, by call id)."""
    replies = yaml.safe_load(source.read_text(encoding="utf-8"))
    for reply in replies:
        for call in reply.get("tool_calls") or [] if isinstance(reply, dict) else []:
            call["name"] = RENAMES.get(call["name"], call["name"])
            call["arguments"] = {**call.get("arguments", {}), **arguments.get(call["id"], {})}
    target.write_text(yaml.safe_dump(replies, sort_keys=False, allow_unicode=True, width=10**9), encoding="utf-8")
    return target


def _profile(source: Path, target: Path) -> Path:
    """The example's profile, its tools allowed by server name instead of tool names."""
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    data["permissions"] = {"tools": {"wf": "allow"}}
    target.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return target


def _run(data_dir: Path, session: str, script: Path, profile: Path, config: Path, task: str,
         in_process: bool = False) -> dict[str, Any]:
    """One ``ctxagent run --json --output``; the answer's value, prompt tokens, outputs, wall time.
    ``in_process``: the CLI in this process (Typer's runner), its MCP server still a process of its own,
    shut down after the run (the test suite: a ctxagent process start saved per run)."""
    answer = data_dir / f"{session}-answer.txt"
    args = ["run", "--json", "--session", session, "--model", f"scripted:{script}", "--profile", str(profile),
            "--mcp-config", str(config), "--output", str(answer), task]
    started = time.perf_counter()
    if in_process:
        code, stderr = _in_process(args, data_dir)
    else:
        proc = subprocess.run([sys.executable, "-m", "ctxagent", *args], capture_output=True, text=True, timeout=900,
                              check=False, env={**os.environ, "CTXAGENT_DATA_DIR": str(data_dir)})
        code, stderr = proc.returncode, proc.stderr
    wall = time.perf_counter() - started
    if code != 0:
        raise RuntimeError(f"ctxagent exited {code}:\n{stderr[-3000:]}")
    transcript = data_dir / "sessions" / session / "transcript.jsonl"
    records = [json.loads(line) for line in transcript.read_text(encoding="utf-8").splitlines() if line.strip()]
    prompts = [r["prompt_tokens"] for r in records if r.get("kind") == "usage"]
    outputs = {r["handle"]: r for r in records if r.get("kind") == "output"}
    return {"answer": answer.read_text(encoding="utf-8").strip(), "requests": len(prompts),
            "context_tokens": sum(prompts), "per_request": prompts, "wall_s": round(wall, 3), "outputs": outputs,
            "session_dir": transcript.parent}


def _in_process(args: list[str], data_dir: Path) -> tuple[int, str]:
    """``ctxagent ARGS`` run by Typer's runner in this process with ``data_dir``; its exit code and stderr."""
    from typer.testing import CliRunner

    from ctxagent.cli import app
    from ctxagent.mcp_tools import hub

    try:  # click's runner sets the variable for the call and puts the environment back
        result = CliRunner().invoke(app, args, env={"CTXAGENT_DATA_DIR": str(data_dir)}, catch_exceptions=False)
    finally:
        hub.close_all()  # one server per run, as a process of its own would have
    return result.exit_code, result.stderr


def grid(data_dir: Path, config: Path, size: int, in_process: bool = False) -> dict[str, Any]:
    """The grid workflow over MCP with handles; the grid's inline cost counted from the stored result."""
    from ctxagent import count_text

    example = example_of("grid")
    script = _script(EXAMPLES / "grid" / "script.yaml", data_dir / "grid.yaml", grid={"size": size})
    profile = _profile(EXAMPLES / "grid" / "profile.yaml", data_dir / "grid-profile.yaml")
    task = example.TASK.replace(f"{example.SIZE}x{example.SIZE}x{example.SIZE}", f"{size}x{size}x{size}")
    run = _run(data_dir, "grid", script, profile, config, task, in_process)
    values = example.tools_module().make_grid(example.SEED, size)
    stored = run["session_dir"] / run["outputs"]["@grid"]["path"]
    inline = count_text(json.dumps(json.loads(stored.read_text(encoding="utf-8")), separators=(",", ":")))
    return {"context_tokens_with_handles": run["context_tokens"], "requests": run["requests"],
            "tokens_inline": inline + run["context_tokens"], "inline": f"counted: the {size}^3 grid result as "
            "compact JSON, once, plus the run's own prompts",
            "ratio": round((inline + run["context_tokens"]) / max(1, run["context_tokens"]), 1),
            "result_bytes": run["outputs"]["@grid"]["bytes"], "wall_s": run["wall_s"],
            "exact_answer": run["answer"] == example.expected_answer(values)}


def extraction(data_dir: Path, config: Path, in_process: bool = False) -> dict[str, Any]:
    """The extraction workflow over MCP: a run with handles and one with the sheet inline, both measured."""
    from ctxagent import count_text

    example = example_of("extraction")
    tools = example.tools_module()
    document = tools.make_sds(example.PRODUCT, example.SEED)
    expected = tools.ingredients(example.SEED)
    source = EXAMPLES / "extraction"
    handles = _run(data_dir, "extraction", _script(source / "script.yaml", data_dir / "extraction.yaml"),
                   _profile(source / "profile.yaml", data_dir / "extraction-profile.yaml"), config, example.TASK,
                   in_process)
    inline = _run(data_dir, "extraction-inline",
                  _script(source / "script.yaml", data_dir / "extraction-inline.yaml",
                          ingredients={"document": document}),
                  _profile(source / "profile-inline.yaml", data_dir / "extraction-inline-profile.yaml"), config,
                  example.TASK, in_process)
    return {"context_tokens_with_handles": handles["context_tokens"], "requests": handles["requests"],
            "tokens_inline": inline["context_tokens"], "inline": "measured (a real run with the sheet inline)",
            "document_tokens": count_text(document),
            "ratio": round(inline["context_tokens"] / max(1, handles["context_tokens"]), 1),
            "wall_s": handles["wall_s"], "inline_wall_s": inline["wall_s"],
            "exact_answer": json.loads(handles["answer"]) == expected and json.loads(inline["answer"]) == expected}


def run(quick: bool = False, grid_size: int = GRID_SIZE, in_process: bool = False) -> dict[str, Any]:
    """Both workflows over MCP in a temporary data folder; one summary dict per workflow (``quick``:
    a 32^3 grid; ``in_process``: ctxagent runs in this process, the MCP servers still in their own)."""
    with tempfile.TemporaryDirectory(prefix="ctxagent-bench-mcp-") as tmp:
        data_dir = Path(tmp)
        config = data_dir / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"wf": {"command": sys.executable, "args": [str(SERVER)],
                                                            "timeout_s": 600}}}), encoding="utf-8")
        return {"grid": grid(data_dir, config, 32 if quick else grid_size, in_process),
                "extraction": extraction(data_dir, config, in_process)}


def tables(data: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The results as ``(title, header, rows of cells)`` (the handles table's columns)."""
    from benchmarks import report

    return [("Issue 13: the grid and extraction workflows with their tools served over MCP",
             *report.handles_rows(data))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mcp_workflows", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--grid-size", type=int, default=GRID_SIZE, help="cells along each axis of the grid")
    args = parser.parse_args(argv)
    numbers = run(grid_size=args.grid_size)
    if args.json:
        print(json.dumps(numbers, indent=2))
        return 0
    print(f"{'workflow':<11} {'with handles':>13} {'inline':>12} {'ratio':>9} {'wall':>8}  exact  inline is")
    for name, row in numbers.items():
        print(f"{name:<11} {row['context_tokens_with_handles']:>13,} {row['tokens_inline']:>12,} "
              f"{row['ratio']:>8,.1f}x {row['wall_s']:>6.2f} s  {row['exact_answer']!s:<5}  {row['inline']}")
    print("tokens: the sum of prompt tokens over the run's requests (tiktoken o200k, as the scripted model reports "
          "them); tools served by examples/mcp/server.py over stdio")
    return 0 if all(row["exact_answer"] for row in numbers.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
