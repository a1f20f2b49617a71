"""ONE STATE, PREFIX and handles as data, driven through the real runner (issue 9).

The property test runs random sessions (pins, empty and repeated provider call ids, calls written as
text the way small local models write them, resumes at
random points, a window change on resume) through ``open_runner`` and the real ``Runner``; only the
model is scripted. On every request it checks that a state folded afresh from the transcript on
disk peeks the very request the live runner is sending (live == resumed, byte for byte), that
between compactions the request extends the previous one, PAIR and BUDGET, and that no two tool
results share a handle and every masked stub names its own result's handle.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from clihelp import FIXED_SYSTEM_PROMPT
from ctxagent.agent.config import RunConfig
from ctxagent.agent.model import Reply, ToolCall, Usage
from ctxagent.agent.peek import next_request
from ctxagent.agent.setup import open_runner
from ctxagent.agent.state import fold
from ctxagent.errors import LimitReached
from ctxagent.handles import IN_TEXT_RE
from ctxagent.messages import pair_violations
from ctxagent.sessions import records
from ctxagent.sessions.session import Session
from ctxagent.tokens import count_messages
from examplecount import examples

TOOL_FILE = '''
def emit(n: int, fact: str = "") -> str:
    """Print n numbered lines, then the fact.

    Args:
        n: lines to print.
        fact: a line to print last.
    """
    return "\\n".join(f"line {i} of {n}: value={i * 7}" for i in range(n)) + ("\\n" + fact if fact else "")
'''


@dataclass
class PlanModel:
    """Plays ``plan`` (one reply per model call) from ``start``, checking every request it gets."""

    plan: list[Reply]
    session: Session
    start: int = 0
    name: str = "plan"
    sent: list[list[dict[str, Any]]] = field(default_factory=list)

    def complete(self, messages: Any, tools: Any) -> Reply:
        messages = [dict(m) for m in messages]
        self.sent.append(messages)
        # ONE STATE: a state folded afresh from the transcript peeks exactly this request
        peek = next_request(self.session)
        assert [e.message for e in peek.view] == messages, "a fresh fold of the transcript builds another request"
        assert peek.compactions == [], "the pipeline is not idempotent on its own result"
        assert pair_violations(messages) == []
        assert peek.budget.fits(peek.view)
        reply = self.plan[self.start + len(self.sent) - 1]
        return Reply(reply.content, reply.tool_calls, Usage(count_messages(messages), 10))


def as_text(n: int, calls: list[ToolCall]) -> Reply:
    """The reply with its calls written in its text, as small local models write them (text_calls.py)."""
    objects = "\n".join(json.dumps({"name": c.name, "arguments": json.loads(c.arguments)}) for c in calls)
    return Reply(f"step {n}\n```json\n{objects}\n```" if n % 2 else f"<tool_call>\n{objects}\n</tool_call>")


def make_plan(draw_ids: list[str], sizes: list[int], pins: list[bool], texted: list[bool] | None = None) -> list[Reply]:
    replies = []
    for n, (cid, size, pin) in enumerate(zip(draw_ids, sizes, pins, strict=True)):
        args = {"n": size, "fact": f"FACT-{n}=v{n * 13}"}
        if size % 4 == 0:
            args = {"n": 30, "fact": "FACT-same"}  # the same call and output again: dedupe
        elif size % 7 == 0:
            args = {"n": 0}  # an empty result, superseded later: prune
        calls = [ToolCall(cid, "emit", json.dumps(args))]
        if pin:
            calls.append(ToolCall(cid, "pin", json.dumps({"fact": f"PINNED-{n}"})))  # same id twice in one reply
        replies.append(as_text(n, calls) if texted and texted[n] else Reply(f"step {n}", tuple(calls)))
    replies.append(Reply("done"))
    return replies


def write_profile(path: Path, window: int, name: str) -> str:
    data = {"context_window": window, "max_output_tokens": 200, "margin_tokens": 50, "tool_result_limit": 600,
            "max_turns": 100, "tools": ["read_output", "grep_output", "pin"], "loop_guard": 0, "thrash_turns": 0,
            "system_prompt": FIXED_SYSTEM_PROMPT,  # the fixed session below is sized to it
            "permissions": {"kinds": {"exec": "allow", "write": "allow"}},
            "pipelines": {"batch": [{"strategy": "prune", "trigger": 0}, {"strategy": "mask_observations",
                                    "trigger": 0, "keep": 3, "keep_tokens": 0.2},
                                   {"strategy": "truncate"}, {"strategy": "dedupe", "trigger": 0}]}}
    target = path / f"{name}.yaml"
    target.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(target)


def drive(tmp: Path, plan: list[Reply], stops: list[int], windows: list[int]) -> tuple[Session, list[Any]]:
    """Run the plan, stopping after each of ``stops`` model calls and resuming with the next window."""
    (tmp / "tools.py").write_text(TOOL_FILE, encoding="utf-8")
    (tmp / "none.yaml").write_text("[]", encoding="utf-8")
    (tmp / "other.yaml").write_text("[]", encoding="utf-8")
    session = Session.at("prop")
    sent: list[Any] = []
    message: str | None = "Collect the facts the emit tool prints."
    for leg, window in enumerate(windows):
        profile = write_profile(tmp, window, f"p{leg}")
        with session.writer():
            model_file = tmp / ("none.yaml" if leg % 2 == 0 else "other.yaml")  # a model change on resume
            runner = open_runner(session, RunConfig(profile_spec=profile, model_spec=f"scripted:{model_file}",
                                 api_base=None, path="batch", workdir=tmp, tools=[f"{tmp / 'tools.py'}:emit"]))
            if message is None and runner.state.needs_input():
                break  # answered before this leg
            model = PlanModel(plan, session, start=runner.state.replies)
            runner.model = model
            try:
                for _ in runner.run(message, max_turns=stops[leg] if leg < len(stops) else None):
                    pass
            except LimitReached:
                pass
            sent.extend(model.sent)
        message = None
    return session, sent


def check_transcript(session: Session, sent: list[list[dict[str, Any]]]) -> None:
    items = session.transcript.load()
    tool_records = [r for r in items if isinstance(r, records.MessageRecord) and r.message["role"] == "tool"]
    handles = [r.handle for r in tool_records]
    assert None not in handles and len(set(handles)) == len(handles), handles  # no two results share a handle
    state = fold(items)
    by_handle = {e.handle: e for e in state.context.view if e.role == "tool"}
    for handle, entry in by_handle.items():
        content = str(entry.message.get("content") or "")
        if entry.kind == "mask_observations":  # a stub names its own result's handle, never another's
            assert handle in IN_TEXT_RE.findall(content) and session.store.find(handle) is not None
    # PREFIX: a request that follows another with no compaction recorded between them extends it
    compaction_at = [i for i, r in enumerate(items) if isinstance(r, records.CompactionRecord)]
    replies_at = [i for i, r in enumerate(items) if isinstance(r, records.MessageRecord)
                  and r.message["role"] == "assistant"]
    settings_at = [i for i, r in enumerate(items) if isinstance(r, records.SettingsRecord)]
    for n in range(1, len(sent)):
        changed = any(replies_at[n - 1] < i < replies_at[n] for i in compaction_at + settings_at)
        if not changed:
            previous = sent[n - 1]
            assert sent[n][:len(previous)] == previous, f"request {n} rewrote an earlier message"


ids = st.sampled_from(["", "call_1", "x", "call_9f8XkQ2mZbL0aYv7", "call-1", "dup"])


# 15 random sessions (each a real runner, resumed up to twice, checked on every request) plus the fixed one
# below: 30 cost 12 s of CPU, a third of a minute on a busy machine, for the same laws (issue 17)
@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data())
@example(data=None)  # a fixed session: stops after 3 and 6 calls, window shrinks then grows
def test_live_and_resumed_requests_are_the_same_and_extend_each_other(tmp_path_factory, data):
    if data is None:
        turns, call_ids, sizes = 16, ["call_1"] * 16, [41, 5, 7, 41, 3, 120, 41, 8, 8, 41, 8, 7, 41, 8, 8, 41]
        pins = [n in (1, 5) for n in range(16)]
        # (PlanModel under-reports: no longer calibrated down)
        stops, windows, texted = [3, 3], [3_000, 1_600, 3_200], None
    else:
        turns = data.draw(st.integers(3, 12))
        call_ids = data.draw(st.lists(ids, min_size=turns, max_size=turns))
        sizes = data.draw(st.lists(st.integers(1, 140), min_size=turns, max_size=turns))
        pins = data.draw(st.lists(st.booleans(), min_size=turns, max_size=turns))
        texted = data.draw(st.lists(st.booleans(), min_size=turns, max_size=turns))  # calls written as text
        stops = data.draw(st.lists(st.integers(1, 4), max_size=2))
        windows = data.draw(st.lists(st.sampled_from([1_500, 1_900, 2_600, 3_600]), min_size=len(stops) + 1,
                                     max_size=len(stops) + 1))
    tmp = tmp_path_factory.mktemp("prop")
    os.environ["CTXAGENT_DATA_DIR"] = str(tmp / "data")
    session, sent = drive(tmp, make_plan(call_ids, sizes, pins, texted), stops, windows)
    assert len(sent) == turns + 1  # every step ran once, across the resumes
    check_transcript(session, sent)
    items = session.transcript.load()
    ends = [r for r in items if isinstance(r, records.EndRecord)]
    assert ends[-1].reason == "answered"
    kinds = {r.strategy for r in items if isinstance(r, records.CompactionRecord)}
    event(f"compactions: {sorted(kinds)}")
    if data is None:  # the fixed session exercises what the laws are about
        assert {"mask_observations", "truncate", "dedupe"} <= kinds, kinds
        assert any(isinstance(r, records.SettingsRecord) and "context_window" in r.changes for r in items)
        assert any(isinstance(r, records.SettingsRecord) and "model" in r.changes for r in items)


def test_a_repeated_call_flag_that_pushes_the_view_over_the_trigger_is_cut_in_the_same_build(tmp_path):
    """Regression (found by the property test above): ``dedupe`` runs after ``truncate`` and flags
    a repeated call by *adding* a line; at request 12 of this session that took the view from 1,188
    tokens to 1,201, over the 1,200 trigger truncate had already checked, so the live run sent it
    whole while a fresh fold's peek truncated it (ONE STATE broken). The pipeline now runs again
    when a step leaves the view over a trigger an earlier step checks."""
    os.environ["CTXAGENT_DATA_DIR"] = str(tmp_path / "data")
    ids = ["", "", "", "call_9f8XkQ2mZbL0aYv7", "", "", "", "", "", "", "", ""]
    sizes = [1, 3, 2, 4, 22, 4, 21, 3, 132, 18, 21, 1]
    pins = [False, True, True, True, True, False, True, True, True, True, False, False]
    session, sent = drive(tmp_path, make_plan(ids, sizes, pins), [], [1_500])
    check_transcript(session, sent)


def test_a_repeated_call_flag_that_leaves_masking_fewer_results_to_keep_is_applied_in_the_same_build(tmp_path):
    """Regression (found by the property test above, seed 113310969455929418284982300947893527404):
    at request 8 ``dedupe`` flagged an empty result as a repeated call (7 tokens became 27), after
    ``mask_observations`` had decided: the verbatim results then overran ``keep_tokens`` (720 of a
    3,600 window), so masking would have kept one result fewer and reached its batch. The live run
    sent the results whole while a fresh fold of the transcript masked three of them (ONE STATE
    broken). The pipeline now runs again on its own result until a pass changes nothing."""
    os.environ["CTXAGENT_DATA_DIR"] = str(tmp_path / "data")
    long = "call_9f8XkQ2mZbL0aYv7"
    ids = ["dup", long, long, "call-1", "call-1", "dup", "call-1", "call_1", "dup"]
    sizes = [138, 38, 91, 25, 97, 12, 7, 45, 72]
    pins = [True, False, True, False, False, False, False, False, True]
    session, sent = drive(tmp_path, make_plan(ids, sizes, pins), [4, 2], [2_600, 3_600, 3_600])
    check_transcript(session, sent)
    kinds = [r.strategy for r in session.transcript.load() if isinstance(r, records.CompactionRecord)]
    assert kinds.count("mask_observations") >= 4 and "dedupe" in kinds, kinds  # the case it pins happened


# --- regressions -------------------------------------------------------------------------------


def _script(path: Path, replies: list[Any]) -> str:
    path.write_text(yaml.safe_dump(replies), encoding="utf-8")
    return f"scripted:{path}"


def test_resume_without_flags_keeps_api_base_and_workdir(tmp_path, fake_openai):
    """Regression: resume forgot --api-base (a resumed session would go to the provider's public
    endpoint) and --workdir (tools ran in the current directory)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "here.txt").write_text("the file in the workdir", encoding="utf-8")
    server = fake_openai([{"content": "first"},
                          {"tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"path": "here.txt"}}]},
                          {"content": "second"}])
    profile = tmp_path / "p.yaml"
    profile.write_text("context_window: 20000\npermissions: {kinds: {read: allow}}\n", encoding="utf-8")
    session = Session.at("keeps")
    with session.writer():
        runner = open_runner(session, RunConfig(profile_spec=str(profile), model_spec="openai/local",
                             api_base=server.base_url,
                             path="batch", workdir=work))
        assert [e.__class__.__name__ for e in runner.run("hi")][-1] == "Finished"
    with session.writer():
        runner = open_runner(session, RunConfig(profile_spec=None, model_spec=None, api_base=None, path="batch"))
        list(runner.run("again"))
    assert len(server.requests) == 3  # the resumed run went to the same local server
    tool = [m for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert "the file in the workdir" in tool[-1]["content"]
    assert not [r for r in session.transcript.load() if isinstance(r, records.SettingsRecord)]


def test_resume_with_a_new_window_records_it_and_budgets_with_it(tmp_path):
    """Regression: resume --profile with a smaller window sent a request budgeted for the old one."""
    big = tmp_path / "big.yaml"
    big.write_text("context_window: 60000\n", encoding="utf-8")
    small = tmp_path / "small.yaml"
    small.write_text("context_window: 9000\nmax_output_tokens: 500\n", encoding="utf-8")
    model = _script(tmp_path / "s.yaml", [{"content": "one"}, {"content": "two"}])
    session = Session.at("window")
    with session.writer():
        list(open_runner(session, RunConfig(profile_spec=str(big), model_spec=model, api_base=None, path="batch",
                         workdir=tmp_path)).run("x"))
    with session.writer():
        runner = open_runner(session, RunConfig(profile_spec=str(small), model_spec=None, api_base=None, path="batch"))
        assert runner.budget().window == 9000
        events = list(runner.run("y"))
    assert next(e for e in events if e.__class__.__name__ == "Requesting").window == 9000
    change = [r for r in session.transcript.load() if isinstance(r, records.SettingsRecord)]
    assert len(change) == 1 and change[0].changes["context_window"] == 9000 and "model" not in change[0].changes
    assert fold(session.transcript.load()).settings.context_window == 9000  # type: ignore[union-attr]


def test_a_pin_made_live_is_in_the_state_before_any_resume(tmp_path):
    """Regression: pins from the pin tool took effect only after a resume (the live state missed them)."""
    model = _script(tmp_path / "s.yaml", [
        {"tool_calls": [{"id": "p1", "name": "pin", "arguments": {"fact": "the port is 8443"}}]},
        {"content": "done"}])
    profile = tmp_path / "p.yaml"
    profile.write_text("context_window: 20000\ntools: [pin]\n", encoding="utf-8")
    session = Session.at("pins")
    with session.writer():
        runner = open_runner(session, RunConfig(profile_spec=str(profile), model_spec=model, path="batch",
                             workdir=tmp_path))
        list(runner.run("remember the port"))
        assert runner.pins() == ["the port is 8443"]
    assert fold(session.transcript.load()).pins == runner.state.pins


@pytest.mark.parametrize("ids_", [["", ""], ["call_1", "call_1"], [None, "a"]])
def test_empty_or_repeated_call_ids_get_unique_ids_and_handles(tmp_path, fake_openai, ids_):
    """Providers that send empty, missing or repeated ids: every call is answered, handles differ."""
    calls = [{"id": i, "name": "read_output", "arguments": {"handle": "@nothing"}} for i in ids_]
    for c in calls:
        if c["id"] is None:
            del c["id"]
    server = fake_openai([{"tool_calls": calls}, {"tool_calls": calls}, {"content": "ok"}])
    profile = tmp_path / "p.yaml"
    profile.write_text("context_window: 20000\n", encoding="utf-8")
    session = Session.at("ids")
    with session.writer():
        list(open_runner(session, RunConfig(profile_spec=str(profile), model_spec="openai/local",
                             api_base=server.base_url,
                         path="batch", workdir=tmp_path)).run("go"))
    tools = [r for r in session.transcript.load() if isinstance(r, records.MessageRecord)
             and r.message["role"] == "tool"]
    assert len(tools) == 4 and len({r.handle for r in tools}) == 4
    sent = [c["id"] for m in server.requests[-1]["messages"] for c in m.get("tool_calls") or []]
    assert len(sent) == 4 and len(set(sent)) == 4  # unique across replies too (Anthropic rejects repeats)
    assert pair_violations([m for m in server.requests[-1]["messages"]]) == []
