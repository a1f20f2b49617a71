"""Deterministic, seeded traces for the benchmarks: the model's turns are scripted, tool outputs are
synthetic but shaped like the real thing (Python sources, grep hits, pytest runs, logs, diffs).

A :class:`Trace` is what a ReAct session would append, turn by turn: an optional user message, then
one assistant message with 1-3 tool calls and one raw output per call (the value the tool returned,
before any offloading). Sizes are in *tokens* (targets; the benchmark measures the real counts with
ctxagent's tokenizer), text sizes in characters.

- :func:`coding_session` — workload 1 (long coding session) with workload 5's facts planted in it.
- :func:`repeated_calls` — workload 4: a third of the calls repeat earlier ones, some after the file
  changed, plus a loop of identical calls.
"""

from __future__ import annotations

import json
import math
import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field

CHARS_PER_TOKEN = 3.6  # rough ratio for code-like text under o200k; only used to aim sizes
SYSTEM_PROMPT = "(the profile's system prompt)"  # replaced by the profile's real one by the harness
PROBE_DISTANCES = (1, 2, 5, 10, 20, 50, 100, 200, 300, 400)  # turns after the fact: every distance that fits


@dataclass(frozen=True)
class Call:
    """One tool call and the raw value the tool returned."""

    id: str
    name: str
    arguments: str
    output: str


@dataclass
class Turn:
    """One model request's worth of traffic: the user message that opens it (if any), the reply."""

    number: int
    user: str | None
    content: str | None
    calls: list[Call]


@dataclass(frozen=True)
class Fact:
    """A value planted at ``turn`` (in a tool output or a user message), maybe corrected later."""

    key: str
    kind: str
    value: str
    turn: int
    where: str
    corrected: str | None = None
    corrected_turn: int | None = None

    def expected(self, turn: int) -> str:
        """The latest value as of ``turn``."""
        if self.corrected is not None and self.corrected_turn is not None and turn >= self.corrected_turn:
            return self.corrected
        return self.value

    def stale(self, turn: int) -> str | None:
        """The superseded value as of ``turn`` (None before the correction)."""
        return self.value if self.expected(turn) != self.value else None


@dataclass
class Trace:
    name: str
    task: str
    turns: list[Turn]
    facts: list[Fact] = field(default_factory=list)
    notes: dict[str, object] = field(default_factory=dict)

    def probes(self) -> list[tuple[int, Fact, int]]:
        """``(probe turn, fact, distance)`` for every probe that falls inside the trace."""
        last = len(self.turns)
        return [(f.turn + d, f, d) for f in self.facts for d in PROBE_DISTANCES if f.turn + d <= last]


# --- text generators ------------------------------------------------------------------------------

MODULES = ["api", "auth", "billing", "cache", "cli", "config", "db", "events", "export", "gateway", "http",
           "jobs", "ledger", "limits", "mail", "models", "notify", "orders", "parser", "payments", "queue",
           "reports", "retry", "router", "scheduler", "search", "session", "storage", "sync", "tasks",
           "tenants", "users", "utils", "validate", "webhooks", "worker"]
WORDS = ["value", "item", "record", "result", "payload", "request", "response", "handler", "client", "session",
         "token", "user", "order", "batch", "entry", "index", "count", "limit", "offset", "buffer", "stream", "cursor",
         "timeout", "retry", "status", "error", "config"]
FILLER = [*WORDS, "the", "a", "to", "of", "check", "then", "fix", "looks", "test"]


def call_id(rng: random.Random) -> str:
    """An OpenAI-style tool call id (its last 12 characters make the handle)."""
    return "call_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(20))


def ident(rng: random.Random) -> str:
    return "_".join(rng.sample(WORDS, rng.choice((1, 2, 2, 3))))


def code_line(rng: random.Random, indent: int) -> str:
    pad = "    " * indent
    kind = rng.random()
    if kind < 0.08:
        return f"{pad}def {ident(rng)}(self, {ident(rng)}: int, {ident(rng)}: str | None = None) -> dict:"
    if kind < 0.14:
        return f'{pad}"""{rng.choice(WORDS).capitalize()} the {rng.choice(WORDS)} for the {rng.choice(WORDS)}."""'
    if kind < 0.30:
        return f"{pad}{ident(rng)} = self.{ident(rng)}.get({ident(rng)!r}, {rng.randint(0, 500)})"
    if kind < 0.42:
        return f"{pad}if {ident(rng)} is None or len({ident(rng)}) > {rng.randint(1, 64)}:"
    if kind < 0.52:
        return f"{pad}return {{'{rng.choice(WORDS)}': {ident(rng)}, '{rng.choice(WORDS)}': {ident(rng)}}}"
    if kind < 0.60:
        return f"{pad}# {' '.join(rng.choices(WORDS, k=rng.randint(4, 10)))}"
    if kind < 0.70:
        return f"{pad}for {rng.choice(WORDS)} in self.{ident(rng)}({ident(rng)}, limit={rng.randint(1, 99)}):"
    if kind < 0.80:
        return f"{pad}raise ValueError(f\"bad {rng.choice(WORDS)}: {{{ident(rng)}!r}}\")"
    if kind < 0.90:
        return f"{pad}await self.{ident(rng)}.{rng.choice(('send', 'put', 'flush', 'close'))}({ident(rng)})"
    return ""


def source(rng: random.Random, tokens: int, header: str = "") -> str:
    lines = [header] if header else [f'"""The {rng.choice(MODULES)} module."""', "",
                                     "from __future__ import annotations", f"import {rng.choice(MODULES)}", ""]
    size = sum(len(x) + 1 for x in lines)
    indent = 0
    while size < tokens * CHARS_PER_TOKEN:
        line = code_line(rng, indent)
        if line.endswith(":"):
            indent = min(3, indent + 1)
        elif rng.random() < 0.2:
            indent = max(0, indent - 1)
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def grep_hits(rng: random.Random, pattern: str, tokens: int) -> str:
    lines = []
    size = 0
    while size < tokens * CHARS_PER_TOKEN:
        path = f"src/app/{rng.choice(MODULES)}.py"
        line = f"{path}:{rng.randint(1, 900)}:{code_line(rng, rng.randint(0, 2)).strip()} {pattern}"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def pytest_output(rng: random.Random, tokens: int, failed: int, extra: str = "") -> str:
    lines = [f"tests/test_{m}.py " + "".join(rng.choice("..........F" if failed else ".") for _ in range(30))
             for m in rng.sample(MODULES, 6)]
    size = sum(len(x) for x in lines)
    if failed:
        lines.append("=================================== FAILURES ===================================")
    while failed and size < tokens * CHARS_PER_TOKEN:
        mod = rng.choice(MODULES)
        block = [f"___________________ test_{ident(rng)} ___________________", "",
                 *(f"    {code_line(rng, 0)}" for _ in range(rng.randint(3, 9))),
                 f"E       AssertionError: assert {rng.randint(0, 99)} == {rng.randint(0, 99)}",
                 f"src/app/{mod}.py:{rng.randint(10, 800)}: AssertionError"]
        lines.extend(block)
        size += sum(len(x) + 1 for x in block)
    if extra:
        lines.append(extra)
    summary = f"{failed} failed, {rng.randint(50, 400)} passed" if failed else f"{rng.randint(50, 400)} passed"
    lines.append(f"==================== {summary} in {rng.uniform(1, 60):.2f}s ====================")
    return "\n".join(lines)


def log_output(rng: random.Random, tokens: int, extra: str = "") -> str:
    lines = []
    size = 0
    while size < tokens * CHARS_PER_TOKEN:
        level = rng.choice(("INFO", "INFO", "INFO", "DEBUG", "WARN"))
        line = (f"2025-03-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
                f"{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z {level} worker-{rng.randint(1, 8)} "
                f"{rng.choice(WORDS)} {rng.choice(WORDS)} job={rng.randint(10_000, 99_999)} "
                f"took={rng.randint(1, 900)}ms")
        lines.append(line)
        size += len(line) + 1
    if extra:
        lines.insert(len(lines) // 2, extra)  # middle of a big log: only the full output has it
    return "\n".join(lines)


def diff_output(rng: random.Random, tokens: int) -> str:
    lines = []
    size = 0
    while size < tokens * CHARS_PER_TOKEN:
        path = f"src/app/{rng.choice(MODULES)}.py"
        hunk = [f"diff --git a/{path} b/{path}", f"--- a/{path}", f"+++ b/{path}",
                f"@@ -{rng.randint(1, 500)},7 +{rng.randint(1, 500)},9 @@"]
        hunk += [rng.choice("+- ") + code_line(rng, rng.randint(0, 2)) for _ in range(rng.randint(4, 14))]
        lines.extend(hunk)
        size += sum(len(x) + 1 for x in hunk)
    return "\n".join(lines)


def listing(rng: random.Random, tokens: int) -> str:
    lines = []
    size = 0
    while size < tokens * CHARS_PER_TOKEN:
        name = f"{ident(rng)}.py" if rng.random() < 0.8 else f"{rng.choice(MODULES)}/"
        line = name if name.endswith("/") else f"{name}  {rng.randint(100, 90_000):,} bytes"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def size_tokens(rng: random.Random, median: int, tail: float) -> int:
    """Skewed output size: lognormal around ``median`` tokens, and with probability ``tail`` a long
    tail of 8K-60K tokens (log-uniform)."""
    if rng.random() < tail:
        return int(math.exp(rng.uniform(math.log(8_000), math.log(60_000))))
    return max(15, min(6_000, int(rng.lognormvariate(math.log(median), 0.9))))


def reasoning(rng: random.Random) -> str | None:
    if rng.random() < 0.15:
        return None
    words = rng.randint(12, 70)
    return " ".join(rng.choices(FILLER, k=words)) + "."


# --- workload 1 + 5: long coding session with planted facts ------------------------------------------

TASK = ("Fix the failing billing tests in this repository (tests/test_billing.py and friends), keep the "
        "public API unchanged, and explain the root cause at the end.")


def _facts(rng: random.Random) -> list[dict[str, object]]:
    """Specs of the planted facts: kind, how it appears, value, (corrected value, delay)."""
    hexid = lambda n: "".join(rng.choice("0123456789abcdef") for _ in range(n))  # noqa: E731
    alnum = lambda n: "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))  # noqa: E731
    return [
        {"key": "settings path", "kind": "path", "where": "tool:read",
         "value": f"/srv/app/conf/settings-{hexid(6)}.toml",
         "line": "CONFIG_FILE = {v!r}"},
        {"key": "max connections", "kind": "number", "where": "tool:read", "value": str(rng.randint(1000, 9999)),
         "line": "MAX_CONNECTIONS = {v}"},
        {"key": "request id", "kind": "id", "where": "tool:log-big", "value": f"req_{alnum(14)}",
         "line": "2025-03-07T10:11:12.345Z ERROR gateway failed request id={v} status=502"},
        {"key": "db error", "kind": "error", "where": "tool:test",
         "value": f"psycopg.OperationalError: connection to 10.0.{rng.randint(1, 9)}.{rng.randint(10, 99)}:6432 "
                  "refused",
         "line": "E       {v}"},
        {"key": "decision retry", "kind": "decision", "where": "user",
         "value": f"keep the retry budget at {rng.randint(3, 9)} attempts",
         "line": "Decision for the rest of the work: {v} (the payment API rate-limits us)."},
        {"key": "staging host", "kind": "path", "where": "user", "value": f"staging-eu-{rng.randint(2, 9)}.internal",
         "line": "FYI the staging host is {v}; use it for the smoke test."},
        {"key": "ticket", "kind": "id", "where": "user", "value": f"BILL-{rng.randint(1000, 9999)}",
         "line": "Reference the ticket {v} in the commit message."},
        {"key": "service port", "kind": "number", "where": "tool:read", "value": str(rng.randint(8000, 8099)),
         "line": "SERVICE_PORT = {v}", "corrected": str(rng.randint(8400, 8499)), "delay": 15,
         "correction": "Correction: SERVICE_PORT is {v} now (ops moved it), not the old value."},
        {"key": "fixture path", "kind": "path", "where": "tool:grep",
         "value": f"tests/fixtures/invoice_{hexid(5)}.json",
         "line": "tests/test_billing.py:41:    FIXTURE = {v!r}"},
        {"key": "commit sha", "kind": "id", "where": "tool:shell", "value": hexid(12),
         "line": "HEAD is now at {v} fix rounding in ledger totals"},
        {"key": "timeout error", "kind": "error", "where": "tool:test-big",
         "value": f"TimeoutError: worker-{rng.randint(1, 8)} did not ack job {rng.randint(100000, 999999)} within 30s",
         "line": "E       {v}"},
        {"key": "rounding decision", "kind": "decision", "where": "user",
         "value": "round half-even at the ledger boundary only",
         "line": "We decided: {v}; do not round inside line items.",
         "corrected": "round half-up at the ledger boundary only", "delay": 25,
         "correction": "Change of plan, final: {v} (finance asked)."},
        {"key": "coverage", "kind": "number", "where": "tool:test",
         "value": f"{rng.randint(60, 95)}.{rng.randint(0, 9)}%",
         "line": "TOTAL                               4127    512    {v}"},
        {"key": "pin version", "kind": "number", "where": "tool:read",
         "value": f"2.{rng.randint(10, 40)}.{rng.randint(0, 9)}",
         "line": "stripe-sdk=={v}", "corrected": f"3.{rng.randint(0, 9)}.{rng.randint(0, 9)}", "delay": 30,
         "correction_tool": "stripe-sdk=={v}"},
    ]


def coding_session(turns: int = 500, seed: int = 1, plant_from: int = 3, plant_every: int = 2,
                   rolling_every: int = 5) -> Trace:
    """Workload 1 (~``turns`` model requests of coding-agent tool traffic) with workload 5's facts planted
    in its early turns (one every ``plant_every`` turns from ``plant_from``) and some corrected later,
    then one fact every ``rolling_every`` turns to the end (:func:`plant_throughout`; 0: none), so that
    facts land just before and just after every compaction and are probed across them."""
    trace = _coding_session(turns, seed, plant_from, plant_every)
    if rolling_every:
        plant_throughout(trace, random.Random(f"{seed}:rolling"), start=plant_from + 15 * plant_every,
                         every=rolling_every)
    return trace


def plant_throughout(trace: Trace, rng: random.Random, start: int, every: int) -> None:
    """Plant a fact (:func:`_rolling_fact`) every ``every`` turns from ``start`` to the end of ``trace``:
    in the middle of the turn's first tool output, or in its user message; every 9th corrected by the
    user 12 turns later. Uses its own ``rng`` so that the rest of the trace does not change."""
    from dataclasses import replace

    seen = {f.value for f in trace.facts} | {f.corrected for f in trace.facts if f.corrected}
    by_number = {t.number: t for t in trace.turns}
    for number in range(start, len(trace.turns) + 1, every):
        turn = by_number[number]
        spec = _rolling_fact(rng, len(trace.facts), seen)
        spec["key"] = f"{spec['key']} (turn {number})"
        line = str(spec["line"]).format(v=spec["value"])
        if spec["where"] == "user" or not turn.calls:
            spec["where"] = "user"
            turn.user = (turn.user + "\n" if turn.user else "") + line
        else:
            first = turn.calls[0]
            lines = first.output.split("\n")
            lines.insert(max(1, len(lines) // 2), line)
            turn.calls[0] = replace(first, output="\n".join(lines))
        fact = _fact_of(spec, number)
        if fact.corrected_turn is not None and fact.corrected_turn <= len(trace.turns):
            fix = by_number[fact.corrected_turn]
            fix.user = (fix.user + "\n" if fix.user else "") + str(spec["correction"]).format(v=spec["corrected"])
        elif fact.corrected is not None:  # the correction would fall after the end: plant it uncorrected
            fact = replace(fact, corrected=None, corrected_turn=None)
        trace.facts.append(fact)


def _coding_session(turns: int, seed: int, plant_from: int, plant_every: int) -> Trace:
    rng = random.Random(seed)
    specs = _facts(rng)
    plant_at = {plant_from + i * plant_every: spec for i, spec in enumerate(specs)}
    corrections: dict[int, tuple[dict[str, object], str]] = {}
    facts: list[Fact] = []
    files_edited: list[str] = []
    out: list[Turn] = []
    failing_grep: str | None = None
    for number in range(1, turns + 1):
        user = TASK if number == 1 else None
        if number > 1 and number % 97 == 0:
            user = rng.choice(["Looks good so far; also check the export path for the same bug.",
                               "Please run the full test suite before moving on.",
                               "Keep going, and keep the diff small."])
        planted = plant_at.get(number)
        correction = corrections.pop(number, None)
        extra_tool: str | None = None
        if planted is not None:
            value = str(planted["value"])
            line = str(planted["line"]).format(v=value)
            where = str(planted["where"])
            corrected = planted.get("corrected")
            delay = int(planted.get("delay", 0) or 0)
            facts.append(Fact(str(planted["key"]), str(planted["kind"]), value, number, where,
                              str(corrected) if corrected else None, number + delay if corrected else None))
            if corrected:
                corrections[number + delay] = (planted, str(corrected))
            if where == "user":
                user = (user + "\n" if user else "") + line
            else:
                extra_tool = where
        if correction is not None:
            spec, new = correction
            if "correction" in spec:
                text = str(spec["correction"]).format(v=new)
                user = (user + "\n" if user else "") + text
            else:
                extra_tool = "tool:read-correction"
        calls = []
        count = 1 if rng.random() < 0.85 else rng.choice((2, 2, 3))
        for index in range(count):
            inject = extra_tool if index == 0 else None
            fact_line = ""
            if inject == "tool:read-correction" and correction is not None:
                fact_line = str(correction[0]["correction_tool"]).format(v=correction[1])
            elif planted is not None and inject:
                fact_line = str(planted["line"]).format(v=planted["value"])
            call, failing_grep = _tool_call(rng, number, inject, fact_line, files_edited, failing_grep)
            calls.append(call)
        out.append(Turn(number, user, reasoning(rng), calls))
    return Trace("coding", TASK, out, facts)


def _tool_call(rng: random.Random, number: int, inject: str | None, fact_line: str, edited: list[str],
               failing_grep: str | None) -> tuple[Call, str | None]:
    """One tool call of the coding session (and the pattern of a grep that found nothing, if pending)."""
    cid = call_id(rng)
    if inject in ("tool:read", "tool:read-correction"):
        path = "src/app/settings.py" if "stripe" not in fact_line else "requirements.txt"
        body = source(rng, size_tokens(rng, 300, 0.0))
        lines = body.split("\n")
        lines.insert(rng.randint(1, len(lines)), fact_line)
        return Call(cid, "read_file", json.dumps({"path": path}), "\n".join(lines)), failing_grep
    if inject == "tool:log-big":
        command = "journalctl -u gateway --since today"
        return Call(cid, "shell", json.dumps({"command": command}),
                    "exit code: 0\n" + log_output(rng, 30_000, extra=fact_line)), failing_grep
    if inject in ("tool:test", "tool:test-big"):
        tokens = 25_000 if inject == "tool:test-big" else 900
        return Call(cid, "shell", json.dumps({"command": "python -m pytest -q tests/test_billing.py"}),
                    "exit code: 1\n" + pytest_output(rng, tokens, 2, extra=fact_line)), failing_grep
    if inject == "tool:grep":
        return Call(cid, "shell", json.dumps({"command": "rg -n FIXTURE tests"}),
                    "exit code: 0\n" + grep_hits(rng, "FIXTURE", 120) + "\n" + fact_line), failing_grep
    if inject == "tool:shell":
        return Call(cid, "shell", json.dumps({"command": "git log -1 --oneline && git status"}),
                    "exit code: 0\n" + fact_line + "\n" + listing(rng, 60)), failing_grep
    kind = rng.random()
    if failing_grep is not None and rng.random() < 0.5:
        # the agent retries a search that found nothing, now successfully (prune's dead end)
        pattern = failing_grep + "_impl"
        return Call(cid, "shell", json.dumps({"command": f"rg -n {pattern} src"}),
                    "exit code: 0\n" + grep_hits(rng, pattern, size_tokens(rng, 150, 0.0))), None
    if kind < 0.33:
        path = f"src/app/{rng.choice(MODULES)}.py"
        output = source(rng, size_tokens(rng, 350, 0.035))
        return Call(cid, "read_file", json.dumps({"path": path}), output), failing_grep
    if kind < 0.52:
        pattern = ident(rng)
        if rng.random() < 0.15:
            return Call(cid, "shell", json.dumps({"command": f"rg -n {pattern} src"}), "exit code: 1\n"), pattern
        return Call(cid, "shell", json.dumps({"command": f"rg -n {pattern} src"}),
                    "exit code: 0\n" + grep_hits(rng, pattern, size_tokens(rng, 180, 0.03))), failing_grep
    if kind < 0.66:
        failed = rng.choice((0, 0, 1, 2, 3))
        target = rng.choice(["tests", f"tests/test_{rng.choice(MODULES)}.py"])
        tokens = size_tokens(rng, 700 if failed else 60, 0.05 if failed else 0.0)
        return Call(cid, "shell", json.dumps({"command": f"python -m pytest -q {target}"}),
                    f"exit code: {1 if failed else 0}\n" + pytest_output(rng, tokens, failed)), failing_grep
    if kind < 0.80:
        path = f"src/app/{rng.choice(MODULES)}.py"
        edited.append(path)
        content = source(rng, size_tokens(rng, 250, 0.0))
        return Call(cid, "write_file", json.dumps({"path": path, "content": content}),
                    f"wrote {len(content.encode()):,} bytes to {path}"), failing_grep
    if kind < 0.88:
        path = rng.choice(["src/app", "tests", "src/app/" + rng.choice(MODULES)])
        if rng.random() < 0.1:
            return Call(cid, "list_dir", json.dumps({"path": path + "_old"}),
                        f"ERROR: No such file or directory: {path}_old"), failing_grep
        return Call(cid, "list_dir", json.dumps({"path": path}), listing(rng, size_tokens(rng, 200, 0.0))), failing_grep
    if kind < 0.95:
        return Call(cid, "shell", json.dumps({"command": "git diff"}),
                    "exit code: 0\n" + diff_output(rng, size_tokens(rng, 500, 0.04))), failing_grep
    return Call(cid, "shell", json.dumps({"command": "tail -n 2000 logs/worker.log"}),
                "exit code: 0\n" + log_output(rng, size_tokens(rng, 600, 0.2))), failing_grep


# --- workload 4: repeated calls ----------------------------------------------------------------------


def repeated_calls(turns: int = 150, seed: int = 4, loop_at: int | None = None, loop_length: int = 8) -> Trace:
    """Workload 4: about a third of the calls repeat an earlier call exactly; some of those come after
    an edit of the file they read (so the result differs); plus a loop of ``loop_length`` identical
    calls starting at ``loop_at`` (default: two thirds in). ``notes['changed']`` lists the call ids
    whose result differs from the earlier result of the same call."""
    rng = random.Random(seed)
    loop_at = loop_at if loop_at is not None else (2 * turns) // 3
    paths = [f"src/app/{m}.py" for m in MODULES[:12]]
    version = dict.fromkeys(paths, 0)
    made: list[tuple[str, str, str]] = []  # (name, arguments, output) of earlier reads/searches
    changed: list[str] = []
    same: list[str] = []
    out: list[Turn] = []

    def read(path: str) -> str:
        r = random.Random(f"{seed}:{path}:{version[path]}")
        return source(r, size_tokens(r, 400, 0.0)) + f"\n# version {version[path]}"

    def grep(pattern: str) -> str:
        r = random.Random(f"{seed}:{pattern}:{sum(version.values())}")
        return "exit code: 0\n" + grep_hits(r, pattern, size_tokens(r, 200, 0.0))

    def run_call(name: str, arguments: str) -> str:
        args = json.loads(arguments)
        if name == "read_file":
            return read(args["path"])
        if name == "grep":
            return grep(args["command"].split()[2])
        return "exit code: 1\n" + pytest_output(random.Random(f"{seed}:loop"), 500, 1)

    for number in range(1, turns + 1):
        cid = call_id(rng)
        if loop_at <= number < loop_at + loop_length:
            name, arguments = "shell", json.dumps({"command": "python -m pytest -q tests/test_ledger.py"})
        elif made and rng.random() < 1 / 3:
            name, arguments, _ = rng.choice(made)
        elif rng.random() < 0.2:
            path = rng.choice(paths)
            version[path] += 1
            content = read(path)
            call = Call(cid, "write_file", json.dumps({"path": path, "content": content[:400]}),
                        f"wrote {len(content.encode()):,} bytes to {path}")
            out.append(Turn(number, TASK if number == 1 else None, reasoning(rng), [call]))
            continue
        elif rng.random() < 0.6:
            name, arguments = "read_file", json.dumps({"path": rng.choice(paths)})
        else:
            name, arguments = "grep", json.dumps({"command": f"rg -n {ident(rng)} src"})
        output = run_call(name, arguments)
        previous = [o for n, a, o in made if n == name and a == arguments]
        if previous:
            (same if previous[-1] == output else changed).append(cid)
        made.append((name, arguments, output))
        tool = "shell" if name in ("grep", "shell") else name
        out.append(Turn(number, TASK if number == 1 else None, reasoning(rng), [Call(cid, tool, arguments, output)]))
    trace = Trace("repeated", TASK, out)
    trace.notes = {"changed": changed, "same": same, "loop": [loop_at, loop_at + loop_length - 1]}
    return trace


# --- workloads 7 + 8 (issue 9): tool outputs of one size in a small window, facts to the end -------

SIZED = {"shell-1500": ("shell", 1_500), "logs-2300": ("logs", 2_300)}  # name -> (kind of output, tokens)
FITS = {"fits-20": ("shell", 300, 20)}
"""Issue 34: a session that never comes near the window (name -> kind, output tokens, turns): managing it
should cost nothing beyond the tool schemas it uses."""
SIZE_SPREAD = 0.05  # every output within about ±5% of its workload's size
TOKEN_MODEL = "openai/gpt-4o-mini"  # whose tokenizer aims the sizes (the harness's MODEL)
SIZED_TASK = ("The nightly pipeline of this service fails intermittently: find out why from the test runs, "
              "diffs and logs, fix it, and report the root cause with the evidence.")


def count_tokens(text: str) -> int:
    """Tokens of ``text`` with ctxagent's tokenizer for :data:`TOKEN_MODEL`."""
    from ctxagent import count_text

    return count_text(text, TOKEN_MODEL)


def fit(make: Callable[[int], str], tokens: int) -> str:
    """Text from ``make(size)`` cut at a line boundary to about ``tokens`` tokens, within 1% or a line
    (its last line, e.g. pytest's summary, kept). ``make`` is asked for more until its text is long enough."""
    aim = tokens * 2
    text = make(aim)
    while count_tokens(text) < tokens:
        aim *= 2
        text = make(aim)
    *lines, last = text.split("\n")
    costs = [count_tokens(line) + 1 for line in lines]  # per line: a close, not exact, estimate
    budget = tokens
    for _ in range(3):  # correct the estimate by what the cut text really counts
        used, kept = count_tokens(last) + 1, 0
        while kept < len(lines) and used + costs[kept] <= budget:
            used += costs[kept]
            kept += 1
        cut = "\n".join([*lines[:kept], last])
        real = count_tokens(cut)
        if abs(real - tokens) <= tokens // 100:
            break
        budget += tokens - real
    return cut


def _shell_output(rng: random.Random, tokens: int) -> tuple[str, str]:
    """A shell command of a coding session and its output of about ``tokens`` tokens (one generator per kind)."""
    kind = rng.random()
    module = rng.choice(MODULES)
    if kind < 0.35:
        failed = rng.randint(1, 4)
        return (f"python -m pytest -q tests/test_{module}.py",
                "exit code: 1\n" + fit(lambda n: pytest_output(rng, n, failed), tokens))
    if kind < 0.55:
        pattern = ident(rng)
        return f"rg -n {pattern} src", "exit code: 0\n" + fit(lambda n: grep_hits(rng, pattern, n), tokens)
    if kind < 0.75:
        return "git diff", "exit code: 0\n" + fit(lambda n: diff_output(rng, n), tokens)
    if kind < 0.85:
        return f"ls -la src/app/{module}", "exit code: 0\n" + fit(lambda n: listing(rng, n), tokens)
    return f"make build SERVICE={module}", "exit code: 2\n" + fit(lambda n: log_output(rng, n), tokens)


def _log_output(rng: random.Random, tokens: int) -> tuple[str, str]:
    """A log-reading command and its output of about ``tokens`` tokens."""
    module = rng.choice(MODULES)
    command = rng.choice([f"tail -n 400 logs/{module}.log", f"journalctl -u {module} --since -1h",
                          f"kubectl logs deploy/{module} --tail=400"])
    return command, "exit code: 0\n" + fit(lambda n: log_output(rng, n), tokens)


def _rolling_fact(rng: random.Random, index: int, seen: set[str]) -> dict[str, object]:
    """The ``index``-th fact of a sized session: a unique value in a tool output or a user message;
    every 9th is corrected by the user 12 turns later."""
    hexid = lambda n: "".join(rng.choice("0123456789abcdef") for _ in range(n))  # noqa: E731
    alnum = lambda n: "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))  # noqa: E731
    makers: list[tuple[str, str, str, Callable[[], str]]] = [
        ("path", "tool", "CONFIG_FILE = '{v}'", lambda: f"/srv/app/conf/{rng.choice(MODULES)}-{hexid(8)}.toml"),
        ("number", "tool", "memory limit of the worker pool: {v}", lambda: f"{rng.randint(10_000, 99_999)} MiB"),
        ("id", "tool", "2025-03-07T10:11:12.345Z ERROR gateway failed request id={v} status=502",
         lambda: f"req_{alnum(14)}"),
        ("error", "tool", "E       {v}", lambda: f"psycopg.OperationalError: connection to 10.{rng.randint(1, 250)}."
                                                  f"{rng.randint(1, 250)}.{rng.randint(1, 250)}:6432 refused"),
        ("decision", "user", "Decision for the rest of the work: {v}.",
         lambda: f"pin the {rng.choice(MODULES)} client to v{rng.randint(2, 9)}.{rng.randint(10, 99)}.{hexid(3)}"),
        ("id", "tool", "HEAD is now at {v} fix the flaky retry in the scheduler", lambda: hexid(12)),
        ("path", "user", "FYI the staging host is {v}; use it for the smoke test.",
         lambda: f"staging-{rng.choice(MODULES)}-{rng.randint(100, 999)}.internal"),
    ]
    kind, where, line, make = makers[index % len(makers)]
    value = make()
    while value in seen:
        value = make()
    seen.add(value)
    spec: dict[str, object] = {"key": f"{kind} #{index}", "kind": kind, "where": where, "value": value, "line": line}
    if index % 9 == 8:
        new = make()
        while new in seen:
            new = make()
        seen.add(new)
        spec.update(corrected=new, delay=12, correction=f"Correction: {kind} #{index} is now {{v}}, not the old value.")
    return spec


def sized_session(name: str, turns: int = 500, seed: int = 7, plant_every: int = 6) -> Trace:
    """Workloads 7 and 8 (issue 9): one ``shell`` call a turn (two in ~10% of turns), every output
    about ``SIZED[name]`` tokens (±:data:`SIZE_SPREAD`), a fact planted every ``plant_every`` turns to
    the end (in the middle of an output, or in a user message). ``notes['output_tokens']`` holds the
    measured size of every output (tokens)."""
    kind, size = SIZED[name] if name in SIZED else FITS[name][:2]
    rng = random.Random(f"{seed}:{name}")
    output = _shell_output if kind == "shell" else _log_output
    seen: set[str] = set()
    facts: list[Fact] = []
    corrections: dict[int, str] = {}
    sizes: list[int] = []
    out: list[Turn] = []
    for number in range(1, turns + 1):
        user = SIZED_TASK if number == 1 else None
        if number > 1 and number % 97 == 0:
            user = "Keep going; keep the diff small and rerun the failing tests."
        fact_line = ""
        if number % plant_every == 3 % plant_every:
            spec = _rolling_fact(rng, len(facts), seen)
            facts.append(_fact_of(spec, number))
            line = str(spec["line"]).format(v=spec["value"])
            if spec["where"] == "user":
                user = (user + "\n" if user else "") + line
            else:
                fact_line = line
            if "corrected" in spec:
                corrections[number + int(spec["delay"])] = str(spec["correction"]).format(v=spec["corrected"])
        if number in corrections:
            user = (user + "\n" if user else "") + corrections.pop(number)
        calls = []
        for index in range(1 if rng.random() < 0.9 else 2):
            target = round(size * rng.uniform(1 - SIZE_SPREAD, 1 + SIZE_SPREAD))
            extra = fact_line if index == 0 else ""
            command, text = output(rng, target - (count_tokens(extra) + 1 if extra else 0))
            if extra:
                lines = text.split("\n")
                lines.insert(len(lines) // 2, extra)
                text = "\n".join(lines)
            sizes.append(count_tokens(text))
            calls.append(Call(call_id(rng), "shell", json.dumps({"command": command}), text))
        out.append(Turn(number, user, reasoning(rng), calls))
    return Trace(name, SIZED_TASK, out, facts, {"output_tokens": sizes, "size": size})


def _fact_of(spec: dict[str, object], turn: int) -> Fact:
    corrected = spec.get("corrected")
    return Fact(str(spec["key"]), str(spec["kind"]), str(spec["value"]), turn, str(spec["where"]),
                str(corrected) if corrected else None, turn + int(spec["delay"]) if corrected else None)  # type: ignore[call-overload]
