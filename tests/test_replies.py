"""Bad replies and reasoning (issue 10): each bad reply a clear outcome, reasoning never lost.

Real litellm HTTP code against servers on 127.0.0.1: FakeOpenAI (OpenAI wire, DeepSeek's rules) and,
for Anthropic's own wire, a small Messages-API server below. Only the model is scripted.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ctxagent.agent.litellm_backend import LiteLLMModel
from ctxagent.agent.model import Reply, ToolCall
from ctxagent.agent.replies import INVALID_ARGUMENTS_KEY, cut_call_error, wire_message
from ctxagent.cli import app
from ctxagent.errors import ProviderError
from ctxagent.testing import FakeOpenAI
from ctxagent.tokens import count_message, count_text

USER = [{"role": "user", "content": "Look, then say hi."}]
TOOL = {"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                         "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}
SIGNED = [{"type": "thinking", "thinking": "I should read x first.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA"},
          {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"}]


def backend(server: FakeOpenAI, stream: bool = False, **kwargs: Any) -> LiteLLMModel:
    kwargs.setdefault("backoff_s", 0.001)
    return LiteLLMModel("openai/fake", api_base=server.base_url, stream=stream, **kwargs)


def follow_up(reply: Reply, result: str = "x = 1") -> list[dict[str, Any]]:
    """The next request after ``reply``: its stored message and one result per call."""
    results = [{"role": "tool", "tool_call_id": c.id, "content": result} for c in reply.tool_calls]
    return [*USER, reply.message(), *results]


def read_call(**extra: Any) -> dict[str, Any]:
    return {"content": None, "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "x"}}]} | extra


# ---------------------------------------------------------------- reasoning: DeepSeek's reasoning_content


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_reasoning_content_is_kept_on_the_stored_message(fake_openai, stream):
    server = fake_openai([read_call(reasoning_content="The file x holds it.")])
    reply = backend(server, stream).complete(USER, [TOOL])
    assert reply.extra == {"reasoning_content": "The file x holds it."}
    assert reply.message()["reasoning_content"] == "The file x holds it."


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_replies_without_reasoning_add_no_fields(fake_openai, stream):
    reply = backend(fake_openai([{"content": "hi"}]), stream).complete(USER, [])
    assert reply.extra == {} and reply.message() == {"role": "assistant", "content": "hi"}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_deepseek_reasoning_content_is_sent_back(stream):
    with FakeOpenAI([read_call(reasoning_content="Read x first."), {"content": "hi"}],
                    require_reasoning_content=True) as server:
        model = backend(server, stream)
        first = model.complete(USER, [TOOL])
        assert model.complete(follow_up(first), [TOOL]).content == "hi"
        assert server.rejected == []
        assert server.requests[1]["messages"][1]["reasoning_content"] == "Read x first."


def test_fake_server_rejects_a_tool_call_turn_without_reasoning_like_deepseek():
    with FakeOpenAI([{"content": "unused"}], require_reasoning_content=True) as server:
        lost = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}
        with pytest.raises(ProviderError) as info:
            backend(server).complete([*USER, lost, {"role": "tool", "tool_call_id": "c1", "content": "r"}], [TOOL])
        assert "HTTP 400" in str(info.value) and "Missing `reasoning_content` field" in str(info.value)
        assert "message index 1" in str(info.value) and len(server.rejected) == 1 and server.served == 0


def sessions_messages(tmp_path: Path, session: str) -> list[dict[str, Any]]:
    path = tmp_path / "ctxagent-data" / "sessions" / session / "transcript.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [r["message"] for r in lines if r.get("kind") == "message"]


def cli_run(tmp_path: Path, server: FakeOpenAI, session: str, *more: str) -> tuple[Any, dict[str, Any]]:
    profile = tmp_path / "p.yaml"
    profile.write_text("context_window: 50000\nmax_output_tokens: 500\n", encoding="utf-8")
    (tmp_path / "x").write_text("x = 1\n", encoding="utf-8")
    out = CliRunner().invoke(app, ["run", "--json", "--session", session, "--model", "openai/fake", "--api-base",
                                   server.base_url, "--profile", str(profile), "--workdir", str(tmp_path), *more,
                                   "read x"], catch_exceptions=False)
    return out, json.loads(out.stdout.strip().splitlines()[-1])


def test_deepseek_reasoning_content_is_sent_back_through_a_run(tmp_path):
    """Regression: the second turn used to be rejected (400 "Missing reasoning_content") and the run exit 4."""
    with FakeOpenAI([read_call(reasoning_content="Read x first."), {"content": "x is 1",
                                                                     "reasoning_content": "It says 1."}],
                    require_reasoning_content=True) as server:
        out, result = cli_run(tmp_path, server, "deepseek")
        assert (out.exit_code, result["answer"]) == (0, "x is 1"), out.stdout + out.stderr
        assert server.rejected == []
        assert server.requests[1]["messages"][2]["reasoning_content"] == "Read x first."
    stored = [m for m in sessions_messages(tmp_path, "deepseek") if m["role"] == "assistant"]
    assert [m.get("reasoning_content") for m in stored] == ["Read x first.", "It says 1."]


# ---------------------------------------------------------------- reasoning: Anthropic thinking blocks


def test_thinking_blocks_from_an_openai_wire_proxy_are_kept_and_sent_back(fake_openai):
    server = fake_openai([read_call(thinking_blocks=SIGNED, reasoning_content=SIGNED[0]["thinking"]),
                          {"content": "hi"}])
    model = backend(server)
    first = model.complete(USER, [TOOL])
    assert first.extra["thinking_blocks"] == SIGNED
    model.complete(follow_up(first), [TOOL])
    assert server.requests[1]["messages"][1]["thinking_blocks"] == SIGNED


class _AnthropicHandler(BaseHTTPRequestHandler):
    """Anthropic's Messages API, enough for litellm: plays ``server.script`` (response bodies) in order."""

    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        """Silent."""

    def do_POST(self) -> None:
        self.server.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        body = json.dumps(self.server.script.pop(0)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def anthropic_message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 20, "output_tokens": 10}}


@pytest.fixture
def anthropic_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AnthropicHandler)
    server.requests, server.script = [], []
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_anthropic_thinking_blocks_with_signatures_are_kept_and_sent_back(anthropic_server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
    call = {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "x"}}
    anthropic_server.script += [anthropic_message([*SIGNED, call], "tool_use"),
                                anthropic_message([{"type": "text", "text": "hi"}], "end_turn")]
    host, port = anthropic_server.server_address[:2]
    model = LiteLLMModel("anthropic/claude-sonnet-4-5", api_base=f"http://{host}:{port}", backoff_s=0.001)
    first = model.complete(USER, [TOOL])
    assert [(b["type"], b.get("signature"), b.get("data")) for b in first.extra["thinking_blocks"]] == [
        ("thinking", SIGNED[0]["signature"], None), ("redacted_thinking", None, SIGNED[1]["data"])]
    assert model.complete(follow_up(first), [TOOL]).content == "hi"
    sent = anthropic_server.requests[1]["messages"][1]
    assert sent["role"] == "assistant"
    assert [{k: v for k, v in b.items() if k != "cache_control"} for b in sent["content"][:2]] == SIGNED
    assert sent["content"][2]["type"] == "tool_use"


def test_reasoning_is_counted_once():
    plain = {"role": "assistant", "content": "hi"}
    thought = "Let me think about the file first, carefully."
    assert count_message(plain | {"reasoning_content": thought}) == count_message(plain) + count_text(thought)
    blocks = [{"type": "thinking", "thinking": thought, "signature": "S" * 400}, {"type": "redacted_thinking",
                                                                                   "data": "D" * 400}]
    assert count_message(plain | {"thinking_blocks": blocks}) == count_message(plain) + count_text(thought)
    both = plain | {"reasoning_content": thought, "thinking_blocks": blocks}
    assert count_message(both) == count_message(plain) + count_text(thought)


# ---------------------------------------------------------------- bad replies


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("fault", ["no_choices", "cut", "empty"])
def test_bad_reply_is_retried_once_then_succeeds(fake_openai, fault, stream):
    bad = {"content": ""} if fault == "empty" else {"content": "Half a rep", fault: True}
    server = fake_openai([bad, {"content": "hi"}])
    notes: list[str] = []
    reply = backend(server, stream, on_retry=notes.append).complete(USER, [])
    assert reply.content == "hi" and len(server.requests) == 2
    assert len(notes) == 1 and "after an incomplete reply from" in notes[0] and "attempt 2 of 2" in notes[0]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("fault,words", [("no_choices", "the reply has no choices"),
                                         ("cut", "cut"),
                                         ("empty", "neither text nor tool calls")])
def test_bad_reply_twice_is_reported_after_one_retry(fake_openai, fault, words, stream):
    bad = {"content": ""} if fault == "empty" else {"content": "Half a rep", fault: True}
    server = fake_openai([bad, bad, {"content": "never"}])
    with pytest.raises(ProviderError) as info:
        backend(server, stream, retries=5).complete(USER, [])
    assert len(server.requests) == 2
    text = str(info.value)
    assert text.startswith("model openai/fake: incomplete reply (reply from http://127.0.0.1")
    if stream and fault == "no_choices":  # a stream of chunks without choices has no finish_reason either
        words = "without a finish_reason"  # (litellm 1.108 makes up finish_reason 'stop' for it: no text then)
        words = words if "finish_reason 'stop'" not in text else "neither text nor tool calls"
    assert "2 requests sent" in text and words in text


def test_cut_stream_is_not_reported_as_a_connection_failure(fake_openai):
    server = fake_openai([read_call(cut=True)] * 2)
    with pytest.raises(ProviderError) as info:
        backend(server, True).complete(USER, [TOOL])
    assert "reply stream was cut after 1 chunk" in str(info.value)
    assert "cannot connect" not in str(info.value) and "no request delivered" not in str(info.value)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_empty_reply_at_the_output_limit_is_not_retried(fake_openai, stream):
    server = fake_openai([{"content": None, "finish_reason": "length", "reasoning_content": "hmm " * 50},
                          {"content": "never"}])
    with pytest.raises(ProviderError) as info:
        backend(server, stream, max_output_tokens=64).complete(USER, [])
    assert len(server.requests) == 1
    assert "reply cut at the output limit" in str(info.value) and "max_output_tokens 64" in str(info.value)
    assert "only reasoning" in str(info.value)


TRUNCATED = '{"path": "notes.txt", "content": "line one\\nline tw'


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_truncated_tool_call_arguments_arrive_byte_for_byte(fake_openai, stream):
    server = fake_openai([{"content": None, "finish_reason": "length",
                           "tool_calls": [{"id": "w1", "name": "write_file", "arguments": TRUNCATED}]}])
    reply = backend(server, stream).complete(USER, [TOOL])
    assert reply.finish_reason == "length" and reply.tool_calls == (ToolCall("w1", "write_file", TRUNCATED),)


def test_truncated_tool_call_at_the_output_limit_becomes_an_error_result(tmp_path):
    """finish_reason "length" inside a call's arguments: not retried; an ERROR result the model corrects."""
    cut = {"content": None, "finish_reason": "length",
           "tool_calls": [{"id": "w1", "name": "write_file", "arguments": TRUNCATED}]}
    fixed = {"content": None, "tool_calls": [{"id": "w2", "name": "write_file",
                                              "arguments": {"path": "notes.txt", "content": "line one\n"}}]}
    with FakeOpenAI([cut, fixed, {"content": "written"}]) as server:
        out, result = cli_run(tmp_path, server, "cut", "--allow", "write")
        assert (out.exit_code, result["answer"]) == (0, "written"), out.stdout + out.stderr
        assert len(server.requests) == 3 and server.rejected == []
    messages = sessions_messages(tmp_path, "cut")
    call = next(m for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
    assert call["tool_calls"][0]["function"]["arguments"] == TRUNCATED  # the record is whole, byte for byte
    results = [m for m in messages if m["role"] == "tool"]
    assert results[0]["content"].startswith("ERROR: the reply was cut at the output limit")
    assert "Make the call again with shorter arguments" in results[0]["content"]
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "line one\n"


def test_cut_call_error_names_the_output_limit():
    call = ToolCall("w1", "write_file", TRUNCATED)
    text = cut_call_error(Reply(None, (call,), finish_reason="length"), call)
    assert text is not None and text.startswith("ERROR: ") and "output limit" in text and "write_file" in text
    assert cut_call_error(Reply(None, (call,), finish_reason="tool_calls"), call) is None
    whole = ToolCall("w2", "write_file", '{"path": "a"}')
    assert cut_call_error(Reply(None, (whole,), finish_reason="length"), whole) is None


def test_truncated_arguments_still_translate_for_native_providers():
    """litellm raises before sending an Anthropic request whose history holds unparsable arguments."""
    from litellm.litellm_core_utils.prompt_templates.factory import anthropic_messages_pt

    stored = {"role": "assistant", "content": None, "thinking_blocks": SIGNED[:1], "tool_calls": [
        {"id": "w1", "type": "function", "function": {"name": "write_file", "arguments": TRUNCATED}},
        {"id": "w2", "type": "function", "function": {"name": "list_dir", "arguments": ""}}]}
    results = [{"role": "tool", "tool_call_id": i, "content": "ERROR: ..."} for i in ("w1", "w2")]
    with pytest.raises(ValueError):
        anthropic_messages_pt([*USER, stored, *results], model="claude-sonnet-4-5", llm_provider="anthropic")
    wire = wire_message(stored, openai_wire=False)
    assert stored["tool_calls"][0]["function"]["arguments"] == TRUNCATED  # the stored message is untouched
    sent = anthropic_messages_pt([*USER, wire, *results], model="claude-sonnet-4-5", llm_provider="anthropic")
    blocks = sent[1]["content"]
    assert blocks[0] == SIGNED[0]
    assert [b["input"] for b in blocks[1:]] == [{INVALID_ARGUMENTS_KEY: TRUNCATED}, {}]
    assert wire_message(stored, openai_wire=True)["tool_calls"] == stored["tool_calls"]
    assert wire_message(stored, openai_wire=True)["content"] == ""
