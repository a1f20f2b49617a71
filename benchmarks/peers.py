"""Peers driven through ``harness.drive`` and checked like ctxagent's requests (``harness.Checks``):
LangChain's ``trim_messages`` and context editing, and deepagents' middleware. Each is optional
(the ``bench`` extra); a missing one is reported, not faked.

Our OpenAI-format messages are converted once with ``langchain_core.messages.convert_to_messages``
(a LangChain user holds LangChain messages), each tagged with ``id = "m<seq>"`` so the output can be
mapped back; what a peer returns is converted back with ``convert_to_openai_messages`` and checked
like ours (PAIR, HEAD, budget). Token counts are ctxagent's tiktoken counts (stored per message, a
fresh count for any message the peer rewrote), passed to the peers as their ``token_counter``.
Each peer runs with its defaults on the raw tool outputs, and (issue 18) with the same offloading
ctxagent gets, as its users would configure it: LangChain context editing on the outputs as
ctxagent's offloading leaves them (a preview and a handle over the profile's limit, the handles
readable with ``grep_output``), deepagents with its eviction (``FilesystemMiddleware``) at
ctxagent's offload limit instead of its default 20,000 tokens.

OpenHands SDK: not run; ``openhands-sdk`` requires Python >= 3.12 (every release on PyPI), and this
project's machines and CI run Python 3.11 (see benchmarks/README.md).
"""

from __future__ import annotations

import importlib.metadata
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import MODEL, FakeSummarizer, View
from ctxagent.messages import Message
from ctxagent.tokens import count_message


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def available() -> dict[str, str | None]:
    """Installed versions of the peer packages (None: not installed)."""
    return {d: version(d) for d in ("langchain-core", "langchain", "deepagents", "openhands-sdk")}


class _LangChainBase:
    """Holds the history as LangChain messages plus what maps them back to ours."""

    summarizer: FakeSummarizer | None = None

    def __init__(self, name: str, tools: dict[str, tuple[Message, int]], outputs: Path | None = None):
        self.name = name
        self._tools = tools
        self._outputs = outputs  # the output store of ctxagent's offloading, when the peer gets it
        self.lc: list[Any] = []
        self.orig: dict[str, tuple[Any, Message, int]] = {}  # id -> (lc message, our message, tokens)
        self.system: Any = None

    def add(self, message: Message, tokens: int, seq: int, turn: int) -> None:
        from langchain_core.messages import convert_to_messages

        lc = self.convert(convert_to_messages([message])[0], message)
        lc.id = f"m{seq}"
        self.orig[lc.id] = (lc, message, tokens)
        if message["role"] == "system" and self.system is None:
            self.system = lc
        else:
            self.lc.append(lc)

    def convert(self, lc: Any, message: Message) -> Any:
        return lc

    def tool_message(self, call_id: str) -> tuple[Message, int]:
        return self._tools[call_id]

    def unchanged(self, m: Any) -> tuple[Message, int] | None:
        known = self.orig.get(m.id) if getattr(m, "id", None) else None
        if known is None:
            return None
        lc, message, tokens = known
        if m is lc or (m.content == lc.content and getattr(m, "tool_calls", None) == getattr(lc, "tool_calls", None)):
            return message, tokens
        return None

    def tokens_of(self, m: Any) -> int:
        same = self.unchanged(m)
        if same is not None:
            return same[1]
        from langchain_core.messages import convert_to_openai_messages

        return count_message(convert_to_openai_messages([m])[0], MODEL)

    def counter(self, messages: Sequence[Any]) -> int:
        return sum(self.tokens_of(m) for m in messages)

    def back(self, messages: Sequence[Any]) -> View:
        from langchain_core.messages import convert_to_openai_messages

        out: list[Message] = []
        tokens: list[int] = []
        for m in messages:
            same = self.unchanged(m)
            if same is None:
                converted = convert_to_openai_messages([m])[0]
                same = (converted, count_message(converted, MODEL))
            out.append(same[0])
            tokens.append(same[1])
        return View(out, tokens)

    def stored_texts(self, view_text: str) -> list[str]:
        return list(self.stored_refs(view_text).values())

    def stored_refs(self, view_text: str) -> dict[str, str]:
        from benchmarks.harness import store_refs

        return store_refs(self._outputs, view_text) if self._outputs else {}

    def tool_context(self) -> Any:
        from benchmarks.harness import tool_context

        return tool_context(self._outputs) if self._outputs else None


class TrimMessages(_LangChainBase):
    """``langchain_core.messages.trim_messages(strategy="last", include_system=True, allow_partial=False,
    start_on=...)`` on every request, ``max_tokens`` for the messages."""

    def __init__(self, name: str, tools: dict[str, tuple[Message, int]], *, max_tokens: int,
                 start_on: str | None = "human"):
        super().__init__(name, tools)
        self.max_tokens = max_tokens
        self.start_on = start_on

    def view(self, turn: int) -> View:
        from langchain_core.messages import trim_messages

        trimmed = trim_messages([self.system, *self.lc], max_tokens=self.max_tokens, token_counter=self.counter,
                                strategy="last", include_system=True, allow_partial=False, start_on=self.start_on)
        return self.back(trimmed)


class _FakeModel:
    """Makes a langchain fake chat model that has a profile (window) and is never called."""

    @staticmethod
    def make(window: int) -> Any:
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

        return GenericFakeChatModel(messages=iter(()), profile={"max_input_tokens": window})


def _request(model: Any, system: Any, messages: list[Any], state: dict[str, Any], max_output: int) -> Any:
    from langchain.agents.middleware.types import ModelRequest

    return ModelRequest(model=model, messages=messages, system_message=system, state=state, tools=[],
                        model_settings={"max_tokens": max_output})


class _Capture:
    """The ``handler`` a middleware calls with the final request: records it, answers nothing."""

    def __init__(self) -> None:
        self.request: Any = None

    def __call__(self, request: Any) -> Any:
        from langchain.agents.middleware.types import ModelResponse
        from langchain_core.messages import AIMessage

        self.request = request
        return ModelResponse(result=[AIMessage(content="")])


class ClearToolUses(_LangChainBase):
    """LangChain's ``ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger, keep=3)])`` (Anthropic's
    ``clear_tool_uses`` semantics), run through its real ``wrap_model_call`` on every request."""

    def __init__(self, name: str, tools: dict[str, tuple[Message, int]], *, window: int, trigger: int,
                 max_output: int = 4096, outputs: Path | None = None):
        from langchain.agents.middleware.context_editing import ClearToolUsesEdit, ContextEditingMiddleware

        super().__init__(name, tools, outputs)
        self.middleware = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=trigger, keep=3)],
                                                   token_counter=self.counter)
        self.model = _FakeModel.make(window)
        self.max_output = max_output

    def view(self, turn: int) -> View:
        capture = _Capture()
        self.middleware.wrap_model_call(_request(self.model, self.system, self.lc, {}, self.max_output), capture)
        return self.back([self.system, *capture.request.messages])


_DA_PATH = re.compile(r"/large_tool_results/[A-Za-z0-9_.-]+")


class DeepAgents(_LangChainBase):
    """deepagents' context management without an LLM: ``FilesystemMiddleware``'s eviction of tool
    results over 20,000 tokens (4 characters a token) to a real ``FilesystemBackend``, and
    ``SummarizationMiddleware`` with deepagents' defaults for a model whose profile gives the window
    (trigger at 85% of it, keep 10%, argument truncation), its summary written by the same fake
    summarizer as ctxagent's LLM strategies (a ``summarizer=`` function), run through its real
    ``wrap_model_call`` with the state (summarization event) carried from request to request."""

    def __init__(self, name: str, tools: dict[str, tuple[Message, int]], *, window: int, root: Path,
                 summarize: bool = True, max_output: int = 4096, evict_tokens: int = 20_000):
        from deepagents.backends import FilesystemBackend
        from deepagents.middleware.filesystem import FilesystemMiddleware
        from deepagents.middleware.summarization import SummarizationMiddleware, compute_summarization_defaults

        super().__init__(name, tools)
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.backend = FilesystemBackend(root_dir=str(root), virtual_mode=True)
        self.fs = FilesystemMiddleware(backend=self.backend, tool_token_limit_before_evict=evict_tokens)
        self.model = _FakeModel.make(window)
        self.max_output = max_output
        self.summarizer = FakeSummarizer() if summarize else None
        self.state: dict[str, Any] = {}
        self.sm = None
        if summarize:
            d = compute_summarization_defaults(self.model)
            self.sm = SummarizationMiddleware(model=self.model, backend=self.backend, trigger=d["trigger"],
                                              keep=d["keep"], truncate_args_settings=d["truncate_args_settings"],
                                              token_counter=self.counter, summarizer=self._summary)
        self._evicted: dict[str, tuple[Message, int]] = {}

    def _summary(self, messages: Sequence[Any]) -> str:
        from langchain_core.messages import get_buffer_string

        assert self.summarizer is not None
        return self.summarizer("Summarize the conversation.\n\n" + get_buffer_string(list(messages)), 1000)

    def convert(self, lc: Any, message: Message) -> Any:
        from langchain_core.messages import ToolMessage

        if isinstance(lc, ToolMessage):
            evicted, done = self.fs._process_large_message(lc, self.backend)
            if done:
                return evicted
        return lc

    def add(self, message: Message, tokens: int, seq: int, turn: int) -> None:
        super().add(message, tokens, seq, turn)
        lc = self.lc[-1] if self.lc else None
        if lc is not None and message.get("role") == "tool" and lc.content != message.get("content"):
            # evicted: our stored entry must describe what deepagents keeps, not the raw output
            from langchain_core.messages import convert_to_openai_messages

            converted = convert_to_openai_messages([lc])[0]
            self.orig[lc.id] = (lc, converted, count_message(converted, MODEL))

    def view(self, turn: int) -> View:
        if self.sm is None:
            return self.back([self.system, *self.lc])
        capture = _Capture()
        request = _request(self.model, self.system, self.lc, self.state, self.max_output)
        response = self.sm.wrap_model_call(request, capture)
        command = getattr(response, "command", None)
        update = dict(getattr(command, "update", None) or {})
        replacements = update.pop("messages", None) or []
        self.state.update(update)
        by_id = {m.id: m for m in replacements if getattr(m, "id", None)}
        if by_id:
            self.lc = [by_id.get(m.id, m) for m in self.lc]
        view = self.back([self.system, *capture.request.messages])
        view.compactions = 1 if "_summarization_event" in update else 0
        return view

    def stored_refs(self, view_text: str) -> dict[str, str]:
        out = {}
        for path in set(_DA_PATH.findall(view_text)):
            file = self.root / path.lstrip("/")
            if file.is_file():
                out[path] = file.read_text(encoding="utf-8", errors="replace")
        return out

    def tool_context(self) -> Any:
        return None  # deepagents' own files: benchmarks/reach.py searches them like its grep tool

    def search_everything(self, keywords: str, pattern: str, value: str) -> bool:
        """deepagents' ``grep`` tool over ``/large_tool_results/`` (its prompt says to when the path is
        not known): ``value`` among its first 1,000 matching lines."""
        from benchmarks.reach import grep_files

        return grep_files(self.root / "large_tool_results", pattern, value)


def timed_import() -> dict[str, float]:
    """Seconds to import each peer's modules once (reported; not part of per-turn overhead)."""
    out = {}
    for label, modules in (("langchain-core", ["langchain_core.messages"]),
                           ("langchain", ["langchain.agents.middleware.context_editing"]),
                           ("deepagents", ["deepagents.middleware.summarization", "deepagents.middleware.filesystem"])):
        start = time.perf_counter()
        try:
            for module in modules:
                __import__(module)
        except ImportError:
            continue
        out[label] = time.perf_counter() - start
    return out
