"""A realistic 10,000-message transcript for the resume benchmark (issue 18), written with the real
record types and the real compaction pipeline.

Shapes as a real batch/interactive session writes them (``ctxagent run`` with a tool-calling
model): a header with the settings, the default system prompt, a task, then turns of an assistant
reply (text, one to three tool calls with OpenAI-style ids and JSON arguments) followed by its
``usage`` record and its tool results (source files read with their file-ledger entry, shell logs,
JSON, listings, writes); results over the offload limit become a head/tail preview plus an
``output`` record; a follow-up user message every few dozen turns after an answer and an ``end``
record; and the ``compaction`` records the default profile's pipeline makes along the way (computed
by :class:`ctxagent.agent.context.ContextState`, as the runner does). Stored token counts are the
text's characters / 4 (no tokenizer: the benchmark measures resume, not counting).

Deterministic for a seed: the same bytes on every machine (about 19 MB for 10,000 messages).
"""

from __future__ import annotations

import hashlib
import json
import random
import string
from pathlib import Path
from typing import Any

WORDS = """
config value result error request session context token handle output record message update parse
load check build index cache path file line count total limit status ready failed retry user model
tool call reply answer view window budget profile strategy summary stub mask prune alpha beta gamma
delta worker queue batch job task node pod service deploy release version
""".split()  # noqa: SIM905 (a paragraph of words reads better than a 60-item literal)
TOOLS = (("read_file", 30), ("shell", 35), ("grep_output", 8), ("list_dir", 10), ("write_file", 10),
         ("read_output", 7))
ALNUM = string.ascii_letters + string.digits


class _Text:
    """Deterministic text of real shapes: source code, logs, JSON, listings."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def words(self, n: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(n))

    def code(self, chars: int) -> str:
        lines: list[str] = []
        size = 0
        while size < chars:
            indent = "    " * self.rng.randint(0, 3)
            a, b = self.rng.choice(WORDS), self.rng.choice(WORDS)
            line = self.rng.choice((
                f'{indent}def {a}_{b}(self, {b}: str, limit: int = {self.rng.randint(1, 999)}) -> dict[str, Any]:',
                f'{indent}return {{"{a}": {b}, "count": len({a}s)}}',
                f'{indent}if {a} is None or {b} > self.{a}_limit:  # {self.words(4)}',
                f'{indent}raise ValueError(f"{a} {{{b}!r}} is not a valid {self.words(2)}")',
                f'{indent}{a} = [{b}.strip() for {b} in lines if {b}]',
                f'{indent}"""{self.words(8).capitalize()}."""'))
            lines.append(line)
            size += len(line) + 1
        return "\n".join(lines)

    def log(self, chars: int) -> str:
        lines: list[str] = []
        size = 0
        while size < chars:
            t = self.rng.randint(0, 86_399)
            level = self.rng.choice(("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR"))
            line = (f"2026-11-30T{t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}.{self.rng.randint(0, 999):03d}Z "
                    f"{level:5} [{self.rng.choice(WORDS)}-{self.rng.randint(1, 9)}] "
                    f"{self.words(self.rng.randint(4, 14))}"
                    f" id={self.rng.getrandbits(40):010x} took={self.rng.random() * 900:.1f}ms")
            lines.append(line)
            size += len(line) + 1
        return "\n".join(lines)

    def json_blob(self, chars: int) -> str:
        items = []
        size = 2
        while size < chars:
            item = {"id": self.rng.getrandbits(32), "name": self.words(2), "status": self.rng.choice(WORDS),
                    "tags": [self.rng.choice(WORDS) for _ in range(3)], "score": round(self.rng.random(), 4),
                    "note": self.words(6) + " — ok"}
            items.append(item)
            size += len(json.dumps(item)) + 2
        return json.dumps(items, indent=1, ensure_ascii=False)

    def listing(self, chars: int) -> str:
        lines: list[str] = []
        size = 0
        while size < chars:
            size_b = self.rng.randint(0, 99999)
            line = (f"-rw-r--r-- 1 dev dev {size_b:>6} Nov 30 12:{self.rng.randint(0, 59):02d} "
                    f"{self.rng.choice(WORDS)}_{self.rng.choice(WORDS)}.{self.rng.choice(('py', 'md', 'json'))}")
            lines.append(line)
            size += len(line) + 1
        return "\n".join(lines)


def _call_id(rng: random.Random) -> str:
    return "call_" + "".join(rng.choice(ALNUM) for _ in range(24))


def _size(rng: random.Random) -> int:
    """Characters of one tool output: log-normal (median ~900), and one in 25 a large output
    (100K-400K characters: offloaded)."""
    if rng.random() < 0.04:
        return rng.randint(100_000, 400_000)
    return int(min(60_000, rng.lognormvariate(6.8, 1.2)))


class Writer:
    """Builds the records of one session, turn by turn, as the runner would append them."""

    LIMIT_CHARS = 20_000 * 4  # the default profile's tool_result_limit, in characters (4 per token)

    def __init__(self, root: Path, seed: int = 18, profile_name: str = "default"):
        from ctxagent.agent.context import ContextState
        from ctxagent.agent.runner import make_budget
        from ctxagent.profile import load_profile
        from ctxagent.sessions import records

        self.records = records
        self.rng = random.Random(seed)
        self.text = _Text(self.rng)
        self.root = root
        self.profile = load_profile(profile_name)
        self.budget = make_budget(self.profile, 128_000, 744)
        self.state = ContextState(transcript_path=str(root / "transcript.jsonl"), model="openai/gpt-4o-mini")
        self.items: list[Any] = [records.SessionHeader(
            name=root.name, model="openai/gpt-4o-mini", profile=profile_name, context_window=128_000,
            path="batch", workdir="/home/dev/project", tools=[], ts=1_796_000_000.0)]
        self.seq = self.turn = 0
        self.ts = 1_796_000_000.0
        self.handles: set[str] = set()
        self.prompt = 0

    def _stamp(self) -> float:
        self.ts = round(self.ts + self.rng.random() * 3, 3)
        return self.ts

    def message(self, message: dict[str, Any], **extra: Any) -> Any:
        text = json.dumps(message, ensure_ascii=False)
        record = self.records.MessageRecord(seq=self.seq, turn=self.turn, tokens=3 + len(text) // 4,
                                            message=message, ts=self._stamp(), **extra)
        self.items.append(record)
        self.state.add(record)
        self.seq += 1
        return record

    def compact(self) -> None:
        from ctxagent.agent.context import record_of

        built = self.state.build(self.profile.pipeline("batch"), self.budget, turn=self.turn)
        self.items.extend(record_of(c).model_copy(update={"ts": self.ts}) for c in built.compactions)
        self.state.record(built.compactions)
        self.prompt = sum(e.tokens for e in built.view) + self.budget.tools

    def reply(self) -> list[tuple[str, str, dict[str, Any]]]:
        """An assistant message with 1-3 tool calls, and its usage record."""
        rng = self.rng
        calls = []
        for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
            tool = rng.choices([t for t, _ in TOOLS], [w for _, w in TOOLS])[0]
            args: dict[str, Any] = {
                "read_file": {"path": f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py"},
                "shell": {"command": f"pytest -q tests/test_{rng.choice(WORDS)}.py -k {rng.choice(WORDS)}"
                          if rng.random() < 0.5 else f"grep -rn '{rng.choice(WORDS)}' src | head -200"},
                "grep_output": {"handle": f"@{''.join(rng.choice(ALNUM) for _ in range(12))}",
                                "pattern": rng.choice(WORDS)},
                "list_dir": {"path": f"src/{rng.choice(WORDS)}"},
                "write_file": {"path": f"src/{rng.choice(WORDS)}.py",
                               "content": self.text.code(rng.randint(200, 3000))},
                "read_output": {"handle": f"@{''.join(rng.choice(ALNUM) for _ in range(12))}",
                                "start": rng.randint(1, 400), "lines": 80},
            }[tool]
            calls.append((_call_id(rng), tool, args))
        content = self.text.words(rng.randint(8, 60)).capitalize() + "." if rng.random() < 0.7 else None
        from ctxagent.messages import tool_call

        self.message({"role": "assistant", "content": content,
                      "tool_calls": [tool_call(cid, tool, json.dumps(args, ensure_ascii=False))
                                     for cid, tool, args in calls]})
        self._usage()
        return calls

    def _usage(self) -> None:
        cached = int(self.prompt * self.rng.uniform(0.6, 0.95))
        self.items.append(self.records.UsageRecord(
            turn=self.turn, model="openai/gpt-4o-mini", prompt_tokens=self.prompt + self.rng.randint(-50, 50),
            completion_tokens=self.rng.randint(20, 400), estimated_prompt_tokens=self.prompt,
            cost_usd=round(self.prompt * 1.5e-7, 6), cached_tokens=cached, ts=self.ts))

    def result(self, call_id: str, tool: str, args: dict[str, Any]) -> None:
        """A tool result: inline, or a preview plus an output record when over the limit."""
        from ctxagent.handles import new_handle

        size = _size(self.rng)
        body = {"read_file": self.text.code, "shell": self.text.log, "grep_output": self.text.log,
                "list_dir": self.text.listing, "read_output": self.text.json_blob,
                "write_file": lambda n: f"wrote {n} bytes to {args.get('path')}"}[tool](size)
        handle = new_handle(call_id, self.handles)
        self.handles.add(handle)
        extra: dict[str, Any] = {"handle": handle}
        if tool in ("read_file", "write_file"):
            extra["file"] = {"path": "/home/dev/project/" + str(args["path"]), "op": tool.split("_")[0],
                             "sha256": hashlib.sha256(body.encode()).hexdigest(), "args": ""}
        if len(body) > self.LIMIT_CHARS:
            lines = body.split("\n")
            path = f"outputs/{handle[1:]}.txt"
            self.items.append(self.records.OutputRecord(
                handle=handle, call_id=call_id, tool=tool, path=path, bytes=len(body.encode()), lines=len(lines),
                tokens=len(body) // 4, sha256=hashlib.sha256(body.encode()).hexdigest(), ts=self.ts,
                arguments=json.dumps(args)[:500]))
            body = (f"[output of {tool} stored as {handle}: {len(lines)} lines, {len(body)} bytes -> {path}; "
                    f"read_output({handle}, start, lines) or grep_output({handle}, pattern) reads it]\n"
                    + "\n".join(lines[:40])[:2600] + f"\n[... {len(lines) - 60} lines ...]\n"
                    + "\n".join(lines[-20:])[:1300])
            extra["offloaded"] = True
        self.message({"role": "tool", "tool_call_id": call_id, "content": body}, **extra)

    def follow_up(self) -> None:
        """An answer, the end of that run, and the user's next message."""
        answer = self.text.words(self.rng.randint(30, 120)).capitalize() + "."
        self.message({"role": "assistant", "content": answer})
        self._usage()
        wall = round(self.rng.uniform(5, 90), 3)
        self.items.append(self.records.EndRecord(reason="answered", turn=self.turn, wall_s=wall, ts=self.ts))
        self.turn += 1
        self.message({"role": "user", "content": "Now " + self.text.words(self.rng.randint(10, 50)) + "?"})


def write(root: Path, messages: int = 10_000, seed: int = 18) -> Path:
    """Write the session ``root`` (``<data>/sessions/<name>``) with ``messages`` messages; returns
    the transcript's path."""
    from ctxagent.sessions.transcript import Transcript

    root.mkdir(parents=True, exist_ok=True)
    w = Writer(root, seed)
    w.message({"role": "system", "content": w.profile.system_prompt})  # the default one, as a real run sends it
    w.turn = 1
    w.message({"role": "user", "content": "Find why " + w.text.words(30) + " and fix it; run the tests."})
    while w.seq < messages:
        w.turn += 1
        w.compact()
        if w.rng.random() < 0.03 and w.seq + 2 <= messages:
            w.follow_up()
            continue
        for call in w.reply():
            w.result(*call)
    w.items.append(w.records.EndRecord(reason="max_turns", turn=w.turn, wall_s=41.5, ts=w.ts))
    path = root / "transcript.jsonl"
    path.unlink(missing_ok=True)
    from ctxagent.sessions.redact import Redactor

    Transcript(path).append(w.items, redactor=Redactor({}))
    return path
