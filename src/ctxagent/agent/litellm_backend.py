"""The litellm backend: any litellm model string behind the small :class:`~ctxagent.agent.model.Model` API.

This is the only module of ctxagent that imports litellm, and it does so lazily, on the first model
call (``import litellm`` costs ~4 s and ~200 MB; FIELD-NOTES.md). Before that import it sets
``LITELLM_LOCAL_MODEL_COST_MAP=True`` (no network fetch of the cost map) and
``LITELLM_MODE=PRODUCTION`` (no ``.env`` loading) unless they are set; after it, litellm is told to
keep quiet: no debug banners, its loggers at WARNING on stderr (stdout belongs to the answer).

Errors are translated once, here, with ``raise ... from err``; no litellm or openai exception type
leaves this module:

- the provider says the context is too long -> :class:`~ctxagent.errors.ProviderContextError`
  (litellm's ``ContextWindowExceededError``, or the code ``context_length_exceeded``, or wordings such
  as "maximum context length", "prompt is too long", "Request too large" in any other litellm error:
  litellm 1.110.2 turns OpenAI's "Request too large" into a ``RateLimitError`` and leaves Ollama's
  "the input length exceeds the context length" a plain ``BadRequestError``);
- anything else -> :class:`~ctxagent.errors.ProviderError`, one line naming the model, the HTTP status
  when there was one, and the provider's own message.

We own the retry policy (litellm and the openai SDK are told not to retry): rate limits (not context
ones), timeouts, connection errors and HTTP 5xx are retried ``retries`` times with exponential
backoff; other 4xx never are.

Prompt caching (FIELD-NOTES.md "Prompt caching"): OpenAI-style providers cache request prefixes of
1,024+ tokens by themselves; Anthropic (also on Bedrock and Vertex AI) caches only up to explicit
``cache_control`` breakpoints. With ``prompt_cache="auto"`` the backend asks litellm to place them
(its ``cache_control_injection_points`` request option) on the system messages and on the last
message, so the next request, which extends this one, reads the whole prefix from the cache. Usage
reports the cached and cache-written tokens, and the cost prices them as the provider bills them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ctxagent.agent.model import Reply, ToolCall, Usage
from ctxagent.errors import ProviderContextError, ProviderError
from ctxagent.messages import Message
from ctxagent.sessions import redact

LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
CONTEXT_CODES = frozenset({"context_length_exceeded"})
CONTEXT_WORDINGS = (  # lowercase substrings of provider messages that mean "context too long"
    "maximum context length",
    "context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "request too large",
)
RETRY_AFTER_CAP_S = 30.0  # seconds; a provider's Retry-After is honoured up to this
MESSAGE_CAP = 600  # characters of provider message kept in our error message
DUMMY_API_KEY = "sk-local-no-key"  # for openai/... models on a local server that needs none
PROMPT_CACHE_MODES = ("auto", "off")  # Profile.prompt_cache
MAX_CACHE_BREAKPOINTS = 4  # Anthropic rejects a request with more cache_control blocks
CACHE_READ_FALLBACK = 0.1  # share of the input price a cache read costs when the model has no cache price
# litellm providers that cache only at explicit breakpoints: all their models, or only their Claude models.
# Gemini is not here: it caches implicitly, and litellm turns its breakpoints into a separately created,
# stored and billed cachedContents resource (extra API calls per request), not a per-request breakpoint.
BREAKPOINT_PROVIDERS = frozenset({"anthropic"})
BREAKPOINT_CLAUDE_HOSTS = frozenset({"bedrock", "vertex_ai"})
_KEY_PATTERN = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{8,}|\bAIza[0-9A-Za-z_\-]{20,}|(?i:bearer)\s+\S+")
_VENDOR_PREFIX = re.compile(r"^.*?\b\w*Exception - |^(?:litellm\.\w+:\s*)+", re.DOTALL)
_LITELLM_HINT = re.compile(r"\s*Handle with `litellm\.\w+`\.?|\s*Received Model Group=.*$", re.DOTALL)


# ---------------------------------------------------------------- importing litellm


@contextlib.contextmanager
def _keep_tiktoken_dir() -> Iterator[None]:
    """Restore a user-set ``TIKTOKEN_CACHE_DIR`` that litellm overwrites with its bundled copy.

    When it was unset, litellm's value (its bundled tokenizers, the directory
    :mod:`ctxagent.tokens` would pick too) is left in place.
    """
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    try:
        yield
    finally:
        if saved is not None:
            os.environ["TIKTOKEN_CACHE_DIR"] = saved


class _StderrHandler(logging.Handler):
    """Writes log records to whatever ``sys.stderr`` is at the time of the record, secrets redacted
    (``ctxagent.sessions.redact``: key shapes, Authorization headers, the environment's keys)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(redact.default().text(self.format(record)) + "\n")
        except Exception:  # logging must never break a model call
            self.handleError(record)


def _quiet_loggers() -> None:
    """Send litellm's loggers to stderr at WARNING, keeping litellm's secret-redacting filters."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.WARNING)
        handler = _StderrHandler(logging.WARNING)
        handler.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
        for old in list(logger.handlers):
            for log_filter in old.filters:
                handler.addFilter(log_filter)
            logger.removeHandler(old)
        logger.addHandler(handler)


@functools.cache
def _litellm() -> Any:
    """The ``litellm`` module, imported on first use, offline-safe and quiet (see module doc)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_MODE", "PRODUCTION")
    with _keep_tiktoken_dir():
        import litellm
    litellm.suppress_debug_info = True
    if hasattr(litellm, "disable_hf_tokenizer_download"):
        litellm.disable_hf_tokenizer_download = True
    _quiet_loggers()
    return litellm


# ---------------------------------------------------------------- model info


def model_window(model: str) -> int | None:
    """The context window of ``model`` in tokens (litellm's ``max_input_tokens``), or None if unknown.

    Never raises: unmapped models (``openai/whatever``) give None; a profile can supply the window.
    """
    try:
        value = _litellm().get_model_info(model).get("max_input_tokens")
    except Exception:  # litellm raises assorted types for unmapped models
        return None
    return int(value) if isinstance(value, int | float) and value > 0 else None


def completion_cost(model: str, prompt_tokens: int, completion_tokens: int, *, cached_tokens: int = 0,
                    cache_creation_tokens: int = 0) -> float | None:
    """Price in US dollars of a call of ``model`` with these token counts, or None if not mapped.

    All counts are tokens. ``prompt_tokens`` is every input token, cached or not; ``cached_tokens`` and
    ``cache_creation_tokens`` are the parts of it read from and written to the provider's prompt cache
    (:class:`~ctxagent.agent.model.Usage` counts them the same way). They are priced at the model's
    ``cache_read_input_token_cost`` and ``cache_creation_input_token_cost`` (litellm's price map, USD
    per token); a model without a cache-read price is billed :data:`CACHE_READ_FALLBACK` (10%) of its
    input price per cached token, one without a cache-write price its input price per written token.
    Never raises (litellm raises ``ModelNotMappedError`` for models without prices).
    """
    lib = _litellm()
    try:
        prompt_usd, completion_usd = lib.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            cache_read_input_tokens=cached_tokens, cache_creation_input_tokens=cache_creation_tokens,
        )
    except Exception:  # unmapped model: no price
        return None
    return float(prompt_usd) + float(completion_usd) - _cache_read_discount(lib, model, cached_tokens)


def _cache_read_discount(lib: Any, model: str, cached_tokens: int) -> float:
    """US dollars to take off litellm's price of ``cached_tokens`` when ``model`` has no cache-read price.

    litellm then bills cache reads at the full input price; we bill :data:`CACHE_READ_FALLBACK` of it.
    """
    if cached_tokens <= 0:
        return 0.0
    try:
        info = lib.get_model_info(model)
    except Exception:  # priced by litellm but not in its model map: keep litellm's price
        return 0.0
    input_usd = info.get("input_cost_per_token")
    if info.get("cache_read_input_token_cost") is not None or not isinstance(input_usd, int | float):
        return 0.0
    return cached_tokens * float(input_usd) * (1.0 - CACHE_READ_FALLBACK)


# ---------------------------------------------------------------- prompt-cache breakpoints


@functools.cache
def needs_cache_breakpoints(model: str) -> bool:
    """Whether ``model`` (a litellm model string) is cached only at explicit ``cache_control`` breakpoints.

    Decided by litellm's provider resolution: True for ``anthropic`` models and for Claude models on
    ``bedrock`` and ``vertex_ai``; False for OpenAI-style providers (openai, azure, deepseek,
    hosted_vllm, ``openai/...`` with an api_base), which cache prefixes by themselves, for Gemini (see
    :data:`BREAKPOINT_PROVIDERS`) and for model strings litellm cannot place.
    """
    try:
        name, provider = _litellm().get_llm_provider(model)[:2]
    except Exception:  # an unknown provider: send nothing extra
        return False
    if provider in BREAKPOINT_PROVIDERS:
        return True
    return provider in BREAKPOINT_CLAUDE_HOSTS and "claude" in str(name).lower()


def cache_points(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """litellm ``cache_control_injection_points`` marking the stable prefix of ``messages``.

    One breakpoint on the last message (the next request extends this one and so reads all of it from
    the cache), then the system messages, earliest (most stable) first: at most
    :data:`MAX_CACHE_BREAKPOINTS` in all. litellm puts ``cache_control: {"type": "ephemeral"}`` on
    those messages in its own copy of the request; the caller's messages are left alone.
    """
    if not messages:
        return []
    last = len(messages) - 1
    systems = [i for i, m in enumerate(messages) if m.get("role") == "system" and i != last]
    return [{"location": "message", "index": i} for i in [last, *systems][:MAX_CACHE_BREAKPOINTS]]


# ---------------------------------------------------------------- parsing replies


def _tool_calls(message: Any) -> tuple[ToolCall, ...]:
    calls = []
    for index, call in enumerate(getattr(message, "tool_calls", None) or []):
        fn = call.function
        args = fn.arguments if isinstance(fn.arguments, str) else json.dumps(fn.arguments or {})
        calls.append(ToolCall(str(call.id or f"call_{index + 1}"), str(fn.name or ""), args))
    return tuple(calls)


def _field(obj: Any, name: str) -> Any:
    """``obj.name`` or ``obj[name]`` (litellm objects and plain dicts alike), or None."""
    if obj is None:
        return None
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _tokens(*values: Any) -> int:
    """The largest of ``values`` that is a positive token count (a finite number, not a bool), else 0."""
    counts = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]
    return max((int(v) for v in counts if v > 0), default=0)


def _cache_tokens(usage: Any) -> tuple[int, int]:
    """(cached, cache-written) prompt tokens: OpenAI's ``prompt_tokens_details`` or Anthropic's fields.

    litellm copies Anthropic's ``cache_read_input_tokens`` / ``cache_creation_input_tokens`` (and
    DeepSeek's ``prompt_cache_hit_tokens``) into ``prompt_tokens_details`` too; whichever is present wins.
    """
    details = _field(usage, "prompt_tokens_details")
    cached = _tokens(_field(details, "cached_tokens"), _field(usage, "cache_read_input_tokens"),
                     _field(usage, "prompt_cache_hit_tokens"))
    written = _tokens(_field(usage, "cache_creation_input_tokens"), _field(details, "cache_creation_tokens"),
                      _field(details, "cache_write_tokens"))
    return cached, written


def _usage(response: Any, lib: Any) -> Usage | None:
    """Our :class:`Usage` (tokens, US dollars) of a litellm response, or None when it reports none.

    The cost is litellm's ``completion_cost``, which prices cached and cache-written tokens at the
    model's cache prices (litellm 1.110.2: missing cache prices fall back to the input price).
    """
    usage = _field(response, "usage")
    if usage is None:
        return None
    try:
        cost = float(lib.completion_cost(completion_response=response))
    except Exception:  # ModelNotMappedError and friends: the price is unknown
        cost = None
    cached, written = _cache_tokens(usage)
    return Usage(_tokens(_field(usage, "prompt_tokens")), _tokens(_field(usage, "completion_tokens")), cost,
                 cached_tokens=cached, cache_creation_tokens=written)


def _reply(response: Any, lib: Any) -> Reply:
    """Our :class:`Reply` from a litellm ``ModelResponse`` (first choice)."""
    choice = response.choices[0]
    message = choice.message
    extra: dict[str, Any] = {}
    reasoning = getattr(message, "reasoning_content", None)
    if isinstance(reasoning, str) and reasoning:
        extra["reasoning_content"] = reasoning
    return Reply(content=message.content, tool_calls=_tool_calls(message), usage=_usage(response, lib),
                 finish_reason=choice.finish_reason, extra=extra)


# ---------------------------------------------------------------- classifying errors


@dataclass(frozen=True)
class _Failure:
    """What went wrong with one call, in our terms.

    ``kind`` is one of: context, rate_limit, timeout, connection, auth, client, server, other.
    ``status`` is the HTTP status the server sent (None for timeouts, connection and local errors).
    """

    kind: str
    status: int | None
    message: str
    retry_after_s: float | None = None

    @property
    def retryable(self) -> bool:
        return self.kind in ("rate_limit", "timeout", "connection", "server")


def _chain(err: BaseException) -> list[BaseException]:
    """``err`` and the exceptions it was raised from, outermost first."""
    seen: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and all(current is not s for s in seen) and len(seen) < 20:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _vendor(exc: BaseException) -> str:
    return type(exc).__module__.split(".")[0]


def _wire_status(err: BaseException, chain: list[BaseException]) -> int | None:
    """The HTTP status the server really sent (litellm relabels some, e.g. a 400 as 429)."""
    for exc in chain:
        response = getattr(exc, "response", None)
        if _vendor(exc) == "httpx" and isinstance(getattr(response, "status_code", None), int):
            return int(response.status_code)  # type: ignore[union-attr]
        if _vendor(exc) == "openai":
            status = getattr(exc, "status_code", None)
            return status if isinstance(status, int) else None  # an SDK-side error: no HTTP at all
    status = getattr(err, "status_code", None)
    return status if isinstance(status, int) else None


def _body(chain: list[BaseException]) -> dict[str, Any]:
    """The provider's error object (``{"message", "code", ...}``) when one was parsed, else {}."""
    for exc in chain:
        body = getattr(exc, "body", None)
        if isinstance(body, dict):
            inner = body.get("error")
            return inner if isinstance(inner, dict) else body
    return {}


def _one_line(text: str) -> str:
    text = _KEY_PATTERN.sub("[redacted]", redact.default().text(" ".join(text.split())))
    return text if len(text) <= MESSAGE_CAP else text[: MESSAGE_CAP - 1] + "…"


def _provider_message(err: BaseException, body: dict[str, Any]) -> str:
    """The provider's own words, without litellm's class-name prefixes and hints."""
    if isinstance(body.get("message"), str) and body["message"]:
        return _one_line(body["message"])
    text = getattr(err, "message", None) or str(err) or type(err).__name__
    text = _LITELLM_HINT.sub("", _VENDOR_PREFIX.sub("", str(text)))
    return _one_line(text)


def _retry_after_s(chain: list[BaseException]) -> float | None:
    for exc in chain:
        headers = getattr(getattr(exc, "response", None), "headers", None)
        value = headers.get("retry-after") if headers is not None else None
        if value:
            try:
                return min(RETRY_AFTER_CAP_S, max(0.0, float(value)))
            except ValueError:
                return None
    return None


def _is_context(err: BaseException, lib: Any, body: dict[str, Any], message: str) -> bool:
    """Whether the provider said the context is too long: litellm's class, the code, or the wording.

    Wordings are matched in the provider's message only (not the whole exception text), so a
    validation error that echoes a prompt about "context windows" is not mistaken for one.
    """
    if isinstance(err, lib.ContextWindowExceededError) or body.get("code") in CONTEXT_CODES:
        return True
    lowered = message.lower()
    return any(code in str(err) for code in CONTEXT_CODES) or any(w in lowered for w in CONTEXT_WORDINGS)


def _network_kind(err: BaseException, chain: list[BaseException], lib: Any) -> str | None:
    """"timeout", "connection", "local" (a bad URL or request), or None when not a network failure."""
    import httpx

    timeouts = (TimeoutError, httpx.TimeoutException)
    if isinstance(err, lib.Timeout) or any(isinstance(e, timeouts) for e in chain):
        return "timeout"
    if any(isinstance(e, httpx.UnsupportedProtocol | httpx.LocalProtocolError) for e in chain):
        return "local"  # a malformed api_base or request: retrying cannot help
    if any(isinstance(e, ConnectionError | httpx.TransportError) for e in chain):
        return "connection"
    if any(_vendor(e) == "openai" and type(e).__name__ == "APIConnectionError" for e in chain):
        return "connection"
    return None


def _classify(err: BaseException, lib: Any) -> _Failure:
    """Our reading of a litellm exception: kind, real HTTP status, provider message."""
    chain = _chain(err)
    network = _network_kind(err, chain, lib)
    body = _body(chain)
    message = _provider_message(err, body)
    if network == "timeout":
        return _Failure(network, None, "")  # the provider said nothing; our message gives the limit
    if network == "local":
        return _Failure("other", None, _one_line(str(chain[-1]) or message))
    if network:
        return _Failure(network, None, _one_line(str(chain[-1]) or message))
    status = None if isinstance(err, lib.APIConnectionError) else _wire_status(err, chain)
    if _is_context(err, lib, body, message):
        return _Failure("context", status, message)
    if status == 429 or isinstance(err, lib.RateLimitError):
        return _Failure("rate_limit", status, message, _retry_after_s(chain))
    if status in (401, 403):
        return _Failure("auth", status, message)
    if status is not None and status >= 500:
        return _Failure("server", status, message, _retry_after_s(chain))
    if status is not None and status >= 400:
        return _Failure("client", status, message)
    return _Failure("other", status, message)


_KIND_WORDS = {
    "context": "context too long",
    "rate_limit": "rate limited",
    "timeout": "timed out",
    "connection": "cannot connect",
    "auth": "authentication failed",
    "client": "request rejected",
    "server": "server error",
    "other": "call failed",
}


# ---------------------------------------------------------------- the backend


class LiteLLMModel:
    """A :class:`~ctxagent.agent.model.Model` that calls ``litellm.completion`` (non-streaming).

    Args:
        model: a litellm model string (``gpt-4o``, ``anthropic/claude-sonnet-4-5``, ``openai/NAME``
            with ``api_base`` for any OpenAI-compatible server).
        api_base: base URL of the provider's API (``http://127.0.0.1:8000/v1``), or None.
        timeout_s: seconds one HTTP attempt may take.
        retries: extra attempts after a retryable failure (so at most ``retries + 1`` calls).
        max_output_tokens: tokens the reply may use (sent as ``max_tokens``), or None for the default.
        backoff_s: seconds before the first retry; doubled for each further one. A provider's
            Retry-After header is honoured up to :data:`RETRY_AFTER_CAP_S`.
        prompt_cache: ``"auto"`` places prompt-cache breakpoints (:func:`cache_points`) when the
            provider needs them (:func:`needs_cache_breakpoints`); ``"off"`` never does. Providers that
            cache by themselves (OpenAI-style) get nothing extra either way.

    Raises ``ValueError`` for a ``prompt_cache`` not in :data:`PROMPT_CACHE_MODES`.
    """

    def __init__(self, model: str, *, api_base: str | None = None, timeout_s: float = 120.0, retries: int = 2,
                 max_output_tokens: int | None = None, backoff_s: float = 0.5, prompt_cache: str = "auto"):
        if prompt_cache not in PROMPT_CACHE_MODES:
            raise ValueError(f"prompt_cache must be one of {', '.join(PROMPT_CACHE_MODES)}, not {prompt_cache!r}")
        self.name = model
        self.prompt_cache = prompt_cache
        self.api_base = api_base
        self.timeout_s = timeout_s
        self.retries = max(0, retries)
        self.max_output_tokens = max_output_tokens
        self.backoff_s = backoff_s

    def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> Reply:
        """One model call: ``messages`` (OpenAI format) and ``tools`` (OpenAI tool schemas, may be empty).

        Returns the first choice as a :class:`Reply` with usage in tokens (cached and cache-written
        ones included) and cost in US dollars (None when litellm has no price for the model).
        Raises ``ProviderContextError`` when the provider says the context is too long,
        ``ProviderError`` for every other failure, after the retries the policy allows.
        """
        lib = _litellm()
        request = self._request(messages, tools)
        for attempt in range(self.retries + 1):
            try:
                with _keep_tiktoken_dir():
                    return _reply(lib.completion(**request), lib)
            except Exception as err:  # litellm raises many unrelated types; mapped below
                failure = _classify(err, lib)
                if not failure.retryable or attempt == self.retries:
                    raise self._error(failure, attempt + 1) from err
            time.sleep(self._delay(attempt, failure))
        raise AssertionError("unreachable")  # pragma: no cover

    def _request(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Keyword arguments of ``litellm.completion`` for one call."""
        request: dict[str, Any] = {"model": self.name, "messages": list(messages), "timeout": self.timeout_s,
                                   "max_retries": 0}
        if tools:
            request["tools"] = list(tools)
        if self.api_base:
            request["api_base"] = self.api_base
            if self.name.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
                request["api_key"] = DUMMY_API_KEY
        if self.max_output_tokens is not None:
            request["max_tokens"] = self.max_output_tokens
        if self.prompt_cache == "auto" and needs_cache_breakpoints(self.name) and messages:
            request["cache_control_injection_points"] = cache_points(messages)
        return request

    def _delay(self, attempt: int, failure: _Failure) -> float:
        """Seconds to wait before retry number ``attempt + 1``."""
        return max(self.backoff_s * 2**attempt, failure.retry_after_s or 0.0)

    def _error(self, failure: _Failure, attempts: int) -> ProviderError:
        """Our exception for ``failure``: one readable line, no stack trace, no key."""
        what = _KIND_WORDS[failure.kind]
        if failure.kind == "timeout":
            what += f" after {self.timeout_s:g} s"
        elif failure.kind == "connection":
            what += f" to {self.api_base or 'the provider'}"
        details = [f"HTTP {failure.status}"] if failure.status is not None else []
        details += [f"{attempts} attempts"] if attempts > 1 else []
        if details:
            what += f" ({', '.join(details)})"
        text = f"model {self.name}: {what}" + (f": {failure.message}" if failure.message else "")
        cls = ProviderContextError if failure.kind == "context" else ProviderError
        return cls(text, status=failure.status)
