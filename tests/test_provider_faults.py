"""Provider fault matrix: the local fake server plays each fault (status x wording x stream or not).

For every fault the tests check the outcome (exception class, or exit code through the CLI), the
number of requests the server received, and that no payload is sent twice after an overflow. The
wordings are the servers' own (see ``ctxagent.agent.provider_errors.RULES`` for their sources).
docs/usage.md "Provider failures" summarises the outcomes.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from typing import Any

import pytest

from clihelp import run_cli
from ctxagent.agent.litellm_backend import LiteLLMModel
from ctxagent.agent.provider_errors import RULES, Evidence, classify, match, public_url, retry_after_s
from ctxagent.errors import ProviderContextError, ProviderError, ProviderQuotaError
from ctxagent.profile import parse_profile
from ctxagent.testing import FakeOpenAI, Item, error

USER = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
TOOL = {"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                         "parameters": {"type": "object", "properties": {}}}}
MODES = ("plain", "stream", "mid_stream")  # non-streaming; streaming with an HTTP error; error event in a stream

# (source, natural HTTP status, error fields): the servers' own wordings of "the context is too long"
CONTEXT_FAULTS: list[tuple[str, int, dict[str, Any]]] = [
    ("openai", 400, {"message": "This model's maximum context length is 128000 tokens. However, your messages "
                     "resulted in 130000 tokens. Please reduce the length of the messages.",
                     "code": "context_length_exceeded"}),
    ("azure", 400, {"message": "This model's maximum context length is 8192 tokens, however you requested 9000 "
                    "tokens (9000 in your prompt; 0 for the completion). Please reduce your prompt; or completion "
                    "length.", "code": "context_length_exceeded"}),
    ("anthropic", 400, {"message": "prompt is too long: 210000 tokens > 200000 maximum"}),
    ("anthropic-max-tokens", 400, {"message": "input length and `max_tokens` exceed context limit: 197000 + 8192 > "
                                   "200000, decrease input length or `max_tokens` and try again"}),
    ("anthropic-413", 413, {"message": "Request exceeds the maximum allowed number of bytes.",
                            "type": "request_too_large"}),
    ("bedrock", 400, {"message": "Input is too long for requested model.", "type": "ValidationException"}),
    ("bedrock-tokens", 400, {"message": "Too many input tokens. Max input tokens: 8192, request input token "
                             "count: 9000", "type": "ValidationException"}),
    ("gemini", 400, {"message": "x", "body": {"error": {
        "code": 400, "status": "INVALID_ARGUMENT",
        "message": "The input token count (1048577) exceeds the maximum number of tokens allowed (1048576)."}}}),
    ("mistral", 400, {"message": "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 "
                      "maximum context length"}),
    ("vllm", 400, {"message": "This model's maximum context length is 4096 tokens. However, you requested 5000 "
                   "tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the "
                   "messages or completion.", "type": "BadRequestError", "code": 400}),
    ("vllm-decoder", 400, {"message": "The decoder prompt (length 5000) is longer than the maximum model length of "
                           "4096. Make sure that `max_model_len` is no smaller than the number of text tokens."}),
    ("sglang", 400, {"message": "The input (5000 tokens) is longer than the model's context length (4096 tokens)."}),
    ("tgi", 422, {"message": "x", "body": {"error": "Input validation error: `inputs` tokens + `max_new_tokens` "
                                           "must be <= 4096. Given: 4000 `inputs` tokens and 1000 `max_new_tokens`",
                                           "error_type": "validation"}}),
    ("llama.cpp", 400, {"message": "the request exceeds the available context size, try increasing it",
                        "type": "exceed_context_size_error"}),
    ("llama.cpp-old", 500, {"message": "Context size has been exceeded.", "type": "server_error"}),
    ("llama.cpp-text", 500, {"message": "x", "body": "Context size has been exceeded."}),
    ("ollama", 400, {"message": "the input length exceeds the context length"}),
    ("ollama-new", 400, {"message": "prompt too long; exceeded max context length by 1000 tokens"}),
    ("lm-studio", 400, {"message": "Trying to keep the first 5000 tokens when context the overflows. However, the "
                        "model is loaded with context length of only 4096 tokens, which is not enough."}),
    ("lm-studio-keep", 400, {"message": "The number of tokens to keep from the initial prompt is greater than the "
                             "context length."}),
    ("openai-tpm", 429, {"message": "Request too large for gpt-4o in organization org-x on tokens per min (TPM): "
                         "Limit 30000, Requested 50000. The input or output tokens must be reduced in order to run "
                         "successfully.", "code": "rate_limit_exceeded", "type": "tokens"}),
    ("xai", 400, {"message": "This model's maximum prompt length is 131072 but the request contains 140000 tokens."}),
    ("openrouter", 400, {"message": "This endpoint's maximum context length is 131072 tokens. However, you "
                         "requested about 140000 tokens. Please reduce the length of either one."}),
    ("cerebras", 400, {"message": "Please reduce the length of the messages or completion. Current length is 9000 "
                       "while limit is 8192", "code": "context_length_exceeded"}),
]
# (source, status, error fields): out of quota, credit or budget: never retried
QUOTA_FAULTS: list[tuple[str, int, dict[str, Any]]] = [
    ("openai-insufficient_quota", 429, {"message": "You exceeded your current quota, please check your plan and "
                                        "billing details.", "code": "insufficient_quota",
                                        "type": "insufficient_quota"}),
    ("openai-billing-hard-limit", 400, {"message": "Billing hard limit has been reached",
                                        "code": "billing_hard_limit_reached"}),
    ("anthropic-credit", 400, {"message": "Your credit balance is too low to access the Anthropic API. Please go to "
                               "Plans & Billing to upgrade or purchase credits."}),
    ("gemini-quota", 429, {"message": "x", "body": {"error": {
        "code": 429, "status": "RESOURCE_EXHAUSTED",
        "message": "You exceeded your current quota, please check your plan and billing details."}}}),
    ("deepseek-402", 402, {"message": "Insufficient Balance", "type": "unknown_error"}),
    ("openrouter-402", 402, {"message": "Insufficient credits. Add more using https://openrouter.ai/settings/credits"}),
    ("azure-403", 403, {"message": "Out of call volume quota for OpenAI API. Quota will be replenished in 2.07 days."}),
]
# (source, status, error fields, headers): retried (rate limits, overload, 5xx, per-minute quotas)
RETRIED_FAULTS: list[tuple[str, int, dict[str, Any], dict[str, str]]] = [
    ("openai-rate-limit", 429, {"message": "Rate limit reached for gpt-4o on requests per min (RPM): Limit 500, "
                                "Used 500, Requested 1.", "code": "rate_limit_exceeded", "type": "requests"}, {}),
    ("plain-429", 429, {"message": "Too Many Requests"}, {"retry-after": "0"}),
    ("gemini-per-minute", 429, {"message": "x", "body": {"error": {
        "code": 429, "status": "RESOURCE_EXHAUSTED",
        "message": "You exceeded your current quota, please check your plan and billing details. Please retry "
                   "in 0.01s.", "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                             "retryDelay": "0s"}]}}}, {}),
    ("vertex-per-minute", 429, {"message": "Quota exceeded for aiplatform.googleapis.com/generate_content_requests_"
                                "per_minute_per_project_per_base_model with base model: gemini-pro."}, {}),
    ("vertex-resource-exhausted", 429, {"message": "Resource exhausted. Please try again later."}, {}),
    ("overloaded-503", 503, {"message": "The server is overloaded", "type": "server_error"}, {}),
    ("anthropic-529", 529, {"message": "Overloaded", "type": "overloaded_error"}, {}),
    ("server-500", 500, {"message": "boom", "type": "server_error"}, {}),
]
# (source, status, error fields): other client errors: one request, not retried
REJECTED_FAULTS: list[tuple[str, int, dict[str, Any]]] = [
    ("bad-request", 400, {"message": "Invalid value for 'temperature'."}),
    ("unauthorized", 401, {"message": "Incorrect API key provided.", "code": "invalid_api_key"}),
    ("not-found", 404, {"message": "The model `fake` does not exist.", "code": "model_not_found"}),
    ("unprocessable", 422, {"message": "Input validation error: `temperature` must be strictly positive"}),
]


@pytest.fixture(scope="module")
def shared_server():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def fake_openai(shared_server):
    """One server for the whole matrix, reset with each test's script (see ``FakeOpenAI.reset``)."""

    def start(items=()):
        shared_server.reset(*items)
        return shared_server

    return start


def fault(status: int, fields: dict[str, Any], mode: str = "plain", headers: dict[str, str] | None = None) -> Item:
    """A script item for one fault, played as ``mode`` asks (see :data:`MODES`)."""
    return error(status, fields["message"], code=fields.get("code"), type=fields.get("type", "invalid_request_error"),
                 headers=headers, body=fields.get("body"), mid_stream=mode == "mid_stream")


def backend(server: FakeOpenAI, mode: str = "plain", **kwargs: Any) -> LiteLLMModel:
    kwargs.setdefault("backoff_s", 0.001)
    return LiteLLMModel("openai/fake", api_base=server.base_url, stream=mode != "plain", **kwargs)


def payloads(server: FakeOpenAI) -> list[str]:
    return [json.dumps(r["messages"], sort_keys=True) for r in server.requests]


def cases(faults: list[tuple[Any, ...]], statuses: bool = True) -> list[Any]:
    """Each fault at its own status in every mode, and at HTTP 500 (plain and stream) when ``statuses``."""
    out = [pytest.param(f[1], f[2], mode, id=f"{f[0]}-{f[1]}-{mode}") for f in faults for mode in MODES]
    if statuses:
        out += [pytest.param(500, f[2], mode, id=f"{f[0]}-500-{mode}") for f in faults if f[1] != 500
                for mode in MODES[:2]]
    return out


# ---------------------------------------------------------------- the matrix


@pytest.mark.filterwarnings("ignore:.*ReadOnly. qualifier:UserWarning")  # pydantic, inside litellm streaming
@pytest.mark.parametrize(("status", "fields", "mode"), cases(CONTEXT_FAULTS))
def test_context_overflow_in_every_wording_status_and_mode(fake_openai, status, fields, mode):
    server = fake_openai([fault(status, fields, mode), {"content": "not reached"}])
    with pytest.raises(ProviderContextError) as info:
        backend(server, mode, retries=2).complete(USER, [])
    assert len(server.requests) == 1  # never resent: the same payload would fail again
    assert "context too long" in str(info.value) and server.base_url in str(info.value)
    assert info.value.http_status == (None if mode == "mid_stream" else status)
    assert "1 request sent" in str(info.value)


@pytest.mark.filterwarnings("ignore:.*ReadOnly. qualifier:UserWarning")
@pytest.mark.parametrize(("status", "fields", "mode"), cases(QUOTA_FAULTS, statuses=False))
def test_quota_and_billing_are_not_retried(fake_openai, status, fields, mode):
    hard = "code" in fields  # insufficient_quota and friends: not retried even with a Retry-After
    server = fake_openai([fault(status, fields, mode, {"retry-after": "0"} if hard else None),
                          {"content": "not reached"}])
    with pytest.raises(ProviderQuotaError) as info:
        backend(server, mode, retries=2).complete(USER, [])
    assert len(server.requests) == 1
    assert info.value.exit_code == 4
    assert "quota or billing" in str(info.value) and "rate limited" not in str(info.value)


@pytest.mark.filterwarnings("ignore:.*ReadOnly. qualifier:UserWarning")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("source", "status", "fields", "headers"), RETRIED_FAULTS, ids=[f[0] for f in RETRIED_FAULTS])
def test_transient_faults_are_retried_then_reported(fake_openai, source, status, fields, headers, mode):
    server = fake_openai([fault(status, fields, mode, headers)] * 3 + [{"content": "not reached"}])
    notes: list[str] = []
    with pytest.raises(ProviderError) as info:
        backend(server, mode, retries=2, on_retry=notes.append).complete(USER, [])
    assert type(info.value) is ProviderError
    assert len(server.requests) == 3 and "3 requests sent" in str(info.value)
    assert len(notes) == 2 and notes[1].endswith("attempt 3 of 3")
    assert server.base_url in notes[0]


@pytest.mark.parametrize(("source", "status", "fields", "headers"), RETRIED_FAULTS, ids=[f[0] for f in RETRIED_FAULTS])
def test_transient_fault_then_success(fake_openai, source, status, fields, headers):
    server = fake_openai([fault(status, fields, headers=headers), {"content": "finally"}])
    assert backend(server, retries=2, on_retry=lambda _: None).complete(USER, []).content == "finally"
    assert len(server.requests) == 2


@pytest.mark.parametrize("mode", MODES[:2])
@pytest.mark.parametrize(("source", "status", "fields"), REJECTED_FAULTS, ids=[f[0] for f in REJECTED_FAULTS])
def test_client_errors_are_not_retried(fake_openai, source, status, fields, mode):
    server = fake_openai([fault(status, fields, mode), {"content": "not reached"}])
    with pytest.raises(ProviderError) as info:
        backend(server, mode, retries=2).complete(USER, [])
    assert type(info.value) is ProviderError and info.value.http_status == status
    assert len(server.requests) == 1
    assert f"HTTP {status} from {server.base_url}/chat/completions; 1 request sent" in str(info.value)


# ---------------------------------------------------------------- regressions named after the failures


def test_context_size_exceeded_500_is_overflow_not_resent(fake_openai):
    server = fake_openai([error(500, "Context size has been exceeded.", type="server_error")] * 3)
    with pytest.raises(ProviderContextError) as info:
        backend(server, retries=2).complete(USER, [])
    assert len(server.requests) == 1 and info.value.http_status == 500


def test_context_size_exceeded_400_is_overflow(fake_openai):
    server = fake_openai([error(400, "Context size has been exceeded.")])
    with pytest.raises(ProviderContextError):
        backend(server, retries=2).complete(USER, [])
    assert len(server.requests) == 1


def test_insufficient_quota_429_not_retried(fake_openai):
    fields = QUOTA_FAULTS[0][2]
    server = fake_openai([fault(429, fields, headers={"retry-after": "1"})] * 3)
    with pytest.raises(ProviderQuotaError) as info:
        backend(server, retries=2).complete(USER, [])
    assert len(server.requests) == 1
    assert str(info.value).startswith("model openai/fake: quota or billing limit reached (not retried;")
    assert "rate limited" not in str(info.value)


def test_plain_429_is_retried(fake_openai):
    server = fake_openai([error(429, "Rate limit reached for requests", code="rate_limit_exceeded"),
                          {"content": "ok"}])
    assert backend(server, retries=1, on_retry=lambda _: None).complete(USER, []).content == "ok"
    assert len(server.requests) == 2


def test_retry_after_delta_seconds_honoured_and_shown(fake_openai):
    server = fake_openai([error(429, "Rate limit reached", headers={"retry-after": "1"}), {"content": "ok"}])
    notes: list[str] = []
    started = time.monotonic()
    assert backend(server, retries=2, on_retry=notes.append).complete(USER, []).content == "ok"
    assert time.monotonic() - started >= 1.0
    assert notes == [f"retrying in 1.0 s after HTTP 429 from {server.base_url}/chat/completions: attempt 2 of 3"]


def test_retry_after_ms_honoured(fake_openai):
    server = fake_openai([error(429, "Rate limit reached", headers={"retry-after-ms": "300", "retry-after": "9"}),
                          {"content": "ok"}])
    started = time.monotonic()
    assert backend(server, retries=1, on_retry=lambda _: None).complete(USER, []).content == "ok"
    assert 0.3 <= time.monotonic() - started < 5  # retry-after-ms wins over retry-after


def test_retry_after_http_date_honoured_and_bounded(fake_openai):
    soon = email.utils.formatdate(time.time() + 2, usegmt=True)
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    server = fake_openai([error(503, "busy", headers={"retry-after": soon}), {"content": "ok"},
                          error(429, "Rate limit reached", headers={"retry-after": later}), {"content": "not reached"}])
    notes: list[str] = []
    started = time.monotonic()
    model = backend(server, retries=2, on_retry=notes.append, max_retry_wait_s=60)
    assert model.complete(USER, []).content == "ok"
    assert time.monotonic() - started >= 0.9  # the date has one-second resolution
    assert len(notes) == 1 and "after HTTP 503" in notes[0]
    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        model.complete(USER, [])
    assert time.monotonic() - started < 2  # not waited: over max_retry_wait_s
    assert len(server.requests) == 3
    assert "more than max_retry_wait_s (60 s)" in str(info.value) and "asks to wait 3" in str(info.value)


def test_backoff_itself_is_bounded_by_max_retry_wait(fake_openai):
    server = fake_openai([error(500, "boom", type="server_error"), {"content": "ok"}])
    started = time.monotonic()
    assert backend(server, retries=1, backoff_s=30, max_retry_wait_s=0.2,
                   on_retry=lambda _: None).complete(USER, []).content == "ok"
    assert time.monotonic() - started < 3


def test_timeouts_are_announced_and_reported_with_url(fake_openai):
    server = fake_openai([{"content": "late", "delay_s": 1.0}] * 2)
    notes: list[str] = []
    with pytest.raises(ProviderError) as info:
        backend(server, retries=1, timeout_s=0.2, on_retry=notes.append).complete(USER, [])
    url = f"{server.base_url}/chat/completions"
    assert notes == [f"retrying in 0.0 s after a timeout (0.2 s) from {url}: attempt 2 of 2"]
    assert f"no reply within 0.2 s from {url}; 2 requests sent" in str(info.value)


def test_misspelled_model_says_no_request_sent():
    with pytest.raises(ProviderError) as info:
        LiteLLMModel("gpt-4oo", retries=2).complete(USER, [])
    assert info.value.http_status is None
    assert "no request sent" in str(info.value) and "HTTP" not in str(info.value)


def test_missing_key_is_not_reported_as_http_401(monkeypatch):
    with pytest.raises(ProviderError) as info:
        LiteLLMModel("anthropic/claude-sonnet-4-5", retries=2).complete(USER, [])
    assert info.value.http_status is None
    assert "no request sent" in str(info.value) and "HTTP 401" not in str(info.value)


def test_tool_choice_auto_and_content_key_sent_by_default(fake_openai):
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    history = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "c1", "content": "text"}]
    server = fake_openai([{"content": "a"}, {"content": "b"}])
    backend(server).complete(history, [TOOL])
    sent = server.requests[0]
    assert sent["tool_choice"] == "auto"
    assert sent["messages"][2] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert history[2]["content"] is None  # the caller's messages are left alone
    backend(server, send_tool_choice=False).complete(history, [TOOL])
    assert "tool_choice" not in server.requests[1]


def test_profile_keys_for_retry_wait_and_tool_choice():
    profile = parse_profile("max_retry_wait_s: 5\nsend_tool_choice: false\n", source="p.yaml")
    assert (profile.max_retry_wait_s, profile.send_tool_choice) == (5, False)
    default = parse_profile("", source="d.yaml")
    assert (default.max_retry_wait_s, default.send_tool_choice) == (60, True)


# ---------------------------------------------------------------- the table, without a server


# more wordings, from litellm's mapping and the providers' documentation: (kind, text)
MORE_WORDINGS = [
    ("context", "This model's maximum context limit is 8192 tokens"),
    ("context", "Context window exceeded"),
    ("context", "400 Request payload size exceeds the limit: 20971520 bytes."),
    ("context", "prompt tokens (9000) exceed model maximum (8192)"),
    ("context", "The maximum input length is 8192 tokens"),
    ("context", "Your input tokens exceed the configured limit of 272000 tokens"),
    ("context", "Input too long: 9000 input tokens, limit is 8192"),
    ("context", "Invalid 'messages[1].content': string too long. Expected a string with maximum length 10485760"),
    ("quota", "ServiceQuotaExceededException: Your request exceeds the service quota for your account."),
    ("quota", "Budget has been exceeded! Current cost: 10.5, Max budget: 10.0"),
]


def test_every_rule_has_a_source_and_a_tested_wording():
    samples = [("context", json.dumps(f[2])) for f in CONTEXT_FAULTS] + MORE_WORDINGS
    samples += [("quota", json.dumps(f[2])) for f in QUOTA_FAULTS]
    assert all(rule.source for rule in RULES)
    for kind, text in samples:
        found = match(text)
        assert found is not None and found.kind.removeprefix("soft_") == kind, text
    texts = [text for _, text in samples] + [json.dumps(f[2]) for f in RETRIED_FAULTS]
    unused = [rule.pattern for rule in RULES if not any(re.search(rule.pattern, t, re.I | re.S) for t in texts)]
    assert unused == []


def test_rate_limit_and_client_wordings_match_no_rule():
    for _, _, fields, _ in RETRIED_FAULTS[:1] + RETRIED_FAULTS[4:]:
        assert match(fields["message"]) is None, fields["message"]
    for _, _, fields in REJECTED_FAULTS:
        assert match(fields["message"]) is None, fields["message"]


@pytest.mark.parametrize(("headers", "expected"), [
    ({"Retry-After": "7"}, 7.0),
    ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 60.0),  # 60 s after "now" below
    ({"retry-after": "Wed, 21 Oct 2015 07:26:00 GMT"}, 0.0),  # in the past
    ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
    ({"retry-after": "soon"}, None),
    ({}, None),
])
def test_retry_after_forms(headers, expected):
    now = email.utils.parsedate_to_datetime("Wed, 21 Oct 2015 07:27:00 GMT").timestamp()
    assert retry_after_s(headers, now=now) == expected


def test_retry_hints_in_bodies_and_messages():
    assert retry_after_s({}, {"details": [{"retryDelay": "41s"}]}) == 41.0
    assert retry_after_s({}, {}, "Rate limit reached. Please try again in 20ms.") == 0.02
    assert retry_after_s({}, {}, "Please retry after 2 seconds.") == 2.0


def test_soft_quota_without_a_retry_hint_is_quota():
    evidence = Evidence(429, "You exceeded your current quota, please check your plan and billing details.",
                        {"status": "RESOURCE_EXHAUSTED"})
    assert classify(evidence).kind == "quota"
    hinted = Evidence(429, evidence.message, {}, {"retry-after": "5"})
    assert classify(hinted).kind == "rate_limit" and classify(hinted).retry_after_s == 5


def test_urls_in_messages_lose_keys():
    url = "https://user:pw@host:8443/v1/models/x:generate?key=AIzaSECRET#f"
    assert public_url(url) == "https://host:8443/v1/models/x:generate"


# ---------------------------------------------------------------- through the CLI



def cli_profile(tmp_path, retries: int = 2) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(f"context_window: 50000\nmax_output_tokens: 500\nretries: {retries}\n"
                    "permissions: {kinds: {exec: allow}}\n", encoding="utf-8")
    return str(path)


def shell_turns(n: int) -> list[Item]:
    return [{"content": None, "tool_calls": [{"id": f"c{i}", "name": "shell",
                                              "arguments": {"command": f"seq 1 {300 + i}"}}]} for i in range(n)]


def cli_run(tmp_path, server: FakeOpenAI, session: str):
    out = run_cli("run", "--json", "--session", session, "--model", "openai/fake", "--api-base", server.base_url,
                  "--profile", cli_profile(tmp_path), "count things")
    return out, json.loads(out.stdout.strip().splitlines()[-1])


def test_cli_context_size_exceeded_500_compacts_and_recovers(tmp_path, fake_openai):
    server = fake_openai([*shell_turns(6), error(500, "Context size has been exceeded.", type="server_error"),
                          {"content": "recovered"}])
    out, result = cli_run(tmp_path, server, "ovf")
    assert (out.exit_code, result["answer"]) == (0, "recovered")
    assert len(server.requests) == 8
    assert len(set(payloads(server))) == len(server.requests)  # no identical payload twice


def test_cli_overflow_that_never_fits_exits_5_without_identical_payloads(tmp_path, fake_openai):
    overflow = error(500, "Context size has been exceeded.", type="server_error")
    server = fake_openai([*shell_turns(6), overflow, overflow, overflow, overflow])
    out, result = cli_run(tmp_path, server, "never")
    assert out.exit_code == 5 and result["status"] == "context_overflow"
    assert len(set(payloads(server))) == len(server.requests) <= 6 + 3


def test_cli_insufficient_quota_exits_4_naming_quota(tmp_path, fake_openai):
    server = fake_openai([fault(429, QUOTA_FAULTS[0][2])] * 3)
    out, result = cli_run(tmp_path, server, "quota")
    assert out.exit_code == 4 and len(server.requests) == 1
    assert "quota or billing" in result["error"] and server.base_url in result["error"]
    assert "retrying" not in out.stderr


def test_cli_rate_limit_retry_is_shown_on_stderr(tmp_path, fake_openai):
    server = fake_openai([error(429, "Rate limit reached", headers={"retry-after": "0"}), {"content": "done"}])
    out, result = cli_run(tmp_path, server, "rl")
    assert (out.exit_code, result["answer"]) == (0, "done")
    assert f"ctxagent: retrying in 0.5 s after HTTP 429 from {server.base_url}/chat/completions: attempt 2 of 3" \
        in out.stderr
