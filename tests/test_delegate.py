"""Sub-agents (agent/delegate.py): concurrent children, message-size contracts, handles across
agents, budgets carved from the parent's, and a kill -9 of the parent during delegation.

Parent and children talk to one local OpenAI-compatible server through real litellm calls; each
child's replies are routed by a marker in its task (``FakeOpenAI(routes=...)``), since children
run at the same time and their requests arrive in any order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from clihelp import call, result_of, run_cli, script
from ctxagent.messages import pair_violations
from ctxagent.sessions import records
from ctxagent.sessions.session import Session

MODEL = "openai/gpt-4o-mini"




def profile(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "p.yaml"
    path.write_text("context_window: 60000\nmax_output_tokens: 300\nretries: 0\n"
                    "tools: [shell, read_output, grep_output, delegate]\n"
                    "permissions: {kinds: {exec: allow}}\n" + extra, encoding="utf-8")
    return str(path)


def transcript(name: str) -> list:
    return list(Session.at(name).transcript.records())


def messages(name: str) -> list[dict]:
    return [r.message for r in transcript(name) if isinstance(r, records.MessageRecord)]


def delegate(call_id: str, task: str) -> dict:
    return {"id": call_id, "name": "delegate", "arguments": {"task": task}}


LONG_ANSWER = "finding " + " ".join(f"row{i}=value{i}" for i in range(900))  # ~5,000 tokens


def test_three_children_run_at_once_read_a_parent_handle_and_return_handles(tmp_path, fake_openai):
    markers = ["child-A", "child-B", "child-C"]
    routes = {m: [{"tool_calls": [{"id": f"r{m[-1]}", "name": "read_output",
                                   "arguments": {"handle": "@big", "start_line": 2, "end_line": 3}}],
                   "delay_s": 1.0},
                  {"content": f"{m} {LONG_ANSWER}"}] for m in markers}
    server = fake_openai([
        {"tool_calls": [{"id": "big", "name": "shell", "arguments": {"command": "seq 100000 250000"}}]},
        {"tool_calls": [delegate(f"d{m[-1]}", f"{m}: look at @big and report") for m in markers]},
        {"tool_calls": [{"id": "rd", "name": "read_output", "arguments": {"handle": "@dB", "start_line": 1}}]},
        {"content": "all three reported"},
    ], routes=routes)
    out = run_cli("run", "--json", "--session", "par", "--model", MODEL, "--api-base", server.base_url,
                  "--profile", profile(tmp_path), "split the work")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "all three reported"), out.stdout
    assert server.rejected == [] and all(not pair_violations(r["messages"]) for r in server.requests)
    results = {m["tool_call_id"]: m["content"] for m in messages("par") if m["role"] == "tool"}
    for m in markers:
        content = results[f"d{m[-1]}"]
        assert content.startswith(f"[ctxagent result of sub-agent par/d{m[-1]}:")
        assert f"stored as @d{m[-1]}" in content and "over the contract of 1,000" in content
        assert len(content) < len(LONG_ANSWER) / 2  # a preview, not the answer
        child = messages(f"par/d{m[-1]}")
        assert child[1]["content"].startswith("[ctxagent assignment from par:")  # the budget header
        read = next(x["content"] for x in child if x["role"] == "tool")
        assert "100001" in read and not read.startswith("ERROR")  # the parent's output, by handle
        assert pair_violations(child) == []
    stored = Session.at("par").store.find("@dB")
    assert stored is not None and stored.read_text(encoding="utf-8") == f"child-B {LONG_ANSWER}"
    assert "child-B finding row0=value0" in results["rd"]  # the parent read the child's result
    spans = [(transcript(f"par/d{m[-1]}")[0].ts, transcript(f"par/d{m[-1]}")[-1].ts) for m in markers]
    assert max(start for start, _ in spans) < min(end for _, end in spans)  # all three overlapped
    usage = [r for r in transcript("par") if isinstance(r, records.UsageRecord) and r.model.startswith("agent:")]
    assert sorted(u.model for u in usage) == ["agent:par/dA", "agent:par/dB", "agent:par/dC"]
    assert [u.calls for u in usage] == [2, 2, 2]  # each child made two model calls
    child_requests = [r for r in server.requests if "child-" in json.dumps(r["messages"][:2])]
    assert child_requests and all("delegate" not in json.dumps(r.get("tools")) for r in child_requests)  # depth 1
    assert result_of(out)["session_usage"]["prompt_tokens"] == sum(
        r.prompt_tokens for r in transcript("par") if isinstance(r, records.UsageRecord))
    assert result_of(out)["run_turns"] == 4  # the parent's own model calls
    assert result_of(out)["usage"]["calls"] == 4 + 6
    shown = run_cli("inspect", "transcript", "--session", "par").stdout
    tree = [line.strip() for line in shown.splitlines() if line.strip().startswith("sub-agent par/d")]
    assert [line.split(":")[0] for line in tree] == ["sub-agent par/dA", "sub-agent par/dB", "sub-agent par/dC"]
    assert all("2 calls" in line and "ended answered" in line for line in tree)
    assert "spend session: 10 calls" in shown  # the parent's 4 and each child's 2
    listed = [json.loads(line) for line in run_cli("sessions", "list", "--json").stdout.splitlines()]
    assert [(r["name"], r["parent"], r["status"]) for r in listed] == [
        ("par", None, "answered"), ("par/dA", "par", "answered"), ("par/dB", "par", "answered"),
        ("par/dC", "par", "answered")]


def test_an_assignment_over_the_contract_is_refused_with_its_size(tmp_path):
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("d1", "delegate", task="word " * 700)]},
                                         {"content": "did it myself"}])
    out = run_cli("run", "--json", "--session", "big", "--model", model, "--profile", profile(tmp_path), "go")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "did it myself"), out.stdout
    result = next(m["content"] for m in messages("big") if m["role"] == "tool")
    assert result.startswith("ERROR: delegate refused: the assignment is 70") and "contract of 500" in result
    assert Session.at("big").children() == []  # nothing started


def test_arguments_that_are_no_json_object_are_refused_in_the_words_of_the_gate(tmp_path):
    model = script(tmp_path / "s.yaml", [{"tool_calls": [{"id": "d1", "name": "delegate", "arguments": '{"task": '},
                                                         {"id": "d2", "name": "delegate", "arguments": "[1]"}]},
                                         {"content": "did it myself"}])
    out = run_cli("run", "--json", "--session", "bad", "--model", model, "--profile", profile(tmp_path), "go")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "did it myself"), out.stdout
    results = [m["content"] for m in messages("bad") if m["role"] == "tool"]
    assert results[0].startswith("ERROR: delegate refused: the arguments of delegate are not valid JSON (")
    assert results[1] == "ERROR: delegate refused: the arguments of delegate must be a JSON object, not list"
    assert Session.at("bad").children() == []  # nothing started


def test_a_child_gets_a_share_of_the_parent_budget_and_its_budget_stop_is_a_result(tmp_path):
    child = script(tmp_path / "child.yaml", [{"tool_calls": [call(f"s{i}", "shell", command=f"seq {i}")]}
                                             for i in range(1, 30)])
    parent = script(tmp_path / "parent.yaml", [{"tool_calls": [call("d1", "delegate", task="keep counting")]},
                                               {"content": "the child ran out of budget"}])
    prof = profile(tmp_path, f"delegate: {{model: '{child}'}}\n")
    out = run_cli("run", "--json", "--session", "bud", "--model", parent, "--profile", prof,
                  "--max-input-tokens", "40000", "go")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "the child ran out of budget"), out.stdout
    header = transcript("bud/d1")[0]
    assert "your budget: max_input_tokens" in messages("bud/d1")[1]["content"]  # the header names its budget
    spent_before = next(r.prompt_tokens for r in transcript("bud") if isinstance(r, records.UsageRecord))
    assert header.limits == {"max_input_tokens": int((40000 - spent_before) * 0.9 * 0.25)}  # the parent keeps 10%
    assert [r.reason for r in transcript("bud/d1") if isinstance(r, records.EndRecord)] == ["budget"]
    result = next(m["content"] for m in messages("bud") if m["role"] == "tool")
    assert result.startswith("ERROR: sub-agent bud/d1 stopped (budget)") and "your budget left" in result
    assert result_of(out)["usage"]["prompt_tokens"] <= 40000


def test_kill_9_of_the_parent_during_delegation_then_resume_keeps_pair(tmp_path, fake_openai):
    server = fake_openai([{"tool_calls": [delegate("dk", "child-K: slow work"), delegate("dl", "child-L: fast")]},
                          {"content": "parent done"}],
                         routes={"child-K": [{"content": "never delivered", "delay_s": 30},
                                             {"content": "K finished after resume"}],
                                 "child-L": [{"content": "L finished"}]})
    args = ["run", "--json", "--session", "kp", "--model", MODEL, "--api-base", server.base_url,
            "--profile", profile(tmp_path), "delegate and wait"]
    proc = subprocess.Popen([sys.executable, "-m", "ctxagent", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "OPENAI_API_KEY": "sk-local"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
            isinstance(r, records.EndRecord) for r in _safe(lambda: transcript("kp/dl"))):
        time.sleep(0.1)  # child L has answered; child K is waiting on its slow reply
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert not any(isinstance(r, records.EndRecord) for r in transcript("kp"))  # killed mid-delegation
    out = run_cli("resume", "--json", "--session", "kp")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "parent done"), out.stdout
    for name in ("kp", "kp/dk", "kp/dl"):
        assert pair_violations(messages(name)) == [], name
    results = {m["tool_call_id"]: m["content"] for m in messages("kp") if m["role"] == "tool"}
    assert "K finished after resume" in results["dk"] and "L finished" in results["dl"]
    assert server.rejected == []
    for child in ("kp/dk", "kp/dl"):  # every call of each child is in the parent's spend, kill or not
        spent = sum(r.prompt_tokens for r in transcript(child) if isinstance(r, records.UsageRecord))
        recorded = sum(r.prompt_tokens for r in transcript("kp")
                       if isinstance(r, records.UsageRecord) and r.model == f"agent:{child}")
        assert spent == recorded > 0, child


def _safe(read):
    try:
        return read()
    except Exception:
        return []


def test_a_sub_agent_cannot_run_what_the_parent_profile_denies(tmp_path):
    """Found by a new user: a delegate call naming another profile ran the child under that profile's
    permissions, so a shell the parent denied ran in the child."""
    marker = tmp_path / "escaped.txt"
    child = script(tmp_path / "child.yaml", [{"tool_calls": [call("s1", "shell", command=f"touch {marker}")]},
                                             {"content": "tried"}])
    parent = script(tmp_path / "parent.yaml", [
        {"tool_calls": [{"id": "d1", "name": "delegate",
                         "arguments": {"task": "run it", "profile": "default"}}]},
        {"content": "done"}])
    deny = tmp_path / "deny.yaml"
    deny.write_text(f"tools: [shell, delegate]\npermissions: {{tools: {{shell: deny}}}}\n"
                    f"delegate: {{model: '{child}'}}\n", encoding="utf-8")
    out = run_cli("run", "--json", "--session", "esc", "--model", parent, "--profile", str(deny), "--allow-all", "go")
    assert out.exit_code == 0, out.stdout
    assert not marker.exists()
    child_result = next(m["content"] for m in messages("esc/d1") if m["role"] == "tool")
    assert child_result.startswith("ERROR:") and "deny" in child_result


def test_sigterm_of_the_parent_kills_a_shell_command_a_child_is_running(tmp_path):
    done, started = tmp_path / "u.done", tmp_path / "u.started"
    child = script(tmp_path / "child.yaml", [
        {"tool_calls": [call("s1", "shell", command=f"touch {started}; sleep 20; touch {done}")]},
        {"content": "never"}])
    parent = script(tmp_path / "parent.yaml", [{"tool_calls": [call("d1", "delegate", task="wait")]},
                                               {"content": "never"}])
    prof = profile(tmp_path, f"delegate: {{model: '{child}'}}\n")
    log = tmp_path / "stderr.txt"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "ctxagent", "run", "--batch", "--allow", "shell", "--session",
                                 "term", "--model", parent, "--profile", prof, "go"], stdout=subprocess.DEVNULL,
                                stderr=err)
    deadline = time.monotonic() + 60
    while not started.exists():  # the child's shell command is running
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 130
    time.sleep(1)
    assert not done.exists()
    child = [r.model_dump() for r in transcript("term/d1")]
    results = [m["content"] for m in messages("term/d1") if m["role"] == "tool"]
    assert results and "killed" in results[0], (log.read_text(), child)  # its result says so, not "did not finish"
    assert [r.reason for r in transcript("term") if isinstance(r, records.EndRecord)] == ["interrupted"]


FOLDING = ("tools: [read_file, delegate]\npipelines:\n  batch:\n"
           "    - {strategy: prune, trigger: 0, min_age_turns: 1, batch: 1}\n"
           "    - {strategy: dedupe, trigger: 0}\n"
           "    - {strategy: mask_observations, trigger: 0, keep: 3, batch: 1, min_tokens: 10}\n")
TURNS = 16


def _child_script(marker: str, folder: Path) -> list[dict]:
    """A child that reads files for :data:`TURNS` replies, three calls each: distinct files, one
    repeated from the turn before (dedupe) and missing ones later superseded (prune), all naming
    ``marker``."""
    letter = marker[-1]
    for n in range(TURNS):
        (folder / f"{letter}{n}.txt").write_text("".join(f"{marker} line {i} of file {n}\n" for i in range(60)),
                                                 encoding="utf-8")
    replies = []
    for turn in range(TURNS):
        names = [f"{letter}{turn}.missing{k}" for k in range(3)] if turn % 4 == 1 else \
            [f"{letter}{turn}.txt", f"{letter}{turn // 2}.txt", f"{letter}0.txt"]
        replies.append({"tool_calls": [{"id": f"{letter}{turn}r{k}", "name": "read_file",
                                        "arguments": {"path": name}} for k, name in enumerate(names)]})
    return [*replies, {"content": f"{marker} done"}]


def test_sub_agents_at_once_send_the_requests_they_send_one_at_a_time(tmp_path, fake_openai):
    """Issue 35: each sub-agent has its own context engine. The children of one reply run at once in
    threads; their folding strategies once shared one instance per process, so a child's request
    could carry the other's stub, or a child died with IndexError. Each child's requests are the
    same whether the children run at once or one after the other."""
    markers = ["child-A", "child-B"]
    sent: dict[int, dict[str, list]] = {}
    for concurrent in (1, 2):
        routes = {m: _child_script(m, tmp_path) for m in markers}
        server = fake_openai([{"tool_calls": [delegate(f"d{m[-1]}", f"{m}: read") for m in markers]},
                              {"content": "both reported"}], routes=routes)
        prof = profile(tmp_path, f"delegate: {{max_concurrent: {concurrent}, max_turns: {TURNS + 1}}}\n" + FOLDING)
        name = f"at{concurrent}"
        before = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)  # threads switch every 10 us (Python's default: 5 ms): collisions show in one run
        try:
            out = run_cli("run", "--json", "--session", name, "--model", MODEL, "--api-base", server.base_url,
                          "--profile", prof, "--workdir", str(tmp_path), "split the work")
        finally:
            sys.setswitchinterval(before)
        assert (out.exit_code, result_of(out)["answer"]) == (0, "both reported"), out.stdout
        assert server.rejected == [], concurrent
        sent[concurrent] = {m: [json.dumps(r["messages"]).replace(name, "NAME") for r in server.requests
                                if m in json.dumps(r["messages"][:2])] for m in markers}
        for m in markers:
            child = transcript(f"{name}/d{m[-1]}")
            assert [r.reason for r in child if isinstance(r, records.EndRecord)] == ["answered"], (m, concurrent)
    spans = [(transcript(f"at2/d{m[-1]}")[0].ts, transcript(f"at2/d{m[-1]}")[-1].ts) for m in markers]
    assert max(start for start, _ in spans) < min(end for _, end in spans)  # the two children overlapped
    for m in markers:
        assert len(sent[1][m]) == TURNS + 1  # the folding strategies act on these children:
        for mark in ("[ctxagent masked", "[ctxagent pruned", "[same result"):
            assert any(mark in r for r in sent[1][m]), mark
        assert sent[2][m] == sent[1][m], f"{m}'s requests differ when the other child runs beside it"
