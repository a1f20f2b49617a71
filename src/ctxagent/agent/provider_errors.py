"""What a provider's failure means, in one table: context overflow, quota or billing, or neither.

Never imports litellm. :func:`read_error` gathers the facts of a failed call from its exception chain
into :class:`Evidence`; :func:`classify` turns them into a :class:`Failure` (what happened, whether a
retry can help). :data:`RULES`, the one table of provider wordings, holds litellm 1.110.2's own context
mapping (``litellm_core_utils/exception_mapping_utils.py``) plus the wordings litellm leaves unmapped;
``soft_quota`` is a quota wording also used for per-minute limits (Gemini, Vertex AI). See docs/usage.md,
"Provider failures", for what each kind does.
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxagent.agent.replies import IncompleteReply, exception_chain
from ctxagent.sessions import redact

CONTEXT, QUOTA, SOFT_QUOTA = "context", "quota", "soft_quota"
MESSAGE_CAP = 600  # characters of provider message kept in our error message
_KEY_PATTERN = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{8,}|\bAIza[0-9A-Za-z_\-]{20,}|(?i:bearer)\s+\S+")
_VENDOR_PREFIX = re.compile(r"^.*?\b\w*Exception - |^(?:litellm\.\w+:\s*)+", re.DOTALL)
_LITELLM_HINT = re.compile(r"\s*Handle with `litellm\.\w+`\.?|\s*Received Model Group=.*$", re.DOTALL)


@dataclass(frozen=True)
class Rule:
    """One row of :data:`RULES`: ``pattern`` (a regular expression, case-insensitive) means ``kind``."""

    kind: str
    pattern: str
    source: str


RULES: tuple[Rule, ...] = (
    # context overflow: error codes and types
    Rule(CONTEXT, r"context_length_exceeded", "OpenAI, Azure OpenAI, Bedrock Mantle error code"),
    Rule(CONTEXT, r"exceed_context_size_error", "llama.cpp server error type"),
    Rule(CONTEXT, r"request_too_large", "Anthropic error type (HTTP 413)"),
    # context overflow: wordings (litellm's own list first)
    Rule(CONTEXT, r"maximum context length", "OpenAI, Azure, vLLM, DeepSeek, OpenRouter, Mistral, Groq; litellm"),
    Rule(CONTEXT, r"reduce the length of the messages", "OpenAI, Groq, vLLM"),
    Rule(CONTEXT, r"maximum context limit", "litellm: \"model's maximum context limit\""),
    Rule(CONTEXT, r"exceed(?:s|ed)? (?:the |its |your )?(?:available |max(?:imum)? |model'?s? )?context"
         r"(?: size| length| limit| window)?",
         "llama.cpp \"the request exceeds the available context size\", Ollama \"exceeds the context "
         "length\"/\"exceeded max context length\", Anthropic \"exceed context limit\"; litellm"),
    Rule(CONTEXT, r"context size has been exceeded", "llama.cpp server (older builds, HTTP 500)"),
    Rule(CONTEXT, r"context (?:window|length) (?:was |has been |is )?exceeded", "generic OpenAI-compatible servers"),
    Rule(CONTEXT, r"prompt is too long|prompt too long", "Anthropic (also on Bedrock, Vertex AI), Fireworks, Ollama"),
    Rule(CONTEXT, r"input is too long", "Bedrock \"Input is too long for requested model\"; litellm"),
    Rule(CONTEXT, r"too many (?:input )?tokens", "Bedrock \"Too many input tokens\", Cohere, AI21; litellm"),
    Rule(CONTEXT, r"exceeds the maximum number of tokens", "Gemini, Vertex AI \"The input token count (N) "
         "exceeds the maximum number of tokens allowed (M)\"; litellm"),
    Rule(CONTEXT, r"request payload size exceeds", "Vertex AI; litellm"),
    Rule(CONTEXT, r"`inputs` tokens \+ `max_new_tokens` must be|`inputs` must have less than",
         "Hugging Face TGI, Together, SageMaker \"Input validation error\"; litellm"),
    Rule(CONTEXT, r"longer than the (?:model'?s? )?(?:context length|maximum model length)",
         "SGLang \"is longer than the model's context length\" (its \"Requested token count exceeds the "
         "model's maximum context length\" is matched above), vLLM \"longer than the maximum model length\""),
    Rule(CONTEXT, r"trying to keep the first \d+ tokens|context length of only|greater than the context length",
         "LM Studio"),
    Rule(CONTEXT, r"maximum prompt length", "xAI \"This model's maximum prompt length is N\""),
    Rule(CONTEXT, r"exceed model maximum", "Bedrock Mantle \"prompt tokens (N) exceed model maximum (M)\""),
    Rule(CONTEXT, r"current length is \d+ while limit is", "Cerebras; litellm"),
    Rule(CONTEXT, r"maximum input length is \d+ tokens|input tokens exceed the configured limit|"
         r"input too long:.*input tokens, limit is", "litellm (assorted OpenAI-compatible providers)"),
    Rule(CONTEXT, r"string too long\. expected a string with maximum length", "OpenAI (one message too long)"),
    Rule(CONTEXT, r"request too large", "OpenAI 429 \"Request too large for <model> ... tokens per min\" "
         "(one request over the TPM limit: only a smaller request can pass)"),
    # quota and billing: never retried
    Rule(QUOTA, r"insufficient_quota|billing_hard_limit_reached|billing_not_active", "OpenAI error codes"),
    Rule(QUOTA, r"credit balance is too low", "Anthropic (HTTP 400)"),
    Rule(QUOTA, r"insufficient (?:balance|credits?|funds)", "DeepSeek 402, OpenRouter 402"),
    Rule(QUOTA, r"out of call volume quota|monthly (?:spend(?:ing)? )?limit|budget (?:has been )?exceeded",
         "Azure OpenAI 403, LiteLLM proxy budgets"),
    Rule(QUOTA, r"service ?quota ?exceeded|exceeds the service quota", "Bedrock ServiceQuotaExceededException"),
    # quota wordings that may be a per-minute limit (retried only with a retry hint)
    Rule(SOFT_QUOTA, r"exceeded your current quota|quota exceeded|token_quota_reached",
         "OpenAI, Gemini (RESOURCE_EXHAUSTED), Vertex AI \"Quota exceeded for ...\", Cerebras; litellm"),
)
PER_WINDOW = re.compile(r"per[ _](?:minute|second)|_per_min|\brpm\b|\btpm\b", re.IGNORECASE)
RETRY_IN = re.compile(r"(?:retry|try again) (?:in|after) (\d+(?:\.\d+)?)\s*(ms|s|sec|seconds?)\b", re.IGNORECASE)
RETRYABLE = frozenset({"rate_limit", "timeout", "connection", "server", "incomplete"})
RETRY_ONCE = frozenset({"incomplete"})  # a bad reply twice in a row is reported, not retried again
KIND_WORDS = {
    "context": "context too long",
    "quota": "quota or billing limit reached (not retried; check the account's plan, credit and billing)",
    "rate_limit": "rate limited",
    "timeout": "timed out",
    "connection": "cannot connect",
    "auth": "authentication failed",
    "client": "request rejected",
    "server": "server error",
    "local": "cannot make the call",
    "other": "call failed",
    "incomplete": "incomplete reply",
    "output_limit": "reply cut at the output limit (not retried)",
}


def match(text: str) -> Rule | None:
    """The first row of :data:`RULES` whose pattern occurs in ``text``, or None."""
    return next((rule for rule in RULES if re.search(rule.pattern, text, re.IGNORECASE | re.DOTALL)), None)


@dataclass(frozen=True)
class Evidence:
    """The facts of one failed call, as the backend read them from litellm's exception chain."""

    status: int | None  # the HTTP status sent (None: none arrived, or an error event in a stream begun with 200)
    message: str  # the provider's words
    body: Mapping[str, Any] = field(default_factory=dict)  # its error object ({"message", "code", "type", ...})
    headers: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    sent: bool = True  # a request left this process
    network: str | None = None  # "timeout" or "connection" for transport failures
    litellm_context: bool = False  # litellm raised ContextWindowExceededError (its own mapping, RULES' first source)
    fault: str | None = None  # a bad reply the backend found: "incomplete", "output_limit"


@dataclass(frozen=True)
class Failure:
    """What went wrong with one call: ``kind`` (a key of :data:`KIND_WORDS`), the facts, and the wait the
    server asked for (``retry_after_s``, seconds; None: it did not ask)."""

    kind: str
    evidence: Evidence
    retry_after_s: float | None = None

    @property
    def retryable(self) -> bool:
        """Whether the same request may be sent again: rate limits, timeouts, connection and 5xx errors."""
        return self.kind in RETRYABLE


def _searchable(evidence: Evidence) -> str:
    """The provider's message with its code, type and status fields: what :data:`RULES` is matched on."""
    fields = [evidence.body.get(k) for k in ("code", "type", "status")]
    return " ".join([evidence.message, *(str(f) for f in fields if f)])


def classify(evidence: Evidence, now: float | None = None) -> Failure:
    """Our reading of a failed call: transport failures and calls that never left first, then
    :data:`RULES` whatever the status (llama.cpp says "Context size has been exceeded" with HTTP 500),
    then the HTTP status; HTTP 413 counts as context (only a smaller request can pass)."""
    if evidence.network or evidence.fault:
        return Failure(evidence.network or evidence.fault or "", evidence)
    if not evidence.sent:
        return Failure("local", evidence)
    rule = match(_searchable(evidence))
    wait = retry_after_s(evidence.headers, evidence.body, evidence.message, now)
    if evidence.litellm_context or (rule and rule.kind == CONTEXT) or evidence.status == 413:
        return Failure("context", evidence)
    if rule and rule.kind == SOFT_QUOTA and (wait is not None or PER_WINDOW.search(evidence.message)):
        return Failure("rate_limit", evidence, wait)
    if rule:
        return Failure("quota", evidence)
    return Failure(_status_kind(evidence.status), evidence, wait)


def _status_kind(status: int | None) -> str:
    """The kind an HTTP status means by itself; None: an error event inside a stream (a server fault)."""
    if status is None or status >= 500:
        return "server"
    if status == 429:
        return "rate_limit"
    if status in (401, 403):
        return "auth"
    return "client" if status >= 400 else "other"


def retry_after_s(headers: Mapping[str, str], body: Mapping[str, Any] | None = None, message: str = "",
                  now: float | None = None) -> float | None:
    """Seconds the server asks us to wait before retrying, or None when it does not say.

    Sources, first found wins: ``retry-after-ms`` (OpenAI, milliseconds); ``retry-after`` in both HTTP
    forms (RFC 9110: delta-seconds, or an HTTP-date, counted from ``now``, a Unix time); Gemini's
    ``RetryInfo.retryDelay`` ("41s") in the error details; "retry in 41.2s" / "try again in 20ms"
    in the message (Gemini, OpenAI, Azure "retry after 2 seconds"). Never negative.
    """
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    if (ms := _number(lowered.get("retry-after-ms"))) is not None:
        return max(0.0, ms / 1000)
    if value := lowered.get("retry-after"):
        seconds = _number(value)
        return max(0.0, seconds) if seconds is not None else _until(value, now)
    for detail in (body or {}).get("details") or []:
        if isinstance(detail, dict) and (delay := _number(str(detail.get("retryDelay", "")).rstrip("s"))) is not None:
            return max(0.0, delay)
    if found := RETRY_IN.search(message):
        return float(found.group(1)) / (1000 if found.group(2).lower() == "ms" else 1)
    return None


def _number(text: str | None) -> float | None:
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _until(http_date: str, now: float | None) -> float | None:
    """Seconds from ``now`` (Unix time; default: the clock) until an HTTP-date, or None if unparseable."""
    try:
        when = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _vendor(exc: BaseException) -> str:
    return type(exc).__module__.split(".")[0]


def _request_url(exc: BaseException) -> str | None:
    """The URL of the HTTP request an httpx or openai exception carries (httpx raises when it has none)."""
    try:
        request = getattr(exc, "request", None)
    except RuntimeError:
        return None
    url = getattr(request, "url", None)
    return str(url) if url is not None else None


def _wire(chain: list[BaseException]) -> tuple[int | None, dict[str, str], str | None, bool]:
    """(HTTP status, headers, URL, whether a request went out), from the httpx and openai exceptions
    only: litellm relabels statuses (a 400 as 429) and invents responses for errors it raises itself
    (a missing key is "HTTP 401" with no request made)."""
    status, headers, url = None, {}, None
    for exc in reversed(chain):  # innermost first: the transport's view
        if _vendor(exc) not in ("httpx", "openai"):
            continue
        url = url or _request_url(exc)
        code = getattr(getattr(exc, "response", None), "status_code", None)
        if status is None and isinstance(code, int):
            status, headers = code, dict(exc.response.headers)  # type: ignore[attr-defined]
    sent = url is not None or _vendor(chain[-1]) not in ("litellm", "openai")
    return status, headers, url, sent


def _body(chain: list[BaseException]) -> tuple[dict[str, Any], str]:
    """The provider's error object (``{"message", "code", ...}``, else {}) and its text body, if plain text."""
    for exc in chain:
        body = getattr(exc, "body", None)
        if isinstance(body, dict):
            inner = body.get("error")
            return (inner if isinstance(inner, dict) else body), ""
        if isinstance(body, str) and body.strip():
            return {}, body
    return {}, ""


def _one_line(text: str) -> str:
    text = _KEY_PATTERN.sub("[redacted]", redact.default().text(" ".join(text.split())))
    return text if len(text) <= MESSAGE_CAP else text[: MESSAGE_CAP - 1] + "…"


def _provider_message(err: BaseException, body: dict[str, Any], text: str) -> str:
    """The provider's own words, without litellm's class-name prefixes and hints."""
    for value in (body.get("message"), body.get("error"), text):
        if isinstance(value, str) and value.strip():
            return _one_line(value)
    words = getattr(err, "message", None) or str(err) or type(err).__name__
    return _one_line(_LITELLM_HINT.sub("", _VENDOR_PREFIX.sub("", str(words))))


def _network_kind(chain: list[BaseException], timeout: bool) -> str | None:
    """"timeout", "connection", "local" (a bad URL or request), or None when not a network failure."""
    import httpx

    if timeout or any(isinstance(e, TimeoutError | httpx.TimeoutException) for e in chain):
        return "timeout"
    if any(isinstance(e, httpx.UnsupportedProtocol | httpx.LocalProtocolError) for e in chain):
        return "local"  # a malformed api_base or request: retrying cannot help
    if any(isinstance(e, ConnectionError | httpx.TransportError)
           or (_vendor(e) == "openai" and type(e).__name__ == "APIConnectionError") for e in chain):
        return "connection"
    return None


def read_error(err: BaseException, *, api_base: str | None = None, timeout: bool = False,
               context: bool = False) -> Evidence:
    """The facts of a failed call, read from ``err`` and the exceptions it was raised from. ``timeout``,
    ``context``: whether litellm classed ``err`` so; ``api_base``: the URL when the exceptions name none."""
    chain = exception_chain(err)
    status, headers, url, sent = _wire(chain)
    if bad := next((e for e in chain if isinstance(e, IncompleteReply)), None):
        return Evidence(None, _one_line(bad.reason), url=public_url(url or api_base),
                        fault="incomplete" if bad.retryable else "output_limit")
    network = _network_kind(chain, timeout)
    body, text = _body(chain)
    message = "" if network == "timeout" else _provider_message(err, body, text)
    if network in ("connection", "local"):
        message = _one_line(str(chain[-1]) or message)
    return Evidence(status, message, body, headers, public_url(url or api_base), sent and network != "local",
                    network if network in ("timeout", "connection") else None, context)


def public_url(url: str | None) -> str | None:
    """``url`` without userinfo, query or fragment (keys travel there: Gemini's ``?key=``)."""
    if not url:
        return None
    found = re.match(r"^([a-z][a-z0-9+.-]*://)(?:[^/@]*@)?([^/?#]*)([^?#]*)", url, re.IGNORECASE)
    return "".join(found.groups()) if found else None


def where(failure: Failure, sent: int, attempts: int, timeout_s: float) -> str:
    """The parenthesis of an error message: what came back, from which URL, how many requests went out."""
    evidence = failure.evidence
    url = evidence.url or "the provider's default URL"
    count = f"{sent} request{'s' if sent != 1 else ''} sent"
    if failure.kind == "local":
        return "no request sent" + (f" to {evidence.url}" if evidence.url else "")
    if failure.kind == "connection":
        return f"to {url}; {attempts} attempt{'s' if attempts != 1 else ''}, no request delivered"
    if failure.kind == "timeout":
        return f"no reply within {timeout_s:g} s from {url}; {count}"
    if evidence.fault:
        return f"reply from {url}; {count}"
    if evidence.status is None:
        return f"error event in the reply stream from {url}; {count}"
    return f"HTTP {evidence.status} from {url}; {count}"


def describe(model: str, failure: Failure, *, sent: int, attempts: int, timeout_s: float, extra: str = "") -> str:
    """One line naming the model, what went wrong, the URL tried, requests sent and the provider's words;
    ``extra`` goes inside the parenthesis (why a retryable failure was not retried)."""
    details = where(failure, sent, attempts, timeout_s) + (f"; {extra}" if extra else "")
    text = f"model {model}: {KIND_WORDS[failure.kind]} ({details})"
    return text + (f": {failure.evidence.message}" if failure.evidence.message else "")


def retry_note(failure: Failure, wait_s: float, attempt: int, attempts: int, timeout_s: float) -> str:
    """The stderr line announcing a retry: "retrying in 3.0 s after HTTP 429 from URL: attempt 2 of 3"."""
    evidence = failure.evidence
    url = evidence.url or "the provider"
    if failure.kind == "timeout":
        cause = f"a timeout ({timeout_s:g} s) from {url}"
    elif failure.kind == "connection":
        cause = f"a connection failure to {url}"
    elif evidence.fault:
        cause = f"an incomplete reply from {url} ({evidence.message})"
    elif evidence.status is None:
        cause = f"an error event in the reply stream from {url}"
    else:
        cause = f"HTTP {evidence.status} from {url}"
    return f"retrying in {wait_s:.1f} s after {cause}: attempt {attempt} of {attempts}"
