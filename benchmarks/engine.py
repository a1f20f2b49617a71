"""The context engine: what building a request costs, and whether two sessions built at once get
the requests each gets alone. Run: ``python -m benchmarks.engine [--messages N] [--rounds N]``.

``build_ms``: CPU milliseconds per request built (``ContextState.build``, the runner's own call)
over a session of N messages (tool calls with log-normal results, one in ten failing), for the batch
path of each bundled profile. ``view_ms``: the same requests built through the public API
(``ctxagent.Context.view``, docs/api.md), which also counts each new message's tokens (the runner
does that when it writes the record) and checks the history's PAIR; no tool schemas.
``together``: two such sessions built turn by turn on two threads at once, ``rounds`` times; how many
rounds gave either session a request that differs from building it alone, and how many raised (each
session has its own engine: both should be 0).
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from typing import Any


def session(name: str, messages: int, seed: int) -> list[list[Any]]:
    """The message records of one session, a turn at a time (the first turn: system and task)."""
    from ctxagent.messages import tool_call
    from ctxagent.sessions import records

    rng = random.Random(seed)
    turns: list[list[Any]] = [[
        records.MessageRecord(seq=0, turn=0, tokens=10, message={"role": "system", "content": "system prompt"}),
        records.MessageRecord(seq=1, turn=1, tokens=10, message={"role": "user", "content": f"task of {name}"})]]
    seq = 2
    while seq < messages:
        turn, cid = len(turns) + 1, f"{name}{seq}"
        size = int(rng.lognormvariate(6, 1.2))
        body = "exit code: 1\nno such file" if rng.random() < 0.1 else f"{name} " + "y" * min(size, 20_000)
        turns.append([
            records.MessageRecord(seq=seq, turn=turn, tokens=20, message={
                "role": "assistant", "content": None, "tool_calls": [tool_call(cid, "shell", '{"command":"ls"}')]}),
            records.MessageRecord(seq=seq + 1, turn=turn, tokens=max(1, size // 4),
                                  message={"role": "tool", "tool_call_id": cid, "content": body})])
        seq += 2
    return turns


def build(turns: list[list[Any]], profile_name: str, start: threading.Barrier | None = None) -> tuple[list[Any], float]:
    """Every request of the session (its messages) and the CPU seconds its builds took."""
    from ctxagent.agent.context import ContextState
    from ctxagent.agent.turns import make_budget
    from ctxagent.profile import load_profile

    profile = load_profile(profile_name)
    steps, budget = profile.pipeline("batch"), make_budget(profile, 128_000, 744)
    state = ContextState(transcript_path="/sessions/s/transcript.jsonl")
    sent, spent = [], 0.0
    if start is not None:
        start.wait()
    for turn, batch in enumerate(turns, 1):
        for record in batch:
            state.add(record)
        began = time.thread_time()
        built = state.build(steps, budget, turn=turn)
        spent += time.thread_time() - began
        state.record(built.compactions)
        sent.append([e.message for e in built.view])
    return sent, spent


def view(turns: list[list[Any]], profile_name: str) -> float:
    """CPU seconds ``ctxagent.Context.view`` takes to build every request of the session."""
    import ctxagent

    context = ctxagent.Context(profile_name, context_window=128_000)
    messages: list[Any] = []
    spent = 0.0
    for batch in turns:
        messages += [record.message for record in batch]
        began = time.thread_time()
        context.view(messages)
        spent += time.thread_time() - began
    return spent


def together(messages: int, rounds: int, profile_name: str = "batch") -> dict[str, int]:
    """Two sessions built at once on two threads, ``rounds`` times, against each built alone."""
    sessions = {name: session(name, messages, seed) for seed, name in enumerate(("alpha", "omega"))}
    alone = {name: build(turns, profile_name)[0] for name, turns in sessions.items()}
    differ = raised = 0
    for _ in range(rounds):
        got: dict[str, list[Any]] = {}
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def one(name: str, into: dict[str, list[Any]] = got, failed: list[BaseException] = errors,
                barrier: threading.Barrier = start) -> None:
            try:
                into[name] = build(sessions[name], profile_name, barrier)[0]
            except Exception as err:
                failed.append(err)

        threads = [threading.Thread(target=one, args=(name,)) for name in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        raised += bool(errors)
        differ += any(got.get(name) != alone[name] for name in sessions)
    return {"rounds": rounds, "differ": differ, "raised": raised}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=4_000, help="messages of each session")
    parser.add_argument("--rounds", type=int, default=20, help="rounds of two sessions built at once")
    args = parser.parse_args()
    from ctxagent.profile import bundled_names

    turns = session("s", args.messages, 7)
    result: dict[str, Any] = {"messages": args.messages, "build_ms": {}, "view_ms": {}}
    for name in bundled_names():
        _, spent = build(turns, name)
        result["build_ms"][name] = round(spent * 1000 / len(turns), 3)
        result["view_ms"][name] = round(view(turns, name) * 1000 / len(turns), 3)
    result["together"] = together(min(args.messages, 400), args.rounds)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
