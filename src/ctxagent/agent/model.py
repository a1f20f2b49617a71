"""The small model interface every backend sits behind, and the factory that picks one.

A backend turns a request (messages, tool schemas) into one :class:`Reply`. Backends:

- ``scripted:PATH`` — :class:`ctxagent.agent.scripted.ScriptedModel`, replies read from a YAML file.
- anything else — :class:`ctxagent.agent.litellm_backend.LiteLLMModel`, any litellm model string.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctxagent.messages import Message, ToolCall, tool_call

__all__ = ["Model", "Reply", "ToolCall", "Usage", "make_model"]


@dataclass(frozen=True)
class Usage:
    """Provider-reported token usage of one call (tokens) and its cost (US dollars, if known).

    ``prompt_tokens`` counts every input token, cached or not. ``cached_tokens`` is the part the
    provider served from its prompt cache (OpenAI ``prompt_tokens_details.cached_tokens``, Anthropic
    ``cache_read_input_tokens``); ``cache_creation_tokens`` the part written to the cache (Anthropic
    ``cache_creation_input_tokens``; 0 where the provider does not report it).
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    cached_tokens: int = 0
    cache_creation_tokens: int = 0


@dataclass(frozen=True)
class Reply:
    """One assistant reply: text and/or tool calls (in call order), plus usage when reported."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def message(self) -> Message:
        """The reply as an OpenAI-format assistant message, as it is stored and sent back."""
        msg: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [tool_call(c.id, c.name, c.arguments) for c in self.tool_calls]
        return msg


class Model(Protocol):
    """What the runner needs from a backend."""

    name: str

    def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> Reply:
        """One model call. Raises ``ProviderError`` (or ``ProviderContextError``) on failure."""
        ...


def make_model(spec: str, *, api_base: str | None = None, replies_done: int = 0,
               timeout_s: float = 120.0, retries: int = 2, max_output_tokens: int | None = None,
               prompt_cache: str = "auto") -> Model:
    """The backend for ``spec``: ``scripted:PATH`` or a litellm model string.

    ``replies_done`` is how many assistant replies the session already holds (a scripted model
    resumes from there). ``prompt_cache`` (``"auto"`` or ``"off"``, the profile's ``prompt_cache``)
    says whether a litellm model places prompt-cache breakpoints for providers that need them
    (Anthropic); a scripted model ignores it. ``timeout_s`` is seconds per HTTP attempt.
    Raises ``UsageError`` for an unreadable script, ``ValueError`` for an unknown ``prompt_cache``.
    """
    if spec.startswith("scripted:"):
        from ctxagent.agent.scripted import ScriptedModel

        return ScriptedModel.from_file(spec.removeprefix("scripted:"), start=replies_done)
    from ctxagent.agent.litellm_backend import LiteLLMModel

    return LiteLLMModel(spec, api_base=api_base, timeout_s=timeout_s, retries=retries,
                        max_output_tokens=max_output_tokens, prompt_cache=prompt_cache)
