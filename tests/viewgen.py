"""Hypothesis generators of random views: tool-call groups of 1–5 parallel calls, sizes tiny to huge."""

from __future__ import annotations

from hypothesis import strategies as st

from ctxagent.messages import tool_call
from ctxagent.strategies.base import Entry

KINDS = st.sampled_from(["calls", "calls", "calls", "text", "user"])  # made once: a new one costs more than a draw
sizes = st.one_of(st.integers(1, 50), st.integers(50, 2_000), st.integers(2_000, 40_000))


@st.composite
def views(draw, max_units: int = 30):
    """A list of entries: system, task, then assistant/tool groups, assistant text and user messages."""
    entries: list[Entry] = []
    seq = 0
    turn = 0

    def add(message, tokens):
        nonlocal seq
        entries.append(Entry(message, tokens, seq, seq, turn))
        seq += 1

    add({"role": "system", "content": "system prompt"}, draw(st.integers(5, 500)))
    turn = 1
    add({"role": "user", "content": "the task"}, draw(st.integers(5, 500)))
    for _ in range(draw(st.integers(0, max_units))):
        kind = draw(KINDS)
        if kind == "user":
            turn += 1
            add({"role": "user", "content": f"follow-up {seq}"}, draw(sizes))
        elif kind == "text":
            turn += 1
            add({"role": "assistant", "content": f"thinking {seq}"}, draw(sizes))
        else:
            turn += 1
            n = draw(st.integers(1, 5))
            ids = [f"c{seq}_{i}" for i in range(n)]
            add({"role": "assistant", "content": None,
                 "tool_calls": [tool_call(i, "shell", '{"command": "ls"}') for i in ids]}, draw(sizes))
            for i in ids:
                add({"role": "tool", "tool_call_id": i, "content": f"result of {i}"}, draw(sizes))
    return entries
