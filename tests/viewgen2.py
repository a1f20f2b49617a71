"""Richer random views than viewgen's: real tool names and arguments (repeats included), results
that failed or found nothing, identical results, offloaded previews that name their own handle,
long multi-paragraph reasoning, pinned facts inside ordinary messages, an optional protected
``pins`` entry (as the runner adds it) and an optional final ``checkpoint`` call by the agent.
Token counts are the real counts of each message."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from ctxagent.handles import base_handle
from ctxagent.messages import tool_call
from ctxagent.strategies.base import Entry
from ctxagent.tokens import count_message

PINS = ("PIN-alpha=42", "deploy key K-7781")
TOOLS = ("shell", "read_file", "grep_output", "list_dir")
ARGS = {
    "shell": [{"command": "ls -la /srv/app"}, {"command": "pytest -q tests/test_api.py"},
              {"command": "cat /etc/app.conf"}, {"command": "grep -rn TODO src"}],
    "read_file": [{"path": "src/app.py"}, {"path": "README.md"}, {"path": "/nope/missing.txt"}],
    "grep_output": [{"handle": "@abc", "pattern": "ERROR"}, {"handle": "@abc", "pattern": "port"}],
    "list_dir": [{"path": "."}, {"path": "src"}],
}
SHARED = ["exit code: 0\nREADME.md\nsrc\ntests\npyproject.toml",
          "def main():\n    return serve(port=8080)\n"]

# The strategies the generators draw from, made once: hypothesis validates a new strategy object and
# computes its label on first use, which cost more than drawing from it (a strategy made in every call
# made generating a view several times slower).
LINE_COUNTS = st.one_of(st.integers(0, 3), st.integers(3, 40), st.integers(40, 200))
RESULT_KINDS = st.sampled_from(["ok", "ok", "ok", "error", "exit", "nofile", "nomatch", "empty", "shared", "preview",
                                "pinned"])
SHARED_RESULTS = st.sampled_from(SHARED)
SOME_PIN = st.sampled_from(PINS)
PARAGRAPHS = st.integers(1, 4)
PARAGRAPH_SIZES = st.one_of(st.integers(1, 5), st.integers(5, 80))
PORTS = st.integers(1, 65535)
UNIT_KINDS = st.sampled_from(["calls", "calls", "calls", "calls", "text", "user"])
FOLLOW_UP_PINS = st.sampled_from(["", *PINS])
CALLS = st.integers(1, 3)
TOOL_NAMES = st.sampled_from(TOOLS)
TOOL_ARGS = {name: st.sampled_from(args) for name, args in ARGS.items()}
CALL_TEXTS = st.sampled_from([None, None, "Let me check."])


_COUNTS: dict[str, int] = {}


def tokens_of(message: dict) -> int:
    """``count_message(message)``, remembered: examples repeat messages (a result's lines are named by
    its call id, and the same ids come back in example after example), and counting was a third of
    generating a view."""
    key = json.dumps(message, sort_keys=True)
    count = _COUNTS.get(key)
    if count is None:
        count = _COUNTS[key] = count_message(message)
    return count


def lines(draw, prefix: str) -> str:
    count = draw(LINE_COUNTS)
    return "\n".join(f"{prefix} line {i}: value={i * 7} path=/srv/app/f{i}.py" for i in range(count))


def result_text(draw, call_id: str) -> str:
    kind = draw(RESULT_KINDS)
    if kind == "ok":
        return f"exit code: 0\n{lines(draw, call_id)}"
    if kind == "error":
        return "ERROR: read_file: no such file: /nope/missing.txt"
    if kind == "exit":
        return f"exit code: 1\n{lines(draw, 'fail')}"
    if kind == "nofile":
        return "cat: /etc/app.conf: No such file or directory"
    if kind == "nomatch":
        return "exit code: 0\nno matches"
    if kind == "empty":
        return ""
    if kind == "shared":
        return draw(SHARED_RESULTS)
    if kind == "preview":
        handle = base_handle(call_id)
        return (f"exit code: 0\nfirst lines\n[... 900 lines cut ...]\nlast lines\n[full output: 1,000 "
                f"lines, 48,000 bytes, 12,345 tokens; saved as {handle} at /data/outputs/{handle[1:]}.out; "
                f"read lines with read_output(\"{handle}\", start_line, end_line)]")
    return f"exit code: 0\nconfig loaded\n{draw(SOME_PIN)}\n{lines(draw, 'cfg')}"


def reasoning(draw) -> str:
    paragraphs = draw(PARAGRAPHS)
    size = draw(PARAGRAPH_SIZES)
    body = [" ".join(f"thought {p}.{i} about /srv/app/f{i}.py" for i in range(size))
            for p in range(paragraphs)]
    return "\n\n".join([*body[:-1], f"Conclusion: use port {draw(PORTS)}."])


@st.composite
def rich_views(draw, max_units: int = 25, pins_entry: bool | None = None, checkpoint: bool | None = None):
    """A list of entries: system, maybe a pins entry, task, then units of many shapes."""
    entries: list[Entry] = []
    state = {"seq": 0, "turn": 0}

    def add(message, kind: str = "message") -> None:
        seq = state["seq"]
        entries.append(Entry(message, tokens_of(message), seq, seq, state["turn"], kind))
        state["seq"] += 1

    add({"role": "system", "content": "You are a careful agent."})
    if pins_entry if pins_entry is not None else draw(st.booleans()):
        add({"role": "user", "content": "[ctxagent pinned facts]\n" + "\n".join(PINS)}, kind="pins")
    state["turn"] = 1
    add({"role": "user", "content": "Fix the failing test in /srv/app; the service must keep port 8080."})
    for _ in range(draw(st.integers(0, max_units))):
        kind = draw(UNIT_KINDS)
        state["turn"] += 1
        if kind == "user":
            pin = draw(FOLLOW_UP_PINS)
            add({"role": "user", "content": f"follow-up {state['seq']} {pin}".strip()})
        elif kind == "text":
            add({"role": "assistant", "content": reasoning(draw)})
        else:
            n = draw(CALLS)
            calls = []
            for i in range(n):
                name = draw(TOOL_NAMES)
                args = json.dumps(draw(TOOL_ARGS[name]))
                calls.append(tool_call(f"call_{state['seq']}_{i}", name, args))
            text = draw(CALL_TEXTS)
            add({"role": "assistant", "content": text, "tool_calls": calls})
            for call in calls:
                add({"role": "tool", "tool_call_id": call["id"], "content": result_text(draw, call["id"])})
    if checkpoint if checkpoint is not None else draw(st.booleans()):
        state["turn"] += 1
        args = {"goal": "fix the failing test", "phase": "diagnosis done",
                "key_facts": ["the test fails on port 8080", PINS[0]], "pending": ["patch src/app.py"]}
        call = tool_call(f"cp{state['seq']}", "checkpoint", json.dumps(args))
        add({"role": "assistant", "content": None, "tool_calls": [call]})
        add({"role": "tool", "tool_call_id": call["id"], "content": "checkpoint saved"})
    return entries
