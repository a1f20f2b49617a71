"""The pieces of MCP support that need no server: configuration, names, deferral, result shapes."""

from __future__ import annotations

import base64
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxagent.errors import UsageError
from ctxagent.mcp_tools.config import expand, parse_servers
from ctxagent.mcp_tools.mirror import input_schema, tool_name
from ctxagent.mcp_tools.results import json_ready, value_of
from ctxagent.sessions.store import OutputStore
from ctxagent.tools.base import Spooled, Tool, ToolContext, ToolError, schema
from ctxagent.tools.deferral import FIND_TOOLS, select
from ctxagent.tools.offload import OffloadPolicy
from ctxagent.tools.toolset import Toolset
from ctxagent.tools.user import NAME_RE
from examplecount import examples


def test_the_mcp_servers_shape_of_claude_code_and_cursor_parses_and_disabled_servers_are_left_out():
    servers = parse_servers({"mcpServers": {
        "fs": {"command": "npx", "args": ["-y", "server-fs"], "env": {"ROOT": "${HOME}"}},
        "web": {"type": "http", "url": "http://127.0.0.1:1/mcp", "headers": {"X": "y"}},
        "off": {"command": "x", "disabled": True}}}, source="cfg.json")
    assert list(servers) == ["fs", "web"]
    assert servers["fs"].transport == "stdio" and servers["web"].transport == "http"
    assert servers["web"].shown()["headers"] == {"X": "***"} and servers["fs"].shown()["env"] == {"ROOT": "${HOME}"}


def test_a_server_is_shared_in_one_working_directory_only(tmp_path):
    """Issue 35: two sessions of one process shared a server per config, so a session got a server
    started in another session's working directory (and logging to its folder). Sub-agents, which
    work in their parent's directory, still share its servers. Nothing starts here."""
    from ctxagent.mcp_tools import hub

    config = parse_servers({"s": {"command": "true"}}, source="cfg.json")["s"]
    parent = hub.connection("s", config, log_dir=tmp_path / "a", workdir=tmp_path / "w")
    child = hub.connection("s", config, log_dir=tmp_path / "a-child", workdir=tmp_path / "w")
    other = hub.connection("s", config, log_dir=tmp_path / "b", workdir=tmp_path / "elsewhere")
    assert child is parent and other is not parent
    assert (other.workdir, other.log_path) == (tmp_path / "elsewhere", tmp_path / "b" / "s.log")


@pytest.mark.parametrize(("entry", "message"), [
    ({"command": "x", "url": "http://h"}, "either 'command'"),
    ({"args": ["a"]}, "either 'command'"),
    ({"command": "x", "type": "sse"}, "sse transport is not supported"),
    ({"command": "x", "timeout_s": 0}, "greater than 0"),
    ({"command": "x", "colour": "red"}, "Extra inputs"),
])
def test_a_bad_server_names_the_source_server_and_key(entry, message):
    with pytest.raises(UsageError, match=re.escape(message)) as err:
        parse_servers({"mcpServers": {"demo": entry}}, source="cfg.json")
    assert str(err.value).startswith("cfg.json: mcpServers.demo")


def test_server_names_that_would_make_ambiguous_tool_names_are_refused():
    with pytest.raises(UsageError, match="without '__'"):
        parse_servers({"a__b": {"command": "x"}}, source="cfg.json")


def test_references_expand_from_the_environment_with_defaults(monkeypatch):
    monkeypatch.setenv("TOKEN_X", "t0k")
    monkeypatch.delenv("NOT_SET_X", raising=False)
    assert expand("Bearer ${TOKEN_X}") == "Bearer t0k"
    assert expand("${NOT_SET_X:-fallback}/${TOKEN_X}") == "fallback/t0k"
    with pytest.raises(UsageError, match="NOT_SET_X is not set"):
        expand("${NOT_SET_X}")


@given(st.text(min_size=1, max_size=30, alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",))),
       st.text(min_size=1, max_size=200))
@settings(max_examples=examples(200), deadline=None)
def test_a_tool_name_is_always_one_providers_accept_and_keeps_the_server_prefix(server, tool):
    server = re.sub(r"[^A-Za-z0-9_-]", "x", server)[:32]
    name = tool_name(server, tool)
    assert NAME_RE.match(name) and name.startswith(server + "__")


def test_a_non_object_schema_takes_no_arguments_and_schema_keywords_are_kept():
    assert input_schema({"type": "string"}) == {"type": "object", "properties": {}}
    kept = input_schema({"$schema": "x", "type": "object", "title": "opArguments", "additionalProperties": False,
                         "properties": {"a": {"type": "integer", "title": "A"}, "title": {"type": "string"}}})
    assert kept == {"type": "object", "additionalProperties": False,  # titles dropped, a property named title kept
                    "properties": {"a": {"type": "integer"}, "title": {"type": "string"}}}


def _tools(n: int) -> list[Tool]:
    return [Tool(f"srv__op{i}", f"Operation {i}: adjust stock {'level' if i % 2 else 'audit'}",
                 schema({"x": {"type": "string"}}), lambda ctx, **a: "ok", kind="mcp", group="srv") for i in range(n)]


def test_find_tools_selects_exact_names_first_then_keywords():
    tools = _tools(8)
    assert [t.name for t in select(tools, "srv__op3, srv__op1")] == ["srv__op3", "srv__op1"]
    assert [t.name for t in select(tools, "audit", limit=3)] == ["srv__op0", "srv__op2", "srv__op4"]
    with pytest.raises(ToolError, match="no deferred tool matches"):
        select(tools, "weather")


@given(st.lists(st.integers(0, 11), max_size=12), st.integers(0, 11))
@settings(max_examples=examples(100), deadline=None)
def test_loading_a_deferred_tool_only_appends_to_the_tool_list(tmp_path_factory, loaded, more):
    """The schemas a request sends before a ``find_tools`` call are a prefix of those after it, so a
    provider's cached prefix survives the load (FIELD-NOTES, prompt caching)."""
    tools = _tools(12)
    ctx = ToolContext(OutputStore(tmp_path_factory.mktemp("s")), tmp_path_factory.getbasetemp())
    toolset = Toolset([*tools[:2], *tools[2:]], ctx, OffloadPolicy(limit_tokens=1000),
                      deferred=[t.name for t in tools[2:]])
    names = [f"srv__op{i}" for i in dict.fromkeys(loaded)]
    before = [s["function"]["name"] for s in toolset.specs(names)]
    after = [s["function"]["name"] for s in toolset.specs([*names, f"srv__op{more}"])]
    assert after[:len(before)] == before
    assert before[:3] == ["srv__op0", "srv__op1", FIND_TOOLS]
    assert set(after) == {"srv__op0", "srv__op1", FIND_TOOLS, *(n for n in [*names, f"srv__op{more}"]
                                                              if n not in ("srv__op0", "srv__op1"))}


def test_result_shapes_become_tool_values(tmp_path):
    # imported here: the SDK's types cost ~0.6 s to import, in every worker that collects this file
    types = pytest.importorskip("mcp_types", reason="the mcp extra is not installed")

    def _result(content: list, structured: object = None, is_error: bool = False) -> object:
        return types.CallToolResult(content=content, structured_content=structured, is_error=is_error)

    store = OutputStore(tmp_path)
    text = types.TextContent(type="text", text="hello")
    assert value_of(_result([text]), store) == "hello"
    assert value_of(_result([text], {"result": "hello"}), store) == "hello"  # the SDK wrapper of a string
    assert value_of(_result([text], {"result": [1, 2]}), store) == [1, 2]
    assert value_of(_result([text], {"rows": [1, 2]}), store) == {"rows": [1, 2]}
    with pytest.raises(ToolError, match="hello"):
        value_of(_result([text], is_error=True), store)
    png = types.ImageContent(type="image", data=base64.b64encode(b"\x89PNG-data").decode(), mime_type="image/png")
    one = value_of(_result([text, png]), store)
    assert isinstance(one, Spooled) and one.path.read_bytes() == b"\x89PNG-data" and "image/png" in one.note
    two = value_of(_result([png, png]), store)
    assert two["summary"].count("image/png") == 2 and base64.b64decode(two["content"][1]["data"]) == b"\x89PNG-data"
    resource = types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
        uri="file:///a.txt", text="inside", mime_type="text/plain"))
    assert value_of(_result([resource]), store) == "[resource file:///a.txt]\ninside"


def test_resolved_values_are_made_json_for_the_server():
    np = pytest.importorskip("numpy")
    assert json_ready(b"text") == "text"
    assert json_ready(b"\xff\x00") == base64.b64encode(b"\xff\x00").decode()
    assert json_ready({"a": (1, np.int64(2)), "b": np.arange(3)}) == {"a": [1, 2], "b": [0, 1, 2]}
    json.dumps(json_ready({"x": np.float32(1.5)}))


def test_a_config_file_is_strict_json_with_line_and_column_and_names_a_wrong_top_level_key(tmp_path):
    from ctxagent.mcp_tools.config import load_file

    bad = tmp_path / "mcp.json"
    bad.write_text('{"mcpServers": {"a": {"command": "python",}}}')  # YAML would accept the trailing comma
    with pytest.raises(UsageError, match=r"mcp.json:1:\d+: not valid JSON"):
        load_file(bad)
    bad.write_text('{"servers": {"a": {"command": "python"}}}')
    with pytest.raises(UsageError, match=re.escape('expected {"mcpServers"')):
        load_file(bad)
    good = tmp_path / "mcp.yaml"
    good.write_text("mcpServers:\n  a: {command: python}\n")
    assert list(load_file(good)) == ["a"]
