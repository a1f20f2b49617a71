"""One context engine per session: two sessions built at once, on two threads, get exactly the
requests each gets alone (issue 35).

The strategies that fold the view incrementally (``mask_observations``, ``dedupe``, ``prune``) once
kept that fold, and the context of the call folding, on one instance per process: two sub-agents
building their requests at the same moment read each other's fold. Here each session is built turn
by turn through :class:`~ctxagent.agent.context.ContextState` (what the runner uses), alone and then
with the other one on a second thread, and every request must be the same both ways.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from ctxagent.agent.context import ContextState
from ctxagent.messages import tool_call
from ctxagent.profile_schema import Step
from ctxagent.sessions import records
from ctxagent.strategies.base import Budget
from ctxagent.strategies.dedupe import DedupeStep
from ctxagent.strategies.mask_observations import MaskObservationsStep
from ctxagent.strategies.prune import PruneStep
from ctxagent.strategies.truncate import TruncateStep

TURNS = 60
STEPS: list[Step] = [PruneStep(trigger=0, min_age_turns=1, batch=1), DedupeStep(trigger=0),
                     MaskObservationsStep(trigger=0, keep=2, batch=1, min_tokens=10), TruncateStep()]
BUDGET = Budget(window=6_000, tools=100, reserved=400, target=0.5, trigger=0.8)


def session(name: str) -> Iterator[list[records.MessageRecord]]:
    """The messages of one session, a turn at a time: each turn an assistant message with two
    tool calls and their results, some failing (prune), some repeating an earlier one (dedupe),
    every text naming the session so that one session's stub in the other's request shows."""
    seq = 0

    def message(content: dict[str, object], turn: int, tokens: int) -> records.MessageRecord:
        nonlocal seq
        seq += 1
        return records.MessageRecord(seq=seq - 1, turn=turn, message=content, tokens=tokens)

    yield [message({"role": "system", "content": f"you are agent {name}"}, 0, 8),
           message({"role": "user", "content": f"task of {name}"}, 1, 6)]
    for turn in range(1, TURNS + 1):
        ids = [f"{name}{turn}a", f"{name}{turn}b"]
        calls = [tool_call(ids[0], "shell", f'{{"command": "ls {name}/{turn // 2}"}}'),
                 tool_call(ids[1], "grep", f'{{"pattern": "{name}-{turn}"}}')]
        turn_messages = [message({"role": "assistant", "content": None, "tool_calls": calls}, turn, 30)]
        failed = "exit code: 1\n" + f"grep: {name}/{turn}: no matches\n" * 12
        outputs = [f"listing of {name}/{turn // 2}\n" + f"{name} file {turn // 2}\n" * 40,  # the same two turns running
                   failed if turn % 3 else f"{name} match {turn}\n" * (10 + turn)]
        for call_id, output in zip(ids, outputs, strict=True):
            turn_messages.append(message({"role": "tool", "tool_call_id": call_id, "content": output}, turn,
                                         len(output) // 4))
        yield turn_messages


def requests(name: str, start: threading.Barrier | None = None) -> list[list[object]]:
    """The messages of every request of session ``name``, built turn by turn as the runner does
    (build, record the compactions, append the reply and its results)."""
    state = ContextState(transcript_path=f"/sessions/{name}/transcript.jsonl", model="openai/gpt-4o-mini")
    sent: list[list[object]] = []
    if start is not None:
        start.wait()
    for turn, batch in enumerate(session(name)):
        for record in batch:
            state.add(record)
        built = state.build(STEPS, BUDGET, turn=turn + 1, pins=(f"{name} pin",))
        state.record(built.compactions)
        sent.append([e.message for e in built.view])
    return sent


def test_two_sessions_built_on_two_threads_get_the_requests_each_gets_alone():
    alone = {name: requests(name) for name in ("alpha", "omega")}
    assert any("[ctxagent masked" in str(r) for r in alone["alpha"])  # the folding steps act on these sessions
    assert any("[ctxagent pruned" in str(r) for r in alone["alpha"])
    assert any("[same result as turn" in str(r) for r in alone["alpha"])
    for _ in range(3):
        together: dict[str, list[list[object]]] = {}
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def build(name: str) -> None:
            try:
                together[name] = requests(name, start)  # noqa: B023 (joined before the next round)
            except BaseException as err:  # an IndexError in a shared fold: the test must see it
                errors.append(err)  # noqa: B023

        threads = [threading.Thread(target=build, args=(name,)) for name in alone]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        for name in alone:
            assert together[name] == alone[name], f"session {name}'s requests differ when built beside another"
