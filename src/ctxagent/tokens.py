"""Token counting: tiktoken encodings loaded offline, per-message framing, calibration.

All counts here are *tokens*, never characters. ``o200k_base`` is used for GPT-4o-era and unknown
models, ``cl100k_base`` for GPT-4/3.5-era ones. For non-OpenAI models the count is an estimate; the
runner calibrates it with the provider's reported prompt tokens (see :func:`calibration`).
Per-message framing follows OpenAI's published counting recipe (cookbook "How to count tokens with
tiktoken"): 3 tokens per message, 3 to prime the reply, plus the text. Building an encoding
(:func:`encoding`, offline) costs about 0.25 s and 80 MB: it happens on the first count that needs
it, never at import.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import importlib.util
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxagent.messages import Message, text_of

PER_MESSAGE = 3  # tokens of role markers around each message (OpenAI cookbook)
PER_REQUEST = 3  # tokens that prime the assistant reply
CHUNK_CHARS = 64 * 1024  # tiktoken is superlinear on one huge line and panics on 1M spaces


@dataclass(frozen=True)
class Source:
    """Where an encoding comes from: the URL OpenAI publishes its ranks file at, the file's sha256,
    and the split pattern (both as tiktoken's ``tiktoken_ext/openai_public.py`` gives them)."""

    url: str
    sha256: str
    pattern: str

    def bundled(self) -> Path | None:
        """litellm's copy of the file: litellm ships a tiktoken download folder, whose files are
        named by the sha1 of their URL; None without litellm or without that file."""
        spec = importlib.util.find_spec("litellm")
        if spec is None or not spec.submodule_search_locations:
            return None
        folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
        path = folder / hashlib.sha1(self.url.encode()).hexdigest()
        return path if path.is_file() else None


_BLOB = "https://openaipublic.blob.core.windows.net/encodings/"
SOURCES = {
    "o200k_base": Source(
        _BLOB + "o200k_base.tiktoken", "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "|".join([
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
            r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
            r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ])),
    "cl100k_base": Source(
        _BLOB + "cl100k_base.tiktoken", "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
        r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s"""),
}
"""The encodings :func:`encoding_for` picks. Counting uses ``encode_ordinary``, which never emits a
special token, so none are declared."""


@functools.cache
def encoding(name: str = "o200k_base") -> Any:
    """The tiktoken ``Encoding`` called ``name``, built with tiktoken's public constructor from the
    file the litellm wheel ships (:meth:`Source.bundled`; found without importing litellm, which
    costs seconds: FIELD-NOTES.md) when it matches OpenAI's sha256, else ``tiktoken.get_encoding(name)``
    (a user's ``TIKTOKEN_CACHE_DIR``, or a download), which raises for an unknown name and, offline
    with no copy, whatever its download raises. Setting ``TIKTOKEN_CACHE_DIR`` instead would reach
    every child process."""
    import tiktoken

    source = SOURCES.get(name)
    path = source.bundled() if source else None
    data = path.read_bytes() if path else b""
    if source is None or hashlib.sha256(data).hexdigest() != source.sha256:
        return tiktoken.get_encoding(name)
    return tiktoken.Encoding(name, pat_str=source.pattern, mergeable_ranks=ranks(data), special_tokens={})


def ranks(data: bytes) -> dict[bytes, int]:
    """The mergeable ranks of a ``.tiktoken`` file's bytes: one ``<base64 token> <rank>`` per line,
    the format ``tiktoken.load.load_tiktoken_bpe`` reads (that function also copies a local file
    into tiktoken's download folder, so it is not used). Only files that matched their published
    sha256 are read here; raises ``ValueError`` (``binascii.Error``) for bytes of another format."""
    fields = data.split()
    if len(fields) % 2:
        raise ValueError("not a .tiktoken file: an odd number of fields")
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))


def encoding_for(model: str) -> str:
    """The tiktoken encoding name used to count tokens for ``model`` (a litellm model string)."""
    base = model.rsplit("/", 1)[-1].lower()
    older = base.startswith(("gpt-4", "gpt-3.5", "text-embedding"))
    return "cl100k_base" if older and not base.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5")) else "o200k_base"


def count_text(text: str, model: str = "") -> int:
    """Tokens in ``text`` (no message framing). Long text is cut into 64 KiB chunks first; the counts
    of the latest long texts are remembered (:class:`_LongCounts`)."""
    if not text:
        return 0
    name = encoding_for(model)
    return _encoded(text, name) if len(text) < LONG_CHARS else _LONG.count(name, text)


def _encoded(text: str, name: str) -> int:
    enc = encoding(name)
    return sum(len(enc.encode_ordinary(text[i : i + CHUNK_CHARS])) for i in range(0, len(text), CHUNK_CHARS))


LONG_CHARS = 4 * 1024  # a text this long is counted once while it is among the latest ones
LONG_KEPT_CHARS = 32 * 1024 * 1024  # characters of long texts whose counts are kept (the oldest go first)


class _LongCounts:
    """Token counts of the latest long texts. One tool output is counted by several layers (the
    offload threshold, the tool message, the stored file, a sub-agent's result): ~5 times for a
    sub-agent's 55K-token result, each ~40 ms (measured, benchmarks/delegation.py). Keyed by the
    text itself (an equal text read back from a file hits too); holds at most
    :data:`LONG_KEPT_CHARS` characters. Thread-safe (sub-agents count in their threads)."""

    def __init__(self) -> None:
        self._counts: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def count(self, name: str, text: str) -> int:
        """Tokens of ``text`` in encoding ``name``: remembered, else encoded (outside the lock) and kept."""
        key = (name, text)
        with self._lock:
            if key in self._counts:
                self._counts.move_to_end(key)
                return self._counts[key]
        count = _encoded(text, name)
        with self._lock:
            if key not in self._counts:
                self._chars += len(text)
            self._counts[key] = count
            while self._chars > LONG_KEPT_CHARS and len(self._counts) > 1:
                (_, old), _count = self._counts.popitem(last=False)
                self._chars -= len(old)
        return count


_LONG = _LongCounts()


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
    """Tokens one message costs in a request: its text and reasoning plus :data:`PER_MESSAGE` framing
    tokens."""
    extra = 1 if message.get("name") else 0
    tool_id = message.get("tool_call_id") or ""
    ids = "".join(c.get("id", "") for c in message.get("tool_calls") or [])
    text = reasoning_text(message) + text_of(message) + tool_id + ids
    return PER_MESSAGE + extra + count_text(text, model)


def count_messages(messages: Iterable[Message], model: str = "") -> int:
    """Tokens of a whole request's messages, including :data:`PER_REQUEST`."""
    return PER_REQUEST + sum(count_message(m, model) for m in messages)


def count_tools(tool_specs: Sequence[dict[str, Any]], model: str = "") -> int:
    """Tokens the tool schemas cost in a request (their JSON text; providers render it similarly)."""
    if not tool_specs:
        return 0
    return count_text(json.dumps(list(tool_specs), separators=(",", ":")), model)


CALIBRATION_MIN, CALIBRATION_MAX = 1.0, 2.0


def calibration(reported: int, estimate: int) -> float:
    """The factor that turns our estimate into the provider's count: ``reported / estimate``
    (prompt tokens), clamped to [:data:`CALIBRATION_MIN`, :data:`CALIBRATION_MAX`].

    Never below 1: a server that reports only the uncached part of the prompt as ``prompt_tokens``
    once drove the factor to its old 0.5 floor, and a 25,032-token request was shown as
    13,713/24,000, never compacted and rejected (issue 34). The cap keeps one odd report from
    wrecking the budget."""
    if reported <= 0 or estimate <= 0:
        return 1.0
    return min(CALIBRATION_MAX, max(CALIBRATION_MIN, reported / estimate))


def reported_prompt(prompt_tokens: int, cached_tokens: int = 0, cache_creation_tokens: int = 0) -> int:
    """A provider's whole prompt count from its usage report (tokens). OpenAI counts cached tokens
    inside ``prompt_tokens`` (``prompt_tokens_details.cached_tokens`` is a part of it); Anthropic's
    API reports cache reads and writes apart from ``input_tokens`` (litellm adds them back). When
    the reported cached and written tokens exceed ``prompt_tokens`` they cannot be a part of it:
    they were reported apart, and are added back."""
    apart = cached_tokens + cache_creation_tokens
    return prompt_tokens + apart if apart > prompt_tokens else prompt_tokens
