"""The wire side of :mod:`ctxagent.testing`'s fake server: scripted items turned into OpenAI chat
completions (plain and server-sent events), error bodies in real servers' shapes, usage and
prompt-cache accounting. Pure functions, no sockets. See :mod:`ctxagent.testing` for the item format.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from ctxagent.messages import Message, text_of, tool_call
from ctxagent.tokens import PER_REQUEST, count_message, count_text, count_tools, reasoning_text

Item = dict[str, Any]

CONTEXT_STYLES = ("openai", "openai-request-too-large", "anthropic", "vllm", "ollama", "llama.cpp", "llama.cpp-500")
CACHE_MIN_TOKENS = 1024  # OpenAI caches a prompt prefix from this many tokens on...
CACHE_STEP_TOKENS = 128  # ...in increments of this many
MID_STREAM = "x-fake-mid-stream"  # internal marker from _answer to the handler; never sent
CUT = "x-fake-cut"  # internal marker: cut the reply mid-way (never sent)
REASONING_KEYS = ("reasoning_content", "thinking_blocks")  # reply-item keys sent on the message as given
DEEPSEEK_MISSING_REASONING = ("Missing `reasoning_content` field in the assistant message at message index {index}. "
                              "For more information, please refer to "
                              "https://api-docs.deepseek.com/guides/thinking_mode#tool-calls")


def error(status: int, message: str, *, code: Any = None, type: str = "invalid_request_error",
          headers: dict[str, str] | None = None, body: dict[str, Any] | str | None = None,
          mid_stream: bool = False) -> Item:
    """A script item that answers with HTTP ``status``, an OpenAI-style error body (or ``body``) and
    ``headers`` (the error item of :mod:`ctxagent.testing`)."""
    return {"error": {"status": status, "message": message, "code": code, "type": type},
            "headers": dict(headers or {}), "body": body, "mid_stream": mid_stream}


def context_error(style: str = "openai", *, tokens: int = 130_000, limit: int = 128_000) -> Item:
    """A script item for "the context is too long", worded as provider ``style`` words it.

    ``tokens`` is the request size and ``limit`` the window, both in tokens. Styles
    (:data:`CONTEXT_STYLES`) and what litellm 1.110.2 raises for each through ``openai/...``:

    - ``openai``: 400, code ``context_length_exceeded`` -> ``ContextWindowExceededError``.
    - ``openai-request-too-large``: 429, OpenAI's tokens-per-minute wording ("Request too large
      for ... Limit M, Requested N") -> ``RateLimitError`` (retrying cannot help: shrink instead).
    - ``anthropic``: 400, "prompt is too long: N tokens > M maximum" -> ``ContextWindowExceededError``.
    - ``vllm``: 400, "This model's maximum context length is M tokens. However, you requested
      N tokens ..." -> ``ContextWindowExceededError``.
    - ``ollama``: 400, "the input length exceeds the context length" -> plain ``BadRequestError``.
    - ``llama.cpp``: 400, type ``exceed_context_size_error``, "the request exceeds the available context
      size, try increasing it" -> ``ContextWindowExceededError``.
    - ``llama.cpp-500``: 500, "Context size has been exceeded." (older llama.cpp servers) ->
      ``InternalServerError`` (ctxagent's table, ``agent/provider_errors.py``, knows it).

    Raises ``ValueError`` for an unknown style.
    """
    if style == "openai":
        return error(400, f"This model's maximum context length is {limit} tokens. However, your messages "
                     f"resulted in {tokens} tokens. Please reduce the length of the messages.",
                     code="context_length_exceeded")
    if style == "openai-request-too-large":
        return error(429, f"Request too large for gpt-4o in organization org-fake on tokens per min (TPM): "
                     f"Limit {limit}, Requested {tokens}. The input or output tokens must be reduced in "
                     "order to run successfully.", code="rate_limit_exceeded", type="tokens")
    if style == "anthropic":
        return error(400, f"prompt is too long: {tokens} tokens > {limit} maximum")
    if style == "vllm":
        return error(400, f"This model's maximum context length is {limit} tokens. However, you requested "
                     f"{tokens} tokens ({tokens - 1000} in the messages, 1000 in the completion). Please "
                     "reduce the length of the messages or completion.", code=400, type="BadRequestError")
    if style == "ollama":
        return error(400, "the input length exceeds the context length")
    if style == "llama.cpp":
        return error(400, "the request exceeds the available context size, try increasing it",
                     type="exceed_context_size_error")
    if style == "llama.cpp-500":
        return error(500, "Context size has been exceeded.", type="server_error")
    raise ValueError(f"unknown context error style {style!r}; known: {', '.join(CONTEXT_STYLES)}")


def checked_item(item: Item) -> Item:
    """``item`` if it is a well-formed script item; raises ``ValueError``/``TypeError`` naming the problem."""
    if not isinstance(item, dict):
        raise TypeError(f"a script item is a mapping, not {type(item).__name__}: {item!r}")
    if "error" in item:
        if not isinstance(item["error"], dict) or "message" not in item["error"]:
            raise ValueError(f"an error item needs {{'error': {{'status', 'message'}}}}: {item!r}")
        return item
    for call in item.get("tool_calls") or []:
        if not isinstance(call, dict) or "name" not in call:
            raise ValueError(f"each tool call needs a 'name': {item!r}")
    return item


def prefix_keys(request: dict[str, Any]) -> list[str]:
    """Digests of the request's cacheable prefixes: model and tools, then each message added in turn."""
    digest = hashlib.sha256(json.dumps([request.get("model"), request.get("tools") or []], sort_keys=True).encode())
    keys = [digest.hexdigest()]
    for message in request.get("messages") or []:
        digest.update(b"\n" + json.dumps(message, sort_keys=True).encode())  # JSON text has no raw newline
        keys.append(digest.hexdigest())
    return keys


def _cached_tokens(request: dict[str, Any], matched: int, prompt: int) -> int:
    """Tokens served from the cache when the first ``matched`` prefix keys were seen before (see module doc)."""
    if matched <= 0:
        return 0
    model = str(request.get("model", ""))
    messages = (request.get("messages") or [])[: matched - 1]
    prefix = count_tools(request.get("tools") or [], model) + sum(_message_tokens(m, model) for m in messages)
    tokens = min(prompt, prefix)
    return 0 if tokens < CACHE_MIN_TOKENS else tokens // CACHE_STEP_TOKENS * CACHE_STEP_TOKENS


_COUNTS: dict[tuple[bytes, str], int] = {}  # (digest of a message's JSON, model) -> count_message
COUNTS_KEPT = 4096


def _message_tokens(message: Message, model: str) -> int:
    """:func:`ctxagent.tokens.count_message` of a request's message, counted once per server process
    (up to :data:`COUNTS_KEPT` messages): every request resends the conversation so far (a sub-agent
    benchmark resends 55K-token results). Keyed by a digest: the texts themselves are not kept."""
    text = json.dumps(message, sort_keys=True)  # ASCII: any message's JSON encodes
    key = (hashlib.blake2b(text.encode(), digest_size=16).digest(), model)
    count = _COUNTS.get(key)
    if count is None:
        if len(_COUNTS) >= COUNTS_KEPT:
            _COUNTS.clear()
        count = _COUNTS[key] = count_message(message, model)
    return count


def reported_cached(usage: dict[str, Any]) -> int:
    """``prompt_tokens_details.cached_tokens`` of a usage object (0 when a scripted one has none)."""
    details = usage.get("prompt_tokens_details")
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return int(value) if isinstance(value, int | float) else 0


def error_body(message: str, *, type: str = "invalid_request_error", code: Any = None,
                param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def _assistant_message(item: Item, number: int) -> Message:
    calls = []
    for index, call in enumerate(item.get("tool_calls") or []):
        args = call.get("arguments", {})
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        calls.append(tool_call(str(call.get("id") or f"call_{number}_{index + 1}"), str(call["name"]), text))
    message: Message = {"role": "assistant", "content": item.get("content")}
    if calls:
        message["tool_calls"] = calls
    message.update({key: item[key] for key in REASONING_KEYS if item.get(key) is not None})
    return message


def _usage(item: Item, request: dict[str, Any], message: Message, matched: int) -> dict[str, Any]:
    """The usage object: fields the item gives, the rest counted (tokens; see module doc)."""
    model = str(request.get("model", ""))
    given = item.get("usage") or {}
    messages = request.get("messages") or []
    counted = PER_REQUEST + sum(_message_tokens(m, model) for m in messages) + count_tools(request.get("tools") or [],
                                                                                          model)
    uncached = given.get("prompt_tokens") == "uncached"  # a server that reports only the uncached part
    if uncached:
        given = {key: value for key, value in given.items() if key != "prompt_tokens"}
    prompt = int(given.get("prompt_tokens", counted))
    reply = int(given.get("completion_tokens", count_text(reasoning_text(message) + text_of(message), model)))
    details = {"cached_tokens": _cached_tokens(request, matched, prompt)}
    if uncached:
        prompt -= details["cached_tokens"]
    return {"prompt_tokens": prompt, "completion_tokens": reply, "total_tokens": prompt + reply,
            "prompt_tokens_details": details} | given


def completion(item: Item, request: dict[str, Any], number: int, matched: int = 0) -> dict[str, Any]:
    """The chat.completion body of reply ``item``; ``matched`` prefix keys of ``request`` were cached."""
    message = _assistant_message(item, number)
    finish = item.get("finish_reason") or ("tool_calls" if message.get("tool_calls") else "stop")
    return {
        "id": f"chatcmpl-fake-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(request.get("model", "fake")),
        "choices": [] if item.get("no_choices") else [{"index": 0, "message": message, "finish_reason": finish,
                                                       "logprobs": None}],
        "usage": _usage(item, request, message, matched),
    }


def sse_chunks(completion: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The chunks of ``completion`` as a stream: role+content, one per tool call, finish, usage."""
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = (completion["choices"] or [{"message": {}, "finish_reason": None}])[0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    if not completion["choices"]:
        return [head | {"choices": []}, head | {"choices": [], "usage": completion["usage"]}][: 1 + include_usage]
    first = {"role": "assistant", "content": message.get("content") or ""}
    chunks = [chunk(first | {k: message[k] for k in REASONING_KEYS if k in message})]
    for index, call in enumerate(message.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{"index": index} | call]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append(head | {"choices": [], "usage": completion["usage"]})
    return chunks


def failed_stream(request: dict[str, Any], payload: dict[str, Any] | str) -> bytes:
    """A stream that starts (one content chunk) and then carries the error ``payload`` as an event."""
    head = {"id": "chatcmpl-fake-err", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": str(request.get("model", "fake"))}
    first = head | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    event = payload if isinstance(payload, dict) else {"error": {"message": payload}}
    return f"data: {json.dumps(first)}\n\ndata: {json.dumps(event)}\n\n".encode()


def missing_reasoning(messages: list[Message]) -> int | None:
    """The index of the first assistant tool-call message without ``reasoning_content``, or None."""
    return next((i for i, m in enumerate(messages) if m.get("role") == "assistant" and m.get("tool_calls")
                 and not isinstance(m.get("reasoning_content"), str)), None)


