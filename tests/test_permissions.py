"""Tool permissions: the policy matrix (kind x policy x path), grants, prompts, confinement."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from clihelp import call, ctxagent, records, script, tool_messages
from ctxagent.errors import ProfileError
from ctxagent.messages import ToolCall
from ctxagent.profile import bundled_names, load_profile, parse_profile
from ctxagent.sessions.store import OutputStore
from ctxagent.tools.base import Tool, ToolContext, ToolError, schema
from ctxagent.tools.builtin import LIST_DIR, READ_FILE, SHELL, WRITE_FILE
from ctxagent.tools.offload import OffloadPolicy
from ctxagent.tools.permissions import KINDS, Gate, Grants, PermissionsConfig, check_grants


def tool_of(kind: str) -> Tool:
    return Tool(f"{kind}_tool", "a tool", schema({}), lambda ctx: "ok", kind=kind)  # type: ignore[arg-type]


def asker(*answers: str):
    """An ``ask`` callback that plays ``answers`` and remembers what it was asked."""
    asked: list[tuple[str, dict[str, Any], Path]] = []
    queue = list(answers)

    def ask(tool: str, arguments: dict[str, Any], workdir: Path) -> str:
        asked.append((tool, arguments, workdir))
        return queue.pop(0)

    ask.asked = asked  # type: ignore[attr-defined]
    return ask


# ---------------------------------------------------------------- the gate, unit by unit


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", ["allow", "ask", "deny"])
@pytest.mark.parametrize("path", ["batch", "interactive"])
def test_policy_matrix(kind, policy, path, tmp_path):
    config = PermissionsConfig(kinds={kind: policy})
    ask = asker("yes")
    gate = Gate(config, path, Grants(ask=ask), workdir=tmp_path)
    refusal = gate.decide(tool_of(kind), {}, call_id="c1")[0]
    if policy == "allow":
        assert refusal is None and not ask.asked
    elif policy == "deny":
        assert f"{kind}_tool is 'deny' (permissions.kinds.{kind})" in refusal and not ask.asked
    elif path == "batch":
        assert "batch runs never prompt" in refusal and f"--allow {kind}_tool" in refusal and not ask.asked
    else:
        assert refusal is None and len(ask.asked) == 1
        (decision,) = gate.take_decisions()
        assert (decision.kind, decision.tool, decision.decision, decision.call_id) == ("permission", f"{kind}_tool",
                                                                                       "yes", "c1")


def test_safe_defaults_and_tool_names_over_kinds(tmp_path):
    gate = Gate(PermissionsConfig(), "batch", workdir=tmp_path)
    assert [gate.decide(tool_of(kind), {})[0] is None for kind in KINDS] == [True, False, False, False, False]
    gate = Gate(PermissionsConfig(kinds={"exec": "deny"}, tools={"exec_tool": "allow"}), "batch", workdir=tmp_path)
    assert gate.decide(tool_of("exec"), {})[0] is None


@pytest.mark.parametrize(("granted", "allow_all", "runs"), [
    ((), False, False), (("exec_tool",), False, True), (("exec",), False, True), (("write",), False, False),
    ((), True, True),
])
def test_grants_turn_ask_into_allow_but_never_deny(granted, allow_all, runs, tmp_path):
    ask_gate = Gate(PermissionsConfig(), "batch", Grants(frozenset(granted), allow_all), workdir=tmp_path)
    assert (ask_gate.decide(tool_of("exec"), {})[0] is None) == runs
    deny_gate = Gate(PermissionsConfig(kinds={"exec": "deny"}), "batch", Grants(frozenset(granted), allow_all),
                     workdir=tmp_path)
    assert "'deny'" in deny_gate.decide(tool_of("exec"), {})[0]


def test_interactive_answers_no_always_and_failures(tmp_path):
    ask = asker("no", "always")
    gate = Gate(PermissionsConfig(), "interactive", Grants(ask=ask), workdir=tmp_path)
    assert "denied by the user" in gate.decide(SHELL, {"command": "ls"}, call_id="a")[0]
    assert gate.decide(SHELL, {"command": "make"}, call_id="b")[0] is None
    assert gate.decide(SHELL, {"command": "make test"}, call_id="c")[0] is None  # always: not asked again
    assert [a[1]["command"] for a in ask.asked] == ["ls", "make"]
    assert ask.asked[0][2] == Path(os.path.realpath(tmp_path))
    assert [(d.call_id, d.decision) for d in gate.take_decisions()] == [("a", "no"), ("b", "always")]
    assert gate.take_decisions() == []

    def broken(tool: str, arguments: dict[str, Any], workdir: Path) -> str:
        raise EOFError

    gate = Gate(PermissionsConfig(), "interactive", Grants(ask=broken), workdir=tmp_path)
    assert "denied by the user" in gate.decide(SHELL, {"command": "ls"})[0]
    gate = Gate(PermissionsConfig(), "interactive", Grants(ask=None), workdir=tmp_path)
    assert "this run cannot prompt" in gate.decide(SHELL, {"command": "ls"})[0]


def test_shell_patterns(tmp_path):
    config = PermissionsConfig(shell={"allow": [r"git (status|diff)( [^ ]+)*", r"ls( -l)?"],
                                      "deny": [r"\brm\s+-[a-z]*r", r"curl"]})
    gate = Gate(config, "batch", Grants(allow_all=False), workdir=tmp_path)
    assert gate.decide(SHELL, {"command": "git status"})[0] is None  # allowed without asking, even in batch
    assert gate.decide(SHELL, {"command": "ls -l"})[0] is None
    assert "never prompt" in gate.decide(SHELL, {"command": "ls -la"})[0]  # no full match: the policy decides
    assert "never prompt" in gate.decide(SHELL, {"command": "git status; make"})[0]  # chaining is never pre-allowed
    assert "never prompt" in gate.decide(SHELL, {"command": "ls $(whoami)"})[0]
    everything = Gate(config, "batch", Grants(allow_all=True), workdir=tmp_path)
    assert "shell deny pattern" in everything.decide(SHELL, {"command": "cd /tmp && rm -rf x"})[0]
    assert "'curl'" in everything.decide(SHELL, {"command": "curl example.com"})[0]
    assert everything.decide(SHELL, {"command": "make"})[0] is None


def test_invalid_json_arguments_are_left_to_the_toolset_parsed_once(tmp_path):
    from ctxagent.tools.guard import guard
    from ctxagent.tools.toolset import make_toolset

    toolset = make_toolset(["shell"], ToolContext(OutputStore(tmp_path / "out"), tmp_path), OffloadPolicy(1000))
    guarded = guard(toolset, PermissionsConfig(), "batch")
    for raw, error in (('{"command": ', "are not valid JSON"), ("[1]", "must be a JSON object, not list")):
        verdict = guarded.check(ToolCall("c", "shell", raw))
        assert verdict.refusal is None and isinstance(verdict.arguments, ToolError)
        outcome = guarded.call(ToolCall("c", "shell", raw), verdict=verdict)
        assert outcome.is_error and error in outcome.content
    verdict = guarded.check(ToolCall("c", "shell", '{"command": "ls"}'))
    assert verdict.arguments == {"command": "ls"} and "never prompt" in verdict.refusal.content


def test_parse_grants():
    assert check_grants(Grants.of("shell, write_file,exec").allow, ["shell", "write_file"]) == {
        "shell", "write_file", "exec"}
    assert check_grants(Grants.of(None).allow, []) == set()
    with pytest.raises(Exception, match="unknown tool or kind 'shel'"):
        check_grants(Grants.of("shel").allow, ["shell"])


@pytest.mark.parametrize("name", bundled_names())
def test_bundled_profiles_have_safe_defaults(name):
    permissions = load_profile(name).permissions
    policies = {kind: permissions.policy(tool_of(kind))[0] for kind in KINDS}
    assert policies == {"read": "allow", "write": "ask", "exec": "ask", "network": "ask", "mcp": "ask"}
    assert permissions.confine and not permissions.shell.allow


def test_profile_validates_permissions():
    profile = parse_profile("permissions:\n  kinds: {exec: allow}\n  tools: {write_file: deny}\n"
                            "  shell: {deny: ['rm -rf']}\n", source="p.yaml")
    assert profile.permissions.kinds == {"exec": "allow"}
    with pytest.raises(ProfileError, match=r"p.yaml:2 \(key 'permissions.kinds.exec'\)"):
        parse_profile("permissions:\n  kinds: {exec: sometimes}\n", source="p.yaml")
    with pytest.raises(ProfileError, match="invalid regex"):
        parse_profile("permissions:\n  shell: {allow: ['(']}\n", source="p.yaml")
    with pytest.raises(ProfileError, match=r"permissions\.colour"):
        parse_profile("permissions:\n  colour: red\n", source="p.yaml")


# ---------------------------------------------------------------- confinement


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "inside.txt").write_text("in\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("out\n")
    (work / "link_out").symlink_to(outside / "secret.txt")
    (work / "dir_out").symlink_to(outside)
    (work / "link_in").symlink_to(work / "inside.txt")
    store = tmp_path / "data" / "sessions" / "s" / "outputs"
    store.mkdir(parents=True)
    (store / "out1.out").write_text("stored\n")
    return {"work": work, "outside": outside, "store": store, "data": tmp_path / "data"}


@pytest.mark.parametrize(("tool", "path", "allowed"), [
    (READ_FILE, "inside.txt", True),
    (READ_FILE, "sub/../inside.txt", True),
    (READ_FILE, "link_in", True),
    (LIST_DIR, ".", True),
    (WRITE_FILE, "sub/new.txt", True),
    (READ_FILE, "../outside/secret.txt", False),
    (READ_FILE, "sub/../../outside/secret.txt", False),
    (LIST_DIR, "..", False),
    (READ_FILE, "link_out", False),
    (READ_FILE, "dir_out/secret.txt", False),
    (WRITE_FILE, "dir_out/new.txt", False),
    (WRITE_FILE, "../escape.txt", False),
    (READ_FILE, "~/.bashrc", False),
    (READ_FILE, "/etc/passwd", False),
])
def test_file_tools_are_confined_to_the_workdir(tree, tool, path, allowed):
    gate = Gate(PermissionsConfig(tools={"write_file": "allow"}), "batch", workdir=tree["work"],
                readable=[tree["store"]], protected=[tree["data"]])
    refusal = gate.decide(tool, {"path": path})[0]
    assert (refusal is None) == allowed, refusal
    if not allowed:
        assert "outside the working directory" in refusal and "permissions.workdir" in refusal


def test_absolute_paths_inside_and_the_store(tree):
    gate = Gate(PermissionsConfig(tools={"write_file": "allow"}), "batch", workdir=tree["work"],
                readable=[tree["store"]], protected=[tree["data"]])
    assert gate.decide(READ_FILE, {"path": str(tree["work"] / "inside.txt")})[0] is None
    assert gate.decide(READ_FILE, {"path": str(tree["store"] / "out1.out")})[0] is None  # previews name these
    # the store is readable, never writable
    assert "ctxagent's own files" in gate.decide(WRITE_FILE, {"path": str(tree["store"] / "x.out")})[0]
    loose = Gate(PermissionsConfig(confine=False, tools={"write_file": "allow"}), "batch", workdir=tree["work"],
                 protected=[tree["data"]])
    assert loose.decide(READ_FILE, {"path": str(tree["outside"] / "secret.txt")})[0] is None
    assert "ctxagent's own files" in loose.decide(WRITE_FILE, {"path": str(tree["store"] / "out1.out")})[0]


def test_workdir_setting_narrows_the_confinement(tree):
    gate = Gate(PermissionsConfig(workdir="sub"), "batch", workdir=tree["work"])
    assert "outside the working directory" in gate.decide(READ_FILE, {"path": "inside.txt"})[0]
    assert "outside the working directory" in gate.decide(LIST_DIR, {})[0]  # its default '.' is outside too
    assert gate.decide(LIST_DIR, {"path": "sub"})[0] is None


# ---------------------------------------------------------------- through the CLI


def profile_file(tmp_path: Path, permissions: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(f"permissions: {permissions}\n", encoding="utf-8")
    return str(path)


def every_kind(work: Path) -> list[dict[str, Any]]:
    """One reply calling a read, a write and an exec tool, then an answer."""
    return [{"tool_calls": [call("r", "read_file", path="data.txt"), call("w", "write_file", path="new.txt",
                                                                               content="written"),
                            call("x", "shell", command="echo ran > ran.txt; echo ran")]},
            {"content": "done"}]


@pytest.mark.parametrize(("permissions", "flags", "expected"), [
    ("{}", [], {"r": True, "w": False, "x": False}),  # the safe defaults
    ("{}", ["--allow", "shell"], {"r": True, "w": False, "x": True}),
    ("{}", ["--allow", "write,exec"], {"r": True, "w": True, "x": True}),
    ("{}", ["--allow-all"], {"r": True, "w": True, "x": True}),
    ("{kinds: {read: deny, write: allow, exec: allow}}", [], {"r": False, "w": True, "x": True}),
    ("{kinds: {write: deny, exec: deny}}", ["--allow-all"], {"r": True, "w": False, "x": False}),
    ("{tools: {shell: allow}, kinds: {exec: deny}}", [], {"r": True, "w": False, "x": True}),
])
def test_batch_permission_matrix_through_the_cli(tmp_path, permissions, flags, expected):
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.txt").write_text("the data\n")
    model = script(tmp_path / "s.yaml", every_kind(work))
    out = ctxagent("run", "--batch", "--session", "m", "--model", model, "--profile",
                   profile_file(tmp_path, permissions), *flags, "do all three", cwd=work)
    assert (out.returncode, out.stdout) == (0, "done\n"), out.stderr
    results = tool_messages("m")
    ran = {cid: not text.startswith("ERROR") for cid, text in results.items()}
    assert ran == expected, results
    assert (work / "new.txt").exists() == expected["w"]
    assert (work / "ran.txt").exists() == expected["x"]
    for cid, text in results.items():
        if not ran[cid]:
            assert text.startswith("ERROR: denied by profile permissions: ")
            assert "permissions." in text or "the default for" in text
    assert ("warning: --allow-all" in out.stderr) == ("--allow-all" in flags)


def test_confinement_through_the_cli(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "secret.txt").write_text("top secret\n")
    (work / "link").symlink_to(tmp_path / "secret.txt")
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("dots", "read_file", path="../secret.txt"),
                        call("abs", "read_file", path=str(tmp_path / "secret.txt")),
                        call("sym", "read_file", path="link"),
                        call("wr", "write_file", path="../planted.txt", content="x")]},
        {"content": "done"},
    ])
    out = ctxagent("run", "--batch", "--allow-all", "--session", "conf", "--model", model, "escape", cwd=work)
    assert out.returncode == 0, out.stderr
    results = tool_messages("conf")
    assert all("outside the working directory" in text for text in results.values()), results
    assert not any("top secret" in text for text in results.values())
    assert not (tmp_path / "planted.txt").exists()


def test_unknown_allow_name_is_a_usage_error(tmp_path):
    model = script(tmp_path / "s.yaml", [{"content": "never"}])
    out = ctxagent("run", "--batch", "--allow", "shel", "--session", "bad", "--model", model, "x")
    assert out.returncode == 2 and "unknown tool or kind 'shel'" in out.stderr


def run_on_a_terminal(args: list[str], answers: list[str], done: bytes, cwd: Path,
                      timeout: float = 60) -> tuple[int, str]:
    """Run the CLI on a pseudo-terminal (the interactive path), answering each permission prompt
    with the next of ``answers`` and the next-message prompt (after ``done``) with Ctrl-D (end of
    input: the session ends; an empty line asks again)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI, with the pty as its terminal
        os.chdir(cwd)
        os.execvpe(sys.executable, [sys.executable, "-m", "ctxagent", *args],
                   {**os.environ, "TERM": "dumb", "COLUMNS": "200"})
    output, asked, finished = b"", 0, False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    data = os.read(fd, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                output += data
            if output.count(b"allow?") > asked:
                os.write(fd, answers[asked].encode() + b"\n")
                asked += 1
            if not finished and done in output:
                os.write(fd, b"\x04")
                finished = True
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), output.decode("utf-8", "replace")


def test_interactive_prompt_yes_no_always_recorded(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("one", "shell", command="echo first > one.txt")]},
        {"tool_calls": [call("two", "shell", command="echo second > two.txt")]},
        {"tool_calls": [call("three", "shell", command="echo third > three.txt")]},
        {"tool_calls": [call("four", "write_file", path="four.txt", content="4")]},
        {"content": "ALL-DONE"},
    ])
    code, shown = run_on_a_terminal(["run", "--session", "tty", "--model", model, "go"], ["n", "a", "y"],
                                    b"ALL-DONE", work)
    assert code == 0, shown
    assert "the model wants to run shell" in shown and "echo first > one.txt" in shown
    assert str(Path(os.path.realpath(work))) in shown.replace("\r\n", "")  # rich wraps a dumb terminal at 80
    results = tool_messages("tty")
    assert results["one"].startswith("ERROR: denied by the user")
    assert not (work / "one.txt").exists()
    assert (work / "two.txt").exists() and (work / "three.txt").exists() and (work / "four.txt").exists()
    decisions = [(r["call_id"], r["tool"], r["decision"], r["policy"]) for r in records("tty")
                 if r["kind"] == "permission"]
    assert decisions == [("one", "shell", "no", "the default for exec tools: ask"),
                         ("two", "shell", "always", "the default for exec tools: ask"),
                         ("four", "write_file", "yes", "the default for write tools: ask")]
    assert shown.count("allow?") == 3  # 'three' ran without asking: always, for the rest of this run
    listed = subprocess.run([sys.executable, "-m", "ctxagent", "inspect", "transcript", "--session", "tty"],
                            capture_output=True, text=True, timeout=60)
    assert "permission shell two: always" in listed.stdout
    assert json.dumps(records("tty"))  # every record reads back
