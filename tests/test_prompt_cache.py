"""Prompt caching: cached tokens in usage, cost as providers bill it, breakpoints where providers need them.

OpenAI-style caching runs over real litellm HTTP against FakeOpenAI (which models OpenAI's automatic
prefix cache); Anthropic's wire format against a tiny Anthropic-shaped server on 127.0.0.1.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest

from ctxagent.agent.litellm_backend import (
    MAX_CACHE_BREAKPOINTS,
    LiteLLMModel,
    _litellm,
    _usage,
    completion_cost,
)
from ctxagent.agent.model import make_model
from ctxagent.testing import CACHE_MIN_TOKENS, CACHE_STEP_TOKENS, FakeOpenAI
from ctxagent.tokens import count_message, count_tools

RULES = "\n".join(f"Rule {i}: never rewrite an earlier message of the conversation." for i in range(120))
SYSTEM = {"role": "system", "content": RULES}  # ~1,560 tokens: over OpenAI's 1,024-token minimum
FILES = {"role": "user", "content": "Summarise " + " ".join(f"file{i}.py" for i in range(200))}  # ~600 tokens
SHORT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
READ_TOOL = {"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                              "parameters": {"type": "object", "properties": {}}}}
ANTHROPIC = ["anthropic/claude-sonnet-4-5", "claude-sonnet-4-5", "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0",
             "bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0", "vertex_ai/claude-sonnet-4-5"]
AUTOMATIC = ["gpt-4o", "azure/gpt-4o", "deepseek/deepseek-chat", "hosted_vllm/qwen3", "openai/fake",
             "gemini/gemini-2.5-flash", "vertex_ai/gemini-2.5-pro"]


def model(server: FakeOpenAI, name: str = "openai/fake") -> LiteLLMModel:
    return LiteLLMModel(name, api_base=server.base_url, retries=0, timeout_s=5)


def cached_size(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    """What FakeOpenAI reports for a cached prefix of ``messages`` and ``tools`` (tokens)."""
    tokens = count_tools(tools, "fake") + sum(count_message(m, "fake") for m in messages)
    return 0 if tokens < CACHE_MIN_TOKENS else tokens // CACHE_STEP_TOKENS * CACHE_STEP_TOKENS


# ---------------------------------------------------------------- the fake's automatic prefix cache


def test_append_only_request_reads_the_prefix_from_the_cache(fake_openai):
    server = fake_openai([{"content": "Reading."}, {"content": "Done."}])
    backend = model(server)
    first = [SYSTEM, FILES]
    one = backend.complete(first, [READ_TOOL])
    second = [*first, one.message(), {"role": "user", "content": "And now the tests."}]
    two = backend.complete(second, [READ_TOOL])
    expected = cached_size(first, [READ_TOOL])
    assert expected >= CACHE_MIN_TOKENS and expected % CACHE_STEP_TOKENS == 0
    assert server.cached == [0, expected]
    assert (one.usage.cached_tokens, two.usage.cached_tokens) == (0, expected)
    assert two.usage.cache_creation_tokens == 0
    assert two.usage.cached_tokens < two.usage.prompt_tokens


def test_changed_early_message_reports_fewer_cached_tokens(fake_openai):
    server = fake_openai([{"content": "a"}, {"content": "b"}, {"content": "c"}])
    backend = model(server)
    backend.complete([SYSTEM, FILES], [READ_TOOL])
    tail = [{"role": "assistant", "content": "a"}, {"role": "user", "content": "More."}]
    appended = backend.complete([SYSTEM, FILES, *tail], [READ_TOOL]).usage.cached_tokens
    rewritten = {"role": "user", "content": FILES["content"] + " (trimmed)"}
    changed = backend.complete([SYSTEM, rewritten, *tail], [READ_TOOL]).usage.cached_tokens
    assert changed == cached_size([SYSTEM], [READ_TOOL]) > 0  # only the system prompt still matches
    assert changed < appended == cached_size([SYSTEM, FILES], [READ_TOOL])


def test_prefix_under_the_minimum_or_with_other_tools_is_not_cached(fake_openai):
    server = fake_openai([{"content": "x"}] * 4)
    backend = model(server)
    backend.complete(SHORT, [])
    backend.complete([*SHORT, {"role": "assistant", "content": "x"}, {"role": "user", "content": "Again."}], [])
    backend.complete([SYSTEM, FILES], [])
    backend.complete([SYSTEM, FILES], [READ_TOOL])  # the tools come first in the prefix: no match
    assert server.cached == [0, 0, 0, 0]


def test_scripted_usage_overrides_the_cache_report(fake_openai):
    usage = {"prompt_tokens": 5000, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 4096}}
    server = fake_openai([{"content": "x", "usage": usage}, {"content": "y", "usage": {"prompt_tokens": 900}}])
    backend = model(server)
    assert backend.complete(SHORT, []).usage.cached_tokens == 4096
    assert backend.complete(SHORT, []).usage.cached_tokens == 0  # the whole prompt is under the minimum
    assert server.cached == [4096, 0]


@pytest.mark.filterwarnings("ignore:.*ReadOnly. qualifier:UserWarning")  # pydantic, inside litellm streaming
def test_streamed_usage_chunk_reports_cached_tokens(fake_openai):
    lib = _litellm()
    server = fake_openai([{"content": "one"}, {"content": "two"}])
    request = {"model": "openai/fake", "api_base": server.base_url, "api_key": "x", "timeout": 5, "max_retries": 0,
               "stream": True, "stream_options": {"include_usage": True}}
    list(lib.completion(messages=[SYSTEM, FILES], **request))
    messages = [SYSTEM, FILES, {"role": "assistant", "content": "one"}, {"role": "user", "content": "More."}]
    chunks = list(lib.completion(messages=messages, **request))
    usage = lib.stream_chunk_builder(chunks, messages=messages).usage
    assert usage.prompt_tokens_details.cached_tokens == server.cached[1] == cached_size([SYSTEM, FILES], []) > 0


# ---------------------------------------------------------------- usage fields and cost


def test_cached_tokens_lower_the_cost(fake_openai):
    plain = {"prompt_tokens": 5000, "completion_tokens": 10}
    cached = plain | {"prompt_tokens_details": {"cached_tokens": 4096}}
    server = fake_openai([{"content": "x", "usage": plain}, {"content": "x", "usage": cached}])
    backend = model(server, "openai/gpt-4o")
    full, reduced = backend.complete(SHORT, []).usage, backend.complete(SHORT, []).usage
    assert reduced.cached_tokens == 4096 and full.cached_tokens == 0
    assert 0 < reduced.cost_usd < full.cost_usd
    assert full.cost_usd == pytest.approx(completion_cost("gpt-4o", 5000, 10))
    assert reduced.cost_usd == pytest.approx(completion_cost("gpt-4o", 5000, 10, cached_tokens=4096))
    info = _litellm().get_model_info("gpt-4o")
    saved = 4096 * (info["input_cost_per_token"] - info["cache_read_input_token_cost"])
    assert full.cost_usd - reduced.cost_usd == pytest.approx(saved)


def test_anthropic_usage_fields_map_to_usage():
    from litellm import ModelResponse
    from litellm.types.utils import Usage as LiteLLMUsage

    def response(**cache: int) -> Any:
        usage = LiteLLMUsage(prompt_tokens=10_300, completion_tokens=100, total_tokens=10_400, **cache)
        return ModelResponse(model="claude-sonnet-4-5", usage=usage, choices=[
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}])

    lib = _litellm()
    usage = _usage(response(cache_read_input_tokens=8000, cache_creation_input_tokens=300), lib)
    plain = _usage(response(), lib)
    assert (usage.prompt_tokens, usage.completion_tokens) == (10_300, 100)
    assert (usage.cached_tokens, usage.cache_creation_tokens) == (8000, 300)
    assert (plain.cached_tokens, plain.cache_creation_tokens) == (0, 0)
    expected = completion_cost("claude-sonnet-4-5", 10_300, 100, cached_tokens=8000, cache_creation_tokens=300)
    assert usage.cost_usd == pytest.approx(expected)
    assert usage.cost_usd < plain.cost_usd


@pytest.mark.parametrize(("usage", "expected"), [
    ({"prompt_tokens": 100, "completion_tokens": 5, "cache_read_input_tokens": 64,
      "cache_creation_input_tokens": None, "prompt_tokens_details": None}, (100, 5, 64, 0)),
    ({"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": None, "cache_write_tokens": 32}},
     (100, 0, 0, 32)),
    (SimpleNamespace(prompt_tokens=7, completion_tokens=None, prompt_tokens_details=SimpleNamespace(cached_tokens=3)),
     (7, 0, 3, 0)),
    ({}, (0, 0, 0, 0)),
    ({"prompt_tokens": float("inf"), "completion_tokens": True, "cache_read_input_tokens": -5}, (0, 0, 0, 0)),
])
def test_usage_is_read_from_dicts_objects_and_missing_fields(usage, expected):
    got = _usage(SimpleNamespace(usage=usage), _litellm())
    assert (got.prompt_tokens, got.completion_tokens, got.cached_tokens, got.cache_creation_tokens) == expected
    assert got.cost_usd is None  # not a litellm response: no price
    assert _usage(SimpleNamespace(usage=None), _litellm()) is None


def test_completion_cost_prices_cache_reads_and_writes():
    info = _litellm().get_model_info("claude-sonnet-4-5")
    fresh, read, write, out = (info[k] for k in ("input_cost_per_token", "cache_read_input_token_cost",
                                                  "cache_creation_input_token_cost", "output_cost_per_token"))
    cost = completion_cost("claude-sonnet-4-5", 10_000, 100, cached_tokens=8000, cache_creation_tokens=1000)
    assert cost == pytest.approx(1000 * fresh + 8000 * read + 1000 * write + 100 * out)
    assert cost < completion_cost("claude-sonnet-4-5", 10_000, 100)
    assert completion_cost("openai/whatever", 1000, 100, cached_tokens=500) is None


def test_completion_cost_reads_at_a_tenth_of_the_input_price_without_a_cache_price():
    info = _litellm().get_model_info("gpt-4-turbo")
    assert info.get("cache_read_input_token_cost") is None
    fresh = info["input_cost_per_token"]
    cost = completion_cost("gpt-4-turbo", 10_000, 0, cached_tokens=8000)
    assert cost == pytest.approx(2000 * fresh + 8000 * fresh * 0.1)


# ---------------------------------------------------------------- breakpoints


@pytest.mark.parametrize("spec", ANTHROPIC)
def test_breakpoints_on_system_and_last_message_for_claude(spec):
    request = LiteLLMModel(spec)._request(SHORT, [READ_TOOL])
    assert request["cache_control_injection_points"] == [{"location": "message", "index": 1},
                                                         {"location": "message", "index": 0}]
    assert request["messages"] == SHORT and "cache_control" not in json.dumps(SHORT)


@pytest.mark.parametrize("spec", AUTOMATIC)
def test_no_breakpoints_for_providers_that_cache_by_themselves(spec):
    request = LiteLLMModel(spec, api_base="http://127.0.0.1:1/v1")._request(SHORT, [READ_TOOL])
    assert "cache_control_injection_points" not in request
    assert "cache_control" not in json.dumps(request)


def test_prompt_cache_off_never_adds_breakpoints():
    backend = make_model("anthropic/claude-sonnet-4-5", prompt_cache="off")
    assert backend.prompt_cache == "off"
    assert "cache_control_injection_points" not in backend._request(SHORT, [])
    with pytest.raises(ValueError, match="prompt_cache"):
        make_model("anthropic/claude-sonnet-4-5", prompt_cache="always")


def test_at_most_four_breakpoints_last_message_first():
    systems = [{"role": "system", "content": f"part {i}"} for i in range(6)]
    messages = [systems[0], {"role": "user", "content": "hi"}, *systems[1:], {"role": "user", "content": "go"}]
    points = LiteLLMModel("anthropic/claude-sonnet-4-5")._request(messages, [])["cache_control_injection_points"]
    assert len(points) == MAX_CACHE_BREAKPOINTS
    assert [p["index"] for p in points] == [len(messages) - 1, 0, 2, 3]
    assert LiteLLMModel("claude-sonnet-4-5")._request([], []).get("cache_control_injection_points") is None


# ---------------------------------------------------------------- Anthropic's wire format, locally


class _AnthropicHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    bodies: list[dict[str, Any]]

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        self.bodies.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0))))
        usage = {"input_tokens": 12, "output_tokens": 3, "cache_read_input_tokens": 2000,
                 "cache_creation_input_tokens": 300}
        body = json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                           "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                           "usage": usage}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def fake_anthropic(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], tuple[str, list[dict[str, Any]]]]]:
    """Starts an Anthropic-shaped /v1/messages server on 127.0.0.1: returns (api_base, request bodies)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
    bodies: list[dict[str, Any]] = []
    handler = type("Handler", (_AnthropicHandler,), {"bodies": bodies})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield lambda: (f"http://127.0.0.1:{server.server_address[1]}", bodies)
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_anthropic_request_carries_breakpoints_and_reports_cache_usage(fake_anthropic):
    api_base, bodies = fake_anthropic()
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    messages = [*SHORT, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "file text"}]
    before = copy.deepcopy(messages)
    reply = LiteLLMModel("anthropic/claude-sonnet-4-5", api_base=api_base, retries=0, timeout_s=5).complete(
        messages, [READ_TOOL])
    assert messages == before  # litellm marked its own copy
    (body,) = bodies
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    marked = [i for i, m in enumerate(body["messages"]) if "cache_control" in json.dumps(m)]
    assert marked == [len(body["messages"]) - 1]  # the tool result, the end of the prefix
    assert json.dumps(body).count("cache_control") == 2
    usage = reply.usage
    assert (usage.prompt_tokens, usage.cached_tokens, usage.cache_creation_tokens) == (2312, 2000, 300)
    assert usage.cost_usd == pytest.approx(
        completion_cost("claude-sonnet-4-5", 2312, 3, cached_tokens=2000, cache_creation_tokens=300))


def test_anthropic_request_without_breakpoints_when_off(fake_anthropic):
    api_base, bodies = fake_anthropic()
    LiteLLMModel("anthropic/claude-sonnet-4-5", api_base=api_base, retries=0, timeout_s=5,
                 prompt_cache="off").complete(SHORT, [])
    assert "cache_control" not in json.dumps(bodies[0])
