"""Issue 18's resume floors: a realistic 10,000-message session (~20 MB; benchmarks/resume_transcript.py)
opened warm (in-process) and shown cold (``inspect context`` in a new process), the record decoder's
throughput, and the peak memory of a one-turn run. Run: ``python -m benchmarks.resume_floor [--quick]``.

Every figure is timed in alternating pairs with its floor, in one run (benchmarks/pairs.py; medians):

- warm resume: ``open_state(Transcript(path))``, the state a run starts from, as ``resume`` opens
  it: the folded-state snapshot the session's last run or open left (agent/snapshot.py), checked
  against the file (sha256 of the bytes it covers) and advanced by the records after it. Floor:
  reading the file's lines and ``msgspec.json.decode`` of each into plain dicts — the least any
  resume that looks at every record must do. Also timed: the whole fold with no snapshot (the first
  open of a session written by an older ctxagent, or after the snapshot cache was cleared).
- cold ``inspect context --session S`` into a pipe (plain output), a new process each time. Floor:
  a new interpreter that imports typer (the CLI framework) and decodes every line as above. The
  count cache (ctxagent/tokens.py) holds what an earlier run or inspect of the session counted,
  and the snapshot cache the state it folded: one untimed inspect fills both first, as the end of
  any run of the session would have.
- decode throughput (MB/s of transcript): the record decoder (``records.loads``: pydantic-core's
  JSON validation into the record models) against msgspec into plain dicts.
- peak memory (``ru_maxrss`` of the child, MB): ``ctxagent run --batch --model scripted:FILE hi``
  beyond ``python -c pass``, and cold ``inspect context`` likewise.

Targets (issue 18): warm resume <= 0.1 s, cold inspect <= 0.5 s, a run <= 60 MB beyond the
interpreter when no tokenizer is needed yet.
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
from benchmarks.pairs import HEADER, Paired, command, paired

FLOOR_CHILD = "import sys, typer, msgspec\nfor line in open(sys.argv[1], 'rb'):\n    msgspec.json.decode(line)\n"


def _decode_all(path: Path) -> Callable[[], None]:
    import msgspec

    def floor() -> None:
        with open(path, "rb") as fh:
            for line in fh:
                msgspec.json.decode(line)

    return floor


def _open(path: Path, snapshot: bool = True) -> Callable[[], None]:
    from ctxagent.agent.snapshot import open_state
    from ctxagent.sessions.transcript import Transcript

    def warm() -> None:
        open_state(Transcript(path), snapshot=snapshot)

    return warm


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
        subprocess.run(inspect, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
        warm = paired(_decode_all(path), _open(path), pairs)
        whole = paired(_decode_all(path), _open(path, snapshot=False), pairs)
        cold = paired(command([py, "-c", FLOOR_CHILD, str(path)], env=env), command(inspect, env=env), pairs)
        ours = paired(_each_line(_dict_decoder(), lines), _each_line(records.loads, lines), pairs)
        script = Path(tmp) / "hi.yaml"
        script.write_text("- content: hello\n", encoding="utf-8")
        memory = _memory(pairs, env, script, "realistic")
    return {"pairs": pairs, "messages": messages, "records": len(lines), "transcript_mb": round(mb, 1),
            "build_s": round(built_s, 1), "warm": _as_dict(warm), "whole_fold": _as_dict(whole), "cold": _as_dict(cold),
            "decode_mb_s": {"msgspec_dicts": round(mb / ours.a_s), "records_loads": round(mb / ours.b_s)},
            "memory": memory}


def _dict_decoder() -> Callable[[bytes], Any]:
    import msgspec

    return msgspec.json.decode


def _as_dict(p: Paired) -> dict[str, float]:
    return {"floor_s": round(p.a_s, 4), "s": round(p.b_s, 4), "ratio": round(p.ratio, 2)}


def _row(what: str, got: dict[str, float], floor: str, target_s: float) -> list[str]:
    met = "met" if got["s"] <= target_s else "not met"
    return [what, f"{got['s']:.3f} s", f"{floor} {got['floor_s']:.3f} s", f"{got['ratio']:.2f}x",
            f"≤ {target_s:g} s", met]


def tables(data: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The result as ``(title, header, rows)``."""
    d, m = data["decode_mb_s"], data["memory"]
    rows = [
        _row("warm resume (open: snapshot + records after it, in-process)", data["warm"],
             "read + msgspec-decode every line", 0.1),
        *([_row("  the same with no snapshot (fold every record)", data["whole_fold"],
                "read + msgspec-decode every line", 0.1)] if "whole_fold" in data else []),
        _row("cold `inspect context` (new process, plain output)", data["cold"],
             "new python: import typer + decode every line", 0.5),
        ["record decoder (`records.loads`)", f"{d['records_loads']} MB/s",
         f"msgspec to dicts {d['msgspec_dicts']} MB/s",
         f"{d['msgspec_dicts'] / d['records_loads']:.2f}x", "–", ""],
        ["peak memory, one-turn scripted run (beyond the interpreter)", f"{m['run_beyond_mb']:.0f} MB",
         f"`python -c pass` {m['python_pass_mb']:.0f} MB", "–", "≤ 60 MB",
         "met" if m["run_beyond_mb"] <= 60 else f"not met (the tokenizer alone: {m['tokenizer_beyond_mb']:.0f} MB)"],
        ["peak memory, cold `inspect context` (beyond the interpreter)", f"{m['inspect_beyond_mb']:.0f} MB",
         f"`python -c pass` {m['python_pass_mb']:.0f} MB", "–", "–", ""],
    ]
    title = (f"Issue 18: resume of a realistic session ({data['messages']:,} messages, {data['records']:,} records, "
             f"{data['transcript_mb']} MB; medians of {data['pairs']} pairs, one run)")
    return [(title, HEADER, rows)]


def main(argv: list[str] | None = None) -> None:
    pairs_.main(argv, prog="python -m benchmarks.resume_floor", doc=__doc__, run=run, tables=tables,
                quick_help="3 pairs instead of 5")

if __name__ == "__main__":
    main()
