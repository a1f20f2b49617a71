"""Handles: structured values, mirrored tools, selective reads, user tools, answers by handle.

In-process tests use a real output store and the real toolset; the CLI tests run ``python -m
ctxagent`` in a subprocess with the scripted model (only the model is scripted).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
import yaml

from clihelp import call, ctxagent, records, script, tool_messages
from ctxagent.agent.model import ToolCall
from ctxagent.errors import UsageError
from ctxagent.sessions.store import OutputStore
from ctxagent.tools import user, values
from ctxagent.tools.base import ToolContext
from ctxagent.tools.offload import OffloadPolicy
from ctxagent.tools.toolset import ToolOutcome, Toolset, make_toolset

HANDLE_TOOLS = ["read_output", "grep_output", "query_output", "output_info"]


# --- user tools of the in-process tests ---------------------------------------------------------


def make_array(n: int = 4, seed: int = 0) -> np.ndarray:
    """A seeded n x n x n float32 array."""
    return np.random.default_rng(seed).random((n, n, n), dtype=np.float32)


def echo(value: Any) -> Any:
    """Return the value as given."""
    return value


def kind_of(value: Any) -> str:
    """What the tool received: its Python type, and a short form of the value."""
    shape = list(value.shape) if isinstance(value, np.ndarray) else None
    return json.dumps({"type": type(value).__name__, "shape": shape, "repr": repr(value)[:60]})


def record(items: list[str], meta: dict | None = None) -> dict:
    """Build a nested JSON value."""
    return {"items": items, "meta": meta or {}, "nested": {"a": [10, 20, {"b": "deep"}], "with space": 1}}


def blob(size: int = 300) -> bytes:
    """Binary bytes."""
    return bytes(range(256)) * (size // 256) + b"\x00" * (size % 256)


def number() -> int:
    """A scalar."""
    return 42


def weird() -> object:
    """Something that is no tool value."""
    return {1, 2}


def big_json(rows: int = 3000) -> list:
    """A JSON list far over the inline threshold."""
    return [{"id": i, "name": f"row {i}", "tags": ["x", "y"]} for i in range(rows)]


@pytest.fixture
def store(tmp_path: Path) -> OutputStore:
    return OutputStore(tmp_path / "session" / "outputs")


@pytest.fixture
def toolset(store: OutputStore, tmp_path: Path) -> Toolset:
    extra = [user.make_tool(fn) for fn in (make_array, echo, kind_of, record, blob, number, weird, big_json)]
    return make_toolset(["shell", *HANDLE_TOOLS], ToolContext(store, tmp_path), OffloadPolicy(2000), extra)


def run(toolset: Toolset, call_id: str, name: str, **arguments: Any) -> ToolOutcome:
    return toolset.call(ToolCall(call_id, name, json.dumps(arguments)))


def received(outcome: ToolOutcome) -> dict[str, Any]:
    assert not outcome.is_error, outcome.content
    return json.loads(outcome.content)


# --- values and records -------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["", "it's", "a b", "x/y", "~1", "名前"])
def test_the_part_and_path_a_stored_object_suggests_work_when_its_first_key_is_odd(toolset: Toolset, key: str) -> None:
    """The note of a stored object suggested "@h/" for a first key "" (a sub-handle that does not parse)
    and "$['it's']" for a key holding a quote (a JSONPath that does not parse)."""
    small = run(toolset, "odd", "echo", value={key: "first", "z": 2})
    part = re.search(r'a part like "([^"]+)"', small.content)
    assert part is not None, small.content
    got = received(run(toolset, "use", "kind_of", value=part.group(1)))["repr"]
    assert got in (repr("first"), repr({key: "first", "z": 2})[:60])

    big = run(toolset, "oddbig", "echo", value={key: "first", **{f"k{i}": "x" * 40 for i in range(200)}})
    path = re.search(r'query_output\("@oddbig", "(.+?)"\)', big.content)
    assert path is not None, big.content
    found = run(toolset, "q", "query_output", handle="@oddbig", path=path.group(1))
    assert not found.is_error and "first" in found.content, found.content


def test_an_argument_ending_in_a_newline_is_text_not_a_handle(toolset: Toolset) -> None:
    """``$`` matched before a final newline: "@everyone\\n" (a line a model writes to a file) looked like a
    handle, named nothing stored and failed the call; "@rec\\n" resolved to @rec."""
    run(toolset, "rec", "record", items=["a"])
    for text in ("@everyone\n", "@rec\n"):
        assert received(run(toolset, "k", "kind_of", value=text))["repr"] == repr(text)


def test_structured_values_are_stored_with_metadata_and_a_handle(toolset: Toolset, store: OutputStore) -> None:
    grid = run(toolset, "grid", "make_array", n=8)
    assert grid.output is not None and grid.output.handle == "@grid"
    assert (grid.output.type, grid.output.shape, grid.output.dtype) == ("ndarray", [8, 8, 8], "float32")
    assert grid.output.path == "outputs/grid.npy" and grid.output.binary
    assert "@grid" in grid.content and "float32" in grid.content and "(8, 8, 8)" in grid.content
    assert len(grid.content) < 400  # a description, never the values
    np.testing.assert_array_equal(np.load(store.root / "grid.npy"), make_array(8))

    small = run(toolset, "rec", "record", items=["a", "b"])
    assert small.output is not None and (small.output.type, small.output.length) == ("json", 3)
    assert small.content.startswith('{"items": ["a", "b"]')  # small JSON: shown in full, and stored
    assert '[stored as @rec: pass "@rec" or a part like "@rec/items"' in small.content
    assert json.loads((store.root / "rec.json").read_text()) == record(["a", "b"])

    raw = run(toolset, "raw", "blob")
    assert raw.output is not None and raw.output.type == "bytes" and (store.root / "raw.out").read_bytes() == blob()

    meta = values.read_meta(store, "@grid")
    assert meta["tool"] == "make_array" and json.loads(meta["arguments"]) == {"n": 8}
    assert meta["sha256"] == hashlib.sha256((store.root / "grid.npy").read_bytes()).hexdigest()
    assert store.handles() == ["@grid", "@rec", "@raw"]


def test_large_json_is_previewed_and_scalars_are_text(toolset: Toolset) -> None:
    big = run(toolset, "big", "big_json")
    assert big.output is not None and big.output.type == "json" and big.output.length == 3000
    assert big.content.startswith("JSON value: list of 3,000 items (object)")
    assert "saved as @big" in big.content and 'query_output("@big", "$[0]")' in big.content
    assert len(big.content) < 3000
    assert run(toolset, "n", "number") == ToolOutcome("42", False, None)
    bad = run(toolset, "w", "weird")
    assert bad.is_error and "it returned set" in bad.content


# --- mirrored tools: resolution -----------------------------------------------------------------


def test_handles_resolve_in_nested_arguments(toolset: Toolset) -> None:
    run(toolset, "grid", "make_array", n=4)
    run(toolset, "rec", "record", items=["a", "b"], meta={"k": "v"})
    arguments = {"value": {"grid": "@grid", "list": ["@rec/items", "@rec/nested/a/2/b", "@rec/nested/a/-1"],
                           "row": "@grid/3", "escaped": "@@grid", "text": "mail me at a@b.c", "spaced": "@ not"}}
    out = run(toolset, "e1", "echo", **arguments)
    assert out.output is not None and out.output.type == "json"
    # a dict holding an ndarray was stored as JSON: the array became nested lists
    stored = json.loads(values.stored(toolset.ctx.store, "@e1").path.read_text())
    assert stored["grid"] == make_array(4).tolist()
    assert stored["list"] == [["a", "b"], "deep", {"b": "deep"}]
    assert stored["row"] == make_array(4)[3].tolist()
    assert (stored["escaped"], stored["text"], stored["spaced"]) == ("@grid", "mail me at a@b.c", "@ not")
    assert received(run(toolset, "k1", "kind_of", value="@grid"))["type"] == "ndarray"
    assert received(run(toolset, "k2", "kind_of", value="@grid/0/1/2"))["type"] == "float"
    assert received(run(toolset, "k3", "kind_of", value="@rec/meta"))["repr"] == "{'k': 'v'}"


def test_text_and_bytes_handles_resolve_to_str_and_bytes(toolset: Toolset) -> None:
    text = run(toolset, "long", "shell", command="seq 1 20000")
    assert text.output is not None
    assert received(run(toolset, "k1", "kind_of", value="@long"))["type"] == "str"
    run(toolset, "raw", "blob")
    assert received(run(toolset, "k2", "kind_of", value="@raw"))["type"] == "bytes"


def test_unknown_handles_are_errors_naming_the_nearest(toolset: Toolset) -> None:
    empty = run(toolset, "e0", "echo", value="@grid")
    assert empty.is_error and "unknown handle @grid" in empty.content and "no stored outputs yet" in empty.content
    run(toolset, "grid", "make_array", n=4)
    run(toolset, "grid2", "make_array", n=2)
    typo = run(toolset, "e1", "echo", value={"deep": ["@gird"]})
    assert typo.is_error and typo.output is None
    assert "unknown handle @gird" in typo.content and "nearest: @grid" in typo.content
    assert "write @@gird" in typo.content
    far = run(toolset, "e2", "echo", value="@zzzzzz")
    assert far.is_error and "this session's handles: @grid, @grid2" in far.content
    run(toolset, "rec", "record", items=["a"])
    key = run(toolset, "e3", "echo", value="@rec/itmes")
    assert key.is_error and "@rec has no key 'itmes'; nearest: 'items'" in key.content
    index = run(toolset, "e4", "echo", value="@rec/items/7")
    assert index.is_error and "index 7 is out of range" in index.content and "1 item" in index.content
    scalar = run(toolset, "e5", "echo", value="@rec/nested/with space")  # whitespace: not a handle at all
    assert not scalar.is_error


@pytest.mark.parametrize("bad", ["@../secret", "@/etc/passwd", "@grid/", "@grid//0", "@a.b", "@" + "x" * 40,
                                 "@grid/../../secret", "@~root", "@grid\\..\\x"])
def test_malformed_and_traversal_handles_are_refused(toolset: Toolset, store: OutputStore, bad: str) -> None:
    run(toolset, "grid", "make_array", n=2)
    (store.root.parent / "secret.out").write_text("top secret")
    out = run(toolset, "e", "echo", value=bad)
    assert out.is_error and "top secret" not in out.content
    for tool in ("read_output", "output_info", "query_output"):
        args = {"handle": bad} if tool != "query_output" else {"handle": bad, "path": "$"}
        refused = run(toolset, "r", tool, **args)
        assert refused.is_error and "top secret" not in refused.content


def test_traversal_never_reaches_the_disk(store: OutputStore) -> None:
    with pytest.raises(UsageError):
        store.path_of("@../x")
    parsed = values.parse_ref("@grid/../../etc")
    assert parsed == values.Ref("@grid", ("..", "..", "etc"))  # parts index into the value, never paths


def test_sha256_is_the_same_through_two_tools(toolset: Toolset) -> None:
    first = run(toolset, "a", "make_array", n=16, seed=3)
    second = run(toolset, "b", "echo", value="@a")
    third = run(toolset, "c", "echo", value="@b")
    assert first.output and second.output and third.output
    assert first.output.sha256 == second.output.sha256 == third.output.sha256
    assert third.output.type == "ndarray"
    run(toolset, "j", "record", items=["x"])
    json_twice = [run(toolset, f"j{i}", "echo", value="@j" if i == 1 else "@j1").output for i in (1, 2)]
    assert json_twice[0] and json_twice[1] and json_twice[0].sha256 == json_twice[1].sha256
    run(toolset, "raw", "blob")
    raw = run(toolset, "raw2", "echo", value="@raw").output
    assert raw is not None and raw.sha256 == hashlib.sha256(blob()).hexdigest()


def test_handles_are_checked_against_the_declared_type(toolset: Toolset) -> None:
    run(toolset, "grid", "make_array", n=2)
    out = run(toolset, "r", "record", items="@grid")
    assert out.is_error and "argument 'items' must be array, but @grid holds ndarray float32" in out.content
    run(toolset, "rec", "record", items=["a"])
    assert not run(toolset, "r2", "record", items="@rec/items").is_error


def test_arguments_the_permission_gate_reads_take_no_handle(toolset: Toolset) -> None:
    run(toolset, "rec", "record", items=["rm -rf /"])
    refused = run(toolset, "s", "shell", command="@rec/items/0")
    assert refused.is_error and "takes no handle" in refused.content
    literal = run(toolset, "s2", "shell", command="echo @@rec")
    assert literal.content == "exit code: 0\n@@rec\n"  # not exactly a handle: passed as written


# --- selective reads at the edges ----------------------------------------------------------------


def test_selective_reads_at_the_edges_are_clear_tool_errors(toolset: Toolset) -> None:
    run(toolset, "txt", "shell", command="seq 1 5000")
    run(toolset, "rec", "record", items=["a", "b"])
    run(toolset, "grid", "make_array", n=2)
    errors = {
        "empty range": ("read_output", {"handle": "@txt", "start_line": 9, "end_line": 3}, "empty range"),
        "past the end": ("read_output", {"handle": "@txt", "start_line": 99_999}, "past the end"),
        "start 0": ("read_output", {"handle": "@txt", "start_line": 0}, "greater than or equal to 1, not 0"),
        "invalid regex": ("grep_output", {"handle": "@txt", "pattern": "(unclosed"}, "invalid regex"),
        "bad context": ("grep_output", {"handle": "@txt", "pattern": "1", "context_lines": 99}, "or equal to 20"),
        "invalid path": ("query_output", {"handle": "@rec", "path": "$.items[?(@.x >> 1)]"}, "invalid JSON path"),
        "empty path": ("query_output", {"handle": "@rec", "path": "  "}, "empty JSON path"),
        "not JSON": ("query_output", {"handle": "@txt", "path": "$"}, "is text, not JSON"),
        "array": ("query_output", {"handle": "@grid", "path": "$"}, "numpy array"),
        "array lines": ("read_output", {"handle": "@grid"}, "no text lines"),
        "part lines": ("grep_output", {"handle": "@rec/items", "pattern": "a"}, "is a part of @rec"),
        "unknown": ("output_info", {"handle": "@rex"}, "nearest: @rec"),
        "no handle": ("read_output", {"handle": "txt"}, "not a handle"),
    }
    for label, (tool, args, expected) in errors.items():
        out = run(toolset, "q", tool, **args)
        assert out.is_error and out.content.startswith("ERROR: ") and expected in out.content, (label, out.content)
    nothing = run(toolset, "q", "grep_output", handle="@txt", pattern="^x$")
    assert (nothing.is_error, nothing.content) == (False, "no line of @txt matches '^x$' (5,000 lines searched)")
    none = run(toolset, "q", "query_output", handle="@rec", path="$.missing")
    assert not none.is_error and none.content.startswith("no match for $.missing in @rec (object of 3 keys")
    end = run(toolset, "q", "read_output", handle="@txt", start_line=4999, end_line=10_000)
    assert end.content == "@txt lines 4,999-5,000:\n4999: 4999\n5000: 5000\n[end of output: 5,000 lines]"


def test_query_output_and_output_info(toolset: Toolset) -> None:
    run(toolset, "rec", "record", items=["a", "b"])
    out = run(toolset, "q", "query_output", handle="@rec", path="$.nested.a[*]")
    assert out.content == ('3 matches of $.nested.a[*] in @rec:\n@rec/nested/a/0 = 10\n@rec/nested/a/1 = 20\n'
                           '@rec/nested/a/2 = {"b": "deep"}')
    spaced = run(toolset, "q", "query_output", handle="@rec", path="$.nested['with space']")
    assert spaced.content.endswith("$['nested']['with space'] = 1")
    sub = run(toolset, "q", "query_output", handle="@rec/nested", path="$.a[2].b")
    assert sub.content.endswith('@rec/nested/a/2/b = "deep"')
    program = 'import json; print(json.dumps({"k": [1, 2, 3], "pad": "x " * 9000}))'
    cat = run(toolset, "cat", "shell", command=f"python3 -c '{program}'")
    assert cat.output is not None and cat.output.type == "text"  # offloaded text that is JSON
    assert run(toolset, "q", "query_output", handle="@cat", path="$.k[1]").content.endswith("= 2")
    run(toolset, "big", "big_json")
    many = run(toolset, "q", "query_output", handle="@big", path="$[*].id")
    assert "200 more matches not listed" not in many.content and "2,800 more matches not listed" in many.content
    filtered = run(toolset, "q", "query_output", handle="@big", path="$[?(@.id == 1234)].name")
    assert filtered.content == '1 match of $[?(@.id == 1234)].name in @big:\n@big/1234/name = "row 1234"'
    run(toolset, "grid", "make_array", n=4, seed=1)
    info = run(toolset, "i", "output_info", handle="@grid").content
    assert info.startswith("@grid: ndarray float32, shape (4, 4, 4)\n")
    assert 'made by: make_array({"n": 4, "seed": 1}), call grid' in info and "sha256 " in info
    part = run(toolset, "i", "output_info", handle="@rec/nested").content
    assert part.startswith("@rec/nested: object of 2 keys: a (list of 3 items), with space (integer)")
    text = run(toolset, "i", "output_info", handle="@big").content
    assert "JSON list of 3,000 items" in text and "lines" in text


def test_a_catastrophic_regex_in_a_query_output_filter_gives_up_at_its_budget(toolset: Toolset, monkeypatch) -> None:
    """A JSONPath filter's regex (jsonpath-ng runs it with `re`, which nothing stops) hung
    query_output for over 300 s. With the budget cut from 10 s to 0.2 s: it gives up at it."""
    from ctxagent.tools import patterns

    monkeypatch.setattr(patterns, "SECONDS", 0.2)
    run(toolset, "rec", "record", items=["a" * 40 + "!", "ab"])
    for path in ("$.items[?(@ =~ '(a|aa)+$')]", "$.items[?(@ == 'x' || @ =~ '(a|aa)+$')]",
                 "$.items[0].`sub(/(a|aa)+$/, x)`"):
        started = time.monotonic()
        out = run(toolset, "q", "query_output", handle="@rec", path=path)
        assert time.monotonic() - started < 5, path
        assert out.is_error and "query_output gave up after 0.2 s: the pattern" in out.content, out.content
    fine = run(toolset, "q", "query_output", handle="@rec", path="$.items[?(@ =~ 'a[b]')]")
    assert fine.content == '1 match of $.items[?(@ =~ \'a[b]\')] in @rec:\n@rec/items/1 = "ab"'
    changed = run(toolset, "q", "query_output", handle="@rec", path="$.items[1].`sub(/b$/, c)`")
    assert changed.content.endswith('= "ac"')
    bad = run(toolset, "q", "query_output", handle="@rec", path="$.items[?(@ =~ '(')]")
    assert bad.is_error and "invalid regex '('" in bad.content


# --- user tools: schema, loading, entry points ----------------------------------------------------


def documented(ctx: ToolContext, path: str, count: int, ratio: float = 0.5, flag: bool = False,
               names: list[str] | None = None, options: dict | None = None,
               mode: Literal["fast", "slow"] = "fast", grid: np.ndarray | None = None) -> str:
    """Do a documented thing.

    More text that is not the description.

    Args:
        path: where to look
        count (int): how many, spread over
            two lines
        mode: how fast

    Returns:
        nothing useful
    """
    return f"{ctx.workdir.name}:{path}:{count}:{mode}"


def test_schema_from_type_hints_and_docstring(toolset: Toolset) -> None:
    tool = user.make_tool(documented)
    assert tool.name == "documented" and tool.description == "Do a documented thing." and tool.kind == "exec"
    props = tool.parameters["properties"]
    assert tool.parameters["required"] == ["path", "count"]
    assert props["path"] == {"type": "string", "description": "where to look"}
    assert props["count"] == {"type": "integer", "description": "how many, spread over two lines"}
    assert props["ratio"] == {"type": "number", "default": 0.5}
    assert props["flag"] == {"type": "boolean", "default": False}
    assert props["names"] == {"type": ["array", "null"], "items": {"type": "string"}}
    assert props["options"] == {"type": ["object", "null"]}
    assert props["mode"] == {"enum": ["fast", "slow"], "type": "string", "description": "how fast", "default": "fast"}
    assert "type" not in props["grid"] and "handle" in props["grid"]["description"]
    ts = Toolset([tool], toolset.ctx, OffloadPolicy(1000))
    out = ts.call(ToolCall("d", "documented", json.dumps({"path": "p", "count": 2})))
    assert out.content == f"{toolset.ctx.workdir.name}:p:2:fast"  # the context came first
    bad = ts.call(ToolCall("d", "documented", json.dumps({"path": "p", "count": 2, "mode": "slowest"})))
    assert bad.is_error and "argument 'mode': input should be 'fast' or 'slow', not 'slowest'" in bad.content
    assert tool.validator is not None  # one signature gives the schema and the validation
    with pytest.raises(UsageError, match="keyword"):
        user.make_tool(lambda *args: None, name="varargs")
    with pytest.raises(UsageError, match="name"):
        user.make_tool(lambda: None)


def test_tools_load_from_files_modules_names_and_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              store: OutputStore) -> None:
    (tmp_path / "mytools.py").write_text(textwrap.dedent('''
        from ctxagent.tools.user import make_tool

        def shout(text: str) -> str:
            """Upper-case the text."""
            return text.upper()

        READER = make_tool(shout, name="reader", kind="read")
        BOTH = [shout, READER]
    '''))
    assert [t.name for t in user.load_spec(f"{tmp_path / 'mytools.py'}:BOTH")] == ["shout", "reader"]
    assert user.load_spec(f"{tmp_path / 'mytools.py'}:READER")[0].kind == "read"
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert user.load_spec("mytools:shout")[0].fn(None, text="hi") == "HI"
    assert user.load_spec("grep_output")[0].name == "grep_output"
    for spec, message in (("mytools:nope", "no attribute"), ("no_such_module_x:f", "cannot import"),
                          (f"{tmp_path}/missing.py:f", "no such file"), ("nonexistent_tool", "not a built-in")):
        with pytest.raises(UsageError, match=message):
            user.load_spec(spec)
    site = tmp_path / "site"
    (site / "ctxplug-1.0.dist-info").mkdir(parents=True)
    (site / "ctxplug-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: ctxplug\nVersion: 1.0\n")
    (site / "ctxplug-1.0.dist-info" / "entry_points.txt").write_text(
        "[ctxagent.tools]\nplug_shout = ctxplug_mod:shout\nbroken = ctxplug_mod:missing\n")
    (site / "ctxplug_mod.py").write_text("def shout(text: str) -> str:\n    return text.upper() + '!'\n")
    monkeypatch.syspath_prepend(str(site))
    assert {"plug_shout", "broken"} <= set(user.installed_names())
    ts = make_toolset(["plug_shout"], ToolContext(store, tmp_path), OffloadPolicy(1000))
    assert ts.call(ToolCall("p", "plug_shout", '{"text": "hey"}')).content == "HEY!"
    with pytest.raises(UsageError, match="cannot be loaded"):
        make_toolset(["broken"], ToolContext(store, tmp_path), OffloadPolicy(1000))
    with pytest.raises(UsageError, match="installed"):
        make_toolset(["nope_tool"], ToolContext(store, tmp_path), OffloadPolicy(1000))


# --- the CLI: answers by handle, inspect, resume, compaction -------------------------------------

CLI_TOOLS = '''
import numpy as np


def make_grid(seed: int = 1, size: int = 8) -> np.ndarray:
    """A seeded size^3 float32 grid."""
    return np.random.default_rng(seed).random((size, size, size), dtype=np.float32)


def argmax(grid: np.ndarray) -> dict:
    """Index and value of the maximum."""
    flat = int(np.argmax(grid))
    index = [int(i) for i in np.unravel_index(flat, grid.shape)]
    return {"index": index, "value": float(grid[tuple(index)])}


def note(text: str) -> str:
    """Text back, long."""
    return (text + "\\n") * 3000
'''


@pytest.fixture
def cli(tmp_path: Path) -> dict[str, Any]:
    tools = tmp_path / "clitools.py"
    tools.write_text(CLI_TOOLS)
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump({
        "context_window": 16000, "tool_result_limit": 2000, "tools": ["output_info"],
        "permissions": {"tools": {"make_grid": "allow", "argmax": "allow", "note": "allow"}},
        "pipelines": {"batch": [{"strategy": "truncate"}], "interactive": [{"strategy": "truncate"}]},
    }))
    specs = [f"{tools}:{name}" for name in ("make_grid", "argmax", "note")]
    return {"args": ["--profile", str(profile), *[a for s in specs for a in ("--tools", s)]], "dir": tmp_path}


def grid_and_max(seed: int = 1, size: int = 8) -> tuple[np.ndarray, list[int], float]:
    grid = np.random.default_rng(seed).random((size, size, size), dtype=np.float32)
    index = [int(i) for i in np.unravel_index(int(np.argmax(grid)), grid.shape)]
    return grid, index, float(grid[tuple(index)])


def test_answers_by_handle_and_inspect(cli: dict[str, Any]) -> None:
    tmp = cli["dir"]
    replies = [{"tool_calls": [call("g", "make_grid", seed=1)]},
               {"tool_calls": [call("m", "argmax", grid="@g")]},
               {"content": "@m"}]
    out = ctxagent("run", "--batch", "--session", "h1", "--model", script(tmp / "a.yaml", replies), *cli["args"], "go")
    _, index, value = grid_and_max()
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"index": index, "value": value}
    assert out.stdout.startswith("{\n  ")  # pretty-printed

    mixed = [*replies[:2], {"content": "max @m/value at @m/index (see @nothing)"}]
    out = ctxagent("run", "--batch", "--session", "h2", "--model", script(tmp / "b.yaml", mixed), *cli["args"], "go")
    assert out.stdout == f"max {json.dumps(value)} at {json.dumps(index)} (see @nothing)\n", out.stderr
    assert "@nothing" in out.stderr

    binary = [replies[0], {"content": "@g"}]
    out = ctxagent("run", "--json", "--session", "h3", "--model", script(tmp / "c.yaml", binary), *cli["args"],
                   "--output", str(tmp / "grid.npy"), "go")
    obj = json.loads(out.stdout)
    assert obj["answer"] == "@g" and obj["output"] == str(tmp / "grid.npy")
    stored = os.path.join(os.environ["CTXAGENT_DATA_DIR"], "sessions", "h3", "outputs", "g.npy")
    assert obj["handles"] == [{"handle": "@g", "type": "ndarray", "path": stored}]
    np.testing.assert_array_equal(np.load(tmp / "grid.npy"), grid_and_max()[0])
    model = script(tmp / "d.yaml", binary)
    refused = ctxagent("run", "--batch", "--session", "h4", "--model", model, *cli["args"], "go")
    assert (refused.returncode, refused.stdout) == (0, "@g\n") and "is binary" in refused.stderr

    listed = ctxagent("inspect", "outputs", "--session", "h1", "--json")
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["handle"], r["tool"], r["type"]) for r in rows] == [("@g", "make_grid", "ndarray"),
                                                                   ("@m", "argmax", "json")]
    assert rows[0]["shape"] == [8, 8, 8] and rows[0]["created"] > 0
    table = ctxagent("inspect", "outputs", "--session", "h1")
    assert "@g" in table.stdout and "make_grid" in table.stdout and "float32[8, 8, 8]" in table.stdout
    one = ctxagent("inspect", "output", "@m/index", "--session", "h1")
    assert json.loads(one.stdout) == index
    npy = ctxagent("inspect", "output", "g", "--session", "h1")
    assert npy.returncode == 2 and "--output" in npy.stderr
    unknown = ctxagent("inspect", "output", "@gg", "--session", "h1")
    assert unknown.returncode == 2 and "nearest: @g" in unknown.stderr


def test_inspect_outputs_does_not_import_litellm(cli: dict[str, Any]) -> None:
    tmp = cli["dir"]
    model = script(tmp / "a.yaml", [{"tool_calls": [call("n", "note", text="hello")]}, {"content": "@n"}])
    out = ctxagent("run", "--batch", "--session", "t1", "--model", model, *cli["args"], "go")
    assert out.returncode == 0 and out.stdout == "hello\n" * 3000, out.stderr[-2000:]
    code = ("import sys\n"
            "from ctxagent.cli import invoke\n"  # main() would end the process after the first command
            "for argv in (['inspect', 'outputs'], ['inspect', 'output', '@n']):\n"
            "    assert invoke(argv) == 0, argv\n"
            "assert 'litellm' not in sys.modules, 'litellm imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("hello\n" * 3000)


def test_resume_uses_a_handle_made_before_the_restart(cli: dict[str, Any]) -> None:
    tmp = cli["dir"]
    model = script(tmp / "r.yaml", [
        {"tool_calls": [call("g", "make_grid", seed=5, size=6)]},
        {"content": "made @g"},
        {"tool_calls": [call("m", "argmax", grid="@g")]},
        {"content": "@m/value"},
    ])
    first = ctxagent("run", "--batch", "--session", "res", "--model", model, *cli["args"], "make it")
    assert first.returncode == 0 and first.stdout.startswith("made @g"), first.stderr
    # a new process; --tools and --profile are not given again: the header keeps the tools
    second = ctxagent("resume", "--batch", "--session", "res", "now find the maximum")
    _, _, value = grid_and_max(5, 6)
    assert (second.returncode, second.stdout) == (0, f"{json.dumps(value)}\n"), second.stderr
    outputs = [r for r in records("res") if r["kind"] == "output"]
    assert [o["handle"] for o in outputs] == ["@g", "@m"]


def test_handles_survive_compaction(cli: dict[str, Any]) -> None:
    tmp = cli["dir"]
    chatter = [{"tool_calls": [call(f"c{i}", "shell", command=f"python3 -c \"print('word ' * 1400)\"; echo {i}")]}
               for i in range(6)]
    profile = tmp / "small.yaml"
    profile.write_text(yaml.safe_dump({
        "context_window": 6000, "max_output_tokens": 500, "tool_result_limit": 2500, "target": 0.4,
        "trigger": 0.6, "tools": ["shell"],
        "permissions": {"tools": {"make_grid": "allow", "argmax": "allow", "shell": "allow"}},
        "pipelines": {"batch": [{"strategy": "truncate"}], "interactive": [{"strategy": "truncate"}]}}))
    model = script(tmp / "c.yaml", [{"tool_calls": [call("g", "make_grid", seed=9)]}, *chatter,
                                    {"tool_calls": [call("m", "argmax", grid="@g")]}, {"content": "@m/index"}])
    args = [a if a != cli["args"][1] else str(profile) for a in cli["args"]]
    out = ctxagent("run", "--batch", "--session", "cmp", "--model", model, *args, "go")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == grid_and_max(9)[1]
    compactions = [r for r in records("cmp") if r["kind"] == "compaction"]
    assert compactions, "the run was meant to compact"
    dropped = compactions[-1]
    assert dropped["start"] <= 3 <= dropped["end"]  # the make_grid call and its result left the view
    assert "ERROR" not in tool_messages("cmp")["m"]


def test_numpy_stays_optional(tmp_path: Path) -> None:
    code = textwrap.dedent('''
        import sys
        sys.modules["numpy"] = None  # import numpy now fails, as where it is not installed
        from pathlib import Path
        from ctxagent.agent.model import ToolCall
        from ctxagent.sessions.store import OutputStore
        from ctxagent.tools.base import ToolContext
        from ctxagent.tools.offload import OffloadPolicy
        from ctxagent.tools.toolset import make_toolset
        from ctxagent.tools.user import make_tool

        def rec() -> dict:
            return {"a": [1, 2]}

        def echo(value: str) -> str:
            return value

        store = OutputStore(Path(sys.argv[1]))
        store.root.mkdir(parents=True)
        (store.root / "arr.npy").write_bytes(b"not really an array")
        ts = make_toolset(["output_info"], ToolContext(store, store.root), OffloadPolicy(1000),
                          [make_tool(rec), make_tool(echo)])
        print(ts.call(ToolCall("r", "rec", "{}")).content.splitlines()[0])
        print(ts.call(ToolCall("e", "echo", '{"value": "@r/a/1"}')).content)
        print(ts.call(ToolCall("x", "echo", '{"value": "@arr"}')).content)
    ''')
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "outputs")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == '{"a": [1, 2]}'
    assert lines[1] == ("ERROR: bad arguments for echo: argument 'value' must be string, but @r/a/1 holds integer. "
                        "It takes: value (string, required)")
    assert lines[2] == "ERROR: @arr is a numpy array (.npy) but numpy is not installed here"
