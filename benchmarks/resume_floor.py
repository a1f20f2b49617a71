"""Resume floors (issues 18 and 35): a realistic 10,000-message session (~20 MB;
benchmarks/resume_transcript.py) opened in-process and shown cold (``inspect context`` in a new
process), the record decoder's throughput, and the peak memory of a one-turn run.
Run: ``python -m benchmarks.resume_floor [--quick]``.

Every figure is timed in alternating pairs with its floor, in one run (benchmarks/pairs.py; medians):

- open: ``open_state(Transcript(path))``, the state a run starts from, as ``resume`` opens it: a
  fold of every record (the folded-state snapshots that made this ~0.02 s were pickles, removed by
  issues 35 and 36). Floor: reading the file's lines and ``msgspec.json.decode`` of each into plain
  dicts — the least any resume that looks at every record must do.
- cold ``inspect context --session S`` into a pipe (plain output), a new process each time: the
  fold, the tokenizer built (no cache between processes), the view. Floor: a new interpreter that
  imports typer (the CLI framework) and decodes every line as above. One untimed inspect first puts
  the file in the page cache for both. Timed twice: wall time, then the CPU time (user + system) of
  the same pairs, which a busy machine inflates far less (for a process that waits for nothing it
  is what a quiet machine's wall time would be).
- decode throughput (MB/s of transcript): the record decoder (``records.loads``: pydantic-core's
  JSON validation into the record models) against msgspec into plain dicts.
- peak memory (``ru_maxrss`` of the child, MB): ``ctxagent run --batch --model scripted:FILE hi``
  beyond ``python -c pass``, and cold ``inspect context`` likewise.

Targets: cold inspect <= 1 s (issue 35; issue 18 had asked 0.5 s with the caches), a run <= 60 MB
beyond the interpreter (issue 18, when no tokenizer was needed yet: every run builds one now).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import pairs as pairs_
from benchmarks.pairs import HEADER, Paired, command, cpu_command, paired

COLD_TARGET_S = 1.0  # a cold `inspect context` of the 10,000-message session (issue 35)
FLOOR_CHILD = "import sys, typer, msgspec\nfor line in open(sys.argv[1], 'rb'):\n    msgspec.json.decode(line)\n"


def _decode_all(path: Path) -> Callable[[], None]:
    import msgspec

    def floor() -> None:
        with open(path, "rb") as fh:
            for line in fh:
                msgspec.json.decode(line)

    return floor


def _open(path: Path) -> Callable[[], None]:
    from ctxagent.agent.state import open_state
    from ctxagent.sessions.transcript import Transcript

    def opened() -> None:
        open_state(Transcript(path))

    return opened


def _each_line(parse: Callable[[bytes], Any], lines: list[bytes]) -> Callable[[], None]:
    def run() -> None:
        for line in lines:
            parse(line)

    return run


PEAK_CHILD = ("import os, sys\npid = os.fork()\nif pid == 0:\n    null = os.open(os.devnull, os.O_RDWR)\n"
              "    os.dup2(null, 1)\n    os.dup2(null, 2)\n    os.execv(sys.argv[1], sys.argv[1:])\n"
              "_, status, usage = os.wait4(pid, 0)\nprint(usage.ru_maxrss, os.waitstatus_to_exitcode(status))\n")
"""Runs a command and prints its peak RSS (KiB) and exit code. A small launcher forks it, so the
child's ``ru_maxrss`` starts from the launcher's few MB, not from this benchmark's heap (a fork
of a big process counts the parent's pages as the child's until it execs)."""


def peak_mb(args: list[str], env: dict[str, str]) -> float:
    """Peak resident memory (MB) of the process ``args`` runs (its own ``ru_maxrss``)."""
    out = subprocess.run([sys.executable, "-c", PEAK_CHILD, *args], capture_output=True, text=True, env=env,
                         check=True).stdout.split()
    if out[1] != "0":
        raise RuntimeError(f"{args} exited with {out[1]}")
    return int(out[0]) / 1024


def _memory(pairs: int, env: dict[str, str], script: Path, session: str) -> dict[str, float]:
    py = sys.executable
    base, run, inspect = [], [], []
    for _ in range(pairs):
        base.append(peak_mb([py, "-c", "pass"], env))
        run.append(peak_mb([py, "-m", "ctxagent", "run", "--batch", "--model", f"scripted:{script}", "hi"], env))
        inspect.append(peak_mb([py, "-m", "ctxagent", "inspect", "context", "--session", session], env))
    tokenizer = peak_mb([py, "-c", "from ctxagent.tokens import count_text; count_text('x')"], env)
    b = statistics.median(base)
    return {"python_pass_mb": round(b, 1), "run_mb": round(statistics.median(run), 1),
            "run_beyond_mb": round(statistics.median(run) - b, 1), "inspect_mb": round(statistics.median(inspect), 1),
            "inspect_beyond_mb": round(statistics.median(inspect) - b, 1),
            "tokenizer_beyond_mb": round(tokenizer - b, 1)}


def run(quick: bool = False, pairs: int | None = None, messages: int = 10_000) -> dict[str, Any]:
    """Build the session, then measure (``pairs`` pairs each: 5, 3 when ``quick``)."""
    from benchmarks import resume_transcript
    from ctxagent.sessions import records

    pairs = pairs or (3 if quick else 5)
    with tempfile.TemporaryDirectory(prefix="ctxagent-resume-") as tmp:
        data = Path(tmp) / "data"
        env = {**os.environ, "CTXAGENT_DATA_DIR": str(data)}
        started = time.perf_counter()
        path = resume_transcript.write(data / "sessions" / "realistic", messages)
        built_s = time.perf_counter() - started
        lines = path.read_bytes().splitlines()
        mb = path.stat().st_size / 1e6
        py = sys.executable
        inspect = [py, "-m", "ctxagent", "inspect", "context", "--session", "realistic"]
        subprocess.run(inspect, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)  # untimed
        opened = paired(_decode_all(path), _open(path), pairs)
        cold = paired(command([py, "-c", FLOOR_CHILD, str(path)], env=env), command(inspect, env=env), pairs)
        cold_cpu = paired(cpu_command([py, "-c", FLOOR_CHILD, str(path)], env), cpu_command(inspect, env), pairs)
        ours = paired(_each_line(_dict_decoder(), lines), _each_line(records.loads, lines), pairs)
        script = Path(tmp) / "hi.yaml"
        script.write_text("- content: hello\n", encoding="utf-8")
        memory = _memory(pairs, env, script, "realistic")
    return {"pairs": pairs, "messages": messages, "records": len(lines), "transcript_mb": round(mb, 1),
            "build_s": round(built_s, 1), "open": _as_dict(opened), "cold": _as_dict(cold),
            "cold_cpu": _as_dict(cold_cpu),
            "decode_mb_s": {"msgspec_dicts": round(mb / ours.a_s), "records_loads": round(mb / ours.b_s)},
            "memory": memory}


def _dict_decoder() -> Callable[[bytes], Any]:
    import msgspec

    return msgspec.json.decode


def _as_dict(p: Paired) -> dict[str, float]:
    return {"floor_s": round(p.a_s, 4), "s": round(p.b_s, 4), "ratio": round(p.ratio, 2)}


def _row(what: str, got: dict[str, float], floor: str, target_s: float | None) -> list[str]:
    met = "–" if target_s is None else "met" if got["s"] <= target_s else "not met"
    return [what, f"{got['s']:.3f} s", f"{floor} {got['floor_s']:.3f} s", f"{got['ratio']:.2f}x",
            "–" if target_s is None else f"≤ {target_s:g} s", met]


def tables(data: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The result as ``(title, header, rows)``."""
    d, m = data["decode_mb_s"], data["memory"]
    rows = [
        _row("open (fold every record, in-process)", data["open"], "read + msgspec-decode every line", None),
        _row("cold `inspect context` (new process, plain output)", data["cold"],
             "new python: import typer + decode every line", COLD_TARGET_S),
        *([_row("  the same, CPU time (user + system: a quiet machine's wall time)", data["cold_cpu"],
                "the same floor's CPU time", COLD_TARGET_S)] if "cold_cpu" in data else []),
        ["record decoder (`records.loads`)", f"{d['records_loads']} MB/s",
         f"msgspec to dicts {d['msgspec_dicts']} MB/s",
         f"{d['msgspec_dicts'] / d['records_loads']:.2f}x", "–", ""],
        ["peak memory, one-turn scripted run (beyond the interpreter)", f"{m['run_beyond_mb']:.0f} MB",
         f"`python -c pass` {m['python_pass_mb']:.0f} MB", "–", "≤ 60 MB",
         "met" if m["run_beyond_mb"] <= 60 else f"not met (the tokenizer alone: {m['tokenizer_beyond_mb']:.0f} MB)"],
        ["peak memory, cold `inspect context` (beyond the interpreter)", f"{m['inspect_beyond_mb']:.0f} MB",
         f"`python -c pass` {m['python_pass_mb']:.0f} MB", "–", "–", ""],
    ]
    title = (f"Issues 18 and 35: resume of a realistic session ({data['messages']:,} messages, "
             f"{data['records']:,} records, {data['transcript_mb']} MB; medians of {data['pairs']} pairs, one run)")
    return [(title, HEADER, rows)]


def main(argv: list[str] | None = None) -> None:
    pairs_.main(argv, prog="python -m benchmarks.resume_floor", doc=__doc__, run=run, tables=tables,
                quick_help="3 pairs instead of 5")

if __name__ == "__main__":
    main()
