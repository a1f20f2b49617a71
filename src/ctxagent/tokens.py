"""Token counting: tiktoken encodings loaded offline, per-message framing, calibration.

All counts here are *tokens*, never characters. Encodings come from tiktoken; offline, tiktoken
cannot download them, so we point ``TIKTOKEN_CACHE_DIR`` at the copies that ship inside the
installed litellm wheel (found with ``importlib.util.find_spec``, without importing litellm, which
costs seconds; FIELD-NOTES.md). ``o200k_base`` is used for GPT-4o-era and unknown models,
``cl100k_base`` for GPT-4/3.5-era ones. For non-OpenAI models the count is an estimate; the
runner calibrates it with the provider's reported prompt tokens (see :func:`calibration`).

Per-message framing follows OpenAI's published counting recipe (cookbook "How to count tokens with
tiktoken"): 3 tokens per message, 3 to prime the reply, plus the text.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ctxagent.messages import Message, text_of

PER_MESSAGE = 3  # tokens of role markers around each message (OpenAI cookbook)
PER_REQUEST = 3  # tokens that prime the assistant reply
CHUNK_CHARS = 64 * 1024  # tiktoken is superlinear on one huge line and panics on 1M spaces


def _bundled_tokenizer_dir() -> str | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return str(path) if path.is_dir() else None


@functools.cache
def encoding(name: str = "o200k_base") -> Any:
    """The tiktoken encoding ``name``, loaded from litellm's bundled copy when offline (through
    :mod:`ctxagent.bpe_cache`, which keeps the parsed file between processes)."""
    from ctxagent import bpe_cache

    bundled = _bundled_tokenizer_dir()
    if bundled and not os.environ.get("TIKTOKEN_CACHE_DIR"):
        os.environ["TIKTOKEN_CACHE_DIR"] = bundled
    return bpe_cache.encoding(name, os.environ.get("TIKTOKEN_CACHE_DIR"))


def encoding_for(model: str) -> str:
    """The tiktoken encoding name used to count tokens for ``model`` (a litellm model string)."""
    base = model.rsplit("/", 1)[-1].lower()
    if base.startswith(("gpt-4-", "gpt-4", "gpt-3.5", "text-embedding")) and not base.startswith(
        ("gpt-4o", "gpt-4.1", "gpt-4.5")
    ):
        return "cl100k_base"
    return "o200k_base"


def count_text(text: str, model: str = "") -> int:
    """Tokens in ``text`` (no message framing). Long text is cut into 64 KiB chunks first."""
    if not text:
        return 0
    enc = encoding(encoding_for(model))
    return sum(
        len(enc.encode_ordinary(text[i : i + CHUNK_CHARS])) for i in range(0, len(text), CHUNK_CHARS)
    )


def reasoning_text(message: Message) -> str:
    """The reasoning an assistant message carries back to the provider, as text ("" when none).

    ``reasoning_content`` (DeepSeek, Kimi, vLLM), or else the ``thinking`` text of Anthropic
    ``thinking_blocks``: litellm fills ``reasoning_content`` with the same thinking the blocks hold,
    which counts once. Signatures and ``redacted_thinking`` data are opaque (encrypted), not counted.
    """
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        return reasoning
    blocks = [b.get("thinking") for b in message.get("thinking_blocks") or [] if isinstance(b, dict)]
    return "\n".join(t for t in blocks if isinstance(t, str) and t)


def count_message(message: Message, model: str = "") -> int:
    """Tokens one message costs in a request: its text and reasoning plus :data:`PER_MESSAGE` framing tokens."""
    extra = 1 if message.get("name") else 0
    tool_id = message.get("tool_call_id") or ""
    ids = "".join(c.get("id", "") for c in message.get("tool_calls") or [])
    return PER_MESSAGE + extra + count_text(reasoning_text(message) + text_of(message) + tool_id + ids, model)


def count_messages(messages: Iterable[Message], model: str = "") -> int:
    """Tokens of a whole request's messages, including :data:`PER_REQUEST`."""
    return PER_REQUEST + sum(count_message(m, model) for m in messages)


def count_tools(tool_specs: Sequence[dict[str, Any]], model: str = "") -> int:
    """Tokens the tool schemas cost in a request (their JSON text; providers render it similarly)."""
    if not tool_specs:
        return 0
    return count_text(json.dumps(list(tool_specs), separators=(",", ":")), model)


def calibration(reported: int, estimate: int) -> float:
    """The factor that turns our estimate into the provider's count: ``reported / estimate``
    (prompt tokens), clamped to [0.5, 2.0] so one odd usage report cannot wreck the budget."""
    return min(2.0, max(0.5, reported / estimate)) if reported > 0 and estimate > 0 else 1.0
