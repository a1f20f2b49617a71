"""Issue 17: permissions wrap the toolset (tools/guard.py); grants are given when a run opens.

No test here touches a runner's attributes after it is built: what a run may do is decided by the
grants it is opened with, and a sub-agent inherits its parent's through the same route.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clihelp import call, script
from ctxagent.agent.config import RunConfig
from ctxagent.agent.setup import open_runner
from ctxagent.errors import UsageError
from ctxagent.messages import ToolCall
from ctxagent.sessions import records
from ctxagent.sessions.session import Session
from ctxagent.tools.base import ToolContext
from ctxagent.tools.guard import GuardedToolset, guard
from ctxagent.tools.offload import OffloadPolicy
from ctxagent.tools.permissions import Grants, PermissionsConfig
from ctxagent.tools.toolset import make_toolset


def shell_call(call_id: str, marker: Path) -> ToolCall:
    return ToolCall(call_id, "shell", f'{{"command": "touch {marker}"}}')


def guarded(tmp_path: Path, path: str = "batch", grants: Grants | None = None,
            permissions: PermissionsConfig | None = None) -> GuardedToolset:
    store = Session.at("guard").store
    toolset = make_toolset(["shell", "read_file"], ToolContext(store, tmp_path), OffloadPolicy(limit_tokens=10_000))
    return guard(toolset, permissions or PermissionsConfig(), path, grants)  # type: ignore[arg-type]


def asker(*answers: str) -> Any:
    queue, asked = list(answers), []

    def ask(tool: str, arguments: dict[str, Any], workdir: Path) -> str:
        asked.append(tool)
        return queue.pop(0)

    ask.asked = asked  # type: ignore[attr-defined]
    return ask


# ---------------------------------------------------------------- the wrapper alone


def test_the_wrapper_refuses_a_denied_tool_as_its_result(tmp_path):
    marker = tmp_path / "ran.txt"
    outcome = guarded(tmp_path).call(shell_call("c1", marker))  # exec is 'ask' and batch never prompts
    assert outcome.is_error and outcome.content.startswith("ERROR: denied by profile permissions: shell is 'ask'")
    assert not marker.exists()
    denied = guarded(tmp_path, grants=Grants(allow_all=True), permissions=PermissionsConfig(tools={"shell": "deny"}))
    assert "'deny'" in denied.call(shell_call("c2", marker)).content  # --allow-all never lifts deny
    assert not marker.exists()


def test_grants_given_at_opening_let_the_call_run(tmp_path):
    marker = tmp_path / "ran.txt"
    outcome = guarded(tmp_path, grants=Grants.of("shell")).call(shell_call("c1", marker))
    assert not outcome.is_error, outcome.content
    assert marker.exists()
    assert not guarded(tmp_path, grants=Grants.of("exec")).call(shell_call("c2", marker)).is_error  # a kind


def test_a_checked_call_is_not_asked_again_and_answers_are_on_the_outcome(tmp_path):
    ask = asker("yes", "yes", "no")
    tools = guarded(tmp_path, "interactive", Grants(ask=ask))
    first = shell_call("c1", tmp_path / "one")
    verdict = tools.check(first, turn=3)
    assert verdict.refusal is None
    assert [(d.call_id, d.decision, d.turn) for d in verdict.decisions] == [("c1", "yes", 3)]
    outcome = tools.call(first, verdict=verdict)
    assert not outcome.is_error and outcome.decisions == () and ask.asked == ["shell"]  # asked once
    second = tools.call(shell_call("c2", tmp_path / "two"), verdict=verdict)  # another call's verdict: checked now
    assert [d.call_id for d in second.decisions] == ["c2"] and ask.asked == ["shell", "shell"]
    refused = tools.call(shell_call("c3", tmp_path / "three"), verdict=tools.check(shell_call("c3", tmp_path)))
    assert refused.is_error and refused.content.startswith("ERROR: denied by the user")
    assert not (tmp_path / "three").exists()


def test_a_verdict_that_refuses_never_runs(tmp_path):
    tools = guarded(tmp_path)
    marker = tmp_path / "ran.txt"
    verdict = tools.check(shell_call("c1", marker))
    assert verdict.refusal is not None
    assert tools.call(shell_call("c1", marker), verdict=verdict) == verdict.refusal
    assert not marker.exists()


def test_inherited_grants_keep_rules_grants_and_always_but_never_ask(tmp_path):
    rules = PermissionsConfig(kinds={"exec": "ask"}, tools={"read_file": "deny"})
    tools = guarded(tmp_path, "interactive", Grants(frozenset({"write"}), False, asker("always")), rules)
    assert tools.check(shell_call("c1", tmp_path / "x")).refusal is None  # answered 'always'
    child = tools.inherited()
    assert child == Grants(frozenset({"write"}), False, None, rules, frozenset({"shell"}))
    looser = guarded(tmp_path, "interactive", child, PermissionsConfig(kinds={"read": "allow"}))
    assert looser.gate.config is rules and looser.gate.grants.ask is None
    assert "'deny'" in looser.call(ToolCall("r", "read_file", '{"path": "a"}')).content  # the parent's rules
    assert not looser.call(shell_call("c2", tmp_path / "y")).is_error  # the parent's 'always'


# ---------------------------------------------------------------- through open_runner


def run_session(name: str, model: str, workdir: Path, profile: str | None = None, grants: Grants | None = None) -> str:
    session = Session.at(name)
    with session.writer():
        runner = open_runner(session, RunConfig(profile_spec=profile, model_spec=model, api_base=None, path="batch",
                             workdir=workdir, lessons=False, grants=grants))
        assert isinstance(runner.toolset, GuardedToolset)
        assert not hasattr(runner, "gate")  # nothing to patch: the gate is inside the toolset
        return [e for e in runner.run("go") if type(e).__name__ == "Finished"][-1].status


def tool_results(name: str) -> dict[str, str]:
    return {r.message["tool_call_id"]: r.message["content"] for r in Session.at(name).transcript.records()
            if isinstance(r, records.MessageRecord) and r.message["role"] == "tool"}


@pytest.mark.parametrize(("grants", "runs"), [(None, False), (Grants.of("shell"), True),
                                              (Grants(allow_all=True), True)])
def test_open_runner_takes_the_grants(tmp_path, grants, runs):
    marker = tmp_path / "ran.txt"
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("x", "shell", command=f"touch {marker}")]},
                                         {"content": "done"}])
    assert run_session("open", model, tmp_path, grants=grants) == "answered"
    assert marker.exists() == runs
    assert tool_results("open")["x"].startswith("ERROR: denied") != runs


def test_an_unknown_allow_name_is_refused_before_anything_is_written(tmp_path):
    model = script(tmp_path / "s.yaml", [{"content": "never"}])
    with pytest.raises(UsageError, match="unknown tool or kind 'shel'"):
        run_session("bad", model, tmp_path, grants=Grants.of("shel"))
    assert not Session.at("bad").transcript.path.exists()


@pytest.mark.parametrize(("grants", "runs"), [(None, False), (Grants.of("shell"), True)])
def test_a_sub_agent_inherits_the_grants_its_parent_was_opened_with(tmp_path, grants, runs):
    marker = tmp_path / "child-ran.txt"
    child = script(tmp_path / "child.yaml", [{"tool_calls": [call("s1", "shell", command=f"touch {marker}")]},
                                             {"content": "child done"}])
    parent = script(tmp_path / "parent.yaml", [{"tool_calls": [call("d1", "delegate", task="touch the file")]},
                                               {"content": "parent done"}])
    profile = tmp_path / "p.yaml"  # the child's profile would allow exec: the parent's rules hold
    profile.write_text(f"tools: [shell, delegate]\ndelegate: {{model: '{child}', profile: '{tmp_path / 'c.yaml'}'}}\n",
                       encoding="utf-8")
    (tmp_path / "c.yaml").write_text("tools: [shell]\npermissions: {kinds: {exec: allow}}\n", encoding="utf-8")
    assert run_session("kid", parent, tmp_path, str(profile), grants) == "answered"
    assert marker.exists() == runs
    assert tool_results("kid/d1")["s1"].startswith("ERROR: denied by profile permissions") != runs
