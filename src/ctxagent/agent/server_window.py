"""The context window a model server says it serves, for a model litellm's map does not know.

Local servers run a model with a window of their own choosing (llama.cpp's ``-c``, Ollama's ``num_ctx``),
often smaller than the model was trained for. :func:`server_window` asks the server, one request per kind
of server (the table in docs/local-models.md, "The window from the server"; sources: llama.cpp
tools/server/README.md ``/props``, vLLM's ``ModelCard.max_model_len``, LM Studio's ``/api/v0/models``,
Ollama's docs/api.md ``/api/show`` and ``/api/ps``). Ollama's trained length is never the window (it
serves 2,048 or 4,096 tokens unless ``num_ctx`` or ``OLLAMA_CONTEXT_LENGTH`` says otherwise).

Standard library only (``urllib``): a run asks this before anything imports litellm; proxies come from
the environment as litellm's HTTP client takes them (``NO_PROXY`` honoured).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxagent.agent.model_types import token_count

TIMEOUT_S = 2.0  # seconds one request may take (a local server answers in milliseconds)
DEADLINE_S = 5.0  # seconds all the requests together may take
MAX_BODY_BYTES = 8 << 20  # a model list larger than this (bytes) is not read
MODELS_FIELDS = ("max_model_len", "context_length", "context_window", "max_context_length", "meta.n_ctx")  # dot: nested
OLLAMA_PROVIDERS = ("ollama/", "ollama_chat/")
OLLAMA_DEFAULT_BASE = "http://localhost:11434"  # litellm's default for ollama/ models without api_base


@dataclass(frozen=True)
class Found:
    """What the server said: ``tokens`` of context window, and ``source`` ("GET URL: FIELD")."""

    tokens: int
    source: str


@dataclass
class Asked:
    """The requests made and what came back of each, for the message when no window was found."""

    answers: list[str] = field(default_factory=list)
    trained: int | None = None  # Ollama: the length the model was trained for (never taken as the window)
    down: bool = False  # the server did not answer at all

    def text(self) -> str:
        """One line: each request and its outcome, ``;``-separated."""
        return "; ".join(self.answers)


def server_root(api_base: str) -> str:
    """``api_base`` without a trailing ``/v1`` (and slash): where llama.cpp, Ollama and LM Studio
    serve their own endpoints (``http://127.0.0.1:8080/v1`` -> ``http://127.0.0.1:8080``)."""
    return api_base.rstrip("/").removesuffix("/v1")


def default_base(model: str) -> str | None:
    """The server a model string goes to without ``api_base`` (Ollama's local default), else None."""
    return OLLAMA_DEFAULT_BASE if model.startswith(OLLAMA_PROVIDERS) else None


def server_window(api_base: str, model: str, *, timeout_s: float = TIMEOUT_S,
                  deadline_s: float = DEADLINE_S) -> tuple[Found | None, Asked]:
    """The context window (tokens) the server at ``api_base`` says it serves ``model`` (a litellm model
    string; ``ollama/`` asks Ollama only) with. Never raises. Returns ``(Found, Asked)`` at the first
    request that names a window, else ``(None, Asked)``: what each request got."""
    client = _Client(timeout_s, time.monotonic() + deadline_s)
    base, root = api_base.rstrip("/"), server_root(api_base)
    name = model.split("/", 1)[-1]  # the name on its server: openai/qwen2.5 -> qwen2.5, ollama/llama3:8b -> llama3:8b
    probes: list[Callable[[], Found | None]] = [
        lambda: _window(client, f"{root}/props", ("default_generation_settings.n_ctx",)),  # llama.cpp: a slot's
        lambda: _window(client, f"{base}/models", MODELS_FIELDS, name),  # vLLM, SGLang...: OpenAI's model list
        lambda: _window(client, f"{root}/api/v0/models", ("loaded_context_length",), name),  # LM Studio, loaded only
        lambda: _ollama(client, root, name)]  # Ollama
    for probe in probes[-1:] if model.startswith(OLLAMA_PROVIDERS) else probes:
        found = probe()
        if found is not None or client.asked.down or time.monotonic() >= client.deadline:
            break
    return found, client.asked


def describe_missing(model: str, api_base: str, asked: Asked) -> str:
    """The sentence a ``UsageError`` gives when the server did not say its window."""
    said = f"the server at {api_base} did not {'answer' if asked.down else 'say it'} ({asked.text()})"
    trained = (f"; Ollama says the model was trained for {asked.trained:,} tokens, but it serves a smaller "
               "window unless num_ctx (Modelfile) or OLLAMA_CONTEXT_LENGTH sets one"
               if asked.trained else "")
    return f"litellm does not know the context window of {model!r}, and {said}{trained}"


class _Client:
    """JSON over HTTP with a per-request timeout and a deadline for all; each outcome kept in :attr:`asked`."""

    def __init__(self, timeout_s: float, deadline: float):
        self.timeout_s, self.deadline = timeout_s, deadline
        self.asked = Asked()

    def get(self, url: str, body: dict[str, Any] | None = None) -> Any:
        """The JSON body of ``GET url`` (``POST`` with ``body``), or None (the outcome kept)."""
        method = "POST" if body is not None else "GET"
        left = self.deadline - time.monotonic()
        if self.asked.down or left <= 0:
            return None
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={"Accept": "application/json", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=min(self.timeout_s, left)) as response:
                raw = response.read(MAX_BODY_BYTES + 1)
        except urllib.error.HTTPError as err:
            err.close()  # it holds the response, and with it the connection
            return self.miss(url, f"HTTP {err.code}", method)
        except (urllib.error.URLError, OSError, ValueError) as err:  # refused, timed out, bad URL
            self.asked.down = True
            return self.miss(url, str(getattr(err, "reason", err)), method)
        if len(raw) > MAX_BODY_BYTES:
            return self.miss(url, f"more than {MAX_BODY_BYTES >> 20} MB", method)
        try:
            return json.loads(raw)
        except ValueError:
            return self.miss(url, "not JSON", method)

    def miss(self, url: str, what: str, method: str = "GET") -> None:
        self.asked.answers.append(f"{method} {url}: {what}")


def _path(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _window(client: _Client, url: str, fields: tuple[str, ...], name: str | None = None, key: str = "data",
            id_keys: tuple[str, ...] = ("id",)) -> Found | None:
    """The first of ``fields`` (dot: nested) that holds a window in the JSON of ``GET url``, or with
    ``name`` in the entry for ``name`` of its model list ``key`` (the entry's id: any of ``id_keys``)."""
    data = client.get(url)
    if data is None:
        return None
    if name is not None:
        items = data.get(key) if isinstance(data, dict) else None
        data = _entry([item for item in items or [] if isinstance(item, dict)], name, id_keys)
        if data is None:
            client.miss(url, f"no entry for {name!r}")
            return None
    for label in fields:
        if tokens := token_count(_path(data, *label.split("."))):
            return Found(tokens, f"GET {url}: {label}")
    client.miss(url, f"no window field for {data.get(id_keys[0])!r}" if name else f"no {fields[0]}")
    return None


def _entry(entries: list[dict[str, Any]], name: str, id_keys: tuple[str, ...]) -> dict[str, Any] | None:
    """The entry whose id (any of ``id_keys``) is ``name``; the only entry when there is one."""
    names = {name, f"{name}:latest"}  # Ollama adds the tag a name was given without
    for entry in entries:
        if any(entry.get(k) in names for k in id_keys):
            return entry
    return entries[0] if len(entries) == 1 else None


def _ollama(client: _Client, root: str, name: str) -> Found | None:
    """Ollama: ``num_ctx`` from ``POST /api/show``'s parameters, else the loaded model's
    ``context_length`` from ``GET /api/ps``; the trained length is kept for the message only."""
    url = f"{root}/api/show"
    shown = client.get(url, {"model": name})
    if shown is None:
        return None
    parameters = _path(shown, "parameters")
    for line in (parameters if isinstance(parameters, str) else "").splitlines():
        key, _, value = " ".join(line.split()).partition(" ")
        if key == "num_ctx" and value.isdecimal() and (tokens := int(value)):
            return Found(tokens, f"POST {url}: parameters num_ctx")
    info = _path(shown, "model_info")
    if isinstance(info, dict):
        client.asked.trained = next((token_count(v) for k, v in info.items() if k.endswith(".context_length")),
                                    None)
    client.miss(url, "no num_ctx in parameters", "POST")
    return _window(client, f"{root}/api/ps", ("context_length",), name, "models", ("name", "model"))
