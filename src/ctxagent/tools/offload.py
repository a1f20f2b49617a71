"""The offload wrapper: the one place that decides whether a tool's value enters the context.

:func:`settle` takes whatever a tool returned and returns the content of the tool message plus, when
the value was stored (with a ``<handle>.meta.json`` sidecar), its :class:`OutputRecord`. See
docs/tools.md ("Offloading", "Handles"). Units: ``limit_tokens`` and thresholds are *tokens*; sizes
are *bytes*; ``max_chars`` is *characters* of preview.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxagent import tokens
from ctxagent.handles import REF_RE, new_handle
from ctxagent.messages import ToolCall
from ctxagent.sessions.records import OutputRecord
from ctxagent.sessions.redact import clip, scan
from ctxagent.sessions.store import OutputStore
from ctxagent.tools import values
from ctxagent.tools.base import Spooled
from ctxagent.tools.clean import clean, encode_exact
from ctxagent.tools.preview import (
    EXACT_TOKENS_MAX_BYTES,
    SNIFF_BYTES,
    FileStats,
    Preview,
    estimate_tokens,
    looks_binary,
    plural,
    preview_bytes,
    preview_file,
    span_tokens,
)

INLINE_MAX_BYTES = EXACT_TOKENS_MAX_BYTES  # larger outputs are offloaded without tokenizing them
ARGUMENTS_MAX_CHARS = 500  # of the call's raw arguments kept in the OutputRecord
SMALL_ARRAY_ITEMS = 64  # an array with at most this many elements is also shown by value
RETURNS = "a tool returns str, bytes, a JSON value (dict, list, number, bool, None) or a numpy array"


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
    value: Any,
    *,
    call: ToolCall,
    tool_name: str,
    store: OutputStore,
    policy: OffloadPolicy,
    handle: str | None = None,
) -> tuple[str, OutputRecord | None]:
    """The tool message content for ``value``, and its OutputRecord when it was offloaded.

    - ``str``: cleaned (:func:`ctxagent.tools.clean.clean`); inline when the cleaned text's tokens
      are at most :func:`threshold`, else offloaded (the raw text stored, the cleaned one previewed).
    - ``bytes``: valid UTF-8 text is treated as a ``str``; binary or non-UTF-8 bytes are always
      offloaded, exactly.
    - :class:`Spooled`: inline (and the spool file deleted) when it is text of at most 4 MiB
      whose note and cleaned text fit the threshold; else the file is moved under a handle (no copy).

    - ``dict``, ``list``, ``tuple``, numpy array: always stored (``.json`` or ``.npy``) under a
      handle; shown in full when the compact JSON fits the threshold, else described and previewed.
    - ``None``, ``bool``, ``int``, ``float``, numpy scalar: its JSON text, inline.

    Values over 4 MiB are offloaded without tokenizing them. A ``str`` is stored as the bytes it
    came from (:func:`ctxagent.tools.clean.encode_exact`); one that is not valid UTF-8 (a lone
    surrogate) is shown with it made visible; one holding a NUL is offloaded like binary bytes. Raises
    ``OSError`` when the store cannot be written or a spool file read, ``TypeError`` (or
    ``ValueError``) for a value JSON or ``numpy.save`` cannot hold, ``TypeError`` for any other
    type.
    """
    job = _Job(call, tool_name, store, policy, threshold(policy, call.id), handle)
    if isinstance(value, Spooled):
        return _settle_spooled(value, job)
    if values.is_structured(value):
        return _settle_structured(value, job)
    if values.is_scalar(value):
        value = values.json_text(value)
    if not isinstance(value, str | bytes):
        raise TypeError(f"it returned {type(value).__name__}; {RETURNS}")
    text = _inline_text(value)
    shown = None if text is None else clean(text)  # lone surrogates made visible: UTF-8 files hold it
    if shown is not None and fits(shown, job.limit, policy.model):
        return shown, None
    data = encode_exact(value) if isinstance(value, str) else value
    handle = job.new_handle()
    return _offloaded(store.put_bytes(handle, data), None, handle, "", job)


def store_text(store: OutputStore, handle: str, call_id: str, text: str, *, tool_name: str = "",
               model: str = "") -> OutputRecord:
    """Write ``text`` (UTF-8) under ``handle``, replacing what was there, and return its record.

    For content that leaves the view after it entered it (a strategy that masks an old tool
    result): the original is kept in the store so its handle can be read back. ``model`` picks
    the tokenizer. Raises ``OSError`` when the store cannot be written.
    """
    path = store.put_bytes(handle, encode_exact(text), durable=False)  # the transcript has it
    return _record(path, handle, store, call_id=call_id, tool_name=tool_name, arguments="", model=model)


def as_text(data: bytes) -> str | None:
    """``data`` decoded when it is valid UTF-8 and not binary (see ``looks_binary``; a NUL byte
    anywhere makes it binary: providers reject ``\\u0000``), else None."""
    if looks_binary(data[:SNIFF_BYTES]) or b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _inline_text(value: str | bytes) -> str | None:
    """The text of a value small enough to show inline (4 MiB), else None; None too for binary or
    non-UTF-8 bytes and for text holding a NUL (offloaded like binary bytes: see :func:`as_text`)."""
    if len(value) > INLINE_MAX_BYTES:
        return None
    if isinstance(value, bytes):
        return as_text(value)
    return None if "\x00" in value else value


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


@dataclass(frozen=True)
class _Job:
    """One value being settled: its call, tool, store, policy and inline threshold (tokens)."""

    call: ToolCall
    tool_name: str
    store: OutputStore
    policy: OffloadPolicy
    limit: int
    handle: str | None = None  # chosen by the caller (the runner, from the session state)

    def new_handle(self) -> str:
        """The handle the value is stored under: the caller's, else one free in the store."""
        return self.handle or new_handle(self.call.id, self.store)


def _settle_spooled(spooled: Spooled, job: _Job) -> tuple[str, OutputRecord | None]:
    """Inline a small text spool file, cleaned (then delete it), or adopt it raw under a new handle
    (one over 4 MiB unread: its preview cleans just the head and tail it shows)."""
    if spooled.path.stat().st_size <= INLINE_MAX_BYTES:
        text = as_text(spooled.path.read_bytes())
        if text is not None:
            shown = clean(text)
            content = _with_note(spooled.note, shown)
            if fits(content, job.limit, job.policy.model):
                spooled.path.unlink()
                return content, None
    handle = job.new_handle()
    return _offloaded(*job.store.adopt_measured(spooled.path, handle), handle, spooled.note, job)


def _with_note(note: str, text: str) -> str:
    """The note line, then the text (either may be empty)."""
    return f"{note}\n{text}" if note and text else note or text


def _offloaded(path: Path, stats: FileStats | None, handle: str, note: str, job: _Job) -> tuple[str, OutputRecord]:
    """Content (note, preview, where to read the rest) and record of an output stored at ``path``."""
    record = _job_record(path, handle, job, stats)
    return _preview_content(path, record.lines, note, _where_line(path, record), job), record


def _job_record(path: Path, handle: str, job: _Job, stats: FileStats | None = None, **value: Any) -> OutputRecord:
    return _record(path, handle, job.store, call_id=job.call.id, tool_name=job.tool_name,
                   arguments=clip(job.call.arguments, ARGUMENTS_MAX_CHARS, getattr(job.store, "redactor", None)),
                   model=job.policy.model, stats=stats, **value)


def _record(path: Path, handle: str, store: OutputStore, *, call_id: str, tool_name: str,
            arguments: str, model: str, stats: FileStats | None = None, **value: Any) -> OutputRecord:
    """The OutputRecord of the output stored at ``path`` (``stats``: as the store measured them, else
    measured here), also written as its sidecar. ``value``: ``type``, ``length``, ``shape``, ``dtype``."""
    stats = stats or scan.measure(path).stats
    binary, count, exact = _file_tokens(path, stats.bytes, model)
    value.setdefault("type", "bytes" if binary else "text")
    record = OutputRecord(
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
        **value,
    )
    meta = record.model_dump(mode="json", exclude={"kind"})
    values.write_meta(store, handle, {**meta, "file": path.name})
    return record


def _file_tokens(path: Path, size: int, model: str) -> tuple[bool, int, bool]:
    """``(binary, tokens, exact)`` of a stored output: a binary one is estimated at 4 bytes a token,
    text as :func:`~ctxagent.tools.preview.span_tokens` counts it."""
    with open(path, "rb") as fh:
        if looks_binary(fh.read(SNIFF_BYTES)):
            return True, estimate_tokens(size), False
        return False, *span_tokens(fh, 0, size, size, model)


# --- structured values --------------------------------------------------------------------------


def _settle_structured(value: Any, job: _Job) -> tuple[str, OutputRecord]:
    """Store a JSON value or an array under a new handle; content shows or describes it."""
    if values.is_ndarray(value):
        handle = job.new_handle()
        path = _save_ndarray(job.store, handle, value)
        record = _job_record(path, handle, job, type="ndarray", shape=list(value.shape), dtype=str(value.dtype))
        return _array_content(value, record, job), record
    data = (values.json_text(value, indent=2) + "\n").encode("utf-8")  # a line an item: read_output, grep_output
    handle = job.new_handle()
    path = job.store.put_bytes(handle, data, ".json")
    record = _job_record(path, handle, job, type="json", length=len(value))
    return _json_content(value, path, record, job), record


def _save_ndarray(store: OutputStore, handle: str, array: Any) -> Path:
    """``numpy.save`` ``array`` (no pickles) to a spool file, fsync it, move it under ``handle``."""
    with store.open_spool() as (fh, spool):
        values.import_numpy().save(fh, array, allow_pickle=False)
        fh.flush()
        os.fsync(fh.fileno())
    return store.adopt(spool, handle, ".npy")


def _part_example(value: Any, handle: str) -> str:
    """``@h/key`` (the first key, when it makes a sub-handle that parses back), ``@h/0`` for a list or
    array, else the whole value's handle (an object whose first key has no sub-handle, like ``""``)."""
    if isinstance(value, dict):
        example = str(values.Ref(handle, (str(next(iter(value), "")),)))
        return example if REF_RE.match(example) else handle
    return f"{handle}/0"


def _path_example(value: Any) -> str:
    """A JSONPath into this value: ``$.first_key``, ``$['key']`` when the key is not an ASCII identifier
    (``$["it's"]`` when it holds a quote), or ``$[0]``."""
    if isinstance(value, dict) and value:
        key = str(next(iter(value)))
        if key.isidentifier() and key.isascii():  # jsonpath-ng's $.name takes ASCII names only
            return f"$.{key}"
        return f"$['{key}']" if "'" not in key else f"$[{json.dumps(key, ensure_ascii=False)}]"
    return "$[0]"


def _json_content(value: Any, path: Path, record: OutputRecord, job: _Job) -> str:
    """The JSON in full with a line naming its handle, when it fits; else described and previewed."""
    handle = record.handle
    use = f'pass "{handle}" or a part like "{_part_example(value, handle)}" as a tool argument to use the value'
    if record.bytes <= INLINE_MAX_BYTES:
        content = f"{values.json_text(value)}\n[stored as {handle}: {use}]"
        if fits(content, job.limit, job.policy.model):
            return content
    summary = values.describe(value)
    size = f"{plural(record.bytes, 'byte')}, {plural(record.tokens, 'token', '' if record.tokens_exact else '~')}"
    where = (f"[full value: {summary}; {size}; saved as {handle} at {path.absolute()}; {use}; read parts "
             f'with query_output("{handle}", "{_path_example(value)}") or read_output("{handle}", start_line, '
             "end_line)]")
    return _preview_content(path, record.lines, f"JSON value: {summary}", where, job)


def _array_content(array: Any, record: OutputRecord, job: _Job) -> str:
    """One line describing a stored array (dtype, shape, sizes, handle); a tiny one also by value."""
    handle = record.handle
    row = f' (or a row, like "{handle}/0")' if array.ndim else ""
    where = (f"[ndarray {array.dtype}, shape {tuple(array.shape)}, {array.nbytes:,} bytes; stored as {handle} "
             f'(.npy); pass "{handle}"{row} as a tool argument to use the array; output_info("{handle}") '
             "describes it]")
    if array.size <= SMALL_ARRAY_ITEMS:
        content = json.dumps(array.tolist()) + "\n" + where
        if fits(content, job.limit, job.policy.model):
            return content
    return where


def _where_line(path: Path, record: OutputRecord) -> str:
    """The last line of an offloaded output's content: its size, handle, path and how to read it."""
    handle = record.handle
    where = f"saved as {handle} at {path.absolute()}"
    if record.binary:
        return (f"[full output: {plural(record.bytes, 'byte')} of binary data; {where}; "
                "inspect it with the shell (e.g. `file`, `xxd | head`)]")
    sizes = f"{plural(record.lines, 'line')}, {plural(record.bytes, 'byte')}, "
    sizes += plural(record.tokens, "token", "" if record.tokens_exact else "~")
    # the search comes first and says the lines shown are not all of it: a small model (Qwen2.5-Coder-1.5B)
    # answered with a value from the preview's lines when this line opened with "pass ... as a tool argument"
    return (f"[full output: {sizes}; {where}; only its first and last lines are shown above: to find something "
            f"in it, search it with grep_output(\"{handle}\", pattern) or read lines with read_output(\"{handle}\", "
            f"start_line, end_line); pass \"{handle}\" as a tool argument to use the whole text]")


def _preview_content(path: Path, lines: int, note: str, where: str, job: _Job) -> str:
    """Note, preview of the stored file (cleaned) and ``where`` line; the preview is halved until it all
    fits the threshold, down to no head and tail at all, which is returned even if it does not fit."""
    policy = job.policy
    max_chars = policy.max_chars
    data = _cleaned_file(path)
    while True:
        preview = _preview(path, data, lines, max_chars, policy)
        body = preview.text if preview.text.endswith("\n") or not preview.text else preview.text + "\n"
        content = _with_note(note, body + where)
        if max_chars <= 0 or tokens.count_text(content, policy.model) <= job.limit:
            return content
        max_chars //= 2


def _cleaned_file(path: Path) -> bytes | None:
    """The stored output at ``path`` cleaned of terminal control, when it is text of at most 4 MiB
    that cleaning changes; else None (its preview then reads the file and cleans only the head and
    tail it shows). Read from the store, not from the tool's value: a redacting store's file has
    no secret, so neither has the preview. Undecodable bytes are kept as they are."""
    if path.stat().st_size > EXACT_TOKENS_MAX_BYTES:
        return None
    raw = path.read_bytes()
    if looks_binary(raw[:SNIFF_BYTES]):
        return None
    text = raw.decode("utf-8", "surrogateescape")
    shown = clean(text, keep_escapes=True)
    return None if shown is text else shown.encode("utf-8", "surrogateescape")


def _preview(path: Path, data: bytes | None, lines: int, max_chars: int, policy: OffloadPolicy) -> Preview:
    """The preview of ``data`` (the cleaned output) when given, else of the file at ``path``."""
    if data is None:
        return preview_file(path, head_lines=policy.head_lines, tail_lines=policy.tail_lines,
                            max_chars=max_chars, model=policy.model, lines=lines)
    return preview_bytes(data, head_lines=policy.head_lines, tail_lines=policy.tail_lines, max_chars=max_chars,
                         model=policy.model)
