"""The types every model backend shares: :class:`Reply`, :class:`Usage`, :class:`ToolCall`, :class:`Model`.

The bottom of the model layer (the backends import it, not the factory). Never imports litellm.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctxagent.messages import Message, ToolCall, tool_call

__all__ = ["REASONING_FIELDS", "Model", "Reply", "ToolCall", "Usage", "price_of", "read_usage", "to_stderr"]

# Assistant-message fields that carry the model's reasoning, kept and sent back as litellm expects them
# (DeepSeek/Kimi ``reasoning_content``, Anthropic ``thinking_blocks`` with signatures; agent/replies.py).
REASONING_FIELDS = ("reasoning_content", "thinking_blocks")


@dataclass(frozen=True)
class Usage:
    """Provider-reported token usage of one call (tokens) and its cost (US dollars, if known).
    ``prompt_tokens`` counts every input token; ``cached_tokens`` is the part served from the prompt cache,
    ``cache_creation_tokens`` the part written to it (0 where the provider does not report it)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    cached_tokens: int = 0
    cache_creation_tokens: int = 0


def _field(obj: Any, name: str) -> Any:
    """``obj.name`` or ``obj[name]`` (litellm objects and plain dicts alike), or None."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def token_count(*values: Any) -> int:
    """The largest of ``values`` that is a positive token count (a finite number, not a bool), as an int; else 0."""
    counts = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]
    return max((int(v) for v in counts if v > 0), default=0)


def read_usage(usage: Any, cost_usd: float | None = None) -> Usage:
    """Our :class:`Usage` from a provider's usage object or dict (OpenAI format, as litellm returns it).

    Cached and cache-written prompt tokens come from OpenAI's ``prompt_tokens_details`` or Anthropic's
    fields; litellm copies Anthropic's ``cache_read_input_tokens`` / ``cache_creation_input_tokens``
    (and DeepSeek's ``prompt_cache_hit_tokens``) into ``prompt_tokens_details`` too: the largest wins.
    """
    details = _field(usage, "prompt_tokens_details")
    cached = token_count(_field(details, "cached_tokens"), _field(usage, "cache_read_input_tokens"),
                         _field(usage, "prompt_cache_hit_tokens"))
    written = token_count(_field(usage, "cache_creation_input_tokens"), _field(details, "cache_creation_tokens"),
                          _field(details, "cache_write_tokens"))
    return Usage(token_count(_field(usage, "prompt_tokens")), token_count(_field(usage, "completion_tokens")),
                 cost_usd, cached_tokens=cached, cache_creation_tokens=written)


def to_stderr(line: str) -> None:
    """Print a backend's notice (a retry announcement) on stderr, prefixed like every ctxagent note."""
    print(f"ctxagent: {line}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Reply:
    """One assistant reply: text and/or tool calls (in call order), plus usage when reported. ``extra``:
    the reasoning (:data:`REASONING_FIELDS`), kept as it came (NO LOSS). ``written``: when the tool calls
    were read from the text (agent/text_calls.py), the text as written (``content`` is then what surrounds them)."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    written: str | None = None

    def message(self) -> Message:
        """The reply as an OpenAI-format assistant message, as it is stored and sent back (reasoning included)."""
        msg: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [tool_call(c.id, c.name, c.arguments) for c in self.tool_calls]
        msg.update({k: self.extra[k] for k in REASONING_FIELDS if self.extra.get(k) is not None})
        return msg


class Model(Protocol):
    """What the runner needs from a backend."""

    name: str

    def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> Reply:
        """One model call. Raises ``ProviderError`` (or ``ProviderContextError``) on failure."""
        ...


def price_of(model: Any, prompt_tokens: int, completion_tokens: int) -> float | None:
    """US dollars ``model`` charges for a call with these token counts, uncached (its ``price``
    method; None when it has none or no price is known)."""
    price = getattr(model, "price", None)
    return None if price is None else price(prompt_tokens, completion_tokens)
