"""Issue 36: confinement that holds against a hostile model and a hostile repository.

Each test is named after a route that broke a promise (write access is not exec; the workdir
confines the file tools). Real files, symlinks and hard links on the test's filesystem, the real
CLI, and a real ``git`` binary for the git routes; only the model is scripted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from benchmarks.confinement import flip_race

from clihelp import call, ctxagent, script, tool_messages
from ctxagent.messages import ToolCall
from ctxagent.sessions.session import Session
from ctxagent.tools import builtin
from ctxagent.tools.base import ToolContext, ToolError
from ctxagent.tools.guard import GuardedToolset, guard
from ctxagent.tools.offload import OffloadPolicy
from ctxagent.tools.paths import open_path, real_path
from ctxagent.tools.permissions import Grants, PermissionsConfig
from ctxagent.tools.toolset import make_toolset

FSMONITOR = '[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "touch {marker}; false"\n'


def run(work: Path, session: str, calls: list[dict[str, object]], *flags: str, model_dir: Path) -> dict[str, str]:
    """One batch run in ``work`` whose model makes ``calls`` (one reply), then answers; its tool results."""
    model = script(model_dir / f"{session}.yaml", [{"tool_calls": calls}, {"content": "done"}])
    out = ctxagent("run", "--batch", "--session", session, "--model", model, *flags, "go", cwd=work)
    assert (out.returncode, out.stdout) == (0, "done\n"), out.stderr
    return tool_messages(session)


def guarded(work: Path, *tools: str, grants: Grants | None = None,
            permissions: PermissionsConfig | None = None) -> GuardedToolset:
    toolset = make_toolset(list(tools), ToolContext(Session.at("confine").store, work), OffloadPolicy(10_000))
    return guard(toolset, permissions or PermissionsConfig(), "batch", grants or Grants(allow_all=True))


# ---------------------------------------------------------------- ctxagent's own files


def test_write_file_never_writes_ctxagent_data_config_or_cache_when_the_workdir_holds_them(tmp_path, monkeypatch):
    """The default data dir is under $HOME, a common workdir: write_file planted a snapshot pickle
    (code run at the end of the same run), a config.yaml granting shell to later runs, and lessons."""
    monkeypatch.setenv("CTXAGENT_CACHE_DIR", str(tmp_path / "ctxagent-cache"))
    data, config, cache = (tmp_path / f"ctxagent-{kind}" for kind in ("data", "config", "cache"))
    planted = {"pickle": data / "cache" / "states" / "x.pickle", "config": config / "config.yaml",
               "lessons": data / "lessons" / "lessons.jsonl", "bpe": cache / "tokenizers" / "o200k.marshal",
               "session": data / "sessions" / "other" / "transcript.jsonl"}
    calls = [call(key, "write_file", path=str(path.relative_to(tmp_path)), content="allow: shell\n")
             for key, path in planted.items()]
    results = run(tmp_path, "own", [*calls, call("ok", "write_file", path="notes.txt", content="fine")],
                  "--allow-all", model_dir=tmp_path)
    for key, path in planted.items():
        assert results[key].startswith("ERROR: denied: write_file path"), (key, results[key])
        assert "ctxagent's own files" in results[key] and not path.exists(), key
    assert (tmp_path / "notes.txt").read_text() == "fine"


def test_the_profile_mcp_config_and_tools_file_of_a_session_are_not_writable_with_write_permission(tmp_path):
    """With only --allow write_file, the model rewrote its profile (granting shell) and its MCP
    configuration (a command), and the next resume ran both."""
    marker = tmp_path / "ran"
    profile = tmp_path / "p.yaml"
    profile.write_text("tools: [write_file, read_file]\n")
    mcp = tmp_path / "mcp.json"
    mcp.write_text('{"mcpServers": {}}')
    tools = tmp_path / "mytools.py"
    tools.write_text("def hello(ctx) -> str:\n    '''Say hello.'''\n    return 'hello'\n")
    link = tmp_path / "sub"
    link.mkdir()
    (link / "p.yaml").symlink_to(profile)  # the same file by another name
    grant = "tools: [shell]\npermissions:\n  kinds: {exec: allow}\n"
    command = f'{{"mcpServers": {{"x": {{"command": "touch", "args": ["{marker}"]}}}}}}'
    results = run(tmp_path, "cfg", [call("p", "write_file", path="p.yaml", content=grant),
                                    call("m", "write_file", path="mcp.json", content=command),
                                    call("t", "write_file", path="mytools.py", content="import os\n"),
                                    call("l", "write_file", path="sub/p.yaml", content=grant)],
                  "--profile", str(profile), "--mcp-config", str(mcp), "--tools", f"{tools}:hello",
                  "--allow", "write_file", model_dir=tmp_path)
    for key in "pmtl":
        assert results[key].startswith("ERROR: denied: write_file path"), results[key]
        assert "configured from" in results[key]
    assert profile.read_text() == "tools: [write_file, read_file]\n" and mcp.read_text() == '{"mcpServers": {}}'
    assert "hello" in tools.read_text() and not marker.exists()


def test_a_resume_whose_profile_changed_on_disk_says_so_and_runs_with_the_recorded_copy(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text("tools: [read_file]\n")
    model = script(tmp_path / "s.yaml", ["first", {"tool_calls": [call("s", "shell", command=f"touch {tmp_path}/x")]},
                                         "second"])
    out = ctxagent("run", "--batch", "--session", "pc", "--model", model, "--profile", str(profile), "go", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    profile.write_text("tools: [read_file, shell]\npermissions:\n  kinds: {exec: allow}\n")  # changed behind its back
    out = ctxagent("resume", "--batch", "--session", "pc", "more", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"profile {profile} changed on disk since this session recorded it" in out.stderr
    assert f"--profile {profile}" in out.stderr
    assert "unknown tool 'shell'" in tool_messages("pc")["s"] and not (tmp_path / "x").exists()


def test_a_resume_whose_mcp_config_changed_on_disk_starts_none_of_its_servers(tmp_path):
    marker = tmp_path / "ran"
    mcp = tmp_path / "mcp.json"
    mcp.write_text('{"mcpServers": {}}')
    model = script(tmp_path / "s.yaml", ["first", "second", "third"])
    out = ctxagent("run", "--batch", "--session", "mc", "--model", model, "--mcp-config", str(mcp), "go")
    assert out.returncode == 0, out.stderr
    mcp.write_text(f'{{"mcpServers": {{"x": {{"command": "touch", "args": ["{marker}"]}}}}}}')
    out = ctxagent("resume", "--batch", "--session", "mc", "more")
    assert out.returncode == 2 and not marker.exists()
    assert f"the MCP configuration {mcp} changed on disk since this session recorded it" in out.stderr
    assert f"give --mcp-config {mcp}" in out.stderr
    mcp.write_text('{"mcpServers": {}}')  # as recorded: resumes
    assert ctxagent("resume", "--batch", "--session", "mc", "more").returncode == 0


# ---------------------------------------------------------------- git: every write under .git is exec

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git binary")


def git_repo(work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)


def git_status(work: Path) -> None:
    subprocess.run(["git", "status"], cwd=work, capture_output=True, timeout=30)


@needs_git
@pytest.mark.parametrize("route", ["commondir", "worktree gitdir"])
def test_writing_git_commondir_or_a_worktree_file_would_run_a_command_and_is_exec(tmp_path, route):
    """.git/config and hooks were guarded, but .git/commondir (or gitdir files, worktrees/*) made the
    next `git status` run a command. First the route itself, on a copy, by hand; then the tool."""
    marker = tmp_path / "PWNED"
    work = tmp_path / "work"
    git_repo(work)
    evil = work / "evil"  # ordinary files in the workdir: the model may write them
    for folder in ("objects", "refs"):
        (evil / folder).mkdir(parents=True)
    (evil / "config").write_text(FSMONITOR.format(marker=marker))
    if route == "commondir":
        target, content = ".git/commondir", "../evil\n"
    else:  # a linked worktree's gitdir names the repository git uses inside it
        (work / "wt").mkdir()
        (evil / "HEAD").write_text("ref: refs/heads/main\n")
        (evil / "commondir").write_text(".\n")
        target, content = "wt/.git", f"gitdir: {evil}\n"
    proof = tmp_path / "proof"
    shutil.copytree(work, proof, symlinks=True)
    (proof / target).write_text(content.replace("../evil", str(evil)))
    git_status(proof / ("wt" if route != "commondir" else ""))
    assert marker.exists(), "the route no longer runs a command with this git: the test proves nothing"
    marker.unlink()

    results = run(work, "git", [call("w", "write_file", path=target, content=content),
                                call("i", "write_file", path=".git/info/exclude", content="*\n")],
                  "--allow", "write_file", model_dir=tmp_path)
    for key in "wi":
        assert results[key].startswith("ERROR: denied by profile permissions: write_file path"), results[key]
        assert "needs the exec permission" in results[key] and "--allow exec" in results[key]
    git_status(work / ("wt" if route != "commondir" else ""))
    assert not marker.exists()


# ---------------------------------------------------------------- the path checked is the path opened


def test_a_symlink_named_with_a_non_utf8_byte_is_checked_where_it_leads(tmp_path):
    """`docs\\x80/...`: the gate checked the literal path (no such file: inside), the tool then opened
    the translated name and followed the link out: files outside read and written, .git/config
    rewritten with write permission only."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / ".git").mkdir(parents=True)
    (work / ".git" / "config").write_text("[core]\n")
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET")
    os.symlink(outside, os.fsencode(work) + b"/docs\x80")
    os.symlink(work / ".git", os.fsencode(work) + b"/gd\x81")
    results = run(work, "bytes", [call("ls", "list_dir"),
                                  call("r", "read_file", path="docs\\x80/secret.txt"),
                                  call("w", "write_file", path="docs\\x80/planted.txt", content="x"),
                                  call("g", "write_file", path="gd\\x81/config", content="[core]\n\tpager = evil\n")],
                  "--allow", "write_file", model_dir=tmp_path)
    assert "docs\\x80" in results["ls"]  # how the model learns the name
    for key in "rw":
        assert "outside the working directory" in results[key] and str(outside) in results[key], results[key]
    assert "TOP SECRET" not in results["r"] and not (outside / "planted.txt").exists()
    assert "needs the exec permission" in results["g"] and (work / ".git" / "config").read_text() == "[core]\n"


def test_a_symlink_swapped_in_after_the_check_is_not_followed(tmp_path):
    """Between the gate's check and the tool's open, a folder on the path became a symlink out."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "docs").mkdir(parents=True)
    (work / "docs" / "a.txt").write_text("inside")
    outside.mkdir()
    (outside / "a.txt").write_text("OUTSIDE")
    tools = guarded(work, "read_file", "write_file", "list_dir")
    calls = [ToolCall("r", "read_file", '{"path": "docs/a.txt"}'),
             ToolCall("w", "write_file", '{"path": "docs/a.txt", "content": "changed"}'),
             ToolCall("l", "list_dir", '{"path": "docs"}')]
    verdicts = [tools.check(c) for c in calls]
    assert all(v.refusal is None for v in verdicts)
    (work / "docs").rename(work / "old")
    (work / "docs").symlink_to(outside)  # the swap
    for c, verdict in zip(calls, verdicts, strict=True):
        outcome = tools.call(c, verdict=verdict)
        assert outcome.is_error and "is a symbolic link or not a folder" in outcome.content, outcome.content
        assert "OUTSIDE" not in outcome.content
    assert (outside / "a.txt").read_text() == "OUTSIDE"
    (work / "docs").unlink()
    (work / "docs").symlink_to(outside / "a.txt")  # now the file itself: the last name is a link
    ctx = ToolContext(Session.at("confine").store, work, checked={"path": work / "docs"})
    with pytest.raises(ToolError, match="is a symbolic link or not a folder"):
        builtin.write_file(ctx, "docs", "changed")
    assert (outside / "a.txt").read_text() == "OUTSIDE"


def test_a_symlink_flipping_while_read_file_runs_never_returns_the_outside_file():
    """A thread flipping a symlink between an inside and an outside target: the outside file came
    back in 81 of 400 reads. Measured by the benchmark's own function (benchmarks/confinement.py)."""
    race = flip_race(400)
    assert race["outside"] == 0, race
    assert race["inside"] + race["refused"] == 400 and race["inside"] > 0  # the race ran: reads got through


def test_write_file_through_a_hard_link_to_a_file_outside_is_refused(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "victim.txt").write_text("original")
    try:
        os.link(outside / "victim.txt", work / "innocent.txt")
    except OSError as err:
        pytest.skip(f"this filesystem makes no hard links: {err}")
    outcome = guarded(work, "write_file").call(ToolCall("w", "write_file", '{"path": "innocent.txt", "content": "x"}'))
    assert outcome.is_error and "has 2 hard links" in outcome.content, outcome.content
    assert (outside / "victim.txt").read_text() == "original"
    (work / "innocent.txt").unlink()  # a new file has one link: written
    assert not guarded(work, "write_file").call(ToolCall("w", "write_file", '{"path": "innocent.txt", '
                                                                            '"content": "x"}')).is_error


def test_open_path_follows_no_link_makes_missing_folders_and_says_what_is_in_the_way(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    fd = open_path(tmp_path / "a" / "b" / "c.txt", os.O_WRONLY | os.O_CREAT, shown="a/b/c.txt", parents=True)
    os.close(fd)
    assert (tmp_path / "a" / "b" / "c.txt").is_file()
    with pytest.raises(ToolError, match=r"'link' on the way to .* is a symbolic link"):
        open_path(tmp_path / "link" / "x", os.O_RDONLY, shown="link/x")
    with pytest.raises(ToolError, match="'link' on the way"):
        open_path(tmp_path / "link", os.O_RDONLY, shown="link")
    with pytest.raises(FileNotFoundError):
        open_path(tmp_path / "missing" / "x", os.O_RDONLY, shown="missing/x")
    assert real_path(tmp_path, "link/../file") == (tmp_path / "file").resolve()  # '..' after the link: resolved


def test_writes_under_a_protected_path_are_refused_by_any_name(tmp_path):
    """Protected paths are compared resolved: a symlink in the workdir to a protected file is refused."""
    profile = tmp_path / "elsewhere" / "p.yaml"
    profile.parent.mkdir()
    profile.write_text("{}\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "p.yaml").symlink_to(profile)
    tools = guard(make_toolset(["write_file"], ToolContext(Session.at("x").store, work), OffloadPolicy(10_000)),
                  PermissionsConfig(confine=False), "batch", Grants(allow_all=True), protected=[profile])
    for path in ("p.yaml", str(profile)):
        outcome = tools.call(ToolCall("w", "write_file", json.dumps({"path": path, "content": "x"})))
        assert outcome.is_error and "ctxagent's own files" in outcome.content, outcome.content
    assert profile.read_text() == "{}\n"


# ---------------------------------------------------------------- shell patterns are not a boundary

DOCS_DENY = [r"\brm\s+-[a-z]*r", "curl|wget"]  # the deny list docs/security.md once showed as protection


@pytest.mark.parametrize("command", ["rm -f -r victim", r"r\m -rf victim", "X=r; ${X}m -rf victim"])
def test_the_docs_old_deny_list_is_beaten_by_shell_quoting_and_an_allow_list_is_not(tmp_path, command):
    """docs/security.md's example deny list let `rm -f -r`, `r\\m`, `c''url` and `${X}l` through: bash
    reads them as the commands the patterns meant to stop. An allow list refuses them (batch)."""
    from ctxagent.tools.builtin import SHELL
    from ctxagent.tools.permissions import Gate, ShellPatterns

    denying = Gate(PermissionsConfig(shell=ShellPatterns(deny=DOCS_DENY)), "batch", Grants.of("shell"),
                   workdir=tmp_path)
    assert denying.decide(SHELL, {"command": command})[0] is None  # not refused...
    (tmp_path / "victim").mkdir()
    subprocess.run(["bash", "-c", command], cwd=tmp_path, check=True)
    assert not (tmp_path / "victim").exists()  # ...and it is rm -rf
    for curl in ("c''url --version", "X=cur; ${X}l --version"):
        assert denying.decide(SHELL, {"command": curl})[0] is None
    allowing = Gate(PermissionsConfig(shell=ShellPatterns(allow=[r"git (status|diff)", r"ls( -[al]+)?"])), "batch",
                    workdir=tmp_path)
    assert allowing.decide(SHELL, {"command": "git status"})[0] is None
    assert "denied by profile permissions: shell is 'ask'" in allowing.decide(SHELL, {"command": command})[0]


def test_a_sub_agent_keeps_the_files_its_parent_is_configured_from(tmp_path):
    """A child with its own delegate.profile must not rewrite its parent's profile either."""
    profile = tmp_path / "parent.yaml"
    profile.write_text("{}\n")
    store = Session.at("parent").store
    parent = guard(make_toolset(["write_file"], ToolContext(store, tmp_path), OffloadPolicy(10_000)),
                   PermissionsConfig(), "batch", Grants(allow_all=True), protected=[profile])
    child = guard(make_toolset(["write_file"], ToolContext(store, tmp_path), OffloadPolicy(10_000)),
                  PermissionsConfig(), "batch", parent.inherited())
    outcome = child.call(ToolCall("w", "write_file", '{"path": "parent.yaml", "content": "x"}'))
    assert outcome.is_error and "ctxagent's own files" in outcome.content
    assert profile.read_text() == "{}\n"
