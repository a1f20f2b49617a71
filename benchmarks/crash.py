"""Crash safety under ``kill -9``: kill scripted runs at random moments, resume, check the laws.

Run: ``python -m benchmarks.crash [--kills 200] [--seed 7] [--litellm-kills 4]``. ``tests/test_crash.py``
runs the same harness with a few dozen kills.

Each *chain* is one session: ``ctxagent run`` is started and SIGKILLed after a seeded random delay
(during a tool — the shell calls sleep briefly —, during a model call, between two records, or
before anything was written), then ``ctxagent resume`` is started and killed again a few times,
and a last ``resume`` runs to the end. After every kill the harness checks:

- **records intact**: every complete line written before the kill is still, byte for byte, the
  start of the transcript after the next process, and parses; a torn last line is moved, exactly,
  to ``transcript.torn-N.jsonl`` (records are small and written with one ``write``, so a real kill
  never tears one here: after some kills the harness cuts the last record at a random byte itself);
- after the last resume: it **answered** (exit 0 and a final answer last, also when the kill came
  after the answer was recorded: resume then reports that answer), message ``seq`` numbers run
  0..n-1 without a gap (**no record lost**), the transcript's messages and the rebuilt view keep
  **PAIR**, every offloaded output's file matches its record's sha256, and no spool file is left behind.

Litellm chains run the real litellm HTTP code against a local ``FakeOpenAI`` that answers with a
delay (so kills land inside model calls) and rejects every request that breaks PAIR with a 400:
a rejected request counts as a PAIR violation. They are slow (each process imports litellm).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import ctxagent
from ctxagent.messages import pair_violations

SRC = str(Path(ctxagent.__file__).resolve().parents[1])
TASK = "Run every step, then answer."
STEPS = 12  # tool-calling replies before the answer


@dataclass
class Tally:
    """What the kills did and what the checks found (counts)."""

    kills: int = 0
    chains: int = 0
    resumed_ok: int = 0
    phases: dict[str, int] = field(default_factory=dict)  # where the kills landed (see ``phase_of``)
    records_checked: int = 0  # complete lines found after the kills, each checked intact afterwards
    torn_lines: int = 0  # torn last lines found after a kill (set aside by the next open)
    torn_simulated: int = 0  # of those, made by cutting the last record after the kill (``tear``)
    interrupted_results: int = 0  # synthetic results given to calls a kill left open
    pair_violations: int = 0
    records_lost: int = 0
    bad_outputs: int = 0
    spools_left: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, other: Tally) -> None:
        for name in ("kills", "chains", "resumed_ok", "records_checked", "torn_lines", "torn_simulated",
                     "interrupted_results",
                     "pair_violations", "records_lost", "bad_outputs", "spools_left"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for phase, count in other.phases.items():
            self.phases[phase] = self.phases.get(phase, 0) + count
        self.failures += other.failures


def phase_of(lines: list[bytes]) -> str:
    """Where a kill landed, read from the complete records it left (the last one decides)."""
    items = [json.loads(line) for line in lines if line.strip()]
    messages = [r["message"] for r in items if r.get("kind") == "message"]
    if not items:
        return "before the session had a record"
    if not any(m["role"] == "user" for m in messages):
        return "while opening the session"
    last = messages[-1]
    if last["role"] == "assistant" and last.get("tool_calls"):
        answered = {m.get("tool_call_id") for m in messages if m["role"] == "tool"}
        if any(c["id"] not in answered for c in last["tool_calls"]):
            return "during the tool calls"
    if last["role"] == "assistant" and not last.get("tool_calls"):
        return "after the answer"
    return "during a model call (or just before it)"


# ---------------------------------------------------------------- the sessions


def scripted_replies(steps: int = STEPS) -> list[dict[str, Any]]:
    """Tool calls that sleep (kills land in tools), quick ones (kills land between records),
    parallel calls, one offloaded output, then answers."""
    replies: list[dict[str, Any]] = []
    for step in range(steps):
        sleep = f"sleep 0.{step % 3 + 1}; echo a{step}"
        calls = [{"id": f"s{step}a", "name": "shell", "arguments": {"command": sleep}}]
        if step % 2:
            calls.append({"id": f"s{step}b", "name": "shell", "arguments": {"command": f"echo b{step}"}})
        if step == 3:
            calls.append({"id": "big", "name": "shell", "arguments": {"command": "seq 1 40000"}})
        replies.append({"content": f"step {step}", "tool_calls": calls})
    return [*replies, {"content": "all steps done"}]


def write_setup(root: Path, steps: int = STEPS) -> tuple[str, str]:
    """The script and the profile every chain uses; returns ``(model, profile path)``."""
    root.mkdir(parents=True, exist_ok=True)
    script = root / "script.yaml"
    script.write_text(yaml.safe_dump(scripted_replies(steps), sort_keys=False), encoding="utf-8")
    profile = root / "profile.yaml"
    profile.write_text("context_window: 64000\nmax_output_tokens: 500\nretries: 0\ntimeout_s: 30\n"
                       "tool_result_limit: 2000\npermissions: {kinds: {exec: allow}}\n", encoding="utf-8")
    return f"scripted:{script}", str(profile)


class Chain:
    """One session killed again and again, then resumed to the end."""

    def __init__(self, root: Path, name: str, model: str, profile: str, api_base: str | None = None,
                 tear: float = 0.0, rng: random.Random | None = None):
        self.root, self.name, self.model, self.profile, self.api_base = root, name, model, profile, api_base
        self.tear, self.rng = tear, rng or random.Random(0)
        self.session = root / "data" / "sessions" / name
        self.transcript = self.session / "transcript.jsonl"
        self.env = {**os.environ, "CTXAGENT_DATA_DIR": str(root / "data"),
                    "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.work = root / "work" / name
        self.work.mkdir(parents=True, exist_ok=True)
        self.tally = Tally(chains=1)
        self._snapshot = b""  # the transcript right after the last kill
        self._torn: list[bytes] = []  # torn last lines kills left; each must end up set aside

    def _args(self) -> list[str]:
        started = self.transcript.exists()
        args = ["resume" if started else "run", "--batch", "--session", self.name, "--model", self.model,
                "--profile", self.profile]
        if self.api_base:
            args += ["--api-base", self.api_base]
        if not started or not self._has_task():
            args.append(TASK)
        return [sys.executable, "-m", "ctxagent", *args]

    def _has_task(self) -> bool:
        return any(r.get("kind") == "message" and r["message"].get("role") == "user" for r in self._records())

    def _records(self) -> list[dict[str, Any]]:
        try:
            data = self.transcript.read_bytes()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines() if line.strip()]

    def kill(self, delay: float) -> None:
        """Start the next process and SIGKILL it after ``delay`` seconds; check what the previous
        kill left against what this process found, then what this one leaves."""
        proc = subprocess.Popen(self._args(), cwd=self.work, env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            self.tally.kills += 1
            killed = True
        else:
            killed = False
        now = self._check_previous()
        if killed and now.endswith(b"\n") and now.count(b"\n") > 1 and self.rng.random() < self.tear:
            now = self._tear(now)  # never the first lines: they appear whole (written, then renamed into place)
        cut = now.rfind(b"\n") + 1
        if killed:
            phase = phase_of(now[:cut].splitlines())
            self.tally.phases[phase] = self.tally.phases.get(phase, 0) + 1
            self.tally.records_checked += now[:cut].count(b"\n")
        if cut < len(now) and now[cut:] not in self._torn:  # (one not yet set aside is counted once)
            self.tally.torn_lines += 1
            self._torn.append(now[cut:])
        for number, line in enumerate(now[:cut].splitlines(), start=1):
            try:
                json.loads(line)
            except ValueError:
                self.tally.records_lost += 1
                self.tally.failures.append(f"{self.name}: line {number}, written before a kill, does not parse")
        self._snapshot = now

    def _tear(self, data: bytes) -> bytes:
        """Cut the last record at a random byte, as a kill in the middle of its write would (an append;
        a transcript's first write is a temporary file renamed into place, so it is never torn: a torn
        lone header made the next resume find an empty transcript and refuse it, a failure no kill
        can cause)."""
        start = data.rstrip(b"\n").rfind(b"\n") + 1
        torn = data[: self.rng.randrange(start + 1, len(data))]  # at least one byte, never its newline
        with open(self.transcript, "r+b") as fh:
            fh.truncate(len(torn))
        self.tally.torn_simulated += 1
        return torn

    def _check_previous(self) -> bytes:
        """The transcript now; counts a loss unless the complete lines of the last snapshot start it."""
        now = self.transcript.read_bytes() if self.transcript.exists() else b""
        before = self._snapshot[: self._snapshot.rfind(b"\n") + 1]
        if not now.startswith(before):
            self.tally.records_lost += 1
            self.tally.failures.append(f"{self.name}: records written before a kill changed or vanished")
        return now

    def finish(self, timeout: float) -> None:
        """Resume to the end and run the final checks."""
        proc = subprocess.run(self._args(), cwd=self.work, env=self.env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
        self._check_previous()
        if proc.returncode == 0 and self._answered():
            self.tally.resumed_ok += 1
        else:
            self.tally.failures.append(f"{self.name}: final resume exited {proc.returncode}: {proc.stderr[-600:]}")
        aside = [p.read_bytes() for p in self.session.glob("transcript.torn-*.jsonl")]
        if any(torn not in aside for torn in self._torn):
            self.tally.failures.append(f"{self.name}: a torn line was not set aside exactly")
        self._check_session()

    def _answered(self) -> bool:
        from ctxagent.sessions import records
        from ctxagent.sessions.outcome import final_answer

        return final_answer(records.loads(json.dumps(r)) for r in self._records()) is not None

    def _check_session(self) -> None:
        from ctxagent.agent.runner import INTERRUPTED
        from ctxagent.agent.state import fold
        from ctxagent.sessions import records

        items = [records.loads(json.dumps(r)) for r in self._records()]
        messages = [r for r in items if isinstance(r, records.MessageRecord)]
        seqs = [m.seq for m in messages]
        if seqs != list(range(len(seqs))):
            self.tally.records_lost += 1
            self.tally.failures.append(f"{self.name}: message seq numbers have gaps or repeats: {seqs}")
        plain = [m.message for m in messages]
        view = [e.message for e in fold(items).context.view]
        problems = pair_violations(plain) + pair_violations(view)
        if problems:
            self.tally.pair_violations += len(problems)
            self.tally.failures.append(f"{self.name}: PAIR broken: {problems[:3]}")
        self.tally.interrupted_results += sum(1 for m in plain if m.get("content") == INTERRUPTED)
        for out in (r for r in items if isinstance(r, records.OutputRecord)):
            path = self.session / out.path
            if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != out.sha256:
                self.tally.bad_outputs += 1
                self.tally.failures.append(f"{self.name}: output {out.handle} missing or not what its record says")
        spools = list((self.session / "outputs").glob(".spool-*")) if (self.session / "outputs").is_dir() else []
        self.tally.spools_left += len(spools)


def run_chain(chain: Chain, delays: list[float], finish_timeout: float) -> Tally:
    """Kill ``chain`` once per delay, then resume it to the end."""
    for delay in delays:
        chain.kill(delay)
    chain.finish(finish_timeout)
    return chain.tally


def calibrate(root: Path, model: str, profile: str) -> tuple[float, float]:
    """``(seconds until the task is recorded, seconds of the whole run)`` of one clean scripted run."""
    chain = Chain(root, "calibration", model, profile)
    started = time.perf_counter()
    proc = subprocess.Popen(chain._args(), cwd=chain.work, env=chain.env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = None
    while proc.poll() is None:
        if first is None and chain.transcript.exists() and b'"role":"user"' in chain.transcript.read_bytes():
            first = time.perf_counter() - started
        time.sleep(0.005)
    total = time.perf_counter() - started
    if proc.returncode:
        raise RuntimeError(f"the calibration run failed with exit code {proc.returncode}")
    return first or total / 2, total


# ---------------------------------------------------------------- litellm chains


def litellm_script(server_items: int = STEPS) -> list[dict[str, Any]]:
    """Replies for a FakeOpenAI: tool calls with unique ids (a kill can eat any of them), then answers."""
    items = [{"content": None, "delay_s": 0.15, "tool_calls": [
        {"id": f"call_{i}", "name": "shell", "arguments": {"command": f"sleep 0.05; echo {i}"}}]}
        for i in range(server_items)]
    return items + [{"content": "answered", "delay_s": 0.15}] * 6


def run_litellm(root: Path, rng: random.Random, kills: int, chains: int) -> Tally:
    """``chains`` sessions against a local FakeOpenAI, ``kills`` kills in all."""
    from ctxagent.testing import FakeOpenAI

    tally = Tally()
    profile = root / "litellm.yaml"
    profile.write_text("context_window: 64000\nmax_output_tokens: 500\nretries: 0\ntimeout_s: 30\n"
                       "permissions: {kinds: {exec: allow}}\n", encoding="utf-8")
    per_chain = [kills // chains + (1 if i < kills % chains else 0) for i in range(chains)]
    for index, count in enumerate(per_chain):
        with FakeOpenAI(litellm_script()) as server:
            chain = Chain(root, f"litellm-{index}", "openai/fake", str(profile), api_base=server.base_url)
            run_chain(chain, [rng.uniform(2.5, 7.0) for _ in range(count)], finish_timeout=180)
            if server.rejected:
                chain.tally.pair_violations += len(server.rejected)
                chain.tally.failures.append(f"{chain.name}: FakeOpenAI rejected {len(server.rejected)} requests "
                                            "for breaking PAIR")
        tally.add(chain.tally)
    return tally


# ---------------------------------------------------------------- the whole run


def run(kills: int, seed: int = 7, litellm_kills: int = 0, workers: int = 2, kills_per_chain: int = 2,
        root: Path | None = None, steps: int = STEPS, tear: float = 0.15) -> Tally:
    """Kill scripted sessions until ``kills`` kills have landed (then ``litellm_kills`` more on litellm
    runs); the tally. Chain ``i`` draws its delays from ``random.Random(seed * 100_003 + i)``: one in
    ten lands while the process starts and opens the session, the rest anywhere between the moment
    a fresh run has recorded its task and the end of a whole run. After a fraction ``tear`` of the
    kills the last record is cut at a random byte, as a kill in the middle of its write would."""
    started = time.perf_counter()
    own = root is None
    root = root or Path(tempfile.mkdtemp(prefix="ctxagent-crash-"))
    try:
        model, profile = write_setup(root, steps)
        first, span = calibrate(root, model, profile)
        total = Tally()
        lock = threading.Lock()
        numbers = itertools.count()

        def worker() -> None:
            while True:
                with lock:
                    if total.kills >= kills:
                        return
                    index = next(numbers)
                rng = random.Random(seed * 100_003 + index)
                delays = [rng.uniform(0.05, first) if rng.random() < 0.1 else rng.uniform(first * 0.9, span * 1.05)
                          for _ in range(kills_per_chain)]
                chain = Chain(root, f"chain-{index}", model, profile, tear=tear, rng=rng)
                tally = run_chain(chain, delays, 120)
                with lock:
                    total.add(tally)

        with ThreadPoolExecutor(max_workers=workers + 1) as pool:  # litellm runs mostly wait: one more thread
            slow = (pool.submit(run_litellm, root, random.Random(seed), litellm_kills, max(1, litellm_kills // 2))
                    if litellm_kills else None)
            for future in [pool.submit(worker) for _ in range(workers)]:
                future.result()
            if slow is not None:
                total.add(slow.result())
        total.seconds = time.perf_counter() - started
        return total
    finally:
        if own:
            shutil.rmtree(root, ignore_errors=True)


def summary(tally: Tally) -> str:
    lines = [
        f"kills                 {tally.kills} in {tally.chains} sessions; {tally.records_checked} records "
        "written before a kill, each checked intact after the next process",
        *(f"  {count:4d} {phase}" for phase, count in sorted(tally.phases.items(), key=lambda kv: -kv[1])),
        f"resumes OK            {tally.resumed_ok} of {tally.chains}",
        f"PAIR violations       {tally.pair_violations}",
        f"records lost          {tally.records_lost}",
        f"torn lines set aside  {tally.torn_lines} ({tally.torn_simulated} made by cutting the last record "
        "after the kill: a write this small is never torn by a real kill)",
        f"interrupted results   {tally.interrupted_results} (synthetic results for calls a kill left open)",
        f"outputs not as recorded {tally.bad_outputs}; spool files left {tally.spools_left}",
        f"time                  {tally.seconds:.1f} s",
    ]
    lines += [f"FAILURE: {failure}" for failure in tally.failures]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=200, help="scripted kills (default 200)")
    parser.add_argument("--litellm-kills", type=int, default=4, help="kills of litellm runs (slow: ~5 s each)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2, help="sessions killed in parallel")
    parser.add_argument("--steps", type=int, default=STEPS, help="tool-calling turns of each scripted run")
    parser.add_argument("--json", type=Path, help="also write the tally here")
    args = parser.parse_args()
    tally = run(args.kills, args.seed, args.litellm_kills, args.workers, steps=args.steps)
    print(summary(tally))
    if args.json:
        args.json.write_text(json.dumps(tally.__dict__, indent=2))
    sys.exit(1 if tally.failures else 0)


if __name__ == "__main__":
    main()
