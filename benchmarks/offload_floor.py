"""Issue 18's offload floor: a shell output offloaded with the secret scan on, against the shell
writing the same bytes to a file; and a turn's transcript writes, against one fsynced append.

Run: ``python -m benchmarks.offload_floor [--quick] [--pairs N] [--json]`` (1 GB a input; 100 MB
with ``--quick``). Three inputs, made once in a temporary folder: random base64 (``base64`` of
``/dev/urandom``: the worst case for a scanner looking for key-like text), a real-looking log
(timestamps, levels, paths, numbers, key=value fields) and ``yes`` (the best case).

Measured in pairs, in one run (A B A B ..., medians; a loaded machine slows both sides alike):

- floor A: ``bash -c "head -c N input > file"``, wall time;
- B: the shell tool running ``head -c N input`` in a session whose output store redacts (what every
  session does): the spool file, the secret scan, the output record (sha256, lines), the preview.
  The target: B within 2x of A on random base64.
- a turn: the runner's own writes for one model reply with one offloaded tool call (two
  ``Transcript.append`` calls, each redacting its records and fsyncing: the reply with its usage, then
  the output record with the tool message), against one fsynced append of the same bytes.

Also, once per input (not paired): the scan alone in MB/s, the Python patterns everywhere (the
fallback, and the only path before issue 18; on 100 MB) against the prefilter's one pass (with the
sha256 and line count).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import pairs as pairs_
from benchmarks.pairs import HEADER, Paired, paired

ONE_GB = 1_000_000_000
OLD_SCAN_BYTES = 100_000_000  # the Python patterns scan this much of each input (they run ~50 MB/s)
INPUTS = ("random base64", "log", "yes")
TARGET = 2.0  # offload of random base64 within 2x of the shell writing it


def _log_block(size: int, seed: int = 18) -> bytes:
    """``size`` bytes of log lines: timestamps, levels, loggers, request lines, paths, numbers,
    key=value fields, now and then a traceback line."""
    rng = random.Random(seed)
    levels = ["INFO"] * 12 + ["DEBUG"] * 6 + ["WARN"] * 2 + ["ERROR"]
    verbs = ["GET", "GET", "GET", "POST", "PUT", "DELETE"]
    routes = ["/api/v1/items/{}", "/api/v1/users/{}/orders", "/healthz", "/static/js/app.{}.js", "/api/v2/search"]
    lines, total, t = [], 0, 1_764_460_800.0
    while total < size:
        t += rng.expovariate(50)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"
        level = rng.choice(levels)
        if rng.random() < 0.03:
            module = rng.choice(["orders", "search"])
            line = (f'{stamp} {level:<5} [worker-{rng.randint(1, 8)}] app.errors:   File '
                    f'"/srv/app/releases/2026.11.{rng.randint(1, 30)}/app/handlers/{module}.py",'
                    f' line {rng.randint(10, 900)}, in handle')
        else:
            route = rng.choice(routes).format(rng.randint(1, 99999))
            line = (f"{stamp} {level:<5} [worker-{rng.randint(1, 8)}] app.server: {rng.choice(verbs)} {route} "
                    f"status={rng.choice([200, 200, 200, 201, 204, 304, 404, 500])} "
                    f"duration_ms={rng.randint(1, 2500)} bytes={rng.randint(0, 90000)} "
                    f"user_id=u_{rng.randint(1, 9999)} trace={rng.getrandbits(48):012x}")
        lines.append(line)
        total += len(line) + 1
    return ("\n".join(lines) + "\n").encode()[:size]


def make_inputs(root: Path, size: int) -> dict[str, Path]:
    """The three inputs of ``size`` bytes each, in ``root``."""
    from ctxagent.sessions.redact import default

    paths = {name: root / name.replace(" ", "_") for name in INPUTS}
    # 1 GB of random base64 holds a key-shaped string now and then (``AIza`` + 35 characters after a
    # ``+``/``/``: about one in two inputs); the store would redact it, so the stored output would
    # not be the input's bytes and the offload would take the rewrite path. Drawn again until clean.
    base64 = f"head -c {size} /dev/urandom | base64 | head -c {size} > {paths['random base64']}"
    for _ in range(20):
        subprocess.run(["bash", "-c", base64], check=True)
        if not default().scan_file(paths["random base64"]):
            break
    else:
        raise RuntimeError("20 draws of random base64 all held a secret-shaped string")
    block = _log_block(min(size, 16 * 1024 * 1024))
    with open(paths["log"], "wb") as fh:
        for start in range(0, size, len(block)):
            fh.write(block[: size - start])
    subprocess.run(["bash", "-c", f"yes 'the quick brown fox jumps over the lazy dog 0123456789' | head -c {size} "
                    f"> {paths['yes']}"], check=True)
    return paths


def _shell_floor(source: Path, size: int, out: Path) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        subprocess.run(["bash", "-c", f"head -c {size} {source} > {out}"], check=True)
        elapsed = time.perf_counter() - start
        out.unlink()
        return elapsed

    return run


def _offload(source: Path, size: int, root: Path) -> Callable[[], float]:
    """The shell tool's call of ``head -c size source`` in a redacting store (timed), then the
    stored output removed (not timed)."""
    from ctxagent.agent.model import ToolCall
    from ctxagent.sessions.redact import RedactingStore
    from ctxagent.tools.base import ToolContext
    from ctxagent.tools.offload import OffloadPolicy
    from ctxagent.tools.toolset import make_toolset

    root.mkdir(parents=True, exist_ok=True)
    toolset = make_toolset(["shell"], ToolContext(RedactingStore(root / "outputs"), root),
                           OffloadPolicy(limit_tokens=20_000))
    calls = iter(range(1_000_000))

    def run() -> float:
        call = ToolCall(f"c{next(calls)}", "shell", json.dumps({"command": f"head -c {size} {source}",
                                                                 "timeout_s": 600}))
        start = time.perf_counter()
        outcome = toolset.call(call)
        elapsed = time.perf_counter() - start
        assert outcome.output is not None and outcome.output.bytes == size, outcome
        shutil.rmtree(root / "outputs")
        return elapsed

    return run


def _turn_records(seq: int) -> tuple[list[Any], list[Any]]:
    """One turn's two appends: the reply (a tool call) with its usage; the output record with the
    tool message (a preview of an offloaded log, ~3 KB)."""
    from ctxagent.messages import tool_call
    from ctxagent.sessions import records

    cid = f"call_{seq:06d}"
    reply = records.MessageRecord(seq=seq, turn=seq, tokens=42, message={
        "role": "assistant", "content": "Let me look at the failing requests in the server log.",
        "tool_calls": [tool_call(cid, "shell", json.dumps({"command": "grep -n 'status=500' /srv/app/logs/app.log"}))]})
    usage = records.UsageRecord(turn=seq, model="openai/gpt-4o-mini", prompt_tokens=18_000 + seq,
                                completion_tokens=42, estimated_prompt_tokens=17_950 + seq)
    preview = _log_block(3000, seed=seq).decode()
    output = records.OutputRecord(handle=f"@{cid[-6:]}", call_id=cid, tool="shell", path=f"outputs/{cid[-6:]}.out",
                                  bytes=48_213, lines=391, tokens=12_050, tokens_exact=False, sha256="ab" * 32,
                                  arguments='{"command": "grep -n ..."}')
    tool = records.MessageRecord(seq=seq + 1, turn=seq, tokens=900, message={
        "role": "tool", "tool_call_id": cid, "content": f"exit code: 0\n{preview}\n[full output: 391 lines]"})
    return [reply, usage], [output, tool]


def _turn(root: Path) -> tuple[Callable[[], float], Callable[[], float]]:
    """(floor, figure) callables for one turn's transcript writes."""
    from ctxagent.sessions import redact
    from ctxagent.sessions.transcript import Transcript

    transcript = Transcript(root / "transcript.jsonl")
    transcript.append(_turn_records(0)[0])  # the file exists: later turns append
    plain = root / "plain.jsonl"
    plain.write_bytes(b"")
    seqs = iter(range(2, 10_000_000, 2))

    def floor() -> float:
        first, second = _turn_records(next(seqs))
        data = "".join(redact.dumps(r) + "\n" for r in (*first, *second)).encode()
        start = time.perf_counter()
        with open(plain, "ab") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return time.perf_counter() - start

    def figure() -> float:
        first, second = _turn_records(next(seqs))
        start = time.perf_counter()
        transcript.append(first)
        transcript.append(second)
        return time.perf_counter() - start

    return floor, figure


def scan_rates(path: Path) -> dict[str, float]:
    """MB/s of the Python patterns everywhere (first 100 MB of ``path``) and of the prefilter's
    one pass (all of it, with the sha256 and line count)."""
    from ctxagent.sessions.redact import Redactor, scan

    old, new = Redactor(prefilter=False), Redactor()
    rates: dict[str, float] = {}
    head = path.with_name(path.name + ".head")
    subprocess.run(["bash", "-c", f"head -c {OLD_SCAN_BYTES} {path} > {head}"], check=True)
    try:
        start = time.perf_counter()
        old.scan_file(head)
        rates["old_mb_s"] = head.stat().st_size / 1e6 / (time.perf_counter() - start)
    finally:
        head.unlink()
    pre = new.prefilter
    if pre is not None:
        start = time.perf_counter()
        measured = scan.measure(path, pre)
        rates["new_mb_s"] = path.stat().st_size / 1e6 / (time.perf_counter() - start)
        rates["windows"] = len(measured.windows) if measured.windows is not None else -1
    return rates


def run(quick: bool = False, pairs: int | None = None) -> dict[str, Any]:
    """The medians of ``pairs`` (5; 3 when ``quick``) A/B pairs per input and for a turn, the scan
    rates, and whether the base64 offload is within 2x of the shell."""
    from ctxagent.sessions.redact import default

    pairs = pairs or (3 if quick else 5)
    size = ONE_GB // (10 if quick else 1)
    out: dict[str, Any] = {"pairs": pairs, "bytes": size, "hyperscan": default().prefilter is not None,
                           "inputs": {}}
    with tempfile.TemporaryDirectory(prefix="ctxagent-offload-floor-") as tmp:
        root = Path(tmp)
        paths = make_inputs(root, size)
        for name, path in paths.items():
            offload = _offload(path, size, root / "session")
            offload()  # warm: the prefilter compiled, the tokenizer loaded, the input in the page cache
            got = paired(_shell_floor(path, size, root / "shell.out"), offload, pairs)
            out["inputs"][name] = {"shell_s": got.a_s, "offload_s": got.b_s, "ratio": got.ratio,
                                   **scan_rates(path)}
            path.unlink()  # disk: one input at a time from here on
        floor, figure = _turn(root)
        turn = paired(floor, figure, max(pairs, 20))
        out["turn"] = {"append_s": turn.a_s, "turn_s": turn.b_s, "ratio": turn.ratio, "pairs": turn.n}
    base64 = out["inputs"]["random base64"]
    out["target_met"] = base64["ratio"] <= TARGET
    return out


def tables(data: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The result as ``(title, header, rows)``: the pairs, then the scan rates."""
    gb = data["bytes"] / 1e9
    rows = []
    for name, got in data["inputs"].items():
        pair = Paired(got["shell_s"], got["offload_s"], data["pairs"])
        rows.append(pair.row(f"offload {gb:g} GB of {name}, scan on", "`head -c N > file`",
                             TARGET if name == "random base64" else None))
    turn = data["turn"]
    pair = Paired(turn["append_s"], turn["turn_s"], turn["pairs"])
    rows.append([f"one turn's transcript writes (2 appends, redacted, fsynced; {turn['pairs']} pairs)",
                 f"{pair.b_s * 1000:.2f} ms", f"one fsynced append of the same bytes {pair.a_s * 1000:.2f} ms",
                 f"{pair.ratio:.2f}x", "–", "–"])
    rates = [[name, f"{got['old_mb_s']:,.0f}", f"{got['new_mb_s']:,.0f}" if "new_mb_s" in got else "–",
              str(got.get("windows", "–"))] for name, got in data["inputs"].items()]
    engine = "hyperscan prefilter" if data["hyperscan"] else "no hyperscan: Python patterns only"
    return [(f"Issue 18: offload and per-turn floors (medians of {data['pairs']} pairs, one run; {engine})",
             HEADER, rows),
            ("Issue 18: the secret scan alone, MB/s", ["input", "Python patterns everywhere (before)",
                                                       "prefilter + sha256 + lines, one pass",
                                                       "prefilter windows verified"], rates)]


def main(argv: list[str] | None = None) -> None:
    pairs_.main(argv, prog="python -m benchmarks.offload_floor", doc=__doc__, run=run, tables=tables,
                quick_help="100 MB inputs, 3 pairs")

if __name__ == "__main__":
    main()
