"""The litellm backend over real litellm HTTP code, talking to a FakeOpenAI server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxagent.agent.litellm_backend import LiteLLMModel, completion_cost, model_window
from ctxagent.errors import ProviderContextError, ProviderError
from ctxagent.testing import CONTEXT_STYLES, FakeOpenAI, context_error, error
from ctxagent.tokens import count_messages, count_text

SRC = str(Path(__file__).resolve().parents[1] / "src")
USER = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
READ_TOOL = {"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                              "parameters": {"type": "object", "properties": {}}}}


def model(server: FakeOpenAI, **kwargs: object) -> LiteLLMModel:
    """A backend pointed at ``server``, with millisecond backoff so retry tests stay fast."""
    kwargs.setdefault("backoff_s", 0.01)
    return LiteLLMModel("openai/fake", api_base=server.base_url, **kwargs)  # type: ignore[arg-type]


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)


# ---------------------------------------------------------------- replies


def test_text_reply_with_usage_counted_by_the_server(fake_openai):
    server = fake_openai([{"content": "hi"}])
    reply = model(server).complete(USER, [])
    assert reply.content == "hi"
    assert reply.tool_calls == ()
    assert reply.finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == count_messages(USER, "fake")
    assert reply.usage.completion_tokens == count_text("hi")
    assert reply.usage.cost_usd is None  # openai/fake has no price
    sent = server.requests[0]
    assert sent["messages"] == USER
    assert "tools" not in sent and "max_tokens" not in sent


def test_tools_and_output_limit_are_sent_when_given(fake_openai):
    server = fake_openai([{"content": "ok"}])
    model(server, max_output_tokens=77).complete(USER, [READ_TOOL])
    assert server.requests[0]["tools"] == [READ_TOOL]
    assert server.requests[0]["max_tokens"] == 77


def test_single_tool_call_keeps_arguments_as_json_text(fake_openai):
    server = fake_openai([{"content": None, "tool_calls": [{"id": "r1", "name": "read_file",
                                                              "arguments": {"path": "a.txt"}}]}])
    reply = model(server).complete(USER, [READ_TOOL])
    assert reply.finish_reason == "tool_calls"
    (call,) = reply.tool_calls
    assert (call.id, call.name, call.arguments) == ("r1", "read_file", '{"path": "a.txt"}')
    assert reply.message()["tool_calls"][0]["function"]["arguments"] == '{"path": "a.txt"}'


def test_parallel_tool_calls_in_order_with_raw_invalid_arguments(fake_openai):
    calls = [{"id": "a", "name": "read_file", "arguments": {"path": "x"}},
             {"id": "b", "name": "grep", "arguments": '{"pattern": "unterminated'}]
    server = fake_openai([{"content": "Two at once.", "tool_calls": calls}])
    reply = model(server).complete(USER, [READ_TOOL])
    assert reply.content == "Two at once."
    assert [c.id for c in reply.tool_calls] == ["a", "b"]
    assert reply.tool_calls[1].arguments == '{"pattern": "unterminated'


def test_usage_reported_by_the_provider_is_parsed(fake_openai):
    server = fake_openai([{"content": "x", "usage": {"prompt_tokens": 1234, "completion_tokens": 56}}])
    usage = model(server).complete(USER, []).usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (1234, 56)


@pytest.mark.filterwarnings("ignore:.*ReadOnly. qualifier:UserWarning")  # pydantic, inside litellm streaming
def test_stream_from_the_fake_server_parses_in_litellm(fake_openai):
    import litellm

    model_window("gpt-4o")  # make sure the backend configured litellm first
    calls = [{"id": "a", "name": "read_file", "arguments": {"path": "x"}}, {"id": "b", "name": "ls"}]
    server = fake_openai([{"content": "Let me look.", "tool_calls": calls}])
    stream = litellm.completion(model="openai/fake", api_base=server.base_url, api_key="x", messages=USER,
                                stream=True, timeout=5, max_retries=0)
    chunks = list(stream)
    merged = litellm.stream_chunk_builder(chunks, messages=USER).choices[0]
    assert merged.message.content == "Let me look."
    assert [(c.id, c.function.arguments) for c in merged.message.tool_calls] == [("a", '{"path": "x"}'),
                                                                                   ("b", "{}")]


# ---------------------------------------------------------------- errors


def test_pair_violation_is_rejected_like_a_strict_provider(fake_openai):
    server = fake_openai([{"content": "never sent"}])
    broken = [*USER, {"role": "assistant", "content": None,
                      "tool_calls": [{"id": "c1", "type": "function",
                                      "function": {"name": "read_file", "arguments": "{}"}}]}]
    with pytest.raises(ProviderError) as info:
        model(server).complete(broken, [])
    assert type(info.value) is ProviderError
    assert info.value.http_status == 400
    assert "c1" in str(info.value) and "model openai/fake" in str(info.value)
    assert server.rejected == server.requests and len(server.requests) == 1  # not retried
    assert server.remaining == 1


@pytest.mark.parametrize("style", CONTEXT_STYLES)
def test_context_errors_in_every_wording(fake_openai, style):
    server = fake_openai([context_error(style, tokens=9000, limit=8192), {"content": "not reached"}])
    with pytest.raises(ProviderContextError) as info:
        model(server).complete(USER, [])
    expected_status = {"openai-request-too-large": 429, "llama.cpp-500": 500}.get(style, 400)
    assert info.value.http_status == expected_status
    assert len(server.requests) == 1  # never retried
    assert "context too long" in str(info.value)
    assert isinstance(info.value.__cause__, Exception)  # the litellm error, chained, not leaked


def test_context_code_with_request_too_large_message_is_a_context_error(fake_openai):
    # litellm 1.110.2 relabels this HTTP 400 as a RateLimitError with status 429.
    server = fake_openai([error(400, "Request too large", code="context_length_exceeded")])
    with pytest.raises(ProviderContextError) as info:
        model(server).complete(USER, [])
    assert info.value.http_status == 400  # what the server sent, not litellm's relabel
    assert len(server.requests) == 1


def test_server_error_is_retried_then_reported(fake_openai):
    server = fake_openai([error(500, "boom", type="server_error")] * 3)
    with pytest.raises(ProviderError) as info:
        model(server, retries=2).complete(USER, [])
    assert type(info.value) is ProviderError
    assert info.value.http_status == 500
    assert len(server.requests) == 3
    url = f"{server.base_url}/chat/completions"
    assert str(info.value) == f"model openai/fake: server error (HTTP 500 from {url}; 3 requests sent): boom"


def test_rate_limits_and_unavailable_are_retried_until_success(fake_openai):
    server = fake_openai([error(503, "overloaded", type="server_error"),
                          error(429, "Rate limit reached for requests", code="rate_limit_exceeded"),
                          {"content": "finally"}])
    assert model(server, retries=2).complete(USER, []).content == "finally"
    assert len(server.requests) == 3


def test_retry_after_header_is_honoured(fake_openai):
    limited = error(429, "Rate limit reached", headers={"retry-after": "0.3"})
    server = fake_openai([limited, {"content": "ok"}])
    started = time.monotonic()
    assert model(server, retries=1).complete(USER, []).content == "ok"
    assert time.monotonic() - started >= 0.3


def test_auth_error_is_not_retried_and_keys_are_redacted(fake_openai):
    server = fake_openai([error(401, "Incorrect API key provided: sk-proj-abcdefghijklmnop1234.",
                                code="invalid_api_key"), {"content": "not reached"}])
    with pytest.raises(ProviderError) as info:
        model(server, retries=2).complete(USER, [])
    assert info.value.http_status == 401
    assert len(server.requests) == 1
    assert "authentication failed" in str(info.value)
    assert "abcdefghijklmnop" not in str(info.value)


def test_timeout_is_retried_then_reported(fake_openai):
    server = fake_openai([{"content": "late", "delay_s": 1.0}] * 2)
    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        model(server, retries=1, timeout_s=0.2).complete(USER, [])
    assert time.monotonic() - started < 3
    assert info.value.http_status is None
    url = f"{server.base_url}/chat/completions"
    assert str(info.value) == f"model openai/fake: timed out (no reply within 0.2 s from {url}; 2 requests sent)"
    assert len(server.requests) == 2


def test_connection_refused_fails_fast(fake_openai):
    server = fake_openai([{"content": "warm"}])
    backend, server_url = model(server, retries=2), server.base_url
    backend.complete(USER, [])  # leaves a pooled keep-alive connection behind
    server.stop()
    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        backend.complete(USER, [])
    assert time.monotonic() - started < 3
    assert info.value.http_status is None
    assert f"cannot connect (to {server_url}/chat/completions; 3 attempts, no request delivered)" in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_key_for_a_real_provider_is_not_retried():
    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        LiteLLMModel("gpt-4o", retries=2, backoff_s=1.0).complete(USER, [])
    assert time.monotonic() - started < 1.0  # no backoff slept
    assert info.value.http_status is None
    assert "api_key" in str(info.value).lower()


def test_real_providers_are_unreachable_in_tests(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
    started = time.monotonic()
    with pytest.raises(ProviderError):
        LiteLLMModel("anthropic/claude-sonnet-4-5", retries=0, timeout_s=5).complete(USER, [])
    assert time.monotonic() - started < 3


# ---------------------------------------------------------------- model info


def test_model_window_and_cost():
    assert model_window("gpt-4o") == 128_000
    assert model_window("openai/whatever") is None
    assert completion_cost("gpt-4o", 1000, 100) > 0
    assert completion_cost("gpt-4o", 1000, 100, cached_tokens=1000) < completion_cost("gpt-4o", 1000, 100)
    assert completion_cost("openai/whatever", 1000, 100) is None


# ---------------------------------------------------------------- process hygiene


def test_model_modules_do_not_import_litellm():
    code = ("import ctxagent.agent.model, ctxagent.agent.scripted, ctxagent.agent.litellm_backend, "
            "ctxagent.testing, sys; assert 'litellm' not in sys.modules, 'litellm imported'")
    result = run_python(code)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def fresh_process(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One new interpreter that imports litellm through ctxagent and talks to a FakeOpenAI (an import of
    litellm costs ~4 s of CPU, so the two tests below share it)."""
    tiktoken_dir = str(tmp_path_factory.mktemp("tiktoken"))
    code = f"""
import gc, os, sys
os.environ["TIKTOKEN_CACHE_DIR"] = {tiktoken_dir!r}
from ctxagent.agent import litellm_backend
from ctxagent.errors import ProviderError
from ctxagent.testing import FakeOpenAI, error
before = gc.get_freeze_count()
litellm_backend._litellm()
print("collector:", gc.isenabled(), before, gc.get_freeze_count() > 100_000, file=sys.stderr)
with FakeOpenAI([error(500, "boom"), error(500, "boom"), error(400, "bad request")]) as server:
    for _ in range(2):
        try:
            litellm_backend.LiteLLMModel("openai/fake", api_base=server.base_url, retries=1, backoff_s=0.01).complete(
                [{{"role": "user", "content": "hi"}}], [])
        except ProviderError as err:
            print("mapped:", err, file=sys.stderr)
try:
    litellm_backend.LiteLLMModel("gpt-4o", retries=0).complete([{{"role": "user", "content": "hi"}}], [])
except ProviderError as err:
    print("mapped:", err, file=sys.stderr)
assert os.environ["TIKTOKEN_CACHE_DIR"] == {tiktoken_dir!r}, os.environ["TIKTOKEN_CACHE_DIR"]
"""
    return run_python(code)


def test_litellm_prints_nothing_on_stdout_and_keeps_tiktoken_dir(fresh_process):
    result = fresh_process
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("mapped:") == 3, result.stderr


def test_fake_server_reports_exhaustion_clearly(fake_openai):
    server = fake_openai([])
    with pytest.raises(ProviderError) as info:
        model(server, retries=0).complete(USER, [])
    assert "script exhausted" in str(info.value)
    assert json.loads(json.dumps(server.requests)) == server.requests


def test_litellm_is_imported_with_the_collector_paused_then_frozen(fresh_process):
    """Issue 16: a plain import spends ~1 s in collections that free nothing; ctxagent pauses the
    collector for it and freezes what it made. In a fresh process: the collector is on again after,
    and litellm's objects are in the permanent generation."""
    result = fresh_process
    line = next(line for line in result.stderr.splitlines() if line.startswith("collector:"))
    assert line.split()[1:] == ["True", "0", "True"], result.stderr


def test_pydantics_readonly_typeddict_warnings_about_litellms_types_are_silenced_in_a_model_call():
    """Regression: run with other files on two workers (`pytest -n 2`), seven litellm tests failed on
    "Items 'device_code', 'user_code', 'verification_uri' on TypedDict class '_DeviceCode' are using the
    `ReadOnly` qualifier" (a module litellm imports on its first call), which a run would print as a
    warning: only the singular wording was silenced. Both are; other UserWarnings are not."""
    import warnings

    from ctxagent.agent.litellm_backend import _no_typeddict_warning

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with _no_typeddict_warning():
            warnings.warn("Item 'index' on TypedDict class 'ChatCompletionThinkingBlock' is using the `ReadOnly` "
                          "qualifier. Pydantic will not protect items from any mutation.", UserWarning, stacklevel=1)
            warnings.warn("Items 'device_code', 'user_code', 'verification_uri' on TypedDict class '_DeviceCode' "
                          "are using the `ReadOnly` qualifier. Pydantic will not protect items from any mutation.",
                          UserWarning, stacklevel=1)
            with pytest.raises(UserWarning):
                warnings.warn("something else", UserWarning, stacklevel=1)
