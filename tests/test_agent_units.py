"""Pieces of the agent in process, in milliseconds: the scripted model's script checks, tool
results placed after their call in the view (ContextState.add_result), and the PAIR check that
stops a damaged request."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ctxagent.agent.context import ContextState, PairError, check_pair
from ctxagent.agent.scripted import ScriptedModel
from ctxagent.errors import ProviderError, UsageError
from ctxagent.messages import tool_call
from ctxagent.sessions.records import MessageRecord

# --- the scripted model ----------------------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ("- 42\n", "reply 1 must be a mapping or a string"),
    ("- hello\n- tool_calls: [{id: c1}]\n", "reply 2, tool call 1 needs a 'name'"),
    ("- tool_calls: [just-a-string]\n", "reply 1, tool call 1 needs a 'name'"),
    ("content: not a list\n", "a script is a YAML list of replies"),
    ("- [unclosed\n", "cannot read script"),
])
def test_a_bad_script_is_a_usage_error_naming_the_reply(tmp_path, text, message):
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match=message.replace("[", r"\[")) as err:
        ScriptedModel.from_file(str(path))
    assert str(path) in str(err.value)


def test_a_missing_script_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="cannot read script"):
        ScriptedModel.from_file(str(tmp_path / "none.yaml"))


def test_the_script_plays_in_order_from_start_then_is_exhausted(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("- first\n- tool_calls: [{name: shell, arguments: {command: ls}}]\n- content: 7\n",
                    encoding="utf-8")
    model = ScriptedModel.from_file(str(path), start=1)
    reply = model.complete([{"role": "user", "content": "go"}], [])
    assert (reply.finish_reason, reply.tool_calls[0].id, reply.tool_calls[0].arguments) == (
        "tool_calls", "call_2_1", '{"command": "ls"}')
    assert reply.usage is not None and reply.usage.prompt_tokens > 0 and model.price(10, 10) == 0.0
    last = model.complete([], [])
    assert (last.content, last.finish_reason, last.tool_calls) == ("7", "stop", ())
    with pytest.raises(ProviderError, match="has 3 replies and all were used"):
        model.complete([], [])


# --- tool results placed after their call ----------------------------------------------------


def _record(seq: int, message: dict) -> MessageRecord:
    return MessageRecord(seq=seq, turn=1, tokens=5, message=message)


def _asks(*ids: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [tool_call(i, "shell", "{}") for i in ids]}


def _result(call_id: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": f"out {call_id}"}


def _state(*messages: dict) -> ContextState:
    state = ContextState()
    for seq, message in enumerate(messages):
        state.add(_record(seq, message))
    return state


def test_a_second_result_of_the_last_call_goes_in_place():
    state = _state({"role": "user", "content": "go"}, _asks("a", "b"), _result("a"))
    assert state.add_result(_record(3, _result("b")), state.view[1].message) == ""  # the view's own object
    assert [e.start for e in state.view] == [0, 1, 2, 3]
    check_pair(state.view)


def test_a_late_result_moves_up_after_its_call_and_the_others_keep_their_slots():
    state = _state({"role": "user", "content": "go"}, _asks("a", "b"), _result("a"), _asks("c"), _result("c"))
    repair = state.add_result(_record(5, _result("b")), state.view[1].message)
    assert "placed right after its call's assistant message #1 (it came after #4)" in repair
    assert [e.message.get("tool_call_id") for e in state.view] == [None, None, "a", "b", None, "c"]
    assert [e.start for e in state.view] == [0, 1, 2, 3, 4, 5]  # ordered by seq still
    check_pair(state.view)


def test_a_result_whose_call_left_the_view_or_lies_behind_a_compaction_is_left_out():
    state = _state({"role": "user", "content": "go"}, _asks("a"), _result("a"))
    gone = _asks("x")  # a call whose assistant message is not in the view (compacted away)
    assert "no longer in the view" in state.add_result(_record(3, _result("x")), gone)
    state = _state({"role": "user", "content": "go"}, _asks("a"), _asks("c"))
    state.view[2] = replace(state.view[2], start=2, end=3)  # a compaction's replacement of 2..3
    repair = state.add_result(_record(4, _result("a")), state.view[1].message)
    assert "a compaction lies between it and its call" in repair
    assert len(state.view) == 3


def test_a_request_that_breaks_pair_is_not_sent():
    state = _state({"role": "user", "content": "go"}, _result("orphan"))
    with pytest.raises(PairError, match="would break PAIR, so it is not sent") as err:
        check_pair(state.view)
    assert err.value.status == "pair_error"
