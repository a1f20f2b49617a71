"""Local models end to end (issue 32), through the real CLI and litellm against the fake server
playing a local one: the window the server says, tool calls written as text, a 4,096-token window
under the default profile, ``--max-output-tokens``. The same against the real model and server:
test_realmodel.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clihelp import records, result_of, run_cli
from ctxagent.messages import pair_violations
from ctxagent.profile import load_profile
from ctxagent.profile_schema import reply_reserve
from ctxagent.sessions.session import Session

LOCAL = "openai/qwen2.5-coder-1.5b"  # litellm does not know it: the window must come from the server
PROPS = {"/props": {"default_generation_settings": {"n_ctx": 4096}}}
FENCED_READ = 'I will read the notes.\n```json\n{"name": "read_file", "arguments": {"path": "notes.txt"}}\n```'


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "notes.txt").write_text("The launch code is TANGO-42.\n", encoding="utf-8")
    return folder


def run(server, workdir, *args):
    return run_cli("run", "--json", "--model", LOCAL, "--api-base", server.base_url, "--workdir", str(workdir), *args)


def header(session: str) -> dict:
    return next(r for r in records(session) if r["kind"] == "session")


# -- the window from the server


def test_a_model_litellm_does_not_know_runs_with_the_window_its_server_says(fake_openai, workdir):
    server = fake_openai([{"content": "hi"}, {"content": "again"}], info=PROPS)
    out = run(server, workdir, "--session", "w", "say hi")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "hi"), out.stdout
    assert header("w")["context_window"] == 4096
    notes = [r["text"] for r in records("w") if r["kind"] == "note" and r["source"] == "context window"]
    assert notes == [f"4,096 tokens, as the server says (GET {server.base_url.removesuffix('/v1')}/props: "
                     "default_generation_settings.n_ctx)"]
    asked = list(server.info_requests)
    again = run_cli("resume", "--json", "--session", "w", "more")  # the recorded window: not asked again
    assert (again.exit_code, result_of(again)["answer"]) == (0, "again") and server.info_requests == asked


def test_the_context_window_flag_and_the_profile_win_over_the_server(fake_openai, workdir, tmp_path):
    server = fake_openai([{"content": "one"}, {"content": "two"}], info=PROPS)
    out = run(server, workdir, "--session", "f", "--context-window", "6000", "x")
    assert out.exit_code == 0 and header("f")["context_window"] == 6000 and server.info_requests == []
    profile = tmp_path / "p.yaml"
    profile.write_text("context_window: 7000\n", encoding="utf-8")
    out = run(server, workdir, "--session", "p", "--profile", str(profile), "x")
    assert out.exit_code == 0 and header("p")["context_window"] == 7000 and server.info_requests == []


def test_a_server_that_says_no_window_stops_the_run_before_anything_is_written(fake_openai, workdir):
    server = fake_openai([{"content": "never"}])
    out = run(server, workdir, "--session", "n", "x")
    error = result_of(out)["error"]
    assert out.exit_code == 2 and "did not say it" in error and "--context-window" in error
    assert "GET" in error and "/props: HTTP 404" in error
    assert server.requests == [] and not Session.at("n").transcript.path.exists()


# -- tool calls written as text


def test_a_call_written_as_fenced_json_is_run_recorded_as_a_call_and_answered_from(fake_openai, workdir):
    server = fake_openai([{"content": FENCED_READ}, {"content": "The launch code is TANGO-42."}], info=PROPS)
    out = run(server, workdir, "--session", "t", "List nothing; read notes.txt and give the launch code.")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "The launch code is TANGO-42."), out.stdout
    second = server.requests[1]["messages"]
    assert pair_violations(second) == [] and server.rejected == []  # a strict provider accepts the transcript
    call, result = second[-2], second[-1]
    assert call["content"] == "I will read the notes." and call["tool_calls"][0]["function"] == {
        "name": "read_file", "arguments": '{"path": "notes.txt"}'}
    assert result["role"] == "tool" and "TANGO-42" in result["content"]
    reply = next(r for r in records("t") if r["kind"] == "message" and r["message"].get("tool_calls"))
    assert reply["written"] == FENCED_READ  # the text as the model wrote it is kept (NO LOSS)


def test_a_session_with_text_calls_resumes_with_another_provider_and_stays_paired(fake_openai, workdir):
    first = fake_openai([{"content": FENCED_READ}, {"content": "done"}], info=PROPS)
    assert run(first, workdir, "--session", "r", "read notes.txt").exit_code == 0
    other = fake_openai([{"content": "still TANGO-42"}])  # a strict OpenAI-style provider, another model
    out = run_cli("resume", "--json", "--session", "r", "--model", "openai/gpt-4o-mini", "--api-base",
                  other.base_url, "what was the code?")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "still TANGO-42"), out.stdout
    assert other.rejected == [] and pair_violations(other.requests[0]["messages"]) == []


def test_an_answer_that_quotes_json_ends_the_run_as_an_answer(fake_openai, workdir):
    answer = 'The failing request:\n```json\n{"request_id": "7f3a9c41", "status": 500}\n```'
    server = fake_openai([{"content": answer}], info=PROPS)
    out = run(server, workdir, "--session", "q", "which request failed?")
    assert (out.exit_code, result_of(out)["answer"]) == (0, answer) and len(server.requests) == 1


@pytest.mark.parametrize(("mode", "runs"), [("off", False), ("auto", False), ("always", True)])
def test_the_profile_switch_decides_on_a_call_to_a_tool_that_does_not_exist(fake_openai, workdir, tmp_path,
                                                                          mode, runs):
    profile = tmp_path / "p.yaml"
    profile.write_text(f"text_tool_calls: {mode}\n", encoding="utf-8")
    written = '```json\n{"name": "deploy", "arguments": {"env": "prod"}}\n```'
    server = fake_openai([{"content": written}, {"content": "could not deploy"}], info=PROPS)
    out = run(server, workdir, "--session", mode, "--profile", str(profile), "deploy")
    assert out.exit_code == 0, out.stdout
    assert result_of(out)["answer"] == ("could not deploy" if runs else written)
    if runs:  # the toolset's error goes back to the model as the call's result
        assert "unknown tool 'deploy'" in server.requests[1]["messages"][-1]["content"]


# -- small windows


def test_the_default_profile_reserves_a_share_of_a_small_window():
    default = load_profile("default")
    assert default.max_output_tokens is None
    assert [default.reply_tokens(w) for w in (2048, 4096, 8192, 32768, 200_000)] == [256, 512, 1024, 4096, 4096]
    assert reply_reserve(1000) == 256 and default.reply_tokens(4096, given=300) == 300


def test_the_default_profile_runs_in_a_4096_token_window_and_offloads_a_2_mb_log(fake_openai, workdir):
    lines = [f"2026-12-04T10:00:{i % 60:02d}Z INFO request_id={i:08x} status=200" for i in range(40_000)]
    lines[17_000] = "2026-12-04T10:00:00Z ERROR request_id=7f3a9c41 status=500"
    (workdir / "app.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert (workdir / "app.log").stat().st_size > 2_000_000
    server = fake_openai([
        {"content": '```json\n{"name": "read_file", "arguments": {"path": "app.log"}}\n```'},
        {"content": '<tool_call>\n{"name": "grep_output", "arguments": {"handle": "@ctx2_0", "pattern": "ERROR"}}'
                    "\n</tool_call>"},
        {"content": "The ERROR line's request id is 7f3a9c41."},
    ], info=PROPS)
    out = run(server, workdir, "--session", "log", "Read app.log and give the request id of its ERROR line.")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "The ERROR line's request id is 7f3a9c41."), out.stdout
    for request in server.requests:
        assert request["max_tokens"] == 512  # an eighth of the window
    preview = server.requests[1]["messages"][-1]["content"]
    assert "@ctx2_0" in preview and len(preview) < 4096  # offloaded: a preview and its handle
    assert "7f3a9c41" in server.requests[2]["messages"][-1]["content"]
    usage = [r for r in records("log") if r["kind"] == "usage"]
    assert all(u["prompt_tokens"] + 512 + 256 <= 4096 for u in usage)


def test_max_output_tokens_flag_is_sent_recorded_and_kept_on_resume(fake_openai, workdir):
    server = fake_openai([{"content": "a"}, {"content": "b"}], info=PROPS)
    assert run(server, workdir, "--session", "m", "--max-output-tokens", "300", "x").exit_code == 0
    assert header("m")["max_output_tokens"] == 300 and server.requests[0]["max_tokens"] == 300
    assert run_cli("resume", "--json", "--session", "m", "y").exit_code == 0
    assert server.requests[1]["max_tokens"] == 300


def test_a_profiles_temperature_is_sent_with_every_request_and_none_leaves_the_servers_default(fake_openai, workdir,
                                                                                                tmp_path):
    """llama.cpp's server samples at 0.8 unless the request says; the real-model benchmark's 1.5B
    model called tools more reliably at 0 (docs/local-models.md)."""
    server = fake_openai([{"content": "a"}, {"content": "b"}], info=PROPS)
    profile = tmp_path / "cold.yaml"
    profile.write_text("extends: default\ntemperature: 0\n", encoding="utf-8")
    assert run(server, workdir, "--session", "cold", "--profile", str(profile), "x").exit_code == 0
    assert run(server, workdir, "--session", "warm", "y").exit_code == 0
    assert server.requests[0]["temperature"] == 0 and "temperature" not in server.requests[1]


def test_a_request_that_cannot_fit_names_the_reply_reserve_and_the_tools_list(fake_openai, workdir):
    server = fake_openai([{"content": "never"}], info={"/props": {"default_generation_settings": {"n_ctx": 1500}}})
    out = run(server, workdir, "--session", "s", "--max-output-tokens", "600", "x")
    error = result_of(out)["error"]
    assert out.exit_code == 5 and server.requests == [], out.stdout
    assert "max_output_tokens" in error and "--max-output-tokens" in error and "tools list" in error


def test_the_tool_schemas_share_of_a_small_window_is_said_at_the_start(fake_openai, workdir):
    server = fake_openai([{"content": "ok"}], info=PROPS)
    out = run(server, workdir, "--session", "sh", "x")
    shown = [w for w in result_of(out)["warnings"] if w.startswith("tool schemas:")]
    assert len(shown) == 1 and "of the 4,096-token window" in shown[0] and "tools list" in shown[0]
    schemas = json.dumps(server.requests[0]["tools"])
    assert len(schemas) > 1000  # what the note is about: sent with every request


# -- empty replies


def test_two_empty_replies_after_a_tool_result_get_one_nudge_then_the_answer(fake_openai, workdir):
    server = fake_openai([{"content": FENCED_READ}, {"content": ""}, {"content": ""},
                          {"content": "The launch code is TANGO-42."}], info=PROPS)
    out = run(server, workdir, "--session", "e", "Read notes.txt and give the launch code.")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "The launch code is TANGO-42."), out.stdout
    nudge = server.requests[3]["messages"][-1]
    assert nudge["role"] == "user" and "Your last reply was empty" in nudge["content"]
    assert server.requests[2]["messages"] == server.requests[1]["messages"]  # the backend's own retry first
    assert pair_violations(server.requests[3]["messages"]) == []
    assert any(w.startswith("empty reply:") for w in result_of(out)["warnings"])


def test_empty_replies_after_the_nudge_end_the_run_as_before(fake_openai, workdir):
    server = fake_openai([{"content": FENCED_READ}] + [{"content": ""}] * 4, info=PROPS)
    out = run(server, workdir, "--session", "e2", "Read notes.txt and give the launch code.")
    assert out.exit_code == 4 and "incomplete reply" in result_of(out)["error"], out.stdout
    assert len(server.requests) == 5  # call, empty twice, the nudge, empty twice: never a second nudge
