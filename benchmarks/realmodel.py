"""Task success with a real model: small tasks a script can check, each run under no management,
``minimal``, ``default``, ``long-horizon`` and ``floor``, against llama.cpp's server and Qwen2.5-Coder-1.5B,
sampling at temperature 0 (``--server-args``): at llama.cpp's default 0.8 this model succeeded in 14-29%
of the tasks under every profile, at 0 in 50-64% (2026-12-04, docs/local-models.md).

Seed 003's measure of a context strategy is task success: within 3% of unmanaged where the
unmanaged context fits, better where it does not, with fewer tokens per task. Each task is a real
``ctxagent run`` (and ``resume`` for the turns after the first) through the CLI, in this process, on
real files in a fresh folder, with the server's own window (no ``--context-window``: the window
comes from the server's ``/props``). A task succeeds when its check passes: the answer holds the
value, or the file was fixed (the check runs the test). Per profile the table gives task success,
model requests, prompt tokens (all, and those the server served from its prompt cache: a request
that keeps the previous prefix costs only its new tokens, so cache stability shows up as wall
time), completion tokens and wall time, each per task run.

*No management* is a profile with no strategies, outputs inline up to 90% of the window (the most a
profile allows) and an unbounded tool-result limit: a request that does not fit is refused before it
is sent (BUDGET), which is where an unmanaged agent fails.

Every run gets ``--max-output-tokens 256`` (``--max-output-tokens`` changes it; 0 leaves each
profile's reserve): a tool call or an answer takes tens of tokens, and a 1.5B model that rambles
writes until the limit at a few tokens a second (512 tokens took over two minutes). And every turn
gets ``--max-turns 10`` (``--max-turns``): a task needs a few calls, and the model once read a 2 MB
log one line per call, which only the profile's 30 would have ended.

    python -m benchmarks.realmodel                                   # every task, 5 profiles, --repeat 2
    python -m benchmarks.realmodel --tasks notes,log-error-id --profiles default --repeat 1
    python -m benchmarks.realmodel --list                            # the tasks and what each covers

Needs ``llama-server`` and the model (``python -m benchmarks.realserver --fetch --build``); the
server runs under ``nice`` when ``--nice`` is given. Results: ``benchmarks/results/realmodel.json``
(every run) and the tables on stdout (``--markdown`` prints them as Markdown for the docs).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import realtasks
from benchmarks.realserver import LlamaServer, missing

PROFILES = ("none", "minimal", "default", "long-horizon", "floor")
NONE_PROFILE = """\
# No management: no strategies, outputs inline up to 90% of the window (the most a profile allows).
extends: minimal
tool_result_limit: 100000000
tool_result_fraction: 0.9
preview: {head_lines: 100000, tail_lines: 100000, max_chars: 10000000}
pipelines: {interactive: [], batch: []}
"""
MODEL = "openai/qwen2.5-coder-1.5b"
RESULTS = Path(__file__).parent / "results" / "realmodel.json"


@dataclass
class Run:
    """One task run under one profile: outcome, spend (tokens as the server counted them), time."""

    task: str
    profile: str
    repeat: int
    window: int
    success: bool
    status: str
    answer: str
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    error: str = ""
    calls: list[str] = field(default_factory=list)


def _profile_path(name: str, folder: Path) -> str:
    """The ``--profile`` argument of ``name``: a bundled profile, or the unmanaged one written to ``folder``."""
    if name != "none":
        return name
    path = folder / "none.yaml"
    path.write_text(NONE_PROFILE, encoding="utf-8")
    return str(path)


def _cli(args: list[str]) -> tuple[int, dict[str, Any]]:
    """``ctxagent ARGS`` in this process (litellm imported once for all runs): exit code and the
    ``--json`` object it printed."""
    from ctxagent.cli import invoke

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = invoke(args)
    lines = [line for line in out.getvalue().splitlines() if line.startswith("{")]
    return code, json.loads(lines[-1]) if lines else {"status": "error", "error": err.getvalue()[-500:]}


def run_task(task: realtasks.Task, profile: str, repeat: int, base_url: str, window: int, folder: Path,
             timeout_s: float, reply_tokens: int | None = None, max_turns: int = 10) -> Run:
    """Run ``task`` under ``profile`` in a fresh folder: the first turn with ``run``, the others with
    ``resume``; then its check."""
    label = Path(profile).stem if profile.endswith((".yaml", ".yml")) else profile  # a profile file's name
    work = folder / f"{task.name}-{label}-{repeat}"
    work.mkdir(parents=True)
    task.setup(work)
    session = f"{task.name}-{label}-{repeat}".replace(".", "_")
    common = ["--json", "--session", session, "--timeout", f"{timeout_s:g}", "--no-lessons", "--max-turns",
              str(max_turns)]
    if reply_tokens:
        common += ["--max-output-tokens", str(reply_tokens)]
    if task.allow:
        common += ["--allow", task.allow]
    started = time.monotonic()
    result: dict[str, Any] = {}
    for index, message in enumerate(task.turns):
        if index == 0:
            args = ["run", *common, "--model", MODEL, "--api-base", base_url, "--profile",
                    _profile_path(profile, folder), "--workdir", str(work), message]
        else:
            args = ["resume", *common, message]
        _, result = _cli(args)
        if result.get("status") != "answered":
            break
    wall = time.monotonic() - started
    usage = result.get("session_usage") or result.get("usage") or {}
    answer = str(result.get("answer") or "")
    done = result.get("status") == "answered" and len(task.turns) == index + 1
    return Run(task.name, profile, repeat, window, bool(done and task.check(answer, work)), str(result.get("status")),
               answer[:300], int(usage.get("calls") or 0), int(usage.get("prompt_tokens") or 0),
               int(usage.get("cached_tokens") or 0), int(usage.get("completion_tokens") or 0), round(wall, 1),
               str(result.get("error") or "")[:300], _calls(session))


def _calls(session: str) -> list[str]:
    """The tool calls the session's transcript recorded, ``name(arguments)``, in order (for reading
    what the model did; arguments cut at 80 characters)."""
    from ctxagent.sessions.records import MessageRecord
    from ctxagent.sessions.session import Session

    found = []
    try:
        for record in Session.at(session).transcript.records():
            if isinstance(record, MessageRecord):
                for call in record.message.get("tool_calls") or []:
                    found.append(f"{call['function']['name']}({call['function']['arguments'][:80]})")
    except Exception as err:  # a session that never started
        found.append(f"<no transcript: {type(err).__name__}>")
    return found


# ---------------------------------------------------------------- the report


def summary(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One row per profile: success (runs and %), and per task run the means of requests, prompt,
    cached, uncached and completion tokens and wall seconds."""
    rows = []
    for profile in dict.fromkeys(r.profile for r in runs):
        mine = [r for r in runs if r.profile == profile]
        n = len(mine)
        rows.append({
            "profile": profile, "runs": n, "succeeded": sum(r.success for r in mine),
            "success": sum(r.success for r in mine) / n,
            "requests": statistics.fmean(r.requests for r in mine),
            "prompt_tokens": statistics.fmean(r.prompt_tokens for r in mine),
            "cached_tokens": statistics.fmean(r.cached_tokens for r in mine),
            "uncached_tokens": statistics.fmean(r.prompt_tokens - r.cached_tokens for r in mine),
            "completion_tokens": statistics.fmean(r.completion_tokens for r in mine),
            "wall_s": statistics.fmean(r.wall_s for r in mine),
            "overflows": sum(r.status == "context_overflow" for r in mine),
        })
    return rows


def verdict(runs: Sequence[Run]) -> list[str]:
    """Seed 003's measure, per managed profile against no management: success on the tasks where
    unmanaged fits (no unmanaged run overflowed) within 3 points, success where it does not, and
    prompt tokens per task run."""
    by_task: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        by_task[r.task].append(r)
    unmanaged = [r for r in runs if r.profile == "none"]
    if not unmanaged:
        return ["no unmanaged runs: nothing to compare against"]
    overflowing = {t for t, rs in by_task.items() if any(r.profile == "none" and r.status == "context_overflow"
                                                         for r in rs)}
    lines = [f"tasks where unmanaged overflowed: {', '.join(sorted(overflowing)) or 'none'}"]

    def rate(rs: Iterable[Run]) -> tuple[float | None, int]:
        rs = list(rs)
        return (sum(r.success for r in rs) / len(rs) if rs else None), len(rs)

    base_fit, n_fit = rate(r for r in unmanaged if r.task not in overflowing)
    base_over, _ = rate(r for r in unmanaged if r.task in overflowing)
    base_tokens = statistics.fmean(r.prompt_tokens for r in unmanaged if r.task not in overflowing) \
        if n_fit else None
    for profile in [p for p in dict.fromkeys(r.profile for r in runs) if p != "none"]:
        mine = [r for r in runs if r.profile == profile]
        fit, _ = rate(r for r in mine if r.task not in overflowing)
        over, _ = rate(r for r in mine if r.task in overflowing)
        tokens = [r.prompt_tokens for r in mine if r.task not in overflowing]
        parts = []
        if fit is not None and base_fit is not None:
            ok = "within 3 points" if fit >= base_fit - 0.03 else "MORE than 3 points below"
            parts.append(f"success where unmanaged fits {fit:.0%} vs {base_fit:.0%} ({ok})")
        if over is not None and base_over is not None:
            parts.append(f"where it overflows {over:.0%} vs {base_over:.0%}")
        if tokens and base_tokens:
            parts.append(f"prompt tokens per task run where unmanaged fits {statistics.fmean(tokens):,.0f} vs "
                         f"{base_tokens:,.0f} ({statistics.fmean(tokens) / base_tokens - 1:+.0%})")
        lines.append(f"{profile}: " + "; ".join(parts))
    return lines


def tables(runs: Sequence[Run], markdown: bool = False) -> str:
    """The profile table, the task-by-profile success table and the verdict, as text (or Markdown)."""
    head = ["profile", "success", "requests", "prompt tok", "cached tok", "uncached tok", "completion tok",
            "wall s", "overflows"]
    body = [[r["profile"], f"{r['succeeded']}/{r['runs']} ({r['success']:.0%})", f"{r['requests']:.1f}",
             f"{r['prompt_tokens']:,.0f}", f"{r['cached_tokens']:,.0f}", f"{r['uncached_tokens']:,.0f}",
             f"{r['completion_tokens']:,.0f}", f"{r['wall_s']:.0f}", str(r["overflows"])] for r in summary(runs)]
    profiles = list(dict.fromkeys(r.profile for r in runs))
    grid_head = ["task", *profiles]
    grid = []
    for task in dict.fromkeys(r.task for r in runs):
        cells = [task]
        for profile in profiles:
            rs = [r for r in runs if r.task == task and r.profile == profile]
            cells.append(f"{sum(r.success for r in rs)}/{len(rs)}" if rs else "–")
        grid.append(cells)
    notes = "\n".join(f"- {line}" for line in verdict(runs))
    return f"{_table(head, body, markdown)}\n\n{_table(grid_head, grid, markdown)}\n\n{notes}"


def _table(head: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows, strict=True)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in [head, *rows])


# ---------------------------------------------------------------- the run


def run_all(tasks: Sequence[realtasks.Task], profiles: Sequence[str], repeat: int, *, timeout_s: float, nice: int,
            threads: int | None, say: Callable[[str], None], reply_tokens: int | None = None,
            keep: Path | None = None, server_args: tuple[str, ...] = (), max_turns: int = 10) -> list[Run]:
    """Every task under every profile ``repeat`` times, one server per window; runs of one profile
    follow each other, so the server's prompt cache keeps the system prompt and tool schemas.
    ``keep``: a folder that keeps the runs' files, sessions and server logs (default: a temporary one)."""
    runs: list[Run] = []
    by_window: dict[int, list[realtasks.Task]] = defaultdict(list)
    for task in tasks:
        by_window[task.window].append(task)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        folder = keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ctxagent-realmodel-")))
        os.environ["CTXAGENT_DATA_DIR"] = str(folder / "data")  # sessions of this benchmark only
        for window, group in sorted(by_window.items()):
            with LlamaServer(window, nice=nice, threads=threads, log=folder / f"server-{window}.log",
                             extra=server_args) as server:
                for profile in profiles:
                    for n in range(repeat):
                        for task in group:
                            run = run_task(task, profile, n, server.base_url, window, folder, timeout_s,
                                           reply_tokens, max_turns)
                            runs.append(run)
                            say(f"{task.name:<18} {profile:<13} #{n}  {'ok  ' if run.success else 'FAIL'} "
                                f"{run.status:<17} {run.requests} req {run.prompt_tokens:>6} prompt "
                                f"({run.cached_tokens} cached) {run.wall_s:>6.1f} s  {run.answer[:60]!r}")
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.realmodel", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", help="comma-separated task names (default: all; --list shows them)")
    parser.add_argument("--profiles", default=",".join(PROFILES),
                        help=f"comma-separated (default: {','.join(PROFILES)})")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each task under each profile (default 2)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds one model request may take (default 600)")
    parser.add_argument("--max-output-tokens", type=int, default=256,
                        help="each reply's reserve and max_tokens, for every profile (default 256; 0: the profiles')")
    parser.add_argument("--max-turns", type=int, default=10,
                        help="model calls per run of a turn (default 10: a task takes a few)")
    parser.add_argument("--nice", type=int, default=0, help="run the server under nice -n N")
    parser.add_argument("--threads", type=int, help="the server's CPU threads (default: all cores)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"results JSON (default {RESULTS})")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument("--keep", type=Path, help="keep the runs' folders, sessions and server logs here")
    parser.add_argument("--server-args", default="--temp 0",
                        help="more llama-server arguments (default '--temp 0', greedy; '' for the server's 0.8)")
    parser.add_argument("--list", action="store_true", help="list the tasks and exit")
    args = parser.parse_args(argv)
    if args.list:
        for task in realtasks.TASKS:
            print(f"{task.name:<18} {task.window:>5}-token window, {len(task.turns)} turn(s): {task.covers}")
        return 0
    chosen = realtasks.select(args.tasks)
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    if reason := missing():
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the server is stopped on the way out
    started = time.monotonic()
    runs = run_all(chosen, profiles, args.repeat, timeout_s=args.timeout, nice=args.nice, threads=args.threads,
                   say=lambda line: print(line, flush=True), reply_tokens=args.max_output_tokens or None,
                   keep=args.keep, server_args=tuple(args.server_args.split()), max_turns=args.max_turns)
    took = time.monotonic() - started
    print(f"\n{len(runs)} runs in {took / 60:.1f} min on {os.cpu_count()} cores ({platform.machine()}), "
          f"{time.strftime('%Y-%m-%d')}\n")
    print(tables(runs, args.markdown))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "minutes": round(took / 60, 1),
                                    "cores": os.cpu_count(), "command": " ".join(["python -m benchmarks.realmodel",
                                                                                 *(argv or sys.argv[1:])]),
                                    "summary": summary(runs), "verdict": verdict(runs),
                                    "runs": [asdict(r) for r in runs]}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
