"""Token counting: tiktoken encodings loaded offline, per-message framing, calibration.

All counts here are *tokens*, never characters. Encodings come from tiktoken; offline, tiktoken
cannot download them, so we point ``TIKTOKEN_CACHE_DIR`` at the copies that ship inside the
installed litellm wheel (found with ``importlib.util.find_spec``, without importing litellm, which
costs seconds; FIELD-NOTES.md). ``o200k_base`` is used for GPT-4o-era and unknown models,
``cl100k_base`` for GPT-4/3.5-era ones. For non-OpenAI models the count is an estimate; the
runner calibrates it with the provider's reported prompt tokens (see :func:`calibration`).

Per-message framing follows OpenAI's published counting recipe (cookbook "How to count tokens with
tiktoken"): 3 tokens per message, 3 to prime the reply, plus the text.

Loading an encoding costs about 0.3 s and 80 MB, so it happens on the first count that needs it,
never at import. Texts every request repeats (tool schemas, system messages: the system prompt and
the pinned facts) are counted once per machine: :func:`count_cached` keeps their counts in
``<data dir>/cache/token-counts.json`` (keyed by the encoding and a hash of the text), so a new
process that only shows a session (``inspect context``) needs no tokenizer for them.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.util
import json
import os
import tempfile
import threading
from collections import OrderedDict
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


def _source_dir() -> str | None:
    """The folder tiktoken reads its ``.tiktoken`` files from: litellm's bundled copies unless
    ``TIKTOKEN_CACHE_DIR`` says otherwise (set here for tiktoken, which reads the variable)."""
    bundled = _bundled_tokenizer_dir()
    if bundled and not os.environ.get("TIKTOKEN_CACHE_DIR"):
        os.environ["TIKTOKEN_CACHE_DIR"] = bundled
    return os.environ.get("TIKTOKEN_CACHE_DIR")


@functools.cache
def encoding(name: str = "o200k_base") -> Any:
    """The tiktoken encoding ``name``, loaded from litellm's bundled copy when offline (through
    :mod:`ctxagent.bpe_cache`, which keeps the parsed file between processes)."""
    from ctxagent import bpe_cache

    _built.add(name)
    _light_counter.cache_clear()  # its ranks are not needed once the encoding is built
    return bpe_cache.encoding(name, _source_dir())


LIGHT_CHARS = 16 * 1024  # an ASCII text up to this many characters may be counted without CoreBPE
LIGHT_BUDGET = 32 * 1024  # characters per process counted that way before building CoreBPE pays off
_built: set[str] = set()  # encodings this process has built
_light_chars: dict[str, int] = {}


def _light_count(text: str, name: str) -> int | None:
    """The count of a short ASCII ``text`` while encoding ``name`` is not built yet, from
    :class:`ctxagent.bpe_cache.LightCounter` (exactly tiktoken's count; ~0.1 s less start-up for a
    one-turn run, issue 16; ~0.4 s less for the first run in a data dir, whose count cache does not
    hold the tool schemas' count yet); None when the real encoding should count it (also when the
    light counter finds the text too costly to merge)."""
    used = _light_chars.get(name, 0) + len(text)
    if name in _built or len(text) > LIGHT_CHARS or used > LIGHT_BUDGET or not text.isascii():
        return None
    counter = _light_counter(name)
    if counter is None:
        return None
    try:
        count = int(counter.count(text))
    except ValueError:
        return None
    _light_chars[name] = used
    return count


@functools.cache
def _light_counter(name: str) -> Any:
    from ctxagent import bpe_cache

    return bpe_cache.light_counter(name, _source_dir())


def encoding_for(model: str) -> str:
    """The tiktoken encoding name used to count tokens for ``model`` (a litellm model string)."""
    base = model.rsplit("/", 1)[-1].lower()
    if base.startswith(("gpt-4-", "gpt-4", "gpt-3.5", "text-embedding")) and not base.startswith(
        ("gpt-4o", "gpt-4.1", "gpt-4.5")
    ):
        return "cl100k_base"
    return "o200k_base"


def count_text(text: str, model: str = "") -> int:
    """Tokens in ``text`` (no message framing). Long text is cut into 64 KiB chunks first; the counts
    of the latest long texts are remembered (:class:`_LongCounts`)."""
    if not text:
        return 0
    name = encoding_for(model)
    light = _light_count(text, name)
    if light is not None:
        return light
    if len(text) < LONG_CHARS:
        return _encoded(text, name)
    hit = _LONG.get(name, text)
    if hit is None:
        hit = _LONG.put(name, text, _encoded(text, name))
    return hit


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

    def get(self, name: str, text: str) -> int | None:
        with self._lock:
            count = self._counts.get((name, text))
            if count is not None:
                self._counts.move_to_end((name, text))
            return count

    def put(self, name: str, text: str, count: int) -> int:
        with self._lock:
            if (name, text) not in self._counts:
                self._chars += len(text)
            self._counts[(name, text)] = count
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


def count_message(message: Message, model: str = "", *, cached: bool = False) -> int:
    """Tokens one message costs in a request: its text and reasoning plus :data:`PER_MESSAGE` framing
    tokens. System messages (the prompt, the pinned facts: the same in request after request) and,
    with ``cached``, any message (a strategy's replacement, made again by every peek of the same
    view) are counted through :func:`count_cached`."""
    extra = 1 if message.get("name") else 0
    tool_id = message.get("tool_call_id") or ""
    ids = "".join(c.get("id", "") for c in message.get("tool_calls") or [])
    text = reasoning_text(message) + text_of(message) + tool_id + ids
    count = count_cached if cached or message.get("role") == "system" else count_text
    return PER_MESSAGE + extra + count(text, model)


def count_messages(messages: Iterable[Message], model: str = "") -> int:
    """Tokens of a whole request's messages, including :data:`PER_REQUEST`."""
    return PER_REQUEST + sum(count_message(m, model) for m in messages)


def count_tools(tool_specs: Sequence[dict[str, Any]], model: str = "") -> int:
    """Tokens the tool schemas cost in a request (their JSON text; providers render it similarly)."""
    if not tool_specs:
        return 0
    return count_cached(json.dumps(list(tool_specs), separators=(",", ":")), model)


CALIBRATION_MIN, CALIBRATION_MAX = 1.0, 2.0


def calibration(reported: int, estimate: int) -> float:
    """The factor that turns our estimate into the provider's count: ``reported / estimate``
    (prompt tokens), clamped to [:data:`CALIBRATION_MIN`, :data:`CALIBRATION_MAX`].

    Never below 1: a provider's count may raise the estimate (its tokenizer counts more than ours),
    never lower it below what the request counts to on our side. A server that reports only the
    uncached part of the prompt as ``prompt_tokens`` once drove the factor to its old 0.5 floor: a
    25,032-token request was shown as 13,713/24,000, compaction never fired and the server rejected
    it (issue 34). The cap keeps one odd report from wrecking the budget."""
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


CACHE_ENTRIES = 4096  # counts kept in the count cache (the oldest go first)


def count_cached(text: str, model: str = "") -> int:
    """:func:`count_text`, remembered across processes in the count cache (see the module doc):
    the same text and encoding always give the same count, so a hit needs no tokenizer. A cache
    that cannot be read or written is ignored (the count is then made, as without it)."""
    if not text:
        return 0
    name = encoding_for(model)
    key = hashlib.blake2b(f"{name}\x00{text}".encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
    counts = _counts()
    hit = counts.get(key)
    if hit is not None:
        return hit
    counts[key] = made = count_text(text, model)
    if not _dirty:  # written once, when the process exits: a run may count many new pins messages
        atexit.register(_save_all)
    _dirty.add(_cache_file())
    return made


def _cache_file() -> Path:
    from ctxagent.dirs import data_dir

    return data_dir() / "cache" / "token-counts.json"


_loaded: dict[Path, dict[str, int]] = {}
_dirty: set[Path] = set()  # cache files with counts this process added


def _save_all() -> None:
    """Write every count cache this process added to (at exit)."""
    for path in list(_dirty):
        _save(path, _loaded[path])
    _dirty.clear()


def _counts() -> dict[str, int]:
    """This process's copy of the count cache (read once per cache file)."""
    path = _cache_file()
    if path not in _loaded:
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError):
            data = {}
        _loaded[path] = {k: v for k, v in data.items() if isinstance(v, int)} if isinstance(data, dict) else {}
    return _loaded[path]


def _save(path: Path, counts: dict[str, int]) -> None:
    """Write the count cache whole, atomically (another process may read it meanwhile)."""
    while len(counts) > CACHE_ENTRIES:
        del counts[next(iter(counts))]
    _write(path, json.dumps(counts, separators=(",", ":")).encode())


def _write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file (owner-only) and a rename; errors are
    ignored (a cache)."""
    part: str | None = None
    try:
        missing = [p for p in [path.parent, *path.parent.parents] if not p.exists()]
        for folder in reversed(missing):  # owner-only, as everything under the data dir
            folder.mkdir(mode=0o700, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=f".{path.name}-", delete=False) as fh:
            part = fh.name
            fh.write(data)
        os.replace(part, path)
    except OSError:
        if part is not None:
            Path(part).unlink(missing_ok=True)
