"""Tool calls written as text (agent/text_calls.py): the shapes small local models write, what is
not a call, the three modes; the run end to end is in test_local_models.py."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxagent.agent.model_types import Reply, ToolCall
from ctxagent.agent.text_calls import read_calls
from ctxagent.tools.catalog import BUILTIN

TOOLS = [BUILTIN[name].spec() for name in ("list_dir", "read_file", "grep_output", "shell")]
LIST = '{"name": "list_dir", "arguments": {"path": "."}}'
READ = '{"name": "read_file", "arguments": {"path": "notes.txt"}}'


def parsed(arguments):
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def calls(text, mode="auto", tools=TOOLS):
    reply = read_calls(Reply(text), mode, tools)
    return [(c.name, parsed(c.arguments)) for c in reply.tool_calls], reply.content


# -- the shapes small models write (each seen from Qwen2.5-Coder-1.5B on llama.cpp, or named by Goose/OpenHands)


def test_a_fenced_json_call_as_qwen_writes_it_is_a_call_and_the_text_around_it_is_kept():
    found, content = calls(f"I will look first.\n```json\n{LIST}\n```\nThen I read the notes.")
    assert found == [("list_dir", {"path": "."})]
    assert content == "I will look first.\n\nThen I read the notes."


def test_several_calls_in_a_tools_tag_one_a_line_as_qwen_wrote_them():
    found, content = calls(f"<tools>\n{LIST}\n{READ}\n</tools>")
    assert found == [("list_dir", {"path": "."}), ("read_file", {"path": "notes.txt"})] and content is None


def test_hermes_tool_call_tags_with_arguments_as_json_text():
    text = '<tool_call>\n{"name": "read_file", "arguments": "{\\"path\\": \\"a.txt\\"}"}\n</tool_call>'
    assert calls(text) == ([("read_file", {"path": "a.txt"})], None)


def test_a_bare_call_alone_in_the_reply_and_calls_on_lines_of_their_own():
    assert calls(LIST) == ([("list_dir", {"path": "."})], None)
    assert calls(f"First:\n{LIST}\nand then\n{READ},\n")[0] == [("list_dir", {"path": "."}),
                                                            ("read_file", {"path": "notes.txt"})]


def test_openai_shaped_and_llama_parameters_shaped_calls_and_a_list_of_them():
    text = ('[{"type": "function", "function": {"name": "shell", "arguments": {"command": "ls"}}},'
            ' {"name": "list_dir", "parameters": {"path": "src"}}]')
    assert calls(text)[0] == [("shell", {"command": "ls"}), ("list_dir", {"path": "src"})]
    assert calls('{"tool_calls": [' + LIST + "]}")[0] == [("list_dir", {"path": "."})]


def test_an_unterminated_fence_or_tag_still_holds_its_call():
    assert calls(f"```json\n{LIST}")[0] == [("list_dir", {"path": "."})]
    assert calls(f"<tool_call>\n{READ}")[0] == [("read_file", {"path": "notes.txt"})]


def test_openhands_function_blocks_are_typed_by_the_tools_schema():
    text = ("<function=read_file>\n<parameter=path>a.txt</parameter>\n<parameter=start_line>5</parameter>\n"
            "</function>")
    assert calls(text)[0] == [("read_file", {"path": "a.txt", "start_line": 5})]


def test_a_bash_fence_of_command_lines_naming_tools_as_qwen_wrote_them():
    text = "Reading both.\n```bash\nread_file config/db.ini\nread_file 'config/net.ini'\n```\n**Result**: ..."
    assert calls(text) == ([("read_file", {"path": "config/db.ini"}), ("read_file", {"path": "config/net.ini"})],
                           "Reading both.\n\n**Result**: ...")
    for not_calls in ("```bash\nls -la\nread_file a.txt\n```", "```bash\nread_file\n```",
                      "```\ngrep_output @h ERROR\n```"):  # a shell line; no argument; two required arguments
        assert calls(not_calls) == ([], not_calls)


def test_function_tags_with_the_call_in_attributes_inside_tools_tags():
    text = """<tools>\n  <function name="list_dir" arguments='{"path": "."}'/>\n</tools>"""
    assert calls(text) == ([("list_dir", {"path": "."})], None)
    assert calls("""<function name="read_file" arguments='{"path": "a.txt"}'></function>""")[0] == [
        ("read_file", {"path": "a.txt"})]


def test_a_call_in_doubled_braces_as_qwen_wrote_it_after_empty_tools_tags():
    text = '<tools></tools>\n\n{{"name": "list_dir", "arguments": {"path": "."}}}'
    assert calls(text) == ([("list_dir", {"path": "."})], "<tools></tools>")
    assert calls('<{{"name": "read_file", "arguments": {"path": "a.txt"}}}>')[0] == [("read_file", {"path": "a.txt"})]


def test_a_call_without_arguments_is_a_call_with_none():
    assert calls('```\n{"name": "list_dir"}\n```')[0] == [("list_dir", {})]


# -- what is not a call


NOT_CALLS = [
    pytest.param('The failing request:\n```json\n{"request_id": "7f3a9c41", "status": 500}\n```',
                 id="quoted-json-data"),
    pytest.param(f"To list files one would send {LIST} to the server.", id="json-inside-a-sentence"),
    pytest.param('```json\n{"name": "deploy", "arguments": {"env": "prod"}}\n```', id="a-tool-that-does-not-exist"),
    pytest.param('```json\n{"name": "read_file", "arguments": {"nope": 1}}\n```', id="an-unexpected-argument"),
    pytest.param('```json\n{"name": "read_file", "arguments": {}}\n```', id="a-missing-argument"),
    pytest.param('```json\n{"name": "read_file", "arguments": {"path": 7}}\n```', id="an-argument-of-the-wrong-type"),
    pytest.param(f"```python\nrequest = {LIST}\nsend(request)\n```", id="a-fence-of-code-around-a-call"),
    pytest.param('{"name": "list_dir", "arguments": {"path": "."}, "result": "3 files"}', id="keys-a-call-has-not"),
]


@pytest.mark.parametrize("text", NOT_CALLS)
def test_an_answer_that_quotes_json_is_not_a_call_in_auto(text):
    assert calls(text) == ([], text)


def test_native_tool_calls_are_never_read_again_from_the_text():
    reply = Reply(LIST, tool_calls=(ToolCall("c1", "read_file", '{"path": "x"}'),))
    assert read_calls(reply, "always", TOOLS) is reply


def test_a_request_without_tools_reads_nothing():
    assert calls(LIST, tools=[]) == ([], LIST)


# -- the modes


def test_off_never_reads_calls():
    assert calls(f"```json\n{LIST}\n```", mode="off")[0] == []


def test_always_takes_unknown_tools_bad_arguments_and_inline_objects():
    text = 'Try {"name": "deploy", "arguments": {"env": "prod"}} and {"name": "read_file", "arguments": "{bad"}'
    assert calls(text, mode="always")[0] == [("deploy", {"env": "prod"}), ("read_file", "{bad")]


def test_the_whole_text_is_kept_as_written():
    text = f"Looking.\n```json\n{LIST}\n```"
    reply = read_calls(Reply(text, usage=None, finish_reason="stop"), "auto", TOOLS)
    assert reply.written == text and reply.content == "Looking." and reply.finish_reason == "stop"
    assert reply.message()["tool_calls"][0]["function"] == {"name": "list_dir", "arguments": '{"path": "."}'}


# -- properties


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)


@given(st.text(alphabet=st.characters(blacklist_characters="{[<"), max_size=200))
def test_text_without_an_object_a_list_or_a_tag_is_never_a_call(text):
    assert read_calls(Reply(text or "x"), "always", TOOLS).tool_calls == ()


@given(JSON)
def test_quoted_json_data_without_a_name_key_is_never_a_call(value):
    if isinstance(value, dict):
        value.pop("name", None)
        value.pop("tool", None)
        value.pop("tool_name", None)
        value.pop("function", None)
        value.pop("tool_calls", None)
    text = f"Here it is:\n```json\n{json.dumps(value)}\n```"
    found = read_calls(Reply(text), "auto", TOOLS).tool_calls
    assert all(c.name in {"list_dir", "read_file", "grep_output", "shell"} for c in found)
    assert not found or isinstance(value, list)


@given(st.lists(st.sampled_from([LIST, READ, '{"name": "shell", "arguments": {"command": "ls"}}']), min_size=1,
                max_size=4), st.sampled_from(["fence", "tag", "bare"]), st.text(alphabet="abc .\n", max_size=30))
def test_every_written_call_is_found_in_order_and_the_prose_is_kept(objects, wrap, prose):
    body = "\n".join(objects)
    block = {"fence": f"```json\n{body}\n```", "tag": f"<tool_call>\n{body}\n</tool_call>", "bare": body}[wrap]
    text = f"{prose.strip()}\n{block}\n" if prose.strip() else block
    reply = read_calls(Reply(text), "auto", TOOLS)
    assert [c.name for c in reply.tool_calls] == [json.loads(o)["name"] for o in objects]
    assert (reply.content or "") == prose.strip()


@pytest.mark.parametrize("mode", ["auto", "always"])
def test_every_call_read_has_json_object_arguments_or_the_raw_text(mode):
    reply = read_calls(Reply(f"{LIST}\n{READ}"), mode, TOOLS)
    for call in reply.tool_calls:
        assert isinstance(json.loads(call.arguments), dict)


def test_a_reply_of_deeply_nested_brackets_costs_bounded_work_and_is_no_call():
    import time

    started = time.monotonic()
    for text in ("[" * 60_000, "{" * 60_000, "[{" * 30_000 + LIST):
        read_calls(Reply(text), "always", TOOLS)
    assert time.monotonic() - started < 3
