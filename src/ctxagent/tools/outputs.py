"""Tools over stored outputs: read a range of lines, search with a regex, query JSON, describe.

A handle (``@abc123``) resolves only inside the session's own output store (``ctx.store``); these
tools take the handle itself (``resolve_handles=False``), not its value. ``read_output`` and
``grep_output`` stream the stored file and keep at most one piece of one line (1 MiB) in memory; a
line longer than 2,000 characters is shown cut (a window around the match, for ``grep_output``).
``query_output`` runs a JSONPath query (jsonpath-ng, with its filter extensions) on a JSON value
(or on text that is JSON); ``output_info`` describes a stored value from its metadata sidecar.
Every result is bounded (at most 200 lines, matches or values listed) and, like any tool result,
offloaded when it is still too large.

Line format: ``N: text`` (``N-`` for ``grep_output`` context lines, ``--`` between groups).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import regex

from ctxagent.tools import values
from ctxagent.tools.base import Tool, ToolContext, ToolError, schema
from ctxagent.tools.offload import file_stats
from ctxagent.tools.preview import CHUNK_BYTES, SNIFF_BYTES, looks_binary, plural

MAX_LINES = 200  # lines read_output returns when end_line is not given
MAX_MATCHES = 200  # matching lines grep_output lists
MAX_CONTEXT = 20  # context_lines allowed
GREP_SECONDS = 10.0  # time budget of one grep_output (the regex package enforces it inside a search)
LINE_MAX_CHARS = 2000  # characters shown of one line
PIECE_BYTES = 1024 * 1024  # a longer line is read (and searched) in pieces of this size
MAX_QUERY_MATCHES = 200  # matches query_output lists
VALUE_MAX_CHARS = 20_000  # characters of one matched value shown by query_output


@dataclass(frozen=True)
class _Line:
    """One line of a stored output: number (1-based), the text shown, whether the regex matched,
    and the characters of the whole line."""

    number: int
    text: str
    matched: bool
    chars: int

    def render(self, sep: str = ":") -> str:
        """``N: text``, with a note when the line was cut."""
        note = f" [line cut: {self.chars:,} characters in all]" if len(self.text) < self.chars else ""
        return f"{self.number}{sep} {self.text}{note}"


def read_output(ctx: ToolContext, handle: str, start_line: int = 1, end_line: int | None = None) -> str:
    """Lines ``start_line``..``end_line`` (1-based, inclusive) of the output stored as ``handle``.

    Without ``end_line``, at most 200 lines, then a line saying how many remain. ``end_line`` past
    the end stops at the end. Raises ``ToolError`` for an unknown or malformed handle, a binary
    output, ``start_line`` < 1 or past the end, or ``end_line`` < ``start_line``.
    """
    path = _output_path(ctx, handle, "read_output")
    if start_line < 1:
        raise ToolError(f"start_line must be 1 or more, not {start_line}")
    if end_line is not None and end_line < start_line:
        raise ToolError(f"empty range: end_line {end_line} is before start_line {start_line}")
    wanted = (end_line if end_line is not None else start_line + MAX_LINES - 1) - start_line + 1
    with open(path, "rb") as fh:
        _refuse_binary(fh, handle, path)
        skipped = _skip_lines(fh, start_line - 1)
        shown = list(itertools.islice(_lines(fh, start_line), wanted))
        if not shown:
            if start_line == 1:
                return f"{handle} is empty (0 lines)"
            raise ToolError(f"start_line {start_line} is past the end: {handle} has {skipped:,} lines")
        last = shown[-1].number
        rest = _count_lines(fh) if end_line is None else None
    parts = [f"{handle} lines {start_line:,}-{last:,}:", *(line.render() for line in shown),
             _range_trailer(handle, last, end_line, rest)]
    return "\n".join(part for part in parts if part)


def _range_trailer(handle: str, last: int, end_line: int | None, rest: int | None) -> str:
    """What follows the lines shown: how many remain and how to read them, or the end."""
    if rest:
        upto = last + min(rest, MAX_LINES)
        return (f"[{rest:,} more lines ({last + 1:,}-{last + rest:,}); next: "
                f"read_output(\"{handle}\", {last + 1}, {upto})]")
    if end_line is None or end_line > last:
        return f"[end of output: {last:,} lines]"
    return ""


def grep_output(ctx: ToolContext, handle: str, pattern: str, context_lines: int = 0) -> str:
    """Lines of the output stored as ``handle`` that match ``pattern`` (Python regex,
    case-sensitive), with their numbers and ``context_lines`` lines around each.

    Lists at most 200 matching lines, then says how many more there are. Raises ``ToolError`` for
    an unknown or malformed handle, a binary output, an invalid regex, or a bad ``context_lines``.
    """
    path = _output_path(ctx, handle, "grep_output")
    regex = _compile(pattern)
    if not 0 <= context_lines <= MAX_CONTEXT:
        raise ToolError(f"context_lines must be between 0 and {MAX_CONTEXT}, not {context_lines}")
    with open(path, "rb") as fh:
        _refuse_binary(fh, handle, path)
        try:
            listed, matches, total = _grep(fh, _Deadline(regex, GREP_SECONDS), context_lines)
        except TimeoutError:
            raise ToolError(f"grep_output gave up after {GREP_SECONDS:g} s: the pattern {pattern!r} is too slow on "
                            f"{handle} (nested repetition like (a+)+ backtracks without end); simplify it") from None
    if not matches:
        return f"no line of {handle} matches {pattern!r} ({total:,} lines searched)"
    head = f"{matches:,} of {total:,} lines of {handle} match {pattern!r}:"
    more = matches - MAX_MATCHES
    if more > 0:
        listed.append(f"[{more:,} more matching lines not listed; narrow the pattern or use read_output]")
    return head + "\n" + "\n".join(listed)


def _grep(fh: BinaryIO, regex: Any, context: int) -> tuple[list[str], int, int]:
    """``(rendered lines, matching lines, lines in all)``; lists the first 200 matches with
    ``context`` lines before and after each, grep style."""
    listed: list[str] = []
    before: deque[_Line] = deque(maxlen=context)
    matches = total = after = last_listed = 0
    for line in _lines(fh, 1, regex):
        total = line.number
        matches += line.matched
        if line.matched and matches <= MAX_MATCHES:
            first = before[0].number if before else line.number
            if last_listed and first > last_listed + 1:
                listed.append("--")
            listed.extend(ctx_line.render("-") for ctx_line in before)
            listed.append(line.render())
            before.clear()
            last_listed, after = line.number, context
        elif after and matches <= MAX_MATCHES:
            listed.append(line.render("-"))
            last_listed, after = line.number, after - 1
        elif context:
            before.append(line)
    return listed, matches, total


def _compile(pattern: str) -> Any:
    """``pattern`` compiled by the ``regex`` package (Python ``re`` syntax, plus a time limit)."""
    try:
        return regex.compile(pattern)
    except (regex.error, OverflowError, RecursionError) as err:
        raise ToolError(f"invalid regex {pattern!r}: {err}") from err


class _Deadline:
    """A compiled pattern whose searches share one time budget (seconds): a pathological pattern
    (catastrophic backtracking) raises ``TimeoutError`` instead of hanging the run."""

    def __init__(self, pattern: Any, seconds: float):
        self.pattern, self.end = pattern, time.monotonic() + seconds

    def search(self, text: str) -> Any:
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return self.pattern.search(text, timeout=left)


def _ref(handle: str) -> values.Ref:
    """``handle`` parsed; ``ToolError`` when it is not a handle, malformed (no paths, no ``..``)."""
    ref = values.parse_ref(handle) if isinstance(handle, str) else None
    if ref is None:
        raise ToolError(f"not a handle: {handle!r} (handles look like @abc123)")
    return ref


def _output_path(ctx: ToolContext, handle: str, tool: str) -> Path:
    """The stored text file of ``handle`` in ``ctx.store``; ``ToolError`` when malformed, unknown,
    a part of a value, or an array (which has no lines)."""
    ref = _ref(handle)
    if ref.parts:
        raise ToolError(f"{tool} reads a whole stored output, and {handle} is a part of {ref.handle}: "
                        f'read it with query_output("{ref.handle}", path) or output_info("{handle}"), '
                        "or pass it to a tool as an argument")
    item = values.stored(ctx.store, ref.handle)
    if item.type == "ndarray":
        raise ToolError(f"{handle} is a numpy array (.npy), it has no text lines; pass it to a tool as an "
                        f'argument, or see output_info("{handle}")')
    return item.path


def _refuse_binary(fh: BinaryIO, handle: str, path: Path) -> None:
    """``ToolError`` when the output is binary (it has no lines to show); else rewinds ``fh``."""
    if looks_binary(fh.read(SNIFF_BYTES)):
        size = os.fstat(fh.fileno()).st_size
        raise ToolError(f"{handle} is binary ({size:,} bytes), it has no text lines; "
                        f"inspect {path} with the shell (e.g. `file`, `xxd | head`)")
    fh.seek(0)


def _skip_lines(fh: BinaryIO, count: int) -> int:
    """Move ``fh`` past its next ``count`` lines without decoding them; returns how many lines it
    moved past (fewer at the end of the file; an unterminated last line counts)."""
    skipped, last = 0, b""
    while skipped < count and (chunk := fh.read(CHUNK_BYTES)):
        newlines = chunk.count(b"\n")
        if skipped + newlines >= count:
            index = -1
            for _ in range(count - skipped):
                index = chunk.index(b"\n", index + 1)
            fh.seek(index + 1 - len(chunk), os.SEEK_CUR)
            return count
        skipped += newlines
        last = chunk[-1:]
    return skipped + (1 if last not in (b"", b"\n") else 0)


def _count_lines(fh: BinaryIO) -> int:
    """Lines from the position of ``fh`` to the end (an unterminated last line counts)."""
    newlines, last = 0, b""
    while chunk := fh.read(CHUNK_BYTES):
        newlines += chunk.count(b"\n")
        last = chunk[-1:]
    return newlines + (1 if last not in (b"", b"\n") else 0)


def _lines(fh: BinaryIO, first: int, regex: Any | None = None) -> Iterator[_Line]:
    """The lines from the position of ``fh``, numbered from ``first``, each searched with
    ``regex`` (piece by piece for lines over 1 MiB: a match across two pieces is missed)."""
    for number in itertools.count(first):
        piece = fh.readline(PIECE_BYTES)
        if not piece:
            return
        shown: str | None = None
        matched, chars = False, 0
        while piece:
            text = piece.decode("utf-8", "replace").removesuffix("\n")
            found = regex.search(text) if regex is not None and not matched else None
            if found:
                matched, shown = True, _window(text, found, chars > 0)
            elif shown is None:
                shown = text[:LINE_MAX_CHARS]
            chars += len(text)
            if piece.endswith(b"\n"):
                break
            piece = fh.readline(PIECE_BYTES)
        yield _Line(number, shown or "", matched, chars)


def _window(text: str, found: Any, later_piece: bool) -> str:
    """The line itself when short, else ``LINE_MAX_CHARS`` characters around the match, with
    ``...`` where text was left out."""
    if len(text) <= LINE_MAX_CHARS and not later_piece:
        return text
    start = max(0, min(found.start() - LINE_MAX_CHARS // 4, len(text) - LINE_MAX_CHARS))
    left = "..." if start > 0 or later_piece else ""
    right = "..." if start + LINE_MAX_CHARS < len(text) else ""
    return left + text[start : start + LINE_MAX_CHARS] + right


READ_OUTPUT = Tool(
    name="read_output",
    description=(
        "Read lines of an offloaded tool output by its handle (like @abc123), numbered 'N: text'. "
        "Lines are 1-based and inclusive; without end_line, returns up to 200 lines and says how "
        "many remain. Lines over 2,000 characters are cut (use grep_output to find text in them)."
    ),
    parameters=schema(
        {
            "handle": {"type": "string", "description": "the output's handle, e.g. @abc123"},
            "start_line": {"type": "integer", "description": "first line (default 1)", "minimum": 1},
            "end_line": {"type": ["integer", "null"], "description": "last line (default: 200 lines on)"},
        },
        required=("handle",),
    ),
    fn=read_output,
    kind="read",
    resolve_handles=False,
)

GREP_OUTPUT = Tool(
    name="grep_output",
    description=(
        "Search an offloaded tool output by its handle (like @abc123) with a Python regular "
        "expression (case-sensitive; use (?i) to ignore case). Returns matching lines as 'N: text' "
        "and context lines as 'N- text', up to 200 matches, and how many more there are."
    ),
    parameters=schema(
        {
            "handle": {"type": "string", "description": "the output's handle, e.g. @abc123"},
            "pattern": {"type": "string", "description": "Python regular expression"},
            "context_lines": {
                "type": "integer",
                "description": f"lines shown before and after each match (default 0, at most {MAX_CONTEXT})",
                "minimum": 0,
                "maximum": MAX_CONTEXT,
            },
        },
        required=("handle", "pattern"),
    ),
    fn=grep_output,
    kind="read",
    resolve_handles=False,
)

# --- query_output -------------------------------------------------------------------------------


def query_output(ctx: ToolContext, handle: str, path: str) -> str:
    """The parts of the JSON value ``handle`` (or a sub-handle) that the JSONPath ``path`` selects.

    One line per match, ``NAME = JSON``, where NAME is the match's sub-handle when it has one
    (pass it to a tool as is), else its JSONPath; at most 200 matches, values over 20,000
    characters cut. A stored text output that is valid JSON is queried too. No match is a normal
    result saying so. Raises ``ToolError`` for an unknown or malformed handle, an invalid path, or
    a value that is not JSON (text that does not parse, bytes, an array).
    """
    ref = _ref(handle)
    item = values.stored(ctx.store, ref.handle)
    if item.type in ("ndarray", "bytes"):
        kind = "a numpy array" if item.type == "ndarray" else "binary data"
        raise ToolError(f"query_output reads JSON values, and {ref.handle} is {kind}; pass it to a tool as an "
                        f'argument, or see output_info("{ref.handle}")')
    expression = _jsonpath(path)
    value = values.load(ctx.store, ref)
    if not ref.parts and isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except ValueError as err:
            raise ToolError(f"{handle} is text, not JSON ({err}); search it with grep_output or read it "
                            "with read_output") from None
    if values.is_ndarray(value):
        raise ToolError(f"{handle} is {values.describe(value)}, not JSON; pass it to a tool as an argument")
    try:
        matches = expression.find(value)
    except Exception as err:  # a filter comparing a number with a string, ...
        raise ToolError(f"JSON path {path!r} failed on {handle}: {type(err).__name__}: {err}") from err
    if not matches:
        return f"no match for {path} in {handle} ({values.describe(value)})"
    lines = [f"{len(matches):,} {'match' if len(matches) == 1 else 'matches'} of {path} in {handle}:"]
    lines += [f"{_match_name(handle, match)} = {_shown_value(match.value)}" for match in matches[:MAX_QUERY_MATCHES]]
    if len(matches) > MAX_QUERY_MATCHES:
        lines.append(f"[{len(matches) - MAX_QUERY_MATCHES:,} more matches not listed; narrow the path]")
    return "\n".join(lines)


def _jsonpath(path: str) -> Any:
    """The parsed JSONPath (jsonpath-ng, extended syntax); ``ToolError`` naming the problem."""
    from jsonpath_ng.ext import parse

    if not path.strip():
        raise ToolError("empty JSON path; examples: $.key, $.items[0], $.items[*].name, $..price")
    try:
        return parse(path)
    except Exception as err:  # jsonpath-ng raises plain Exception subclasses (lexer, parser)
        raise ToolError(f"invalid JSON path {path!r}: {err}; examples: $.key, $.items[0], $.items[*].name, "
                        "$..price, $.items[?(@.qty > 1)]") from err


def _match_name(handle: str, match: Any) -> str:
    """The sub-handle of a match (``@h/items/0/name``) when every key can be one, else its JSONPath."""
    parts: list[str] = []
    node = match
    while node is not None:
        kind = type(node.path).__name__
        if kind == "Fields":
            parts.extend(reversed([str(f) for f in node.path.fields]))
        elif kind == "Index":
            indices = getattr(node.path, "indices", None) or (node.path.index,)
            parts.extend(str(i) for i in reversed(indices))
        elif kind not in ("Root", "This"):
            return "$." + str(match.full_path)
        node = node.context
    parts.reverse()
    sub = str(values.Ref(handle, tuple(parts)))
    try:
        if values.parse_ref(sub) is not None:
            return sub
    except ToolError:
        pass
    return "$" + "".join(f"[{p}]" if p.lstrip("-").isdigit() else f"['{p}']" for p in parts)


def _shown_value(value: Any) -> str:
    text = values.json_text(value)
    if len(text) <= VALUE_MAX_CHARS:
        return text
    return text[:VALUE_MAX_CHARS] + f" [... value cut: {len(text):,} characters; query a narrower path]"


# --- output_info --------------------------------------------------------------------------------


def output_info(ctx: ToolContext, handle: str) -> str:
    """What ``handle`` (or a sub-handle) holds: type, size, lines, shape, sha256, the tool and
    arguments that made it, when, and where the file is. Reads the metadata sidecar written when
    the value was stored (measures the file when there is none). Raises ``ToolError`` for an
    unknown or malformed handle or part.
    """
    ref = _ref(handle)
    item = values.stored(ctx.store, ref.handle)
    if ref.parts:
        part = values.load(ctx.store, ref)
        return (f"{handle}: {values.describe(part)}; a part of {ref.handle} ({item.type}); "
                f"pass \"{handle}\" to a tool as an argument to use it")
    meta = item.meta or _measured(item)
    lines = [f"{ref.handle}: {_summary(item, meta)}"]
    size = f"{meta.get('bytes', 0):,} bytes"
    if item.type in ("text", "json"):
        tokens = meta.get("tokens")
        size += f", {plural(meta.get('lines', 0), 'line')}" + (f", {'' if meta.get('tokens_exact', True) else '~'}"
                                                               f"{tokens:,} tokens" if tokens is not None else "")
    lines.append(f"size: {size}; sha256 {meta.get('sha256', '?')}")
    if meta.get("tool"):
        arguments = meta.get("arguments") or ""
        made = f"made by: {meta['tool']}({arguments})" + (f", call {meta['call_id']}" if meta.get("call_id") else "")
        if isinstance(meta.get("ts"), int | float):
            made += ", " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(meta["ts"]))
        lines.append(made)
    lines.append(f"file: {item.path.absolute()}")
    lines.append(_how_to_read(item))
    return "\n".join(lines)


def _measured(item: values.Stored) -> dict[str, Any]:
    """Metadata measured from the file, for an output stored without a sidecar."""
    stats = file_stats(item.path)
    return {"bytes": stats.bytes, "lines": stats.lines, "sha256": stats.sha256, "type": item.type}


def _summary(item: values.Stored, meta: dict[str, Any]) -> str:
    if item.type == "ndarray":
        return f"ndarray {meta.get('dtype', '?')}, shape {tuple(meta.get('shape') or ())}"
    if item.type == "json":
        try:
            return "JSON " + values.describe(values.load_file(item))
        except ToolError:
            return f"JSON value of {meta.get('length', '?')} items"
    return "binary data" if item.type == "bytes" else "text"


def _how_to_read(item: values.Stored) -> str:
    handle = item.handle
    use = f'pass "{handle}" to a tool as an argument to use the whole value'
    if item.type == "json":
        return f'{use}, "{handle}/KEY" or "{handle}/INDEX" for a part; query_output("{handle}", "$...") reads parts'
    if item.type == "text":
        return f"{use}; read_output and grep_output read parts"
    return use


QUERY_OUTPUT = Tool(
    name="query_output",
    description=(
        "Query a stored JSON value by its handle (like @abc123, or a part like @abc123/items) with a "
        "JSONPath expression: $.key, $.items[0], $.items[*].name, $..price, $.items[?(@.qty > 1)]. "
        "Returns up to 200 matches as 'NAME = JSON', NAME being a handle you can pass to other tools."
    ),
    parameters=schema(
        {
            "handle": {"type": "string", "description": "the value's handle, e.g. @abc123"},
            "path": {"type": "string", "description": "JSONPath expression, starting with $"},
        },
        required=("handle", "path"),
    ),
    fn=query_output,
    kind="read",
    resolve_handles=False,
)

OUTPUT_INFO = Tool(
    name="output_info",
    description=(
        "Describe a stored output by its handle (like @abc123): type (text, bytes, json, ndarray), "
        "size, lines, shape, sha256, the tool call that made it, and how to read it."
    ),
    parameters=schema(
        {"handle": {"type": "string", "description": "the output's handle, e.g. @abc123 or @abc123/key"}},
        required=("handle",),
    ),
    fn=output_info,
    kind="read",
    resolve_handles=False,
)

TOOLS: tuple[Tool, ...] = (READ_OUTPUT, GREP_OUTPUT, QUERY_OUTPUT, OUTPUT_INFO)
