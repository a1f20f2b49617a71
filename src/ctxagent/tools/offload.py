"""The offload wrapper: the one place that decides whether a tool's value enters the context.

:func:`settle` takes whatever a tool returned (``str``, ``bytes`` or :class:`Spooled`) and returns
the content of the tool message plus, when the value was too large or not text, the
:class:`OutputRecord` of the file it now lives in (bytes exactly as produced). The model then sees
a middle-out preview (:mod:`ctxagent.tools.preview`) and a line naming the handle, the path and
the tools that read it.

Units: ``limit_tokens`` and thresholds are *tokens*; sizes are *bytes*; ``max_chars`` is
*characters* of preview.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ctxagent import tokens
from ctxagent.agent.model import ToolCall
from ctxagent.sessions.records import OutputRecord
from ctxagent.sessions.store import OutputStore
from ctxagent.tools.base import Spooled, ToolValue
from ctxagent.tools.preview import (
    CHUNK_BYTES,
    EXACT_TOKENS_MAX_BYTES,
    SNIFF_BYTES,
    estimate_tokens,
    looks_binary,
    plural,
    preview_file,
)

INLINE_MAX_BYTES = EXACT_TOKENS_MAX_BYTES  # larger outputs are offloaded without tokenizing them
ARGUMENTS_MAX_CHARS = 500  # of the call's raw arguments kept in the OutputRecord


@dataclass(frozen=True)
class OffloadPolicy:
    """When a tool output is offloaded and how it is previewed.

    Attributes:
        limit_tokens: the most tokens one tool message may cost (the provider's or the profile's
            tool-result limit); the inline threshold is this minus :func:`envelope_overhead`.
        head_lines, tail_lines: lines of the preview's head and tail.
        max_chars: characters of head plus tail text in the preview (the marker and the lines
            around it come on top); shrunk further if the preview would not fit the threshold.
        model: litellm model string, picks the tokenizer.
    """

    limit_tokens: int
    head_lines: int = 40
    tail_lines: int = 20
    max_chars: int = 4000
    model: str = ""


@dataclass(frozen=True)
class FileStats:
    """Size (bytes), lines and sha256 (hex) of a stored output, computed in one streaming pass."""

    bytes: int
    lines: int
    sha256: str


def envelope_overhead(call_id: str, model: str = "") -> int:
    """Tokens our own tool message costs around its content, measured on that message with "".

    It is the sum of two measurements of ``{"role": "tool", "tool_call_id": call_id,
    "content": ""}``: :func:`ctxagent.tokens.count_message` (role markers, the id: what our budget
    counts) and the tokens of its ``json.dumps`` (the keys, quotes and id as a provider serializes
    them). The id is counted twice on purpose: the result is an upper bound, and a threshold a few
    tokens low costs nothing, while one too high brings intermittent "too large" errors.
    """
    message = {"role": "tool", "tool_call_id": call_id, "content": ""}
    return tokens.count_message(message, model) + tokens.count_text(json.dumps(message), model)


def threshold(policy: OffloadPolicy, call_id: str) -> int:
    """Tokens of content that may stay inline for call ``call_id``: limit minus overhead, >= 0."""
    return max(0, policy.limit_tokens - envelope_overhead(call_id, policy.model))


def settle(
    value: ToolValue,
    *,
    call: ToolCall,
    tool_name: str,
    store: OutputStore,
    policy: OffloadPolicy,
) -> tuple[str, OutputRecord | None]:
    """The tool message content for ``value``, and its OutputRecord when it was offloaded.

    - ``str``: inline when its tokens are at most :func:`threshold`, else offloaded.
    - ``bytes``: valid UTF-8 text is treated as a ``str``; binary or non-UTF-8 bytes are always
      offloaded, exactly.
    - :class:`Spooled`: inline (and the spool file deleted) when it is text of at most 4 MiB
      whose note and text fit the threshold; else the file is moved under a handle (no copy).

    Values over 4 MiB are offloaded without tokenizing them. A ``str`` is stored as UTF-8 (a lone
    surrogate, which UTF-8 cannot hold, is kept as its 3 bytes and previewed as U+FFFD). Raises
    ``OSError`` when the store cannot be written or a spool file read.
    """
    job = _Job(call, tool_name, store, policy, threshold(policy, call.id))
    if isinstance(value, Spooled):
        return _settle_spooled(value, job)
    if isinstance(value, str):
        text: str | None = value
    else:
        text = as_text(value) if len(value) <= INLINE_MAX_BYTES else None
    if text is not None and fits(text, job.limit, policy.model):
        return text, None
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
    handle = store.unique_handle(call.id)
    return _offloaded(store.put_bytes(handle, data), handle, "", job)


def store_text(store: OutputStore, handle: str, call_id: str, text: str, *, tool_name: str = "",
               model: str = "") -> OutputRecord:
    """Write ``text`` (UTF-8) under ``handle``, replacing what was there, and return its record.

    For content that leaves the view after it entered it (a strategy that masks an old tool
    result): the original is kept in the store so its handle can be read back. ``model`` picks
    the tokenizer. Raises ``OSError`` when the store cannot be written.
    """
    path = store.put_bytes(handle, text.encode("utf-8", "surrogatepass"))
    return _record(path, handle, store, call_id=call_id, tool_name=tool_name, arguments="", model=model)


def as_text(data: bytes) -> str | None:
    """``data`` decoded when it is valid UTF-8 and not binary (see ``looks_binary``), else None."""
    if looks_binary(data[:SNIFF_BYTES]):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def fits(text: str, limit: int, model: str = "") -> bool:
    """Whether ``text`` costs at most ``limit`` tokens.

    Cheap first: a token is at least one byte, so UTF-8 bytes <= limit fits untokenized, and text
    over 4 MiB never fits. Otherwise counts 64 KiB chunks (as ``tokens.count_text`` does) and stops
    as soon as the count passes ``limit``.
    """
    if len(text) > INLINE_MAX_BYTES:
        return False
    size = len(text.encode("utf-8", "surrogatepass"))
    if size <= limit:
        return True
    if size > INLINE_MAX_BYTES:
        return False
    total = 0
    for start in range(0, len(text), tokens.CHUNK_CHARS):
        total += tokens.count_text(text[start : start + tokens.CHUNK_CHARS], model)
        if total > limit:
            return False
    return True


def file_stats(path: Path) -> FileStats:
    """Bytes, lines (``\\n`` count plus an unterminated last line) and sha256 of ``path``.

    Streams 1 MiB chunks: memory does not grow with the file. Raises ``OSError``.
    """
    digest = hashlib.sha256()
    size = newlines = 0
    last = b""
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
            newlines += chunk.count(b"\n")
            last = chunk[-1:]
    return FileStats(size, newlines + (1 if last not in (b"", b"\n") else 0), digest.hexdigest())


@dataclass(frozen=True)
class _Job:
    """One value being settled: its call, tool, store, policy and inline threshold (tokens)."""

    call: ToolCall
    tool_name: str
    store: OutputStore
    policy: OffloadPolicy
    limit: int


def _settle_spooled(spooled: Spooled, job: _Job) -> tuple[str, OutputRecord | None]:
    """Inline a small text spool file (then delete it), or adopt it under a new handle."""
    if spooled.path.stat().st_size <= INLINE_MAX_BYTES:
        text = as_text(spooled.path.read_bytes())
        if text is not None:
            content = _with_note(spooled.note, text)
            if fits(content, job.limit, job.policy.model):
                spooled.path.unlink()
                return content, None
    handle = job.store.unique_handle(job.call.id)
    return _offloaded(job.store.adopt(spooled.path, handle), handle, spooled.note, job)


def _with_note(note: str, text: str) -> str:
    """The note line, then the text (either may be empty)."""
    return f"{note}\n{text}" if note and text else note or text


def _offloaded(path: Path, handle: str, note: str, job: _Job) -> tuple[str, OutputRecord]:
    """Content (note, preview, where to read the rest) and record of an output stored at ``path``."""
    record = _record(path, handle, job.store, call_id=job.call.id, tool_name=job.tool_name,
                     arguments=job.call.arguments[:ARGUMENTS_MAX_CHARS], model=job.policy.model)
    return _preview_content(path, record.lines, note, _where_line(path, record), job), record


def _record(path: Path, handle: str, store: OutputStore, *, call_id: str, tool_name: str,
            arguments: str, model: str) -> OutputRecord:
    """The OutputRecord of the output stored at ``path`` (sizes, sha256 and tokens measured)."""
    stats = file_stats(path)
    binary, count, exact = _file_tokens(path, stats.bytes, model)
    return OutputRecord(
        handle=handle,
        call_id=call_id,
        tool=tool_name,
        path=path.relative_to(store.root.parent).as_posix(),
        bytes=stats.bytes,
        lines=stats.lines,
        tokens=count,
        tokens_exact=exact,
        sha256=stats.sha256,
        binary=binary,
        arguments=arguments,
    )


def _file_tokens(path: Path, size: int, model: str) -> tuple[bool, int, bool]:
    """``(binary, tokens, exact)`` of a stored output: text under 4 MiB is counted; the rest is
    estimated at 4 bytes a token."""
    with open(path, "rb") as fh:
        binary = looks_binary(fh.read(SNIFF_BYTES))
    if binary or size >= EXACT_TOKENS_MAX_BYTES:
        return binary, estimate_tokens(size), False
    return binary, tokens.count_text(path.read_bytes().decode("utf-8", "replace"), model), True


def _where_line(path: Path, record: OutputRecord) -> str:
    """The last line of an offloaded output's content: its size, handle, path and how to read it."""
    handle = record.handle
    where = f"saved as {handle} at {path.absolute()}"
    if record.binary:
        return (f"[full output: {plural(record.bytes, 'byte')} of binary data; {where}; "
                "inspect it with the shell (e.g. `file`, `xxd | head`)]")
    sizes = f"{plural(record.lines, 'line')}, {plural(record.bytes, 'byte')}, "
    sizes += plural(record.tokens, "token", "" if record.tokens_exact else "~")
    return (f"[full output: {sizes}; {where}; read lines with read_output(\"{handle}\", start_line, "
            f"end_line) or search with grep_output(\"{handle}\", pattern)]")


def _preview_content(path: Path, lines: int, note: str, where: str, job: _Job) -> str:
    """Note, preview and ``where`` line; the preview is halved until it all fits the threshold
    (down to no head and tail at all, which is returned even if it does not fit)."""
    policy = job.policy
    max_chars = policy.max_chars
    while True:
        preview = preview_file(path, head_lines=policy.head_lines, tail_lines=policy.tail_lines,
                               max_chars=max_chars, model=policy.model, lines=lines)
        body = preview.text if preview.text.endswith("\n") or not preview.text else preview.text + "\n"
        content = _with_note(note, body + where)
        if max_chars <= 0 or tokens.count_text(content, policy.model) <= job.limit:
            return content
        max_chars //= 2
