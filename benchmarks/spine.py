"""Numbers for the spine: start-up, append latency, resume of a 10,000-message transcript, and the
time and peak memory of offloading a 1 GB shell output. Run: ``python -m benchmarks.spine [--quick]``.

Timings are wall-clock medians on this machine; compare the ratios, not the absolute values.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ONE_GB = 1_000_000_000


def wall(cmd: list[str], runs: int, env: dict[str, str] | None = None) -> float:
    """Median wall time of ``cmd`` in seconds over ``runs`` runs (one warm-up first)."""
    times = []
    for i in range(runs + 1):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
        if i:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def startup(runs: int) -> dict[str, float]:
    """Medians (s): ``python -c pass``; ``import typer`` and ``ctxagent --help`` timed in ``runs``
    alternating pairs (benchmarks/pairs.py: their ratio survives a loaded machine)."""
    from benchmarks.pairs import command, paired

    py = sys.executable
    wall([py, "-m", "ctxagent", "--help"], 1)  # warm the file cache for both sides
    pair = paired(command([py, "-c", "import typer"]), command([py, "-m", "ctxagent", "--help"]), n=runs)
    return {
        "python -c pass": wall([py, "-c", "pass"], runs),
        "python -c 'import typer'": pair.a_s,
        "ctxagent --help": pair.b_s,
        "pairs": pair.n,
    }


def append_latency(n: int, root: Path) -> dict[str, float]:
    from ctxagent.sessions import records
    from ctxagent.sessions.transcript import Transcript

    t = Transcript(root / "append.jsonl")
    lat = []
    for i in range(n):
        rec = records.MessageRecord(seq=i, turn=i, tokens=50, message={"role": "user", "content": "x" * 400})
        s = time.perf_counter()
        t.append([rec])
        lat.append((time.perf_counter() - s) * 1000)
    lat.sort()
    return {"p50_ms": lat[len(lat) // 2], "p99_ms": lat[int(len(lat) * 0.99)]}


def write_transcript(session_root: Path, messages: int, profile_name: str = "default") -> None:
    """A realistic transcript: a task, then assistant tool calls with results of skewed sizes, and
    the compaction records the profile's batch pipeline makes along the way (as a real run writes
    them: a resumed session starts from those, not from 10,000 raw messages)."""
    import random

    from ctxagent.agent.context import ContextState, record_of
    from ctxagent.agent.runner import make_budget
    from ctxagent.messages import tool_call
    from ctxagent.profile import load_profile
    from ctxagent.sessions import records
    from ctxagent.sessions.transcript import Transcript

    rng = random.Random(7)
    session_root.mkdir(parents=True)
    profile = load_profile(profile_name)
    items: list[object] = [records.SessionHeader(name=session_root.name, model="scripted:none", profile=profile_name,
                                                 context_window=128_000)]
    state = ContextState(transcript_path=str(session_root / "transcript.jsonl"))
    budget = make_budget(profile, 128_000, 744)
    seq = turn = 0

    def msg(m: dict[str, object], tokens: int) -> None:
        nonlocal seq
        record = records.MessageRecord(seq=seq, turn=turn, tokens=tokens, message=m)
        items.append(record)
        state.add(record)
        seq += 1

    msg({"role": "system", "content": "system prompt"}, 10)
    turn = 1
    msg({"role": "user", "content": "the task"}, 10)
    while seq < messages:
        turn += 1
        built = state.build(profile.pipeline("batch"), budget, turn=turn)
        items.extend(record_of(c) for c in built.compactions)
        state.record(built.compactions)
        cid = f"c{seq}"
        msg({"role": "assistant", "content": None, "tool_calls": [tool_call(cid, "shell", '{"command":"ls"}')]}, 20)
        size = int(rng.lognormvariate(6, 1.2))
        msg({"role": "tool", "tool_call_id": cid, "content": "y" * min(size, 20_000)}, max(1, size // 4))
    items.append(records.EndRecord(reason="max_turns", turn=turn))
    Transcript(session_root / "transcript.jsonl").append(items)


def resume_time(messages: int, root: Path, runs: int) -> dict[str, float]:
    """Time to open a session for resume (load the JSONL, replay its compactions, scan, run the
    pipeline to build the next view), in-process, with the default profile."""
    os.environ["CTXAGENT_DATA_DIR"] = str(root)
    from ctxagent.agent.peek import next_request
    from ctxagent.sessions.session import Session

    session = Session.at(f"big{messages}")
    write_transcript(session.root, messages)
    times = []
    for _ in range(runs):
        s = time.perf_counter()
        next_request(session)
        times.append(time.perf_counter() - s)
    size = (session.root / "transcript.jsonl").stat().st_size
    cli = wall([sys.executable, "-m", "ctxagent", "inspect", "transcript", "--session", session.name, "--json"],
               3, env={**os.environ})
    return {"messages": messages, "transcript_mb": size / 1e6, "resume_ms": statistics.median(times) * 1000,
            "cli_inspect_transcript_json_s": cli}


OFFLOAD_CHILD = r"""
import json, sys, time
from pathlib import Path
from ctxagent.agent.model import ToolCall
from ctxagent.sessions.redact import RedactingStore
from ctxagent.sessions.store import OutputStore
from ctxagent.tools.base import ToolContext
from ctxagent.tools.offload import OffloadPolicy
from ctxagent.tools.toolset import make_toolset
root, size = Path(sys.argv[1]), int(sys.argv[2])
store_type = RedactingStore if sys.argv[3] == "redact" else OutputStore
def hwm_mb():  # this process's own peak RSS (ru_maxrss would include the parent's, from before exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
ts = make_toolset(["shell"], ToolContext(store_type(root / "outputs"), root), OffloadPolicy(limit_tokens=20000))
from ctxagent.tokens import count_text
count_text("warm the tokenizer up: a real session has it loaded before its first tool call")
before = hwm_mb()
cmd = f"yes 'the quick brown fox jumps over the lazy dog 0123456789' | head -c {size}"
t = time.perf_counter()
out = ts.call(ToolCall("big", "shell", json.dumps({"command": cmd, "timeout_s": 600})))
elapsed = time.perf_counter() - t
after = hwm_mb()
print(json.dumps({"seconds": elapsed, "rss_before_mb": before, "rss_peak_mb": after,
                  "offloaded": out.output is not None, "bytes": out.output.bytes if out.output else 0}))
"""


def offload(size: int, root: Path) -> dict[str, float]:
    """Offload ``size`` bytes of shell output into a session's store (secrets redacted, as in a real
    session) and into a plain store (no redaction pass), against writing the same bytes with the shell."""
    from benchmarks.pairs import command, paired

    root.mkdir(parents=True, exist_ok=True)
    result: dict[str, float] = {}
    shell = command(["bash", "-c", f"yes 'the quick brown fox jumps over the lazy dog 0123456789' "
                                   f"| head -c {size} > {root}/plain.out"])
    for store in ("redact", "plain"):
        runs: list[dict[str, float]] = []

        def child(store: str = store, runs: list[dict[str, float]] = runs) -> float:
            out = subprocess.run([sys.executable, "-c", OFFLOAD_CHILD, str(root / store), str(size), store],
                                 capture_output=True, text=True, check=True)
            shutil.rmtree(root / store, ignore_errors=True)
            runs.append(json.loads(out.stdout))
            return float(runs[-1]["seconds"])

        pair = paired(shell, child, n=3)  # the shell then the offload, three times: medians
        result |= {f"{store}_{k}": v for k, v in runs[-1].items()}
        result |= {f"{store}_seconds": pair.b_s, f"{store}_shell_s": pair.a_s, f"{store}_ratio_to_shell": pair.ratio,
                   f"{store}_rss_peak_mb": max(r["rss_peak_mb"] for r in runs)}
    result["shell_to_file_s"] = result["redact_shell_s"]
    result["pairs"] = 3
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer runs")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    runs = 3 if args.quick else 10
    root = Path(tempfile.mkdtemp(prefix="ctxagent-bench-"))
    try:
        results = {
            "startup_s": startup(runs),
            "append": append_latency(300 if args.quick else 2000, root),
            "resume": resume_time(10_000, root / "data", runs),
            "offload": offload(ONE_GB // (10 if args.quick else 1), root / "offload"),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    s = results["startup_s"]
    print(f"start-up  python -c pass {s['python -c pass']:.3f}s | import typer {s[next(iter(list(s)[1:2]))]:.3f}s"
          f" | ctxagent --help {s['ctxagent --help']:.3f}s"
          f" ({s['ctxagent --help'] / s[list(s)[1]]:.2f}x import typer)")
    a = results["append"]
    print(f"append    p50 {a['p50_ms']:.3f} ms, p99 {a['p99_ms']:.3f} ms per record (flush + fsync)")
    r = results["resume"]
    print(f"resume    {r['messages']:,} messages ({r['transcript_mb']:.1f} MB): {r['resume_ms']:.0f} ms in-process; "
          f"'inspect transcript --json' {r['cli_inspect_transcript_json_s']:.2f} s")
    o = results["offload"]
    for store, what in (("redact", "with the secret scan (default)"), ("plain", "without the secret scan")):
        print(f"offload   {o[f'{store}_bytes'] / 1e9:.2f} GB shell output {what}: {o[f'{store}_seconds']:.2f} s "
              f"({o[f'{store}_ratio_to_shell']:.2f}x the shell writing it to a file, {o['shell_to_file_s']:.2f} s); "
              f"peak RSS {o[f'{store}_rss_peak_mb']:.0f} MB (before the call {o[f'{store}_rss_before_mb']:.0f} MB)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
