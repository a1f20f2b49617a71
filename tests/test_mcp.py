"""MCP servers as mirrored tools (ctxagent/mcp_tools): real servers written with the SDK, over
stdio and streamable HTTP on 127.0.0.1 (tests/mcp_servers/demo.py); only the model is scripted.

A server start costs ~1.6 s of CPU (the SDK's import). Tests about the server's process (its crash,
kill, stderr, environment) or the stdio transport (a 3 MB result) start their own; the others share
one HTTP server (``http_url``, one per module: its tools keep no state), each with its own connection.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clihelp import call, result_of, run_cli, script
from ctxagent.mcp_tools import hub
from ctxagent.sessions import records
from ctxagent.sessions.session import Session

if importlib.util.find_spec("mcp") is None:  # not imported here: ~1.7 s in every worker that collects this file
    pytest.skip("the mcp extra (pip install 'ctxagent[mcp]') is not installed", allow_module_level=True)

DEMO = Path(__file__).parent / "mcp_servers" / "demo.py"


@pytest.fixture(autouse=True)
def _close_servers():
    """Every server a test started stops with it (connections are per process, keyed by config)."""
    yield
    hub.close_all()


@pytest.fixture(scope="module")
def http_url():
    """The demo server over streamable HTTP on a free 127.0.0.1 port; its URL. One for the module:
    its tools keep no state, and each test connects anew (``_close_servers`` closes the connections)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(DEMO), "http", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        _wait_port(port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.terminate()
        server.wait(10)


# `python ARGS` with SIGINT as at a terminal: a suite run as a background job of a script (`make test &`)
# has SIGINT ignored, a child inherits that, and Ctrl-C would not reach ctxagent (python -S: the launcher
# imports nothing; exec keeps the process id the test signals)
AS_AT_A_TERMINAL = [sys.executable, "-S", "-c", "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"]


def mcp_config(tmp_path: Path, *extra: str, name: str = "demo", **options: object) -> Path:
    server = {"command": sys.executable, "args": [str(DEMO), "stdio", *extra], **options}
    path = tmp_path / f"mcp-{name}.json"
    path.write_text(json.dumps({"mcpServers": {name: server}}), encoding="utf-8")
    return path


def http_config(tmp_path: Path, url: str, name: str = "demo", **options: object) -> Path:
    """An ``--mcp-config`` file naming the shared HTTP server ``name`` (its tools: ``name__...``)."""
    path = tmp_path / f"mcp-{name}-http.json"
    path.write_text(json.dumps({"mcpServers": {name: {"url": url, **options}}}), encoding="utf-8")
    return path


def profile(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "p.yaml"
    path.write_text("tools: [shell, read_output, grep_output, query_output]\n"
                    "permissions: {kinds: {exec: allow, mcp: allow}}\n" + extra, encoding="utf-8")
    return str(path)


def transcript(name: str) -> list:
    return list(Session.at(name).transcript.records())


def tool_results(name: str) -> dict[str, str]:
    return {r.message["tool_call_id"]: r.message["content"] for r in transcript(name)
            if isinstance(r, records.MessageRecord) and r.message["role"] == "tool"}


def run(tmp_path: Path, replies: list, *args: str, session: str = "m") -> dict:
    model = script(tmp_path / f"{session}.yaml", replies)
    out = run_cli("run", "go", "-s", session, "-m", model, "--batch", "--json", *args)
    return result_of(out) | {"_stderr": out.stderr, "_code": out.exit_code}


def test_a_3mb_result_is_offloaded_and_a_builtin_handle_arrives_at_an_mcp_tool_as_its_full_value(tmp_path):
    result = run(tmp_path, [
        {"tool_calls": [call("big", "demo__big", lines=50_000), call("sh", "shell", command="seq 1 200000")]},
        {"tool_calls": [call("d1", "demo__digest", text="@sh"), call("d2", "demo__digest", text="@big")]},
        "done"], "--mcp-config", str(mcp_config(tmp_path)), "-p", profile(tmp_path))
    assert result["status"] == "answered", result
    outputs = {r.handle: r for r in transcript("m") if isinstance(r, records.OutputRecord)}
    assert outputs["@big"].bytes > 2_700_000 and outputs["@big"].tool == "demo__big"
    results = tool_results("m")
    assert "@big" in results["big"] and len(results["big"]) < 12_000  # a preview naming the handle
    shell_text = "\n".join(str(i) for i in range(1, 200_001)) + "\n"
    assert hashlib.sha256(shell_text.encode()).hexdigest() in results["d1"]
    big_text = (Session.at("m").store.root / outputs["@big"].path.split("/")[-1]).read_text()
    assert f"received {len(big_text)} characters" in results["d2"]


def test_structured_content_is_stored_as_json_and_answers_query_output(tmp_path, http_url):
    result = run(tmp_path, [
        {"tool_calls": [call("t", "demo__cities", count=2000)]},
        {"tool_calls": [call("q", "query_output", handle="@t", path="$.rows[1234].population")]},
        "done"], "--mcp-config", str(http_config(tmp_path, http_url)), "-p", profile(tmp_path))
    assert result["status"] == "answered"
    output = next(r for r in transcript("m") if isinstance(r, records.OutputRecord))
    assert output.type == "json" and output.path.endswith(".json")
    assert "1234000" in tool_results("m")["q"]


def test_mcp_arguments_that_break_the_tools_json_schema_come_back_as_error_results_the_server_never_sees(
        tmp_path, http_url):
    result = run(tmp_path, [{"tool_calls": [call("t", "demo__cities", count="many"), call("r", "demo__refuse"),
                                            call("d", "demo__digest", text=7)]},
                            {"tool_calls": [call("ok", "demo__cities", count=2)]}, "done"],
                 "--mcp-config", str(http_config(tmp_path, http_url)), "-p", profile(tmp_path))
    assert result["status"] == "answered"
    results = tool_results("m")
    assert results["t"].startswith("ERROR: bad arguments for demo__cities: argument 'count' must be integer, "
                                   'not "many". It takes: count (integer)')
    assert results["r"].startswith("ERROR: bad arguments for demo__refuse: missing argument 'reason'")
    assert "refused" not in results["r"]  # the server's own error would say it: it was never called
    assert results["d"].startswith("ERROR: bad arguments for demo__digest: argument 'text' must be string, not 7")
    assert not results["ok"].startswith("ERROR") and "city1" in results["ok"]


def test_error_results_images_and_the_servers_stderr(tmp_path):
    result = run(tmp_path, [{"tool_calls": [call("r", "demo__refuse", reason="no such account"),
                                            call("i", "demo__picture")]},
                            "done"], "--mcp-config", str(mcp_config(tmp_path)), "-p", profile(tmp_path))
    hub.close_all()  # the log is complete once the server is gone
    log = (Session.at("m").root / "mcp" / "demo.log").read_text()  # the server logs the failed call on its
    assert "Tool 'refuse' failed" in log and "Tool 'refuse'" not in result["_stderr"]  # stderr: the log, not ours
    results = tool_results("m")
    assert results["r"].startswith("ERROR: ") and "no such account" in results["r"]
    assert "image image/png" in results["i"] and "@i" in results["i"]
    output = next(r for r in transcript("m") if isinstance(r, records.OutputRecord))
    stored = (Session.at("m").store.root / Path(output.path).name).read_bytes()
    assert stored.startswith(b"\x89PNG") and len(stored) == 8 + 1024


def test_a_slow_tool_that_reports_progress_outlives_its_timeout_and_a_silent_one_does_not(tmp_path, http_url):
    config = http_config(tmp_path, http_url, timeout_s=0.8)
    started = time.monotonic()
    run(tmp_path, [{"tool_calls": [call("slow", "demo__slow", seconds=2.0), call("quiet", "demo__silent", seconds=30)]},
                   "done"], "--mcp-config", str(config), "-p", profile(tmp_path))
    results = tool_results("m")
    assert results["slow"] == "finished after 2.0 s"
    assert results["quiet"].startswith("ERROR: ") and "no result and no progress for 0.8 s" in results["quiet"]
    assert time.monotonic() - started < 15  # the silent call was cancelled, not waited out


def test_a_crashed_server_gives_an_error_result_is_restarted_once_then_stays_down(tmp_path):
    result = run(tmp_path, [
        {"tool_calls": [call("c1", "demo__crash")]},
        {"tool_calls": [call("w1", "demo__whoami")]},
        {"tool_calls": [call("c2", "demo__crash")]},
        {"tool_calls": [call("w2", "demo__whoami")]},
        "done"], "--mcp-config", str(mcp_config(tmp_path)), "-p", profile(tmp_path))
    assert result["status"] == "answered"
    results = tool_results("m")
    assert results["c1"].startswith("ERROR: ") and "restarted for the next call" in results["c1"]
    assert results["w1"].startswith("pid ")
    assert "crashed again" in results["c2"] and "crashed again" in results["w2"]


def test_kill_9_of_ctxagent_leaves_no_server_process(tmp_path):
    pid_file = tmp_path / "server.pid"
    config = mcp_config(tmp_path, env={"DEMO_PID_FILE": str(pid_file)})
    model = script(tmp_path / "k.yaml", [{"tool_calls": [call("s", "demo__slow", seconds=60)]}, "done"])
    env = {**os.environ}
    proc = subprocess.Popen([sys.executable, "-m", "ctxagent", "run", "go", "-s", "k", "-m", model, "--batch",
                             "--mcp-config", str(config), "-p", profile(tmp_path)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    server = int(pid_file.read_text())
    time.sleep(1.0)  # the slow call is running
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 5
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server), "the MCP server outlived ctxagent's kill -9"


def test_ctrl_c_during_an_mcp_call_cancels_it_at_the_server_and_the_session_stays_resumable(tmp_path):
    pid_file, cancel_file = tmp_path / "server.pid", tmp_path / "cancelled"
    config = mcp_config(tmp_path, env={"DEMO_PID_FILE": str(pid_file), "DEMO_CANCEL_FILE": str(cancel_file)})
    model = script(tmp_path / "c.yaml", [{"tool_calls": [call("s", "demo__slow", seconds=60)]}, "done"])
    proc = subprocess.Popen([*AS_AT_A_TERMINAL, "-m", "ctxagent", "run", "go", "-s", "c", "-m", model, "--batch",
                             "--mcp-config", str(config), "-p", profile(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60  # the slow call is running (on a busy machine, a second after the
    while not (cancel_file.exists() and cancel_file.read_text() == "started"):  # server started was too soon)
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.1)
    time.sleep(0.3)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    stderr = proc.communicate(timeout=30)[1]
    assert proc.returncode == 130, stderr
    assert time.monotonic() - started < 10
    assert cancel_file.read_text() == "cancelled"
    assert not _alive(int(pid_file.read_text()))
    assert transcript("c")[-1].reason == "interrupted"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split()[2] == "Z")  # a zombie is dead


def test_streamable_http_server_with_a_header_from_the_environment(tmp_path, monkeypatch, http_url):
    monkeypatch.setenv("DEMO_TOKEN", "s3cr3t-token-value")
    config = tmp_path / "http.json"
    config.write_text(json.dumps({"mcpServers": {"web": {
        "url": http_url, "headers": {"Authorization": "Bearer ${DEMO_TOKEN}"}}}}))
    result = run(tmp_path, [{"tool_calls": [call("h", "web__digest", text="hello")]}, "done"],
                 "--mcp-config", str(config), "-p", profile(tmp_path))
    assert result["status"] == "answered"
    assert tool_results("m")["h"].startswith("received 5 characters")
    text = Session.at("m").transcript.path.read_text()
    assert "s3cr3t-token-value" not in text and str(config) in text  # the path is kept, not the values


def test_closing_an_http_connection_closes_its_sockets(tmp_path, http_url):
    port = int(http_url.split(":")[-1].split("/")[0])
    result = run(tmp_path, [{"tool_calls": [call("w", "demo__whoami")]}, "done"],
                 "--mcp-config", str(http_config(tmp_path, http_url)), "-p", profile(tmp_path))
    assert result["status"] == "answered" and tool_results("m")["w"].startswith("pid ")
    hub.close_all()
    assert _sockets_to(port) == 0  # the server lives on (it is shared): an open client would keep them


def _sockets_to(port: int) -> int:
    """How many of this process's open sockets are TCP connections to 127.0.0.1:PORT (from /proc)."""
    remote = f"0100007F:{port:04X}"
    inodes = {f"socket:[{fields[9]}]" for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
              if (fields := line.split())[2] == remote}
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):  # closed since the listing
            count += os.readlink(fd) in inodes
    return count


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the HTTP MCP server did not start")


def test_sixty_large_schemas_are_deferred_and_the_selected_tools_arrive_in_the_next_request(tmp_path, fake_openai):
    server = fake_openai([
        {"tool_calls": [{"id": "f", "name": "find_tools", "arguments": {"query": "demo__inventory_op7, demo__big"}}]},
        {"tool_calls": [{"id": "o", "name": "demo__inventory_op7", "arguments": {"p1": "x"}}]},
        {"content": "done"},
        {"content": "again"},
    ])
    config = mcp_config(tmp_path, "--many", "60")
    prof = profile(tmp_path, "context_window: 60000\nmax_output_tokens: 500\nretries: 0\n")
    out = run_cli("run", "go", "-s", "d", "-m", "openai/gpt-4o-mini", "--api-base", server.base_url, "--batch",
                  "--json", "--mcp-config", str(config), "-p", prof)
    assert result_of(out)["status"] == "answered", out.stderr
    names = [[t["function"]["name"] for t in r.get("tools") or []] for r in server.requests]
    assert "find_tools" in names[0] and not any(n.startswith("demo__") for n in names[0])
    finder = next(t for t in server.requests[0]["tools"] if t["function"]["name"] == "find_tools")
    assert "demo__inventory_op59" in finder["function"]["description"]
    assert names[1][-2:] == ["demo__inventory_op7", "demo__big"]  # appended: the cached prefix stays
    assert names[1][:len(names[0])] == names[0]
    assert tool_results("d")["o"] == "op7 ran with x"
    assert any(isinstance(r, records.ToolsRecord) and r.loaded for r in transcript("d"))
    out = run_cli("resume", "-s", "d", "more", "--batch", "--json")  # resume sends the same tools
    assert result_of(out)["status"] == "answered", out.stderr
    assert [t["function"]["name"] for t in server.requests[-1]["tools"]] == names[-1]


def test_mcp_tools_ask_by_default_and_a_server_grant_allows_its_tools(tmp_path, http_url):
    config = http_config(tmp_path, http_url)
    bare = tmp_path / "bare.yaml"
    bare.write_text("tools: [read_output]\n")
    run(tmp_path, [{"tool_calls": [call("w", "demo__whoami")]}, "done"], "--mcp-config", str(config),
        "-p", str(bare), session="a")
    refused = tool_results("a")["w"]
    assert refused.startswith("ERROR: ") and "--allow demo__whoami" in refused and "mcp" in refused
    run(tmp_path, [{"tool_calls": [call("w", "demo__whoami")]}, "done"], "--mcp-config", str(config),
        "-p", str(bare), "--allow", "demo", session="b")
    assert tool_results("b")["w"].startswith("pid ")


def test_the_server_env_references_the_users_environment_and_unset_names_say_which(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SECRET_FOR_DEMO", "abc-123-secret")
    config = mcp_config(tmp_path, env={"DEMO_SECRET": "${MY_SECRET_FOR_DEMO}"})
    run(tmp_path, [{"tool_calls": [call("w", "demo__whoami")]}, "done"], "--mcp-config", str(config),
        "-p", profile(tmp_path))
    # the server got the value; the transcript holds it redacted (an environment secret's name)
    assert tool_results("m")["w"].endswith("secret [REDACTED:env:MY_SECRET_FOR_DEMO]")
    assert "abc-123-secret" not in Session.at("m").transcript.path.read_text()

    monkeypatch.delenv("MY_SECRET_FOR_DEMO")
    config = mcp_config(tmp_path, name="other", env={"DEMO_SECRET": "${MY_SECRET_FOR_DEMO}"})
    result = run(tmp_path, ["done"], "--mcp-config", str(config), "-p", profile(tmp_path), session="u")
    assert result["status"] == "answered"
    assert "MY_SECRET_FOR_DEMO is not set" in result["_stderr"]


def test_resume_offers_the_recorded_tools_when_the_server_is_gone(tmp_path, http_url):
    config = http_config(tmp_path, http_url)
    run(tmp_path, [{"tool_calls": [call("w", "demo__whoami")]}, "done", {"tool_calls": [call("x", "demo__whoami")]},
                   "done again"], "--mcp-config", str(config), "-p", profile(tmp_path))
    hub.close_all()
    config.unlink()
    out = run_cli("resume", "-s", "m", "again", "--batch", "--json")
    assert result_of(out)["status"] == "answered", out.stderr
    assert "is gone" in out.stderr
    assert "not configured for this run" in tool_results("m")["x"]


def test_mcp_list_counts_schema_tokens_and_reports_a_server_that_cannot_start(tmp_path):
    config = tmp_path / "two.json"
    config.write_text(json.dumps({"mcpServers": {
        "demo": {"command": sys.executable, "args": [str(DEMO), "stdio"], "env": {"K": "literal-value"}},
        "broken": {"command": str(tmp_path / "no-such-server")}}}))
    out = run_cli("mcp", "list", "--mcp-config", str(config), "-m", "scripted:x", "--json")
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    demo = next(r for r in rows if r.get("server") == "demo")
    assert demo["status"] == "ok" and len(demo["tools"]) == 13 and demo["schema_tokens"] > 300
    names = [t["name"] for t in demo["tools"]]
    assert len(set(names)) == len(names) and "demo__dot_name" in names  # dot.name and dot_name: two names
    assert demo["config"]["env"] == {"K": "***"}
    broken = next(r for r in rows if r.get("server") == "broken")
    assert broken["status"] == "failed" and "no-such-server" in broken["error"]
    assert rows[-1]["total_schema_tokens"] == demo["schema_tokens"] and rows[-1]["deferred"] is False


def test_a_server_that_never_answers_is_reported_as_not_started_within_its_startup_timeout(tmp_path):
    from ctxagent.mcp_tools.config import ServerConfig

    silent = ServerConfig(command="sleep", args=["30"], startup_timeout_s=0.5)  # runs, never speaks MCP
    conn = hub.connection("silent", silent, log_dir=tmp_path, workdir=tmp_path)
    with pytest.raises(hub.McpUnavailable, match=r"did not start within 0.5 s \(startup_timeout_s\)"):
        conn.tools()


def test_a_malformed_mcp_config_names_the_server_and_key(tmp_path):
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"mcpServers": {"demo": {"command": "x", "url": "http://h"}}}))
    out = run_cli("run", "go", "-s", "z", "-m", script(tmp_path / "z.yaml", ["done"]), "--batch",
                  "--mcp-config", str(config))
    assert out.exit_code == 2 and "mcpServers.demo" in out.stderr and "either 'command'" in out.stderr
    assert not Session.at("z").exists()


def test_the_papers_workflows_over_mcp_answer_exactly_with_far_fewer_tokens_than_inline(monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import mcp_workflows

    # ctxagent in this process, the server over stdio: one for the three runs, as the runners of one
    # process share it (the benchmark closes it after each run, as a process of its own would: a
    # server start is ~2 s of CPU, and its lifetime is not this test's point). A 16^3 grid: its
    # result is already 14 times the run's tokens.
    with monkeypatch.context() as patch:
        patch.setattr(hub, "close_all", lambda: None)  # put back before _close_servers closes the server
        numbers = mcp_workflows.run(grid_size=16, in_process=True)
    for row in numbers.values():
        assert row["exact_answer"], row
        assert row["tokens_inline"] > 10 * row["context_tokens_with_handles"], row
    assert numbers["extraction"]["inline"].startswith("measured")


def test_a_grant_for_a_server_that_did_not_start_is_a_warning_not_an_error(tmp_path, monkeypatch):
    monkeypatch.delenv("UNSET_FOR_DEMO", raising=False)
    config = mcp_config(tmp_path, env={"DEMO_SECRET": "${UNSET_FOR_DEMO}"})
    bare = tmp_path / "bare.yaml"
    bare.write_text("tools: [read_output]\n")
    result = run(tmp_path, ["done"], "--mcp-config", str(config), "-p", str(bare), "--allow", "demo,demo__whoami")
    assert result["status"] == "answered" and result["_code"] == 0
    assert "UNSET_FOR_DEMO is not set" in result["_stderr"]


def test_the_servers_stderr_is_logged_owner_only_and_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("DEMO_API_KEY", "zq-very-secret-value-123456")
    config = mcp_config(tmp_path, env={"DEMO_SECRET": "${DEMO_API_KEY}"})
    run(tmp_path, [{"tool_calls": [call("l", "demo__leak")]}, "done"], "--mcp-config", str(config),
        "-p", profile(tmp_path))
    hub.close_all()  # the log is complete once the server is gone
    log = Session.at("m").root / "mcp" / "demo.log"
    text = log.read_text()
    assert "debug: using [REDACTED:env:DEMO_API_KEY]" in text and "zq-very-secret" not in text
    assert oct(log.stat().st_mode & 0o777) == "0o600" and oct(log.parent.stat().st_mode & 0o777) == "0o700"


def test_a_binary_handle_reaches_a_string_parameter_as_base64_and_clashing_names_both_work(tmp_path, http_url):
    run(tmp_path, [{"tool_calls": [call("p", "demo__picture")]},
                   {"tool_calls": [call("b", "demo__b64len", data="@p")]},
                   {"tool_calls": [call("d1", "demo__dot_name")]}, "done"],
        "--mcp-config", str(http_config(tmp_path, http_url)), "-p", profile(tmp_path))
    results = tool_results("m")
    assert results["b"] == "1032 bytes, starting 89504e47"
    assert results["d1"] in ("dotted", "underscored")


def test_an_http_result_over_one_mib_is_offloaded_not_taken_for_a_crash(tmp_path, http_url):
    config = tmp_path / "http.json"
    config.write_text(json.dumps({"mcpServers": {"web": {"url": http_url}}}))
    result = run(tmp_path, [{"tool_calls": [call("h", "web__big", lines=30_000)]},
                            {"tool_calls": [call("w", "web__whoami")]}, "done"],
                 "--mcp-config", str(config), "-p", profile(tmp_path))
    assert result["status"] == "answered"
    outputs = {r.handle: r for r in transcript("m") if isinstance(r, records.OutputRecord)}
    assert outputs["@h"].bytes > 1_600_000
    assert tool_results("m")["w"].startswith("pid ")


def test_an_mcp_server_gets_its_own_env_and_the_profiles_pass_through_but_no_other_credential(tmp_path, monkeypatch):
    """Issue 31: a stdio server starts with the SDK's minimal environment, its own ``env`` entries (as
    configured: tested above) and the names the profile's ``tool_environment.pass_through`` lists."""
    monkeypatch.setenv("DEMO_SECRET", "from-ctxagent-env-" + "q7Z" * 4)
    plain = run(tmp_path, [{"tool_calls": [call("w", "demo__whoami")]}, "done"],
                "--mcp-config", str(mcp_config(tmp_path)), "-p", profile(tmp_path), session="plain")
    assert plain["status"] == "answered" and tool_results("plain")["w"].endswith("secret <unset>")
    passing = run(tmp_path, [{"tool_calls": [call("w", "demo__whoami")]}, "done"],
                  "--mcp-config", str(mcp_config(tmp_path)),
                  "-p", profile(tmp_path, "tool_environment: {pass_through: ['DEMO_*']}\n"), session="passing")
    assert passing["status"] == "answered"
    assert tool_results("passing")["w"].endswith("secret [REDACTED:env:DEMO_SECRET]")  # it got there
