"""The litellm backend: any litellm model string behind the small :class:`~ctxagent.agent.model_types.Model` API.

The only module that imports litellm, lazily (``import litellm`` costs ~4 s and ~200 MB; FIELD-NOTES.md).
Errors are translated here, once, after :mod:`ctxagent.agent.provider_errors` classified them; we own
the retry policy (litellm and the openai SDK never retry). See docs/usage.md "Provider failures" and
docs/context.md "Prompt caching".
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

from ctxagent.agent.model_types import Reply, Usage, read_usage
from ctxagent.agent.provider_errors import RETRY_ONCE, Failure, classify, describe, read_error, retry_note
from ctxagent.agent.replies import IncompleteReply, err_words, read_reply, read_stream, stream_cut, wire_message
from ctxagent.collector import collector_paused
from ctxagent.errors import ProviderContextError, ProviderError, ProviderQuotaError
from ctxagent.messages import Message
from ctxagent.sessions import redact

LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
DUMMY_API_KEY = "sk-local-no-key"  # for openai/... models on a local server that needs none
PROMPT_CACHE_MODES = ("auto", "off")  # Profile.prompt_cache
MAX_CACHE_BREAKPOINTS = 4  # Anthropic rejects a request with more cache_control blocks
CACHE_READ_FALLBACK = 0.1  # share of the input price a cache read costs when the model has no cache price
# litellm providers that cache only at explicit breakpoints: all their models, or only their Claude models.
# Gemini is not here: it caches implicitly, and litellm turns its breakpoints into a separately created,
# stored and billed cachedContents resource (extra API calls per request), not a per-request breakpoint.
BREAKPOINT_PROVIDERS = frozenset({"anthropic"})
BREAKPOINT_CLAUDE_HOSTS = frozenset({"bedrock", "vertex_ai"})
# litellm providers whose messages litellm translates into the provider's own format (not OpenAI's)
NATIVE_PROVIDERS = frozenset({"anthropic", "bedrock", "bedrock_converse", "vertex_ai", "vertex_ai_beta", "gemini",
                              "cohere", "cohere_chat"})


@contextlib.contextmanager
def _keep_tiktoken_dir() -> Iterator[None]:
    """Restore a user-set ``TIKTOKEN_CACHE_DIR`` that litellm overwrites with its bundled copy."""
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    try:
        yield
    finally:
        if saved is not None:
            os.environ["TIKTOKEN_CACHE_DIR"] = saved


@contextlib.contextmanager
def _no_typeddict_warning() -> Iterator[None]:
    """Silence pydantic's "Item(s) '...' on TypedDict class ... is using the `ReadOnly` qualifier"
    UserWarning, which litellm 1.110.2 triggers reading a streamed reply with reasoning (nothing is wrong)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Items? '\w+'.* on TypedDict class", category=UserWarning)
        yield


class _StderrHandler(logging.Handler):
    """Writes log records to whatever ``sys.stderr`` is at the time, secrets redacted."""

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
    """The ``litellm`` module, imported on first use: no cost-map fetch, no ``.env``, quiet loggers.

    The import makes ~2 million objects, none garbage: collection is paused and they are frozen
    (``gc.freeze``); else the first full collection took ~0.2 s of a one-turn run (issue 16, measured).
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_MODE", "PRODUCTION")
    with collector_paused(freeze=True), _keep_tiktoken_dir():
        import litellm
    litellm.suppress_debug_info = True
    if hasattr(litellm, "disable_hf_tokenizer_download"):
        litellm.disable_hf_tokenizer_download = True
    _quiet_loggers()
    return litellm


def embed(texts: list[str], model: str, api_base: str | None = None) -> list[list[float]]:
    """The embedding vectors of ``texts``, in order, from ``model`` through ``litellm.embedding`` (60 s
    timeout, no retry). Raises what litellm raises."""
    response = _litellm().embedding(model=model, input=texts, timeout=60, max_retries=0, **_endpoint(model, api_base))
    return [d["embedding"] for d in sorted(response.data, key=lambda d: d["index"])]


def _endpoint(model: str, api_base: str | None) -> dict[str, Any]:
    """The request fields for a server at ``api_base``: an openai/... model gets a dummy key when
    ``OPENAI_API_KEY`` is unset (a local server needs none, litellm's client insists on one)."""
    if not api_base:
        return {}
    if model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
        return {"api_base": api_base, "api_key": DUMMY_API_KEY}
    return {"api_base": api_base}


def model_window(model: str) -> int | None:
    """The context window of ``model`` in tokens (litellm's ``max_input_tokens``), or None if unknown
    (an unmapped model: ``openai/whatever``). Never raises."""
    try:
        value = _litellm().get_model_info(model).get("max_input_tokens")
    except Exception:  # litellm raises assorted types for unmapped models
        return None
    return int(value) if isinstance(value, int | float) and value > 0 else None


def did_you_mean(model: str, n: int = 3) -> list[str]:
    """Model strings litellm knows that look like ``model`` (a typo: ``openai/gpt-4o-mnii`` gives
    ``openai/gpt-4o-mini``), best first; the provider prefix the user gave is kept. Never raises."""
    try:
        known = list(_litellm().model_cost)
    except Exception:  # the price map could not be loaded: no suggestion
        return []
    provider, _, name = model.rpartition("/")
    found = difflib.get_close_matches(name, known, n=n, cutoff=0.75) if provider else []
    found = [f"{provider}/{k}" if "/" not in k else k for k in found]
    found += difflib.get_close_matches(model, known, n=n, cutoff=0.75)
    return list(dict.fromkeys(m for m in found if m != model))[:n]


def load_litellm() -> None:
    """Import litellm now, in a process that forks others (``ctxagent batch``'s fork server)."""
    _litellm()


def completion_cost(model: str, prompt_tokens: int, completion_tokens: int, *, cached_tokens: int = 0,
                    cache_creation_tokens: int = 0) -> float | None:
    """Price in US dollars of a call of ``model`` with these token counts, or None if not mapped. Never raises.

    All counts are tokens; ``cached_tokens`` and ``cache_creation_tokens`` are the parts of
    ``prompt_tokens`` read from and written to the prompt cache, priced at litellm's cache prices; a model
    without a cache-read price is billed :data:`CACHE_READ_FALLBACK` of its input price per cached token.
    """
    lib = _litellm()
    try:
        prompt_usd, completion_usd = lib.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            cache_read_input_tokens=cached_tokens, cache_creation_input_tokens=cache_creation_tokens)
    except Exception:  # unmapped model: no price
        return None
    return float(prompt_usd) + float(completion_usd) - _cache_read_discount(lib, model, cached_tokens)


def _cache_read_discount(lib: Any, model: str, cached_tokens: int) -> float:
    """US dollars to take off litellm's price (the full input price) of ``cached_tokens`` when ``model``
    has no cache-read price."""
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


@functools.cache
def _provider(model: str) -> tuple[str, str] | None:
    """(model name, litellm provider) of a litellm model string, or None when litellm cannot place it."""
    try:
        name, provider = _litellm().get_llm_provider(model)[:2]
    except Exception:  # an unknown provider
        return None
    return str(name), str(provider)


def needs_cache_breakpoints(model: str) -> bool:
    """Whether ``model`` (a litellm model string) is cached only at explicit ``cache_control`` breakpoints:
    ``anthropic`` models and Claude on ``bedrock`` and ``vertex_ai`` (litellm's provider resolution)."""
    name, provider = _provider(model) or ("", "")
    return provider in BREAKPOINT_PROVIDERS or (provider in BREAKPOINT_CLAUDE_HOSTS and "claude" in name.lower())


def cache_points(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """litellm ``cache_control_injection_points`` marking the stable prefix of ``messages``: the last
    message (the next request extends it), then the system messages, earliest first; at most
    :data:`MAX_CACHE_BREAKPOINTS`. litellm marks its own copy; ``messages`` are left alone."""
    if not messages:
        return []
    last = len(messages) - 1
    systems = [i for i, m in enumerate(messages) if m.get("role") == "system" and i != last]
    return [{"location": "message", "index": i} for i in [last, *systems][:MAX_CACHE_BREAKPOINTS]]


def _usage(response: Any, lib: Any) -> Usage | None:
    """Our :class:`Usage` (tokens, US dollars at litellm's cache prices) of a response, or None when it has none."""
    usage = getattr(response, "usage", None)
    if usage is None:
        return None
    try:
        cost = float(lib.completion_cost(completion_response=response))
    except Exception:  # ModelNotMappedError and friends: the price is unknown
        cost = None
    return read_usage(usage, cost)


def openai_wire(model: str) -> bool:
    """Whether litellm sends ``model``'s messages in OpenAI's format, as given (not :data:`NATIVE_PROVIDERS`,
    not a model string litellm cannot place)."""
    found = _provider(model)
    return found is not None and found[1] not in NATIVE_PROVIDERS


@dataclass(eq=False)
class LiteLLMModel:
    """A :class:`~ctxagent.agent.model_types.Model` that calls ``litellm.completion``. ``name``: a litellm
    model string (``gpt-4o``, ``anthropic/claude-sonnet-4-5``, ``openai/NAME`` with ``api_base`` for any
    OpenAI-compatible server). Raises ``ValueError`` for a ``prompt_cache`` not in :data:`PROMPT_CACHE_MODES`.
    """

    name: str
    _: KW_ONLY
    api_base: str | None = None  # base URL of the provider's API (``http://127.0.0.1:8000/v1``)
    timeout_s: float = 120.0  # seconds one HTTP attempt may take
    retries: int = 2  # extra attempts after a retryable failure (so at most ``retries + 1`` calls)
    max_output_tokens: int | None = None  # tokens the reply may use (sent as ``max_tokens``; None: the default)
    backoff_s: float = 0.5  # seconds before the first retry, doubled for each further one; a server's own
    # wait (:func:`~ctxagent.agent.provider_errors.retry_after_s`) is honoured when longer
    prompt_cache: str = "auto"  # "auto": breakpoints (:func:`cache_points`) where the provider needs them
    # (:func:`needs_cache_breakpoints`); "off": never
    max_retry_wait_s: float = 60.0  # the longest wait (seconds); a server asking for more is not retried
    send_tool_choice: bool = True  # send ``tool_choice: "auto"`` with the tools (some OpenAI-compatible
    # servers ignore ``tools`` without it)
    stream: bool = False  # ask for a server-sent-event stream and assemble it
    temperature: float | None = None  # sent with each request (None: the provider's default)
    on_retry: Callable[[str], None] | None = None  # called with a line announcing each retry ("retrying in ...")

    def __post_init__(self) -> None:
        if self.prompt_cache not in PROMPT_CACHE_MODES:
            raise ValueError(f"prompt_cache must be one of {', '.join(PROMPT_CACHE_MODES)}, not {self.prompt_cache!r}")
        self.retries = max(0, self.retries)

    def price(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """US dollars a call with these token counts costs uncached (:func:`completion_cost`; None: no price)."""
        return completion_cost(self.name, prompt_tokens, completion_tokens)

    def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> Reply:
        """One model call: ``messages`` (OpenAI format) and ``tools`` (OpenAI tool schemas, may be empty).

        Returns the first choice as a :class:`Reply`, usage in tokens, cost in US dollars (None: no price).
        Raises ``ProviderContextError`` (the context is too long) or ``ProviderQuotaError`` (out of quota or
        credit), never retried, or ``ProviderError`` for any other failure after the retries the policy
        allows (provider_errors' ``RETRYABLE`` kinds only, its ``RETRY_ONCE`` kinds once at most).
        """
        lib = _litellm()
        request = self._request(messages, tools)
        attempts, sent = self.retries + 1, 0
        for attempt in range(1, attempts + 1):
            try:
                with _keep_tiktoken_dir(), _no_typeddict_warning():
                    return self._call(lib, request)
            except Exception as err:  # litellm raises many unrelated types; classified below
                failure = classify(read_error(err, api_base=self.api_base, timeout=isinstance(err, lib.Timeout),
                                              context=isinstance(err, lib.ContextWindowExceededError)))
                sent += failure.evidence.sent and failure.kind != "connection"
                wait = self._wait(attempt, failure)
                limit = min(attempts, 2) if failure.kind in RETRY_ONCE else attempts
                if not failure.retryable or attempt >= limit or wait is None:
                    refused = failure.retryable and attempt < limit and wait is None
                    raise self._error(failure, sent, attempt, refused_wait=refused) from err
            if self.on_retry is not None:
                self.on_retry(retry_note(failure, wait, attempt + 1, limit, self.timeout_s))
            time.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _call(self, lib: Any, request: dict[str, Any]) -> Reply:
        """One HTTP attempt, a stream read to its end; raises ``IncompleteReply`` for a bad reply (agent/replies.py)."""
        try:
            response = lib.completion(**request)
        except Exception as err:  # a reply body cut short is an incomplete reply, not a connection failure
            if stream_cut(err):
                raise IncompleteReply(f"the reply was cut before its end: {err_words(err)}") from err
            raise
        if self.stream:
            with contextlib.closing(response):  # a stream that failed midway still holds its connection
                response = read_stream(response, lambda chunks: lib.stream_chunk_builder(
                    chunks, messages=request["messages"]))
        return read_reply(response, _usage(response, lib), self.max_output_tokens)

    def _request(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
        openai = openai_wire(self.name)
        wire = [wire_message(m, openai_wire=openai) for m in messages]
        request: dict[str, Any] = {"model": self.name, "messages": wire, "timeout": self.timeout_s, "max_retries": 0}
        if tools:
            request["tools"] = list(tools)
            if self.send_tool_choice:
                request["tool_choice"] = "auto"
        if self.stream:
            request |= {"stream": True, "stream_options": {"include_usage": True}}
        request |= _endpoint(self.name, self.api_base)
        if self.max_output_tokens is not None:
            request["max_tokens"] = self.max_output_tokens
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if self.prompt_cache == "auto" and needs_cache_breakpoints(self.name) and messages:
            request["cache_control_injection_points"] = cache_points(messages)
        return request

    def _wait(self, attempt: int, failure: Failure) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``; None when the server asks for more than the bound."""
        asked = failure.retry_after_s
        if asked is not None and asked > self.max_retry_wait_s:
            return None
        backoff: float = self.backoff_s * 2 ** (attempt - 1)  # int ** int is typed Any (a negative power is a float)
        return max(min(backoff, self.max_retry_wait_s), asked or 0.0)

    def _error(self, failure: Failure, sent: int, attempts: int, *, refused_wait: bool = False) -> ProviderError:
        """Our exception for ``failure``: one readable line naming the URL and the requests sent, no key."""
        extra = (f"the server asks to wait {failure.retry_after_s:g} s, more than max_retry_wait_s "
                 f"({self.max_retry_wait_s:g} s)") if refused_wait else ""
        text = describe(self.name, failure, sent=sent, attempts=attempts, timeout_s=self.timeout_s, extra=extra)
        cls = {"context": ProviderContextError, "quota": ProviderQuotaError}.get(failure.kind, ProviderError)
        return cls(text, status=failure.evidence.status)
