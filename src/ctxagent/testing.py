"""A fake OpenAI-compatible chat-completions server that plays scripted replies, for tests and demos.

It lets the real litellm HTTP code run with no model behind it::

    from ctxagent.testing import FakeOpenAI, context_error

    with FakeOpenAI([{"content": "hi"}, context_error("anthropic")]) as server:
        make_model("openai/fake", api_base=server.base_url)   # http://127.0.0.1:PORT/v1

It serves ``POST /v1/chat/completions`` (and ``GET /v1/models``) over HTTP/1.1 with keep-alive;
each request consumes the next *item* of the script, in order:

- a **reply**: ``{"content": str | None, "tool_calls": [{"id": str, "name": str,
  "arguments": dict | str}], "usage": {"prompt_tokens": int, "completion_tokens": int,
  "prompt_tokens_details": {"cached_tokens": int}, ...}, "finish_reason": str, "delay_s": float}``;
  every key is optional. Mapping arguments are sent as JSON text, string arguments byte for byte
  (they may be invalid JSON on purpose). Usage fields the item gives are sent as given (extra ones,
  such as ``cache_read_input_tokens``, too); the others are counted: prompt tokens are
  :func:`ctxagent.tokens.count_messages` of the request's messages plus
  :func:`ctxagent.tokens.count_tools` of its tool schemas (as a provider counts them), completion tokens those of the
  reply's text (content plus tool-call names and arguments), and cached tokens
  (``prompt_tokens_details.cached_tokens``) follow the prompt cache below. ``"prompt_tokens":
  "uncached"`` reports the counted prompt minus its cached part, as some servers do.
  ``delay_s`` (seconds) sleeps before answering, to provoke client timeouts.
  ``reasoning_content`` (str) and ``thinking_blocks`` (list of dicts) are sent on the message (and in
  the first chunk of a stream), as DeepSeek and a LiteLLM proxy in front of Anthropic send them; their
  text counts in the completion tokens. Faults of a reply: ``"no_choices": True`` answers HTTP 200
  with ``"choices": []``; ``"cut": True`` cuts the reply mid-way: a stream stops after its first chunk,
  a plain reply after half its body, and the connection closes (Content-Length promised more).
- an **error**: ``{"error": {"status": int, "message": str, "code": ..., "type": str},
  "headers": {str: str}, "body": dict | str, "mid_stream": bool, "delay_s": float}``, answered
  with that HTTP status, those extra headers (``retry-after``, say) and an OpenAI-style error body
  ``{"error": {"message", "type", "param", "code"}}``, or ``body`` as given when the item has one
  (a dict is sent as JSON, a string as plain text: the shapes of Gemini, TGI, llama.cpp...). With
  ``mid_stream`` a streaming request gets HTTP 200 and a server-sent ``data: {"error": ...}`` event
  after a first content chunk, as servers do when a stream fails after it started; a
  non-streaming request gets the plain HTTP error. Build them with :func:`error` and
  :func:`context_error`.

Prompt cache, modelled on OpenAI's automatic one (prefixes of 1,024+ tokens, in 128-token
increments): a reply's cached tokens are the tokens (:func:`ctxagent.tokens.count_tools` of the
tools plus :func:`~ctxagent.tokens.count_message` of each message) of the longest prefix of whole
messages that, with the same model and tools, began an earlier request answered with a reply; 0 when
that is under :data:`CACHE_MIN_TOKENS`, else rounded down to a multiple of :data:`CACHE_STEP_TOKENS`
and never more than the prompt tokens.

When the script runs out the server answers HTTP 500 saying so. Like strict providers (OpenAI,
Anthropic), it rejects with HTTP 400, consuming no script item, a request whose messages break the
PAIR law (:func:`ctxagent.messages.pair_violations`), and with ``require_reasoning_content`` one that
DeepSeek's thinking mode rejects (api-docs.deepseek.com/guides/thinking_mode, "Tool calls").

Streaming: when the request says ``"stream": true`` the reply is sent as server-sent events
(``chat.completion.chunk`` objects, tool calls as indexed deltas, a usage chunk when
``stream_options.include_usage`` is set, then ``data: [DONE]``), in one response with a Content-Length.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import sys
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from ctxagent.messages import Message, content_of, pair_violations, text_of, tool_call
from ctxagent.tokens import PER_REQUEST, count_message, count_text, count_tools, reasoning_text

Item = dict[str, Any]

CACHE_MIN_TOKENS = 1024  # OpenAI caches a prompt prefix from this many tokens on...
CACHE_STEP_TOKENS = 128  # ...in increments of this many
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


_CONTEXT_ERRORS: dict[str, tuple[int, str, dict[str, Any]]] = {  # style: (status, message, error fields)
    "openai": (400, "This model's maximum context length is {limit} tokens. However, your messages resulted in "
               "{tokens} tokens. Please reduce the length of the messages.", {"code": "context_length_exceeded"}),
    "openai-request-too-large": (429, "Request too large for gpt-4o in organization org-fake on tokens per min (TPM): "
                                 "Limit {limit}, Requested {tokens}. The input or output tokens must be reduced in "
                                 "order to run successfully.", {"code": "rate_limit_exceeded", "type": "tokens"}),
    "anthropic": (400, "prompt is too long: {tokens} tokens > {limit} maximum", {}),
    "vllm": (400, "This model's maximum context length is {limit} tokens. However, you requested {tokens} tokens "
             "({messages} in the messages, 1000 in the completion). Please reduce the length of the messages or "
             "completion.", {"code": 400, "type": "BadRequestError"}),
    "ollama": (400, "the input length exceeds the context length", {}),
    "llama.cpp": (400, "the request exceeds the available context size, try increasing it",
                  {"type": "exceed_context_size_error"}),
    "llama.cpp-500": (500, "Context size has been exceeded.", {"type": "server_error"}),
}
CONTEXT_STYLES = tuple(_CONTEXT_ERRORS)


def context_error(style: str = "openai", *, tokens: int = 130_000, limit: int = 128_000) -> Item:
    """A script item for "the context is too long", worded as provider ``style`` words it.

    ``tokens`` is the request size and ``limit`` the window, both in tokens. The styles
    (:data:`CONTEXT_STYLES`) are worded in the table above; through ``openai/...`` litellm 1.110.2
    raises ``ContextWindowExceededError`` for ``openai``, ``anthropic``, ``vllm`` and ``llama.cpp``,
    ``RateLimitError`` for ``openai-request-too-large`` (OpenAI's tokens-per-minute wording: retrying
    cannot help, shrink instead), a plain ``BadRequestError`` for ``ollama`` and ``InternalServerError``
    for ``llama.cpp-500`` (older llama.cpp servers; ctxagent's table, ``agent/provider_errors.py``,
    knows it). Raises ``ValueError`` for an unknown style.
    """
    if style not in _CONTEXT_ERRORS:
        raise ValueError(f"unknown context error style {style!r}; known: {', '.join(CONTEXT_STYLES)}")
    status, message, fields = _CONTEXT_ERRORS[style]
    return error(status, message.format(tokens=tokens, limit=limit, messages=tokens - 1000), **fields)


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
    """The usage object: fields the item gives, the rest counted (tokens; see module doc). The first
    ``matched`` prefix keys of ``request`` (:func:`prefix_keys`) were seen before: they are cached."""
    model = str(request.get("model", ""))
    given = dict(item.get("usage") or {})
    uncached = given.get("prompt_tokens") == "uncached"  # a server that reports only the uncached part
    if uncached:
        del given["prompt_tokens"]
    tools = count_tools(request.get("tools") or [], model)
    counts = [_message_tokens(m, model) for m in request.get("messages") or []]
    prompt = int(given.get("prompt_tokens", PER_REQUEST + tools + sum(counts)))
    reply = int(given.get("completion_tokens", count_text(reasoning_text(message) + text_of(message), model)))
    prefix = min(prompt, tools + sum(counts[: matched - 1])) if matched else 0
    cached = 0 if prefix < CACHE_MIN_TOKENS else prefix // CACHE_STEP_TOKENS * CACHE_STEP_TOKENS
    if uncached:
        prompt -= cached
    return {"prompt_tokens": prompt, "completion_tokens": reply, "total_tokens": prompt + reply,
            "prompt_tokens_details": {"cached_tokens": cached}} | given


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


def _chunk(head: dict[str, Any], delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def sse_chunks(completion: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The chunks of ``completion`` as a stream: role+content, one per tool call, finish, usage."""
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks = [head | {"choices": []}]  # a completion without choices
    if completion["choices"]:
        choice = completion["choices"][0]
        message = choice["message"]
        first = {"role": "assistant", "content": message.get("content") or ""}
        chunks = [_chunk(head, first | {k: message[k] for k in REASONING_KEYS if k in message})]
        chunks += [_chunk(head, {"tool_calls": [{"index": i} | call]})
                   for i, call in enumerate(message.get("tool_calls") or [])]
        chunks.append(_chunk(head, {}, choice["finish_reason"]))
    if include_usage:
        chunks.append(head | {"choices": [], "usage": completion["usage"]})
    return chunks


def failed_stream(request: dict[str, Any], payload: dict[str, Any] | str) -> bytes:
    """A stream that starts (one content chunk) and then carries the error ``payload`` as an event."""
    head = {"id": "chatcmpl-fake-err", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": str(request.get("model", "fake"))}
    event = payload if isinstance(payload, dict) else {"error": {"message": payload}}
    return _sse([_chunk(head, {"role": "assistant", "content": ""}), event], done=False)


def missing_reasoning(messages: list[Message]) -> int | None:
    """The index of the first assistant tool-call message without ``reasoning_content``, or None."""
    return next((i for i, m in enumerate(messages) if m.get("role") == "assistant" and m.get("tool_calls")
                 and not isinstance(m.get("reasoning_content"), str)), None)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real clients expect
    disable_nagle_algorithm = True  # otherwise ~40 ms per request with keep-alive (FIELD-NOTES.md)
    timeout = 30  # seconds an idle keep-alive connection may hold a thread
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request log lines http.server writes to stderr."""

    def setup(self) -> None:
        super().setup()
        with self.server.fake._lock:
            self.server.fake._connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.fake._lock:
                self.server.fake._connections.discard(self.connection)

    def _send(self, status: int, body: bytes, content_type: str = "application/json",
              headers: dict[str, str] | None = None, length: int | None = None) -> None:
        """Answer ``body``; ``length``: the Content-Length promised instead (a reply cut short)."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode())

    def _other(self, method: str) -> None:
        """Answer a request other than a chat completion: an ``info`` route (the model list by default), else 404."""
        route = self.path.split("?", 1)[0].rstrip("/")
        fake = self.server.fake
        with fake._lock:
            fake.info_requests.append(f"{method} {route}")
        if route in fake.info:
            self._send_json(200, fake.info[route])
        else:
            self._send_json(404, error_body(f"no route {method} {self.path}", type="not_found_error"))

    def do_GET(self) -> None:
        self._other("GET")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._other("POST")
            return
        try:
            request = json.loads(raw)
        except ValueError as err:
            self._send_json(400, error_body(f"request body is not JSON: {err}"))
            return
        status, payload, headers, fault = self.server.fake._answer(request)
        stream = bool(request.get("stream"))
        if stream and status == 200:
            assert isinstance(payload, dict), "a 200 answer is a completion object"
            include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
            body, kind = _sse(sse_chunks(payload, include_usage)), "text/event-stream"
        elif stream and fault == "mid_stream":
            status, body, kind = 200, failed_stream(request, payload), "text/event-stream"
        elif isinstance(payload, str):
            body, kind = payload.encode(), "text/plain; charset=utf-8"
        else:
            body, kind = json.dumps(payload).encode(), "application/json"
        if fault == "cut":
            self._send_cut(body, kind, stream)
        else:
            self._send(status, body, kind, headers)

    def _send_cut(self, body: bytes, kind: str, stream: bool) -> None:
        """Half of a reply's ``body``, then the connection closes: a stream's first event, or half of JSON."""
        part = body[: body.index(b"\n\n") + 2] if stream else body[: len(body) // 2]  # JSON has no raw newline
        self._send(200, part, kind, length=len(body))
        self.wfile.flush()
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


def _sse(chunks: list[dict[str, Any]], done: bool = True) -> bytes:
    """``chunks`` as server-sent events, then ``data: [DONE]`` when ``done``."""
    return ("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + ("data: [DONE]\n\n" if done else "")).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAI

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay silent when a client hangs up (a timed-out call); report anything else."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeOpenAI:
    """A local OpenAI-compatible server playing ``replies`` (script items, see the module doc).

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Attributes:

    - ``base_url``: ``"http://127.0.0.1:PORT/v1"``, for ``api_base``.
    - ``requests``: every parsed request body received, oldest first (rejected ones included).
    - ``rejected``: the request bodies rejected for breaking the PAIR law.
    - ``served``: how many script items have been played.
    - ``cached``: per request (same order as ``requests``), the cached prompt tokens reported in its
      usage (``prompt_tokens_details.cached_tokens``; 0 for errors and rejections).

    ``check_pairs=False`` accepts PAIR-breaking requests (a lax provider); ``require_reasoning_content``
    rejects assistant tool-call messages sent back without ``reasoning_content`` (HTTP 400, in
    DeepSeek's words).
    ``routes`` maps a text to its own script: a request whose first user message contains the text
    is answered from that script (in order) instead of the main one, so agents that run at the same
    time (sub-agents) each get their own replies whatever order their requests arrive in.
    ``info`` maps a path (``/props``, ``/api/show``, ``/v1/models``) to the JSON object a ``GET`` (or
    ``POST``) of it answers, as a llama.cpp, Ollama, vLLM or LM Studio server would; every request
    other than a chat completion is listed in ``info_requests`` (``"GET /props"``).
    """

    def __init__(self, replies: Iterable[Item] = (), *, check_pairs: bool = True,
                 require_reasoning_content: bool = False, routes: dict[str, list[Item]] | None = None,
                 info: dict[str, Any] | None = None):
        self.script: list[Item] = [checked_item(item) for item in replies]
        self._routes = {key: iter([checked_item(item) for item in items]) for key, items in (routes or {}).items()}
        self.check_pairs = check_pairs
        self.require_reasoning_content = require_reasoning_content
        self.requests: list[dict[str, Any]] = []
        self.info = {"/v1/models": {"object": "list", "data": [{"id": "fake", "object": "model"}]}}
        self.info.update({path.rstrip("/"): body for path, body in (info or {}).items()})
        self.info_requests: list[str] = []
        self.rejected: list[dict[str, Any]] = []
        self.served = 0
        self.cached: list[int] = []
        self._prefixes: set[str] = set()  # prefix keys of requests answered with a reply (the prompt cache)
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._server: _Server | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of the running server (``.../v1``). Raises ``RuntimeError`` if stopped."""
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not running")
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # AF_INET: a str host
        return f"http://{host}:{port}/v1"

    def start(self) -> Self:
        """Listen on 127.0.0.1 (a free port) and serve in a daemon thread. Returns ``self``."""
        if self._server is None:
            self._server = _Server(("127.0.0.1", 0), _Handler)
            self._server.fake = self
            threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="FakeOpenAI",
                             daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving (``shutdown`` returns when the serving thread's loop has) and close every open
        connection, so pooled clients see a dead server."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add(self, *items: Item) -> None:
        """Append script items (played after the ones already queued)."""
        checked = [checked_item(item) for item in items]
        with self._lock:
            self.script.extend(checked)

    def reset(self, *items: Item) -> None:
        """Forget every request and script item, then queue ``items``: one server for many tests.

        (litellm keeps one pooled client per ``api_base``; hundreds of short-lived servers in one
        process leave it evicting clients whose sockets were never closed.)
        """
        checked = [checked_item(item) for item in items]
        with self._lock:
            self.script, self.served = checked, 0
            self.requests.clear()
            self.info_requests.clear()
            self.rejected.clear()
            self.cached.clear()
            self._prefixes.clear()

    @property
    def remaining(self) -> int:
        """Script items not played yet."""
        return len(self.script) - self.served

    # -- request handling (called from handler threads)

    def _answer(self, request: dict[str, Any]) -> tuple[int, dict[str, Any] | str, dict[str, str], str | None]:
        """The HTTP status, body (JSON object or text), extra headers and fault (``"cut"``, ``"mid_stream"``
        or None: the item's) of the answer to one chat-completions request."""
        messages = request.get("messages") or []
        rejection = None
        if self.require_reasoning_content and (missing := missing_reasoning(messages)) is not None:
            rejection = error_body(DEEPSEEK_MISSING_REASONING.format(index=missing), code="invalid_request_error")
        elif self.check_pairs and (problems := pair_violations(messages)):
            rejection = error_body("Invalid 'messages': tool calls and tool results do not pair: "
                                   + "; ".join(problems), param="messages")
        keys = prefix_keys(request)
        with self._lock:
            self.requests.append(request)
            self.cached.append(0)
            index = len(self.cached) - 1
            if rejection is not None:
                self.rejected.append(request)
                return 400, rejection, {}, None
            number = self.served + 1
            item = self._next_item(messages)
        if item is None:
            message = f"FakeOpenAI script exhausted: all {len(self.script)} scripted replies were used"
            return 500, error_body(message, type="server_error"), {}, None
        time.sleep(float(item.get("delay_s") or 0))
        if "error" in item:
            spec = item["error"]
            message, kind = str(spec.get("message", "error")), spec.get("type", "invalid_request_error")
            body = item.get("body") or error_body(message, type=kind, code=spec.get("code"))
            fault = "mid_stream" if item.get("mid_stream") else None
            return int(spec.get("status", 400)), body, dict(item.get("headers") or {}), fault
        with self._lock:
            matched = next((i for i, key in enumerate(keys) if key not in self._prefixes), len(keys))
            self._prefixes.update(keys)
        answer = completion(item, request, number, matched)
        with self._lock:
            self.cached[index] = reported_cached(answer["usage"])
        return 200, answer, {}, "cut" if item.get("cut") else None

    def _next_item(self, messages: list[Message]) -> Item | None:
        """The next item of the script ``messages`` are routed to, played (None when it has run out): the
        first route whose key the first user message contains, else the main script."""
        first = next((m for m in messages if m.get("role") == "user"), {})
        route = next((key for key in self._routes if key in content_of(first)), None)
        if route is not None:
            return next(self._routes[route], None)
        if self.served >= len(self.script):
            return None
        self.served += 1
        return self.script[self.served - 1]
