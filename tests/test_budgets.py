"""Budgets: the circuit breaker on tokens, money and wall time (agent/budgets.py).

The CLI runs in process (Typer's runner) against a local OpenAI-compatible server started by the
test, through real litellm HTTP calls: the server's request log proves a request was not sent.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clihelp import call, ctxagent, result_of, run_cli, script
from ctxagent.agent.budgets import Breaker, Spend, parse_limits
from ctxagent.agent.state import SessionState
from ctxagent.errors import UsageError
from ctxagent.messages import pair_violations
from ctxagent.profile_schema import Limits
from ctxagent.sessions import records
from ctxagent.sessions.session import Session
from examplecount import examples

MODEL = "openai/gpt-4o-mini"  # litellm has its prices: the cost limit can be kept




def profile(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "p.yaml"
    path.write_text("context_window: 50000\nmax_output_tokens: 200\nretries: 0\n"
                    "permissions: {kinds: {exec: allow}}\n" + extra, encoding="utf-8")
    return str(path)


def shell_turns(n: int, completion_tokens: int | None = None) -> list[dict]:
    usage = {} if completion_tokens is None else {"usage": {"completion_tokens": completion_tokens}}
    return [{"content": None, "tool_calls": [{"id": f"c{i}", "name": "shell",
                                              "arguments": {"command": f"seq 1 {40 + i}"}}], **usage}
            for i in range(n)]


def kinds(session: str) -> list[records._Record]:
    return list(Session.at(session).transcript.records())


def end_of(session: str) -> records.EndRecord:
    return [r for r in kinds(session) if isinstance(r, records.EndRecord)][-1]


def agent(session: str, server, tmp_path: Path, *flags: str, task: str = "count") -> object:
    return run_cli("run", "--json", "--session", session, "--model", MODEL, "--api-base", server.base_url,
                   "--profile", profile(tmp_path), *flags, task)


@pytest.mark.parametrize(("flag", "value", "key"), [
    ("--max-input-tokens", "2600", "max_input_tokens"),
    ("--max-output-tokens-total", "500", "max_output_tokens_total"),
    ("--max-cost-usd", "0.0006", "max_cost_usd"),
])
def test_a_run_stops_before_the_request_that_would_cross_its_limit(tmp_path, fake_openai, flag, value, key):
    server = fake_openai([*shell_turns(6, completion_tokens=150), {"content": "done"}])  # long replies
    out = agent("b", server, tmp_path, flag, value)
    result = result_of(out)
    assert (out.exit_code, result["status"]) == (3, "budget"), out.stdout
    end = end_of("b")
    assert end.limit == f"run.{key}" and end.spent is not None and end.left is not None
    assert end.spent + end.left == pytest.approx(float(value))
    sent = len(server.requests)
    assert 0 < sent < 7 and server.served == sent  # stopped early, and nothing was sent after the stop
    spent = {"max_input_tokens": result["usage"]["prompt_tokens"],
             "max_output_tokens_total": result["usage"]["completion_tokens"],
             "max_cost_usd": result["usage"]["cost_usd"]}[key]
    assert spent <= float(value)  # the limit was never crossed
    assert "the request was not sent" in result["error"]
    # a checkpoint is written before the end record, deterministic (no summarizer call)
    tail = kinds("b")[-3:]
    assert any(isinstance(r, records.CompactionRecord) and r.strategy == "checkpoint" for r in tail)
    assert all(not r.model.startswith("summarizer:") for r in kinds("b") if isinstance(r, records.UsageRecord))
    # resume with the limit raised continues from there, to the answer
    raised = str(int(value) * 20) if value.isdigit() else str(float(value) * 20)  # an int option takes an int
    again = run_cli("resume", "--json", "--session", "b", flag, raised)
    assert (again.exit_code, result_of(again)["answer"]) == (0, "done"), again.stdout
    assert server.rejected == [] and all(pair_violations(r["messages"]) == [] for r in server.requests)
    assert result_of(again)["session_usage"]["calls"] == len(server.requests)


def test_wall_time_limit_stops_before_the_next_request(tmp_path):
    # 3 s: the first request must go out within the limit, also in-process on a machine at load 10
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("w1", "shell", command="sleep 3.2")]},
                                         {"content": "never"}])
    out = run_cli("run", "--json", "--session", "w", "--model", model, "--profile", profile(tmp_path),
                  "--max-wall-s", "3", "wait")
    assert (out.exit_code, result_of(out)["status"]) == (3, "budget"), out.stdout
    end = end_of("w")
    assert end.limit == "run.max_wall_s" and end.spent >= 3.2 and end.wall_s >= 3.2
    assert sum(isinstance(r, records.UsageRecord) for r in kinds("w")) == 1, [type(r).__name__ for r in kinds("w")]


def test_a_command_run_after_another_in_one_process_does_not_count_its_wall_time(tmp_path):
    """``cli.invoke`` set the start of a command's wall time and never cleared it: the next command in
    the same process that did not go through it (the suite's ``run_cli``, a program embedding the app)
    counted the time since the first one, and ``--max-wall-s`` stopped it before its first request."""
    first = ctxagent("run", "--batch", "--session", "one", "--model", script(tmp_path / "a.yaml", ["one"]), "x")
    assert (first.returncode, first.stdout) == (0, "one\n"), first.stderr
    time.sleep(2.5)
    out = run_cli("run", "--json", "--session", "two", "--model", script(tmp_path / "b.yaml", ["two"]),
                  "--max-wall-s", "2", "x")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "two"), out.stdout


def test_session_limit_is_kept_by_resume_and_raised_by_a_flag(tmp_path, fake_openai):
    server = fake_openai([*shell_turns(1), {"content": "first"}, {"content": "second"}])
    out = agent("s", server, tmp_path, "--session-limit", "max_input_tokens=3000")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "first"), out.stdout
    header = kinds("s")[0]
    assert isinstance(header, records.SessionHeader) and header.limits == {"max_input_tokens": 3000}
    stopped = run_cli("resume", "--json", "--session", "s", "go on")  # no flag: the recorded limit holds
    assert (stopped.exit_code, end_of("s").limit) == (3, "session.max_input_tokens"), stopped.stdout
    assert len(server.requests) == 2  # the crossing request was never sent
    raised = run_cli("resume", "--json", "--session", "s", "--session-limit", "max_input_tokens=100000")
    assert (raised.exit_code, result_of(raised)["answer"]) == (0, "second"), raised.stdout
    assert result_of(raised)["limits"]["session"] == {"max_input_tokens": 100000}


def test_warning_at_80_percent_goes_to_stderr_and_json(tmp_path, fake_openai):
    server = fake_openai([*shell_turns(3), {"content": "done"}])
    out = agent("warn", server, tmp_path, "--max-input-tokens", "5400")  # ~1,150-1,450 per request
    result = result_of(out)
    assert out.exit_code == 0, out.stdout  # the last request brought the run over 80%: said after it
    assert [w for w in result["warnings"] if w.startswith("budget: the run has spent")], result["warnings"]
    assert "warning: budget: the run has spent" in out.stderr
    assert any(isinstance(r, records.NoteRecord) and r.source == "budget" for r in kinds("warn"))


def test_cost_limit_on_a_model_without_a_price_is_refused_before_any_request(tmp_path, fake_openai):
    server = fake_openai([{"content": "never"}])
    out = run_cli("run", "--json", "--session", "np", "--model", "openai/not-in-the-price-map", "--api-base",
                  server.base_url, "--profile", profile(tmp_path), "--max-cost-usd", "1", "x")
    assert (out.exit_code, result_of(out)["status"]) == (2, "usage_error")
    assert "no price" in result_of(out)["error"] and server.requests == []


def test_json_reports_run_and_session_spend_under_distinct_keys(tmp_path, fake_openai):
    server = fake_openai([{"content": "one"}, {"content": "two"}])
    agent("j", server, tmp_path)
    second = result_of(run_cli("resume", "--json", "--session", "j", "again"))
    assert second["run_turns"] == 1 and second["usage"]["calls"] == 1
    assert second["session_usage"]["calls"] == 2
    assert second["session_usage"]["prompt_tokens"] > second["usage"]["prompt_tokens"]
    assert second["cost_usd"] == second["usage"]["cost_usd"] and second["cost_usd"] > 0
    assert second["model"] == MODEL and second["is_error"] is False and second["duration_s"] > 0


def test_profile_limits_are_validated_with_file_line_and_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("limits:\n  run:\n    max_cost_usd: -1\n", encoding="utf-8")
    out = run_cli("run", "--json", "--session", "bad", "--model", "scripted:x", "--profile", str(bad), "x")
    error = result_of(out)["error"]
    assert out.exit_code == 2 and "bad.yaml" in error and "bad.yaml:3" in error and "limits.run.max_cost_usd" in error


def test_an_output_limit_below_one_reply_is_refused_before_anything_is_written(tmp_path):
    model = script(tmp_path / "s.yaml", [{"content": "x"}])
    out = run_cli("run", "--json", "--session", "small", "--model", model, "--profile", profile(tmp_path),
                  "--max-output-tokens-total", "100", "go")  # the profile reserves 200 per reply
    assert out.exit_code == 2 and "smaller than one reply's reserve" in result_of(out)["error"]
    assert not Session.at("small").exists()


def test_session_limit_items_are_checked():
    assert parse_limits(["max_cost_usd=2.5", "max-input-tokens=100"]) == {"max_cost_usd": 2.5,
                                                                         "max_input_tokens": 100}
    for bad in ("max_cost_usd", "cost=1", "max_wall_s=soon", "max_cost_usd=0", "max_input_tokens=0.5",
                "max_input_tokens=1.5", "max_cost_usd=inf", "max_wall_s=nan"):  # fractional tokens crashed; inf
        with pytest.raises(UsageError, match="--session-limit"):                 # made the --json invalid
            parse_limits([bad])
    assert parse_limits(["max_cost_usd=none"]) == {"max_cost_usd": None}


def test_a_recorded_cost_limit_on_an_unpriced_model_is_refused_before_anything_is_written(tmp_path, fake_openai):
    server = fake_openai([{"content": "one"}, {"content": "two"}])
    out = agent("swm", server, tmp_path, "--session-limit", "max_cost_usd=1")
    assert out.exit_code == 0, out.stdout
    before = Session.at("swm").transcript.path.read_bytes()
    refused = run_cli("resume", "--json", "--session", "swm", "--model", "openai/my-model", "--context-window",
                      "32000", "again")
    assert refused.exit_code == 2 and "max_cost_usd=none" in result_of(refused)["error"]
    assert Session.at("swm").transcript.path.read_bytes() == before  # no settings change, no message
    removed = run_cli("resume", "--json", "--session", "swm", "--model", "openai/my-model", "--context-window",
                      "32000", "--session-limit", "max_cost_usd=none", "again")
    assert (removed.exit_code, result_of(removed)["answer"]) == (0, "two"), removed.stdout
    assert result_of(removed)["limits"]["session"] == {}
    with pytest.raises(UsageError, match="finite"):  # in process: main() would print it and exit 2
        run_cli("run", "--json", "--session", "inf", "--model", "scripted:x", "--max-cost-usd", "inf", "x")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@settings(max_examples=examples(60), deadline=None)
@given(limit=st.integers(100, 5000), output_cap=st.integers(1, 300),
       calls=st.lists(st.tuples(st.integers(1, 800), st.floats(0, 1), st.floats(0, 1)), max_size=40))
def test_bounded_law_no_sequence_of_requests_crosses_a_limit(limit, output_cap, calls):
    """BOUNDED (DESIGN.md): whatever the requests, a request allowed by the breaker never takes the
    spend over a limit, given that a reply is never longer than the reserve it was allowed with."""
    state = SessionState()
    limits = Limits(max_input_tokens=limit, max_output_tokens_total=limit, max_cost_usd=limit / 1e6)
    breaker = Breaker(limits, Limits(), state, clock=Clock())
    for prompt, out_share, price_share in calls:
        crossing = breaker.check(state, prompt, output_cap, (prompt + output_cap) / 1e6)
        if crossing is not None:
            assert crossing.spent + crossing.needs > crossing.limit
            break
        reply = int(output_cap * out_share)
        state.apply(records.UsageRecord(turn=1, model="m", prompt_tokens=prompt, completion_tokens=reply,
                                        estimated_prompt_tokens=prompt, cost_usd=(prompt + reply) * price_share / 1e6))
        spent = breaker.run_spend(state)
        assert spent.prompt_tokens <= limit and spent.completion_tokens <= limit
        assert spent.cost_usd <= limit / 1e6 + 1e-12


def test_spend_of_a_run_excludes_the_session_before_it():
    state = SessionState()
    state.apply(records.UsageRecord(turn=1, model="m", prompt_tokens=100, completion_tokens=5,
                                    estimated_prompt_tokens=100, cost_usd=0.5))
    breaker = Breaker(Limits(), Limits(max_input_tokens=150), state, clock=Clock())
    crossing = breaker.check(state, 60, 0, 0.0)
    assert crossing is not None and crossing.scope == "session" and crossing.spent == 100
    assert breaker.run_spend(state) == Spend(calls=0)
