"""Small pieces of the strategy family in milliseconds: the registry's checks, the tool-call
helpers strategies name calls with, and the checkpoint's rendering and parsing of odd values. The
laws on random views are in test_strategies.py."""

from __future__ import annotations

import json

import pytest

from ctxagent.errors import UsageError
from ctxagent.messages import tool_call
from ctxagent.strategies import registry
from ctxagent.strategies.base import Entry
from ctxagent.strategies.checkpoint import agent_call, files_touched, parse_json_object, render_checkpoint
from ctxagent.strategies.common import call_name, canonical_call, content_of, short_args, short_call
from ctxagent.strategies.truncate import Truncate


def test_the_registry_refuses_a_name_twice_and_parameters_of_another_strategy():
    before = registry.names()
    with pytest.raises(ValueError, match="'truncate' is registered twice"):
        registry.register(Truncate())

    class Renamed(Truncate):
        name = "renamed"

    with pytest.raises(ValueError, match="'renamed' declares the parameters of another strategy"):
        registry.register(Renamed())
    assert registry.names() == before
    with pytest.raises(UsageError, match=r"unknown strategy 'nope'; known: .*truncate"):
        registry.get("nope")


def test_content_of_joins_text_parts_and_reads_none_as_empty():
    parts = [{"type": "text", "text": "a"}, "junk", {"type": "image_url"}, {"type": "text", "text": "b"}]
    assert content_of({"role": "user", "content": parts}) == "ab"
    assert content_of({"role": "assistant", "content": None}) == ""


def test_calls_are_named_in_short_whatever_their_arguments():
    assert (call_name(None), short_call(None)) == ("?", "?()")
    shell = tool_call("c", "shell", '{"command": "ls -la", "timeout": 5}')
    assert short_call(shell) == "shell(command=ls -la, timeout=5)"
    assert short_args("not json {") == "not json {"
    assert short_args("[1, 2]") == "[1, 2]"
    assert short_args("   ") == ""
    assert short_args(json.dumps({"text": "x" * 200}), limit=20).startswith("text=xxx")
    assert len(short_args(json.dumps({"text": "x" * 200}), limit=20)) <= 20
    assert canonical_call(tool_call("c", "read", '{"b": 1,  "a": 2}')) == ("read", '{"a":2,"b":1}')
    assert canonical_call(tool_call("c", "read", " {broken ")) == ("read", "{broken")


def test_render_checkpoint_writes_known_fields_in_order_then_others():
    text = render_checkpoint({"extra_notes": [{"file": "a.py", "line": 3}, 7, ""], "goal": "  fix\n the  test ",
                              "key_facts": ["port 8080"], "phase": None})
    lines = text.splitlines()
    assert lines[:3] == ["goal: fix the test", "key facts:", "- port 8080"]
    assert lines[-1] == "extra notes: file: a.py; line: 3; 7"
    assert "phase" not in text


@pytest.mark.parametrize("reply", ['```json\n{"goal": "g"}\n```', '{"goal": "g"}'])
def test_parse_json_object_takes_a_fenced_or_bare_object(reply):
    assert parse_json_object(reply) == {"goal": "g"}


@pytest.mark.parametrize("reply", ["[1]", "{}", "not json"])
def test_parse_json_object_refuses_anything_else(reply):
    with pytest.raises(ValueError):
        parse_json_object(reply)


def _entry(message: dict, seq: int = 0) -> Entry:
    return Entry(message, 10, seq, seq, 1)


def test_agent_call_is_the_newest_assistants_checkpoint_call_with_an_object():
    user = _entry({"role": "user", "content": "go"})
    assert agent_call([user]) is None
    calls = [tool_call("c1", "checkpoint", "not json"), tool_call("c2", "checkpoint", "[]"),
             tool_call("c3", "shell", '{"goal": "x"}'), tool_call("c4", "checkpoint", '{"goal": "g"}')]
    asks = _entry({"role": "assistant", "content": None, "tool_calls": calls}, 1)
    assert agent_call([user, asks]) == ("c4", {"goal": "g"})
    assert agent_call([user, asks, _entry({"role": "assistant", "content": "done"}, 2)]) is None


def test_files_touched_reads_path_arguments_of_valid_calls_only():
    calls = [tool_call("a", "read", '{"path": "src/a.py"}'), tool_call("b", "edit", "broken"),
             tool_call("c", "edit", '["src/b.py"]'), tool_call("d", "copy", '{"files": ["x.py", "y.py"], "n": 1}')]
    entry = _entry({"role": "assistant", "content": None, "tool_calls": calls})
    assert files_touched([entry]) == ["src/a.py", "x.py", "y.py"]
