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

``--fork`` (what ``tests/test_crash.py`` uses; Linux): every ``ctxagent`` process is forked from a
server process that imported what a run imports once (litellm too, for the litellm chains), then
runs ``python -m ctxagent ARGS`` from its entry point on: still a process of its own, killed with a
real SIGKILL, but without a new interpreter's ~1 s of CPU of imports (~5 s with litellm), and the
kills land in the run, not in the imports (without it, on a busy machine, most of them did). As a
resumed process has less left to run than a fresh one, each delay is then scaled by the share of the
script's replies not yet recorded (else most kills of a resume came after its end, and did not land).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib
import itertools
import json
import os
import random
import select
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
REPO = Path(__file__).resolve().parents[1]
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


# ---------------------------------------------------------------- the processes


def chain_env(root: Path) -> dict[str, str]:
    """The environment of every ``ctxagent`` process of a run under ``root``."""
    return {**os.environ, "CTXAGENT_DATA_DIR": str(root / "data"),
            "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


PRELOAD = ("ctxagent.cli", "ctxagent.cli.run", "ctxagent.cli.config", "ctxagent.cli.outputs_cmd", "ctxagent.cli.render",
           "ctxagent.cli.tracing", "ctxagent.agent.setup", "ctxagent.agent.scripted", "ctxagent.lessons.hooks",
           "ctxagent.sessions.replica", "filelock", "hyperscan")  # what a run imports


class Forks:
    """A fork server: ``python -m benchmarks.crash --serve-forks`` imports what a ``ctxagent`` run
    imports (:data:`PRELOAD`, and litellm with ``litellm=True``) and builds its tokenizer (a cache
    of tiktoken's tables, the same in every process, never written), then forks a child for each
    :meth:`start`. The child is a process of its own (its pid, its file descriptors, killed with a
    real SIGKILL), set up as ``python -m ctxagent ARGS`` is (its directory, /dev/null for standard
    input and output) and started at ctxagent's entry point (``ctxagent.cli.main``). The server
    reaps a child only when :meth:`Forked.wait` asks it to, after the child ended, so its pid is
    never reused while the harness may still signal it (through a pidfd: Linux 5.3)."""

    @staticmethod
    def supported() -> bool:
        return hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")

    def __init__(self, env: dict[str, str], log: Path, litellm: bool = False) -> None:
        self._lock = threading.Lock()
        with open(log, "ab") as err:
            self._server = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.crash", "--serve-forks", "litellm" if litellm else "scripted"],
                cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        if self._ask(None) != "ready":
            self.close()
            raise RuntimeError(f"the fork server did not start (its stderr: {log})")

    def _ask(self, request: dict[str, Any] | None) -> str:
        assert self._server.stdin is not None and self._server.stdout is not None
        with self._lock:
            if request is not None:
                self._server.stdin.write(json.dumps(request) + "\n")
                self._server.stdin.flush()
            reply = self._server.stdout.readline()
        if not reply:
            raise RuntimeError(f"the fork server ended (exit code {self._server.poll()})")
        return reply.strip()

    def start(self, args: list[str], cwd: Path, stderr: str) -> Forked:
        """Fork ``ctxagent ARGS`` in ``cwd``, its standard error appended to the file ``stderr``."""
        pid = int(self._ask({"args": args, "cwd": str(cwd), "stderr": stderr}))
        return Forked(self, args, pid)

    def reap(self, pid: int) -> int:
        """The exit code of the ended child ``pid`` (minus the signal that ended it), reaped."""
        return int(self._ask({"reap": pid}))

    def close(self) -> None:
        if self._server.stdin is not None:
            self._server.stdin.close()
        self._server.wait(30)
        if self._server.stdout is not None:
            self._server.stdout.close()


class Forked:
    """A child of a :class:`Forks` server, with what the harness uses of :class:`subprocess.Popen`."""

    def __init__(self, server: Forks, args: list[str], pid: int) -> None:
        self.server, self.args, self.pid = server, args, pid
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)  # not reaped yet (the server waits to be asked): still this child

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._pidfd], [], [], timeout)[0]:  # readable once the child ended
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self.returncode = self.server.reap(self.pid)
            os.close(self._pidfd)
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            signal.pidfd_send_signal(self._pidfd, sig)


def serve_forks(litellm: bool) -> list[str] | None:
    """The loop of a :class:`Forks` server. Returns in a forked child, set up to run ``ctxagent`` with
    the arguments it returns; in the server once the harness closed its standard input (None)."""
    for name in PRELOAD:
        importlib.import_module(name)
    tokens = importlib.import_module("ctxagent.tokens")
    tokens.encoding(tokens.encoding_for(""))  # as count_text calls it (a cache: ~0.5 s of CPU to build)
    if litellm:
        from ctxagent.agent.litellm_backend import _litellm

        _litellm()
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # a child's standard input and output, as the harness gives a new interpreter's
        os.dup2(null, fd)
    os.close(null)

    def reply(value: object) -> None:
        replies.write(f"{value}\n")
        replies.flush()

    gc.freeze()  # what the server imported is never collected: a child's collections do not walk (and copy) it
    reply("ready")
    for line in requests:
        request = json.loads(line)
        if "reap" in request:
            reply(os.waitstatus_to_exitcode(os.waitpid(request["reap"], 0)[1]))
            continue
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            os.chdir(request["cwd"])
            err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(err, 2)
            os.close(err)
            return list(request["args"])
        reply(pid)
    return None


def run_forked(args: list[str] | None) -> None:
    """In a child of a fork server: what ``python -m ctxagent ARGS`` runs (ctxagent's entry point),
    then the end a ``multiprocessing`` child gets (the streams flushed, ``os._exit``: the interpreter's
    teardown would free every module of the server again, ~0.2 s of CPU a child; its ``atexit``
    handlers do not run, as in ``ctxagent batch``'s forked tasks). In the server: nothing."""
    if args is None:
        return
    from ctxagent.cli import main

    sys.argv = [str(Path(ctxagent.__file__).with_name("__main__.py")), *args]
    try:
        main()
        code = 0
    except SystemExit as stop:  # as the interpreter ends on it: an int is the code, other values print
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


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
                 tear: float = 0.0, rng: random.Random | None = None, forks: Forks | None = None, replies: int = 0):
        self.root, self.name, self.model, self.profile, self.api_base = root, name, model, profile, api_base
        self.tear, self.rng, self.forks, self.replies = tear, rng or random.Random(0), forks, replies
        self.session = root / "data" / "sessions" / name
        self.transcript = self.session / "transcript.jsonl"
        self.env = chain_env(root)
        self.work = root / "work" / name
        self.work.mkdir(parents=True, exist_ok=True)
        self.tally = Tally(chains=1)
        self._snapshot = b""  # the transcript right after the last kill
        self._torn: list[bytes] = []  # torn last lines kills left; each must end up set aside

    def _args(self) -> list[str]:
        """The ``ctxagent`` arguments of the next process: ``run`` the first time, then ``resume``."""
        started = self.transcript.exists()
        args = ["resume" if started else "run", "--batch", "--session", self.name, "--model", self.model,
                "--profile", self.profile]
        if self.api_base:
            args += ["--api-base", self.api_base]
        if not started or not self._has_task():
            args.append(TASK)
        return args

    def start(self, stderr: Path | None = None) -> subprocess.Popen[bytes] | Forked:
        """Start the next ``ctxagent`` process (a new interpreter, or forked by ``self.forks``);
        standard input and output are /dev/null, standard error too unless ``stderr`` is given."""
        if self.forks is not None:
            return self.forks.start(self._args(), self.work, str(stderr or os.devnull))
        with open(stderr or os.devnull, "wb") as err:
            return subprocess.Popen([sys.executable, "-m", "ctxagent", *self._args()], cwd=self.work,
                                    env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)

    def _left(self) -> float:
        """The share of the script's replies not recorded yet (at least a tenth)."""
        used = sum(1 for r in self._records() if r.get("kind") == "message" and r["message"].get("role") == "assistant")
        return max(0.1, 1 - used / self.replies)

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
        kill left against what this process found, then what this one leaves. A forked process
        (``self.forks``) runs at once and a resumed one has less left to run than a fresh one: with
        ``self.replies`` (the script's) its delay is scaled by the share of replies not yet recorded."""
        if self.forks is not None and self.replies:
            delay *= self._left()
        proc = self.start()
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
        log = self.root / "logs" / f"{self.name}.stderr"
        log.parent.mkdir(exist_ok=True)
        proc = self.start(stderr=log)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            raise
        self._check_previous()
        if code == 0 and self._answered():
            self.tally.resumed_ok += 1
        else:
            stderr = log.read_text(encoding="utf-8", errors="replace")
            self.tally.failures.append(f"{self.name}: final resume exited {code}: {stderr[-600:]}")
        aside = [p.read_bytes() for p in self.session.glob("transcript.torn-*.jsonl")]
        if any(torn not in aside for torn in self._torn):
            self.tally.failures.append(f"{self.name}: a torn line was not set aside exactly")
        self._check_session()

    def _answered(self) -> bool:
        from ctxagent.sessions import records
        from ctxagent.sessions.outcome import final_answer

        return final_answer([records.loads(json.dumps(r)) for r in self._records()]) is not None

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


def calibrate(root: Path, model: str, profile: str, forks: Forks | None = None) -> tuple[float, float]:
    """``(seconds until the task is recorded, seconds of the whole run)`` of one clean scripted run."""
    chain = Chain(root, "calibration", model, profile, forks=forks)
    started = time.perf_counter()
    proc = chain.start()
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


LITELLM_DELAY_S = 0.15  # the FakeOpenAI's delay before each reply
LITELLM_SLEEP_S = 0.05  # each tool call's sleep


def litellm_script(server_items: int = STEPS) -> list[dict[str, Any]]:
    """Replies for a FakeOpenAI: tool calls with unique ids (a kill can eat any of them), then answers."""
    items = [{"content": None, "delay_s": LITELLM_DELAY_S, "tool_calls": [
        {"id": f"call_{i}", "name": "shell", "arguments": {"command": f"sleep {LITELLM_SLEEP_S}; echo {i}"}}]}
        for i in range(server_items)]
    return items + [{"content": "answered", "delay_s": LITELLM_DELAY_S}] * 6


def litellm_floor(server_items: int = STEPS) -> float:
    """Seconds a whole run of :func:`litellm_script` takes at the least: the server's delays before
    each of its replies and the tool calls' sleeps."""
    return (server_items + 1) * LITELLM_DELAY_S + server_items * LITELLM_SLEEP_S


def run_litellm(root: Path, rng: random.Random, kills: int, chains: int, fork: bool = False) -> Tally:
    """``chains`` sessions against a local FakeOpenAI, ``kills`` kills in all. Each kill lands after a
    random delay: in a new interpreter 2.5-7 s (its litellm import takes a few seconds), in a forked
    process (litellm already imported) anywhere before the earliest moment a whole run can end."""
    tally = Tally()
    profile = root / "litellm.yaml"
    profile.write_text("context_window: 64000\nmax_output_tokens: 500\nretries: 0\ntimeout_s: 30\n"
                       "permissions: {kinds: {exec: allow}}\n", encoding="utf-8")
    per_chain = [kills // chains + (1 if i < kills % chains else 0) for i in range(chains)]
    forks = Forks(chain_env(root), root / "forks-litellm.log", litellm=True) if fork else None
    low, high = (0.1, litellm_floor() * 0.95) if forks else (2.5, 7.0)
    try:
        for index, count in enumerate(per_chain):
            tally.add(_litellm_chain(root, index, str(profile), [rng.uniform(low, high) for _ in range(count)],
                                     forks))
    finally:
        if forks is not None:
            forks.close()
    return tally


def _litellm_chain(root: Path, index: int, profile: str, delays: list[float], forks: Forks | None) -> Tally:
    from ctxagent.testing import FakeOpenAI

    with FakeOpenAI(litellm_script()) as server:
        chain = Chain(root, f"litellm-{index}", "openai/fake", profile, api_base=server.base_url, forks=forks,
                      replies=STEPS + 1)
        run_chain(chain, delays, finish_timeout=180)
        if server.rejected:
            chain.tally.pair_violations += len(server.rejected)
            chain.tally.failures.append(f"{chain.name}: FakeOpenAI rejected {len(server.rejected)} requests "
                                        "for breaking PAIR")
    return chain.tally


# ---------------------------------------------------------------- the whole run


def run(kills: int, seed: int = 7, litellm_kills: int = 0, workers: int = 2, kills_per_chain: int = 2,
        root: Path | None = None, steps: int = STEPS, tear: float = 0.15, fork: bool = False) -> Tally:
    """Kill scripted sessions until ``kills`` kills have landed (then ``litellm_kills`` more on litellm
    runs); the tally. Chain ``i`` draws its delays from ``random.Random(seed * 100_003 + i)``: one in
    ten lands while the process starts and opens the session, the rest anywhere between the moment
    a fresh run has recorded its task and the end of a whole run. After a fraction ``tear`` of the
    kills the last record is cut at a random byte, as a kill in the middle of its write would.
    ``fork``: start the processes from fork servers (:class:`Forks`), where Linux has ``pidfd_open``."""
    started = time.perf_counter()
    own = root is None
    root = root or Path(tempfile.mkdtemp(prefix="ctxagent-crash-"))
    fork = fork and Forks.supported()
    forks = None
    try:
        model, profile = write_setup(root, steps)
        forks = Forks(chain_env(root), root / "forks.log") if fork else None
        first, span = calibrate(root, model, profile, forks)
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
                chain = Chain(root, f"chain-{index}", model, profile, tear=tear, rng=rng, forks=forks,
                              replies=steps + 1)
                tally = run_chain(chain, delays, 120)
                with lock:
                    total.add(tally)

        with ThreadPoolExecutor(max_workers=workers + 1) as pool:  # litellm runs mostly wait: one more thread
            slow = (pool.submit(run_litellm, root, random.Random(seed), litellm_kills, max(1, litellm_kills // 2),
                                fork) if litellm_kills else None)
            for future in [pool.submit(worker) for _ in range(workers)]:
                future.result()
            if slow is not None:
                total.add(slow.result())
        total.seconds = time.perf_counter() - started
        return total
    finally:
        if forks is not None:
            forks.close()
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
    parser.add_argument("--fork", action="store_true",
                        help="fork each process from a server that imported ctxagent (and litellm) once (Linux)")
    parser.add_argument("--serve-forks", choices=("scripted", "litellm"), help=argparse.SUPPRESS)  # see Forks
    args = parser.parse_args()
    if args.serve_forks:
        run_forked(serve_forks(litellm=args.serve_forks == "litellm"))
        return
    tally = run(args.kills, args.seed, args.litellm_kills, args.workers, steps=args.steps, fork=args.fork)
    print(summary(tally))
    if args.json:
        args.json.write_text(json.dumps(tally.__dict__, indent=2))
    sys.exit(1 if tally.failures else 0)


if __name__ == "__main__":
    main()
