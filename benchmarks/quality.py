"""Issue 11 numbers: what the model sees of terminal output, and the work a session does not redo.
Run: ``python -m benchmarks.quality [--json]``.

1. **Cleaning** (two workloads, the real ``shell`` tool through the real toolset and offloader,
   default profile, 128K window): a coloured test-runner log (1,000 ANSI-coloured pytest lines) and
   a progress-bar download (20,001 carriage-return frames, then a result line). For each: tokens of
   the raw output (what the context held before cleaning), tokens of the tool message the model
   gets now, whether it was offloaded, and whether the final frame / the summary line is visible.
2. **Repeated reads** (the real CLI, a scripted model): a 36-turn session that reads 6 source files
   of 40-160 lines again and again (each about 6 times, interleaved, 3 of them rewritten once on
   the way), run twice: with the ledger's repeat notes (the default) and with ``repeat_notes:
   false``. Tokens of all tool results, the sum of prompt tokens over the run's requests, and the
   reads answered by a note.
3. **Nothing dropped is out of reach** (the real runner through benchmarks/harness.py): an 80-turn
   session of ~2,300-token logs, each holding one unique fact, in a 32K window, under every bundled
   profile on both paths. After the last turn, for each fact: still in the view; in a stored output
   whose handle the view names; found by one ``recall`` call the way a model would ask (the fact's
   words without its value: a keyword query with the default 8 hits, or a regex of the line's
   prefix with ``top_k: 50``). And the input tokens (sum over requests) of the same run without the
   ``recall`` tool, so its cost is measured, not estimated.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

COLOURED = (
    "import sys\n"
    "for i in range(1000):\n"
    "    ok = i % 17\n"
    "    colour, word = ('\\x1b[32m', 'PASSED') if ok else ('\\x1b[31;1m', 'FAILED')\n"
    "    sys.stdout.write(f'tests/test_mod_{i % 40}.py::test_case_{i} \\x1b[1m{colour}{word}\\x1b[0m"
    "\\x1b[36m [{i // 10:3d}%]\\x1b[0m\\x1b[K\\n')\n"
    "sys.stdout.write('\\x1b[31m========== 59 failed, 941 passed in 12.34s ==========\\x1b[0m\\n')\n"
)
PROGRESS = (
    "import sys\n"
    "for i in range(20001):\n"
    "    sys.stdout.write(f'\\rDownloading model.bin: {i * 100 // 20000:3d}% |' + '#' * (i * 30 // 20000)"
    " + ' ' * (30 - i * 30 // 20000) + f'| {i * 512 // 1000} MB')\n"
    "sys.stdout.write('\\nsaved model.bin (10,240,512 bytes, sha256 4b2f9c0e7a11)\\n')\n"
)


PLAIN = {  # what a terminal shows of each: the same lines without escapes, the last frame of the bar
    "coloured": re.sub(r"\\x1b\[[0-9;]*[mK]", "", COLOURED),
    "progress": PROGRESS.replace("for i in range(20001):", "for i in (20000,):")
                        .replace("f'\\rDownloading", "f'Downloading"),
}


def _tool_result(command: str, root: Path) -> dict[str, Any]:
    from ctxagent.agent.setup import offload_policy
    from ctxagent.messages import ToolCall
    from ctxagent.profile import load_profile
    from ctxagent.sessions.store import OutputStore
    from ctxagent.tokens import count_text
    from ctxagent.tools.base import ToolContext
    from ctxagent.tools.toolset import make_toolset

    profile = load_profile("default")
    store = OutputStore(root / "outputs")
    toolset = make_toolset(["shell"], ToolContext(store, root), offload_policy(profile, profile.model, window=128_000))
    raw = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=root).stdout
    outcome = toolset.call(ToolCall("bench", "shell", json.dumps({"command": command})), "@bench")
    return {"raw_tokens": count_text("exit code: 0\n" + raw, profile.model),
            "context_tokens": count_text(outcome.content, profile.model),
            "offloaded": outcome.output is not None, "content": outcome.content}


def cleaning(root: Path) -> dict[str, Any]:
    """Workload 1: tokens in the context with and without terminal-control cleaning."""
    out: dict[str, Any] = {}
    for name, program, last in (("coloured test log", COLOURED, "59 failed, 941 passed in 12.34s"),
                                ("progress-bar download", PROGRESS, "saved model.bin")):
        script = root / f"{name.split()[0]}.py"
        script.write_text(program)
        row = _tool_result(f"{sys.executable} {script}", root)
        plain = root / f"{name.split()[0]}-plain.py"
        plain.write_text(PLAIN[name.split()[0].split("-")[0]])
        row["plain_tokens"] = _tool_result(f"{sys.executable} {plain}", root)["context_tokens"]
        row["last_line_visible"] = last in row.pop("content")
        out[name] = row
    return out


FILES = {f"src/mod_{i}.py": 40 * (1 + i % 4) for i in range(6)}  # path -> lines


def _source(path: str, lines: int, version: int) -> str:
    return "".join(f"def {Path(path).stem}_fn_{n}(x):  # v{version} computes step {n} of the pipeline\n"
                   for n in range(lines))


def _session(work: Path, data: Path, notes: bool) -> dict[str, Any]:
    for path, lines in FILES.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(_source(path, lines, 0))
    replies: list[dict[str, Any]] = []
    paths = list(FILES)
    for turn in range(36):
        path = paths[(turn * 5) % 6]
        calls = [{"id": f"r{turn}", "name": "read_file", "arguments": {"path": path}}]
        if turn in (10, 20, 30):  # a rewrite: the next read of that file must return the new text
            target = paths[turn % 6]
            calls.append({"id": f"w{turn}", "name": "write_file",
                          "arguments": {"path": target, "content": _source(target, FILES[target], turn)}})
        replies.append({"tool_calls": calls})
    replies.append({"content": "done"})
    model = data / f"script-{notes}.yaml"
    model.write_text(yaml.safe_dump(replies, sort_keys=False))
    profile = data / f"profile-{notes}.yaml"
    profile.write_text(f"repeat_notes: {str(notes).lower()}\nmax_turns: 60\n")
    session = f"reads-{notes}"
    env = {**os.environ, "CTXAGENT_DATA_DIR": str(data)}
    run = subprocess.run([sys.executable, "-m", "ctxagent", "run", "--batch", "--session", session, "--model",
                          f"scripted:{model}", "--profile", str(profile), "--allow", "write_file", "go"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    dump = subprocess.run([sys.executable, "-m", "ctxagent", "inspect", "transcript", "--session", session, "--json"],
                          env=env, capture_output=True, text=True, timeout=120)
    records = [json.loads(line) for line in dump.stdout.splitlines()]
    results = [r for r in records if r["kind"] == "message" and r["message"]["role"] == "tool"
               and r["message"]["tool_call_id"].startswith("r")]
    return {"reads": len(results),
            "answered_by_note": sum("is unchanged since you read it" in r["message"]["content"] for r in results),
            "read_result_tokens": sum(r["tokens"] for r in results),
            "prompt_tokens": sum(r["prompt_tokens"] for r in records if r["kind"] == "usage")}


def repeated_reads(root: Path) -> dict[str, Any]:
    """Workload 2: the same session with and without repeat notes."""
    rows = {}
    for notes in (True, False):
        work = root / f"work-{notes}"
        work.mkdir()
        rows["with ledger notes" if notes else "without (repeat_notes: false)"] = _session(work, root, notes)
    return rows


def _fact_line(trace: Any, value: str) -> str:
    """The line of the trace's tool output or user message that holds ``value``."""
    for turn in trace.turns:
        for text in [turn.user or "", *(call.output for call in turn.calls)]:
            if value in text:
                return next(line for line in text.split("\n") if value in line)
    return ""


def _recall_finds(ctx: Any, line: str, value: str) -> dict[str, bool]:
    """Whether one ``recall`` call finds ``value`` when asked the way a model would: with what it
    knows of the fact (the words of its line that hold no digit: a model knows "the memory limit
    of the worker pool", not "48213 MiB"), as keywords (8 hits) or as a regex of that line with
    every token holding a digit left open (50 hits)."""
    from ctxagent.tools.recall import recall

    tokens = line.split()
    known = [t for t in tokens if not re.search(r"\d", t)]
    keyword = recall(ctx, " ".join(w for t in known for w in re.findall(r"[A-Za-z]{3,}", t)))
    pattern = r"\s+".join(r"\S+" if re.search(r"\d", t) else re.escape(t) for t in tokens)
    return {"keyword": value in keyword, "regex": value in recall(ctx, pattern, regex=True, top_k=50)}


def reachability(root: Path, turns: int = 80, only: tuple[str, ...] = ()) -> dict[str, Any]:
    """Workload 3: per bundled profile (``only`` those, when given) and path, how many of the planted
    facts the model can reach."""
    from benchmarks.harness import CtxagentRun, data_dir, prepare
    from benchmarks.suite import SIZED_WINDOW, profiles, setup
    from benchmarks.workloads import sized_session
    from ctxagent.profile import load_profile
    from ctxagent.tools.base import ToolContext

    trace = sized_session("logs-2300", turns, plant_every=1)
    prep = prepare(trace, load_profile("default").system_prompt)
    facts = trace.facts  # in tool outputs (5 of 7 kinds) and user messages (2 of 7)
    lines = {f.value: _fact_line(trace, f.value) for f in facts}
    out: dict[str, Any] = {"facts": len(facts), "turns": turns, "window": SIZED_WINDOW, "rows": {}}
    n = 0
    for label, profile, problem in profiles():
        if only and label not in only:
            continue
        for path in ("interactive", "batch"):
            row: dict[str, Any] = {}
            for with_recall in (True, False):
                tools = [t for t in profile.tools if with_recall or t != "recall"]
                s = setup(label, profile.model_copy(update={"tools": tools}), False, root, problem,
                          window=SIZED_WINDOW)
                n += 1
                run = CtxagentRun(f"{label} ({path})", prep, s.profile, path=path, window=s.window,
                                  root=root / f"run{n}")
                result = run.drive(group="profile", probes=False)
                row["input_tokens" if with_recall else "input_tokens_without_recall"] = result.total()
                if not with_recall:
                    continue
                with data_dir(run.data):
                    view_text = json.dumps([e.message for e in run.runner.request()], ensure_ascii=False)
                    stored = run.stored_texts(view_text)
                    ctx = ToolContext(run.store, run.toolset.ctx.workdir, transcript=run.session.transcript.path)
                    found = {f.value: _recall_finds(ctx, lines[f.value], f.value) for f in facts}
                in_view = {f.value for f in facts if f.value in view_text}
                by_handle = {f.value for f in facts if any(f.value in t for t in stored)} - in_view
                recalled = {v for v, hit in found.items() if hit["keyword"] or hit["regex"]}
                row.update(in_view=len(in_view), by_handle=len(by_handle),
                           recall_keyword=sum(h["keyword"] for h in found.values()),
                           recall_regex=sum(h["regex"] for h in found.values()),
                           reachable=len(in_view | by_handle | recalled), stopped_at=result.stopped_at,
                           error=result.error)
            row["recall_cost_pct"] = round(100 * (row["input_tokens"] / row["input_tokens_without_recall"] - 1), 2)
            out["rows"][f"{label} ({path})"] = row
    return out


def run(quick: bool = False) -> dict[str, Any]:
    """All three parts in a temporary folder; ``quick``: reachability over 40 turns, two profiles."""
    with tempfile.TemporaryDirectory(prefix="ctxagent-bench-quality-") as tmp:
        root = Path(tmp)
        for part in ("clean", "reads", "reach"):
            (root / part).mkdir()
        return {"cleaning": cleaning(root / "clean"), "repeated_reads": repeated_reads(root / "reads"),
                "reachability": reachability(root / "reach", *((40, ("default", "minimal")) if quick else ()))}


def tables(numbers: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The three tables as (title, header, rows of cells)."""
    clean = [[name, f"{r['raw_tokens']:,}", f"{r['context_tokens']:,}", f"{r['plain_tokens']:,}", str(r["offloaded"]),
              str(r["last_line_visible"])] for name, r in numbers["cleaning"].items()]
    reads = [[name, str(r["reads"]), str(r["answered_by_note"]), f"{r['read_result_tokens']:,}",
              f"{r['prompt_tokens']:,}"] for name, r in numbers["repeated_reads"].items()]
    reach = numbers["reachability"]
    rows = [[name, str(r["in_view"]), str(r["by_handle"]), str(r["recall_keyword"]), str(r["recall_regex"]),
             f"{r['reachable']}/{reach['facts']}", f"{r['input_tokens']:,}", f"{r['recall_cost_pct']:+.2f}%"]
            for name, r in reach["rows"].items()]
    return [
        ("Issue 11: terminal output, tokens in the context (real shell tool, default profile, 128K window)",
         ["workload", "raw tokens", "tokens in context", "plain text", "offloaded", "last line visible"], clean),
        ("Issue 11: a 36-turn session re-reading 6 files (3 rewritten once), real CLI, scripted model",
         ["repeated reads", "reads", "answered by a note", "tokens of read results", "prompt tokens (run)"], reads),
        (f"Issue 11: facts reachable after {reach['turns']} turns of ~2,300-token logs in a {reach['window']:,}-token "
         f"window ({reach['facts']} facts, one a turn; recall asked without the value)",
         ["profile (path)", "in view", "+ by handle", "recall (keyword, 8 hits)", "recall (regex, 50 hits)",
          "reachable", "input tokens", "recall tool's cost"], rows),
    ]


def render(numbers: dict[str, Any]) -> list[str]:
    """The tables as Markdown lines."""
    lines: list[str] = []
    for title, header, rows in tables(numbers):
        lines += [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    numbers = run()
    print(json.dumps(numbers, indent=2) if args.json else "\n".join(render(numbers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
