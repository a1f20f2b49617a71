"""Built-in tools, the tools over offloaded outputs, and the toolset, on real files and processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from ctxagent.agent.model import ToolCall
from ctxagent.errors import UsageError
from ctxagent.sessions.store import OutputStore
from ctxagent.tools import builtin, outputs
from ctxagent.tools.base import Spooled, Tool, ToolContext, ToolError, schema
from ctxagent.tools.offload import OffloadPolicy
from ctxagent.tools.toolset import BUILTIN, ToolOutcome, Toolset, make_toolset

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    workdir = tmp_path / "work"
    workdir.mkdir()
    return ToolContext(store=OutputStore(tmp_path / "session" / "outputs"), workdir=workdir)


@pytest.fixture
def toolset(ctx: ToolContext) -> Toolset:
    return make_toolset(list(BUILTIN), ctx, OffloadPolicy(limit_tokens=2000))


def call(toolset: Toolset, name: str, call_id: str = "call_1", **arguments: Any) -> Any:
    return toolset.call(ToolCall(id=call_id, name=name, arguments=json.dumps(arguments)))


def gone(pid: int) -> bool:
    """The process no longer runs (a zombie waiting for a non-reaping init counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def wait_gone(pid: int, seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return gone(pid)


# --- shell -------------------------------------------------------------------------------------


def test_shell_exit_code_and_merged_stderr(toolset: Toolset) -> None:
    outcome = call(toolset, "shell", command="echo out; echo err >&2; exit 3")
    assert not outcome.is_error and outcome.output is None
    assert outcome.content == "exit code: 3\nout\nerr\n"
    assert call(toolset, "shell", command="true").content == "exit code: 0"


def test_shell_runs_in_workdir_with_empty_stdin(ctx: ToolContext, toolset: Toolset) -> None:
    outcome = call(toolset, "shell", command="pwd; cat; echo done", timeout_s=5)
    assert outcome.content == f"exit code: 0\n{ctx.workdir}\ndone\n"
    assert not list(ctx.store.root.glob(".spool-*"))  # inlined spool files are deleted


def test_shell_signal_death_is_reported(ctx: ToolContext) -> None:
    spooled = builtin.shell(ctx, "kill -KILL $$")
    assert spooled.note == "killed by signal SIGKILL"


def test_shell_timeout_kills_the_whole_process_group(ctx: ToolContext) -> None:
    pidfile = ctx.workdir / "child.pid"
    started = time.monotonic()
    spooled = builtin.shell(ctx, f"sleep 30 & echo $! > {pidfile}; echo started; wait", timeout_s=1)
    assert time.monotonic() - started < 5
    assert spooled.note == "timed out after 1 s, process group killed"
    assert spooled.path.read_text() == "started\n"
    assert wait_gone(int(pidfile.read_text()))


def test_shell_timeout_kills_children_that_ignore_sigterm(ctx: ToolContext) -> None:
    pidfile = ctx.workdir / "child.pid"
    command = f"bash -c 'trap \"\" TERM; echo $$ > {pidfile}; while :; do sleep 0.1; done' & wait"
    spooled = builtin.shell(ctx, command, timeout_s=1)
    assert "process group killed" in spooled.note
    assert wait_gone(int(pidfile.read_text()))


def test_shell_kills_background_processes_left_behind(ctx: ToolContext) -> None:
    pidfile = ctx.workdir / "bg.pid"
    spooled = builtin.shell(ctx, f"sleep 30 & echo $! > {pidfile}")
    assert spooled.note == "exit code: 0; background processes it left running were killed"
    assert wait_gone(int(pidfile.read_text()))


def test_stopping_a_run_kills_its_own_shell_commands_not_another_runs(ctx: ToolContext) -> None:
    """Issue 35: every shell command of the process was in one set, so a Ctrl-C of one session
    killed the commands of every other session in the process. A run's stop holds its own (and
    its sub-agents', which share it)."""
    import dataclasses
    import threading

    mine, other = builtin.Stop(), builtin.Stop()
    got: list[Spooled] = []
    worker = threading.Thread(target=lambda: got.append(builtin.shell(dataclasses.replace(ctx, stop=mine), "sleep 30")))
    worker.start()
    deadline = time.monotonic() + 10
    while not mine.running and time.monotonic() < deadline:
        time.sleep(0.01)
    builtin.kill_running(other)
    assert worker.is_alive() and len(mine.running) == 1 and not other.running
    mine.set()
    builtin.kill_running(mine)
    worker.join(10)
    assert got[0].note == "killed by signal SIGTERM" and not mine.running


def test_shell_bad_timeout(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="timeout_s"):
        builtin.shell(ctx, "true", timeout_s=0)


def test_shell_non_utf8_output_is_offloaded_exactly(toolset: Toolset) -> None:
    outcome = call(toolset, "shell", command=r"printf 'caf\xe9\n'")
    assert outcome.output is not None and not outcome.output.binary
    assert toolset.ctx.store.path_of(outcome.output.handle).read_bytes() == b"caf\xe9\n"
    assert outcome.content.startswith("exit code: 0\ncaf\ufffd\n[full output: 1 line, 5 bytes")


def test_shell_binary_output_is_offloaded_exactly(toolset: Toolset) -> None:
    expected = b"\x89PNG\r\n\x1a\n" + bytes(2000)
    outcome = call(toolset, "shell", command=r"printf '\x89PNG\r\n\x1a\n'; head -c 2000 /dev/zero")
    assert outcome.output is not None and outcome.output.binary
    assert toolset.ctx.store.path_of(outcome.output.handle).read_bytes() == expected
    assert "PNG image" in outcome.content and "2,008 bytes" in outcome.content


_MEMORY_CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from ctxagent.agent.model import ToolCall
    from ctxagent.sessions.store import OutputStore
    from ctxagent.tools.base import ToolContext
    from ctxagent.tools.offload import OffloadPolicy
    from ctxagent.tools.toolset import make_toolset

    def peak_kib():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])

    root, tool, arguments = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    ctx = ToolContext(store=OutputStore(root / "outputs"), workdir=root)
    tools = make_toolset(["shell", "read_file"], ctx, OffloadPolicy(limit_tokens=2000))
    warm = tools.call(ToolCall("warm", "shell", json.dumps({"command": "seq 100000"})))
    assert warm.output is not None  # tokenizer, preview and store paths all loaded
    before = peak_kib()
    outcome = tools.call(ToolCall("big", tool, arguments))
    print(json.dumps({"growth_kib": peak_kib() - before, "bytes": outcome.output.bytes,
                      "lines": outcome.output.lines, "content": outcome.content}))
    """
)


def memory_of(tmp_path: Path, tool: str, **arguments: Any) -> dict[str, Any]:
    """What the tool call did in a fresh process: peak memory growth (KiB), the stored output's
    bytes and lines, the content the model reads."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    result = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, str(tmp_path), tool, json.dumps(arguments)],
                            env=env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_shell_output_of_200_mb_streams_to_disk(tmp_path: Path) -> None:
    report = memory_of(tmp_path, "shell", command="yes | head -c 200000000")
    assert (report["bytes"], report["lines"]) == (200_000_000, 100_000_000)
    assert report["growth_kib"] < 20 * 1024, report  # far below the 195,312 KiB of output
    assert report["content"].startswith("exit code: 0\ny\ny\n")
    assert "[... 99,999,940 lines, 199,999,880 bytes, ~49,999,970 tokens omitted" in report["content"]


# --- files -------------------------------------------------------------------------------------


def test_read_file_of_a_100_mb_file_streams_to_disk_instead_of_holding_it_twice(tmp_path: Path) -> None:
    """read_file of a 3 GB file took 6.4 GB of memory (the lines, then their join, then the text)."""
    with open(tmp_path / "big.txt", "wb") as fh:
        for _ in range(100):
            fh.write(b"y\n" * 500_000)
    report = memory_of(tmp_path, "read_file", path="big.txt")
    assert (report["bytes"], report["lines"]) == (100_000_000, 50_000_000)
    assert report["growth_kib"] < 20 * 1024, report  # far below the 97,656 KiB read
    assert report["content"].startswith("y\ny\n") and "lines, 99,999,880 bytes" in report["content"]
    (tmp_path / "line.txt").write_bytes(b"x" * 50_000_000)  # one line, no newline: still a block at a time
    report = memory_of(tmp_path, "read_file", path="line.txt", start_line=1, end_line=1)
    assert (report["bytes"], report["growth_kib"] < 20 * 1024) == (50_000_000, True), report


def test_read_file_ranges(ctx: ToolContext) -> None:
    (ctx.workdir / "f.txt").write_text("one\ntwo\nthree\nfour")
    assert builtin.read_file(ctx, "f.txt") == "one\ntwo\nthree\nfour"
    assert builtin.read_file(ctx, "f.txt", 2, 3) == "two\nthree\n"
    assert builtin.read_file(ctx, "f.txt", 4, 99) == "four"
    assert builtin.read_file(ctx, str(ctx.workdir / "f.txt"), 3) == "three\nfour"


def test_read_file_of_more_than_1_mib_streams_the_range_into_a_spool_file(ctx: ToolContext) -> None:
    lines = b"".join(b"%07d\n" % i for i in range(1, 200_001))  # 1.6 MB
    (ctx.workdir / "big.txt").write_bytes(lines + b"tail")
    whole = builtin.read_file(ctx, "big.txt")
    assert isinstance(whole, Spooled) and whole.path.read_bytes() == lines + b"tail"
    part = builtin.read_file(ctx, "big.txt", 150_000, 150_002)
    assert isinstance(part, Spooled) and part.path.read_bytes() == b"0150000\n0150001\n0150002\n"
    last = builtin.read_file(ctx, "big.txt", 200_001)
    assert isinstance(last, Spooled) and last.path.read_bytes() == b"tail"
    with pytest.raises(ToolError, match=r"past the end: big\.txt has 200001 lines"):
        builtin.read_file(ctx, "big.txt", 200_002)


@pytest.mark.parametrize(
    ("path", "start", "end", "message"),
    [
        ("missing.txt", 1, None, "no such file: missing.txt"),
        (".", 1, None, "is a directory"),
        ("f.txt", 0, None, "start_line must be 1 or more"),
        ("f.txt", 3, 2, "empty range"),
        ("f.txt", 5, None, "past the end: f.txt has 2 lines"),
    ],
)
def test_read_file_errors(ctx: ToolContext, path: str, start: int, end: int | None, message: str) -> None:
    (ctx.workdir / "f.txt").write_text("a\nb\n")
    with pytest.raises(ToolError, match=message):
        builtin.read_file(ctx, path, start, end)


def test_read_file_non_utf8_and_empty(ctx: ToolContext) -> None:
    (ctx.workdir / "latin1.txt").write_bytes(b"caf\xe9\n")
    assert builtin.read_file(ctx, "latin1.txt") == b"caf\xe9\n"
    (ctx.workdir / "empty.txt").write_bytes(b"")
    assert builtin.read_file(ctx, "empty.txt") == ""


def test_write_file_creates_parents(ctx: ToolContext) -> None:
    assert builtin.write_file(ctx, "a/b/c.txt", "héllo\n") == "wrote 7 bytes to a/b/c.txt"
    assert (ctx.workdir / "a/b/c.txt").read_text() == "héllo\n"
    with pytest.raises(ToolError, match="is a directory"):
        builtin.write_file(ctx, "a", "x")


def test_list_dir(ctx: ToolContext) -> None:
    (ctx.workdir / "sub").mkdir()
    (ctx.workdir / "b.txt").write_bytes(b"x" * 1234)
    (ctx.workdir / "a.txt").write_bytes(b"")
    assert builtin.list_dir(ctx) == "a.txt  0 bytes\nb.txt  1,234 bytes\nsub/"
    assert builtin.list_dir(ctx, "sub") == "sub is empty"
    with pytest.raises(ToolError, match="no such directory"):
        builtin.list_dir(ctx, "nope")
    with pytest.raises(ToolError, match="not a directory"):
        builtin.list_dir(ctx, "a.txt")


# --- read_output and grep_output ---------------------------------------------------------------


@pytest.fixture
def stored(ctx: ToolContext) -> str:
    ctx.store.put_bytes("@out1", "".join(f"line {i}\n" for i in range(1, 501)).encode())
    return "@out1"


def test_read_output_range(ctx: ToolContext, stored: str) -> None:
    assert outputs.read_output(ctx, stored, 2, 3) == "@out1 lines 2-3:\n2: line 2\n3: line 3"
    assert outputs.read_output(ctx, stored, 499, 900) == (
        "@out1 lines 499-500:\n499: line 499\n500: line 500\n[end of output: 500 lines]"
    )


def test_read_output_default_is_200_lines_then_says_what_remains(ctx: ToolContext, stored: str) -> None:
    text = outputs.read_output(ctx, stored, 101)
    lines = text.splitlines()
    assert lines[0] == "@out1 lines 101-300:" and lines[1] == "101: line 101" and len(lines) == 202
    assert lines[-1] == '[200 more lines (301-500); next: read_output("@out1", 301, 500)]'


@pytest.mark.parametrize(
    ("handle", "start", "end", "message"),
    [
        ("@out1", 5, 4, "empty range: end_line 4 is before start_line 5"),
        ("@out1", 0, None, "start_line must be 1 or more"),
        ("@out1", 501, None, "start_line 501 is past the end: @out1 has 500 lines"),
        ("@nothere", 1, None, "unknown handle @nothere"),
        ("@../x", 1, None, "not a handle"),
        ("out1", 1, None, "not a handle"),
    ],
)
def test_read_output_errors(ctx: ToolContext, stored: str, handle: str, start: int, end: int | None,
                            message: str) -> None:
    with pytest.raises(ToolError, match=message.replace("(", r"\(").replace(")", r"\)")):
        outputs.read_output(ctx, handle, start, end)


def test_binary_outputs_have_no_lines_to_read_or_grep(ctx: ToolContext) -> None:
    ctx.store.put_bytes("@png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)))  # no sidecar: sniffed
    for read in (lambda: outputs.read_output(ctx, "@png"), lambda: outputs.grep_output(ctx, "@png", "x")):
        with pytest.raises(ToolError, match=r"@png is binary \(264 bytes\), it has no text lines; inspect "):
            read()


def test_read_output_long_line_unterminated_and_empty(ctx: ToolContext) -> None:
    ctx.store.put_bytes("@long", b"short\n" + "é".encode() * 5000 + b"\nend")
    text = outputs.read_output(ctx, "@long")
    assert text.splitlines()[2] == "2: " + "é" * 2000 + " [line cut: 5,000 characters in all]"
    assert text.splitlines()[3:] == ["3: end", "[end of output: 3 lines]"]
    assert outputs.read_output(ctx, "@long", 3, 3) == "@long lines 3-3:\n3: end"
    with pytest.raises(ToolError, match="has 3 lines"):
        outputs.read_output(ctx, "@long", 4)
    ctx.store.put_bytes("@empty", b"")
    assert outputs.read_output(ctx, "@empty") == "@empty is empty (0 lines)"


def test_outputs_refuse_binary(ctx: ToolContext) -> None:
    ctx.store.put_bytes("@bin", b"\x00\x01\x02" * 100)
    with pytest.raises(ToolError, match="binary"):
        outputs.read_output(ctx, "@bin")
    with pytest.raises(ToolError, match="binary"):
        outputs.grep_output(ctx, "@bin", "x")


def test_grep_output_matches_and_context(ctx: ToolContext, stored: str) -> None:
    assert outputs.grep_output(ctx, stored, r"^line 4\d$") == (
        "10 of 500 lines of @out1 match '^line 4\\\\d$':\n"
        + "\n".join(f"{i}: line {i}" for i in range(40, 50))
    )
    text = outputs.grep_output(ctx, stored, r"line (10|13|300)$", context_lines=1)
    assert text.splitlines()[1:] == [
        "9- line 9", "10: line 10", "11- line 11", "12- line 12", "13: line 13", "14- line 14",
        "--", "299- line 299", "300: line 300", "301- line 301",
    ]


def test_grep_output_no_match_and_invalid_regex(ctx: ToolContext, stored: str) -> None:
    assert outputs.grep_output(ctx, stored, "nothing here") == (
        "no line of @out1 matches 'nothing here' (500 lines searched)"
    )
    with pytest.raises(ToolError, match="invalid regex '\\(unclosed'"):
        outputs.grep_output(ctx, stored, "(unclosed")
    with pytest.raises(ToolError, match="context_lines"):
        outputs.grep_output(ctx, stored, "x", context_lines=-1)
    with pytest.raises(ToolError, match="unknown handle"):
        outputs.grep_output(ctx, "@nope", "x")


def test_grep_output_caps_matches(ctx: ToolContext, stored: str) -> None:
    lines = outputs.grep_output(ctx, stored, "line").splitlines()
    assert lines[0] == "500 of 500 lines of @out1 match 'line':"
    assert lines[200] == "200: line 200"
    assert lines[-1] == "[300 more matching lines not listed; narrow the pattern or use read_output]"


def test_grep_output_shows_a_window_of_a_long_line(ctx: ToolContext) -> None:
    ctx.store.put_bytes("@wide", b"a" * 100_000 + b"NEEDLE" + b"b" * 100_000 + b"\n")
    line = outputs.grep_output(ctx, "@wide", "NEEDLE").splitlines()[1]
    assert line.startswith("1: ...aaa") and "NEEDLE" in line
    assert line.endswith("bbb... [line cut: 200,006 characters in all]")
    assert len(line) < 2100


# --- toolset -----------------------------------------------------------------------------------


def test_registry_and_specs(ctx: ToolContext) -> None:
    assert list(BUILTIN) == ["shell", "read_file", "write_file", "list_dir", "read_output", "grep_output",
                             "query_output", "output_info", "recall", "pin", "delegate"]
    specs = make_toolset(["shell", "read_output"], ctx, OffloadPolicy(1000)).specs()
    assert [spec["function"]["name"] for spec in specs] == ["shell", "read_output"]
    assert specs[0]["function"]["parameters"]["required"] == ["command"]
    with pytest.raises(UsageError, match=r"unknown tool.*'bogus'"):
        make_toolset(["shell", "bogus"], ctx, OffloadPolicy(1000))
    with pytest.raises(UsageError, match="more than once"):
        make_toolset(["shell", "shell"], ctx, OffloadPolicy(1000))
    with pytest.raises(ValueError, match="two tools"):
        Toolset([BUILTIN["shell"], BUILTIN["shell"]], ctx, OffloadPolicy(1000))


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("shell", '{"command": ', "ERROR: the arguments of shell are not valid JSON (Expecting value"),
        ("shell", '["ls"]', "ERROR: the arguments of shell must be a JSON object, not list"),
        ("nope", "{}", "ERROR: unknown tool 'nope'; the tools are: shell, read_file,"),
        ("shell", "{}", "ERROR: bad arguments for shell: missing argument 'command'. It takes: command"),
        ("shell", '{"command": "ls", "cwd": "/"}', "ERROR: bad arguments for shell: unexpected argument"),
        ("shell", '{"command": 5}', "ERROR: bad arguments for shell: argument 'command' must be string"),
        ("read_file", '{"path": "x", "start_line": true}', "ERROR: bad arguments for read_file: argument"),
        ("read_file", '{"path": "missing"}', "ERROR: no such file: missing"),
    ],
)
def test_call_errors_are_outcomes(toolset: Toolset, name: str, arguments: str, message: str) -> None:
    outcome = toolset.call(ToolCall(id="c1", name=name, arguments=arguments))
    assert outcome.is_error and outcome.output is None
    assert outcome.content.startswith(message), outcome.content


def test_invalid_json_is_quoted_up_to_200_chars(toolset: Toolset) -> None:
    raw = '{"command": "' + "x" * 500
    content = toolset.call(ToolCall(id="c1", name="shell", arguments=raw)).content
    assert repr(raw[:200]) in content and "x" * 201 not in content


def test_null_for_an_optional_argument_means_default(ctx: ToolContext, toolset: Toolset) -> None:
    (ctx.workdir / "f.txt").write_text("a\nb\n")
    raw = '{"path": "f.txt", "start_line": null, "end_line": null}'
    outcome = toolset.call(ToolCall("c1", "read_file", raw))
    assert (outcome.content, outcome.is_error) == ("a\nb\n", False)


def _explode(ctx: ToolContext, n: int) -> str:
    return str(1 // n)


def _passthrough(ctx: ToolContext, source: str) -> str:
    return source


def _not_text(ctx: ToolContext) -> Any:
    return {4, 2}


def test_tool_exceptions_become_error_outcomes(ctx: ToolContext) -> None:
    tools = [
        Tool("explode", "divides", schema({"n": {"type": "integer"}}, ("n",)), _explode),
        Tool("weird", "returns a number", schema({}), _not_text),
    ]
    toolset = Toolset(tools, ctx, OffloadPolicy(1000))
    outcome = toolset.call(ToolCall("c1", "explode", '{"n": 0}'))
    assert outcome == ToolOutcome(
        "ERROR: tool explode failed: ZeroDivisionError: integer division or modulo by zero", True, None
    )
    assert toolset.call(ToolCall("c2", "explode", '{"n": 1}')).content == "1"
    weird = toolset.call(ToolCall("c3", "weird", ""))
    assert weird.content.startswith("ERROR: tool weird failed: it returned set; a tool returns str, bytes")


def test_handle_arguments_resolve_to_stored_values(ctx: ToolContext, stored: str) -> None:
    tool = Tool("cat", "reads", schema({"source": {"type": "string"}}, ("source",)), _passthrough)
    toolset = Toolset([tool], ctx, OffloadPolicy(100_000))
    assert toolset.call(ToolCall("c1", "cat", '{"source": "@out1"}')).content.startswith("line 1\nline 2\n")
    missing = toolset.call(ToolCall("c2", "cat", '{"source": "@gone"}'))
    assert missing.content.startswith("ERROR: unknown handle @gone: this session has no output by that name")


def test_large_tool_output_is_offloaded_and_readable_back(toolset: Toolset) -> None:
    outcome = call(toolset, "shell", call_id="call_seq", command="seq 1 100000")
    assert outcome.output is not None and outcome.output.lines == 100_000
    assert outcome.content.startswith("exit code: 0\n1\n2\n")
    handle = outcome.output.handle
    assert ("only its first and last lines are shown above: to find something in it, search it with "
            f'grep_output("{handle}", pattern)') in outcome.content
    back = call(toolset, "read_output", handle=handle, start_line=99_999, end_line=100_000)
    assert back.content == f"{handle} lines 99,999-100,000:\n99999: 99999\n100000: 100000"
    found = call(toolset, "grep_output", handle=handle, pattern="^4242$")
    assert found.content == f"1 of 100,000 lines of {handle} match '^4242$':\n4242: 4242"


def test_spooled_values_from_other_tools_are_settled(ctx: ToolContext) -> None:
    def spooling(ctx: ToolContext) -> Spooled:
        fd, path = ctx.store.spool()
        os.write(fd, b"\xff" * 10)
        os.close(fd)
        return Spooled(path, note="done")

    toolset = Toolset([Tool("spooling", "writes", schema({}), spooling)], ctx, OffloadPolicy(1000))
    outcome = toolset.call(ToolCall("sp1", "spooling", "{}"))
    assert outcome.output is not None and outcome.content.startswith("done\n[binary output: 10 bytes")


# --- schemas and validation from signatures (issue 17) -----------------------------------------


def test_every_builtin_tool_gets_its_schema_and_validator_from_its_signature() -> None:
    from ctxagent.tools.signature import function_tool

    for name, tool in BUILTIN.items():
        assert tool.validator is not None, name
        derived = function_tool(tool.fn, name=name)
        assert derived.parameters == tool.parameters and derived.fn is tool.fn, name  # fn takes the context
        assert all(spec.get("description") for spec in tool.parameters["properties"].values()), name
    shell = BUILTIN["shell"].parameters["properties"]["timeout_s"]
    assert (shell["minimum"], shell["maximum"], shell["default"]) == (1, builtin.SHELL_TIMEOUT_MAX_S, 60)


def test_tool_schemas_are_the_same_bytes_in_every_process() -> None:
    """They are part of every request's prompt-cache prefix: a new process (another hash seed) must
    send the same bytes."""
    code = ("import json; from ctxagent.tools.catalog import BUILTIN; "
            "print(json.dumps([t.spec() for t in BUILTIN.values()]))")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert runs == {json.dumps([t.spec() for t in BUILTIN.values()]) + "\n"}


def test_arguments_are_validated_by_the_signature(toolset: Toolset) -> None:
    out = call(toolset, "shell", command="true", timeout_s=0)
    assert out.is_error and "argument 'timeout_s': input should be greater than or equal to 1, not 0" in out.content
    out = call(toolset, "shell", command="true", timeout_s="60")
    assert out.is_error and "argument 'timeout_s' must be integer" in out.content  # JSON types are not coerced
    out = call(toolset, "read_file", path="x", end_line=None)  # null for an optional argument: its default
    assert out.is_error and "no such file" in out.content


def test_a_user_tool_may_name_its_arguments_anything() -> None:
    from ctxagent.tools.signature import function_tool

    def odd(title: str, json: int = 2, model_config: list[int] | None = None) -> str:
        """Odd names.

        Args:
            title: a property called title stays
        """
        return f"{title}{json}{model_config}"

    tool = function_tool(odd)
    props = tool.parameters["properties"]
    assert props["title"] == {"type": "string", "description": "a property called title stays"}
    assert props["model_config"] == {"type": ["array", "null"], "items": {"type": "integer"}}
    assert "title" not in tool.parameters and "additionalProperties" not in tool.parameters
    from ctxagent.tools.arguments import validate_arguments

    given = {"title": "t", "model_config": [1]}
    assert validate_arguments(tool, given, {}) == given
    with pytest.raises(ToolError, match=r"missing argument 'title'; unexpected argument 'nope'"):
        validate_arguments(tool, {"nope": 1}, {})


def test_an_mcp_tools_arguments_are_checked_by_its_json_schema_keywords_not_only_types(tmp_path: Path) -> None:
    """jsonschema checks what an MCP server declared (enum, minimum, nested objects, extras allowed
    unless the schema says otherwise); a value that breaks it is an error result and the tool never runs."""
    ran: list[dict[str, Any]] = []
    parameters = {"type": "object", "required": ["mode"], "properties": {
        "mode": {"type": "string", "enum": ["fast", "safe"]}, "depth": {"type": "integer", "minimum": 1},
        "where": {"type": "object", "properties": {"x": {"type": "number"}}}}}
    tool = Tool("srv__op", "d", parameters, lambda ctx, **a: ran.append(a) or "ok", kind="mcp", group="srv")
    toolset = Toolset([tool], ToolContext(OutputStore(tmp_path / "out"), tmp_path), OffloadPolicy(1000))
    bad = {'{"mode": "wild"}': "argument 'mode': 'wild' is not one of ['fast', 'safe']",
           '{"mode": "fast", "depth": 0}': "argument 'depth': 0 is less than the minimum of 1",
           '{"mode": "fast", "where": {"x": "far"}}': "argument 'where.x': 'far' is not of type 'number'"}
    for raw, problem in bad.items():
        outcome = toolset.call(ToolCall("c", "srv__op", raw))
        assert outcome.is_error and problem in outcome.content, outcome.content
    assert not ran
    assert toolset.call(ToolCall("c", "srv__op", '{"mode": "safe", "depth": 2, "extra": 1}')).content == "ok"
    assert ran == [{"mode": "safe", "depth": 2, "extra": 1}]
