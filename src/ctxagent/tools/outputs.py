"""Tools over stored outputs: ``read_output`` (a range of lines) and ``grep_output`` (a regex search).

They take the handle itself (``resolve_handles=False``), stream the stored file with at most a 1 MiB
piece of one line in memory, and show at most 2,000 characters of a line and 200 lines or matches.
Line format: ``N: text`` (``N-`` for ``grep_output`` context lines, ``--`` between groups).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, BinaryIO

from pydantic import Field

from ctxagent.tools import values
from ctxagent.tools.base import Tool, ToolContext, ToolError
from ctxagent.tools.patterns import Budget, Timed, compile_pattern, too_slow
from ctxagent.tools.preview import move_lines
from ctxagent.tools.signature import function_tool

MAX_LINES = 200  # lines read_output returns when end_line is not given
MAX_MATCHES = 200  # matching lines grep_output lists
MAX_CONTEXT = 20  # context_lines allowed
LINE_MAX_CHARS = 2000  # characters shown of one line
PIECE_BYTES = 1024 * 1024  # a longer line is read (and searched) in pieces of this size


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


def read_output(ctx: ToolContext, handle: str, start_line: Annotated[int, Field(ge=1)] = 1,
                end_line: int | None = None) -> str:
    """Lines ``start_line``..``end_line`` (1-based, inclusive) of the output stored as ``handle``.

    Without ``end_line``, at most 200 lines, then a line saying how many remain. ``end_line`` past
    the end stops at the end. Raises ``ToolError`` for an unknown or malformed handle, a binary
    output, ``start_line`` < 1 or past the end, or ``end_line`` < ``start_line``.

    Args:
        handle: the handle a saved output's preview names (it starts with @)
        start_line: first line
        end_line: last line (default: 200 lines on)
    """
    path = _output_path(ctx, handle, "read_output")
    check_range(start_line, end_line)
    wanted = (end_line if end_line is not None else start_line + MAX_LINES - 1) - start_line + 1
    with open(path, "rb") as fh:
        skipped = move_lines(fh, start_line - 1)
        shown = list(itertools.islice(_lines(fh, start_line), wanted))
        if not shown:
            if start_line == 1:
                return f"{handle} is empty (0 lines)"
            raise ToolError(f"start_line {start_line} is past the end: {handle} has {skipped:,} lines")
        last = shown[-1].number
        rest = move_lines(fh) if end_line is None else None
    parts = [f"{handle} lines {start_line:,}-{last:,}:", *(line.render() for line in shown),
             _range_trailer(handle, last, end_line, rest)]
    return "\n".join(part for part in parts if part)


def check_range(start_line: int, end_line: int | None) -> None:
    """``ToolError`` unless ``start_line`` >= 1 and ``end_line`` is None or >= ``start_line``."""
    if start_line < 1:
        raise ToolError(f"start_line must be 1 or more, not {start_line}")
    if end_line is not None and end_line < start_line:
        raise ToolError(f"empty range: end_line {end_line} is before start_line {start_line}")


def _range_trailer(handle: str, last: int, end_line: int | None, rest: int | None) -> str:
    """What follows the lines shown: how many remain and how to read them, or the end."""
    if rest:
        upto = last + min(rest, MAX_LINES)
        return (f"[{rest:,} more lines ({last + 1:,}-{last + rest:,}); next: "
                f"read_output(\"{handle}\", {last + 1}, {upto})]")
    if end_line is None or end_line > last:
        return f"[end of output: {last:,} lines]"
    return ""


def grep_output(ctx: ToolContext, handle: str, pattern: str,
                context_lines: Annotated[int, Field(ge=0, le=MAX_CONTEXT)] = 0) -> str:
    """Lines of the output stored as ``handle`` that match ``pattern`` (Python regex,
    case-sensitive), with their numbers and ``context_lines`` lines around each.

    Lists at most 200 matching lines, then says how many more there are. Raises ``ToolError`` for
    an unknown or malformed handle, a binary output, an invalid regex, or a bad ``context_lines``.

    Args:
        handle: the handle a saved output's preview names (it starts with @)
        pattern: Python regular expression
        context_lines: lines shown before and after each match
    """
    path = _output_path(ctx, handle, "grep_output")
    regex = compile_pattern(pattern)
    if not 0 <= context_lines <= MAX_CONTEXT:
        raise ToolError(f"context_lines must be between 0 and {MAX_CONTEXT}, not {context_lines}")
    with open(path, "rb") as fh:
        budget = Budget()
        try:
            listed, matches, total = _grep(fh, Timed(regex, budget), context_lines)
        except TimeoutError:
            raise too_slow("grep_output", pattern, handle, budget) from None
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


def ref_of(handle: str) -> values.Ref:
    """``handle`` parsed; ``ToolError`` when it is not a handle, malformed (no paths, no ``..``)."""
    ref = values.parse_ref(handle) if isinstance(handle, str) else None
    if ref is None:
        raise ToolError(f"not a handle: {handle!r} (handles look like @abc123)")
    return ref


def _output_path(ctx: ToolContext, handle: str, tool: str) -> Path:
    """The stored text file of ``handle`` in ``ctx.store``; ``ToolError`` when malformed, unknown,
    a part of a value, an array or binary data (which have no lines)."""
    ref = ref_of(handle)
    if ref.parts:
        raise ToolError(f"{tool} reads a whole stored output, and {handle} is a part of {ref.handle}: "
                        f'read it with query_output("{ref.handle}", path) or output_info("{handle}"), '
                        "or pass it to a tool as an argument")
    item = values.stored(ctx.store, ref.handle)
    if item.type == "ndarray":
        raise ToolError(f"{handle} is a numpy array (.npy), it has no text lines; pass it to a tool as an "
                        f'argument, or see output_info("{handle}")')
    if item.type == "bytes":
        raise ToolError(f"{handle} is binary ({item.path.stat().st_size:,} bytes), it has no text lines; "
                        f"inspect {item.path} with the shell (e.g. `file`, `xxd | head`)")
    return item.path


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


READ_OUTPUT = function_tool(read_output, kind="read", resolve_handles=False, description=(
    "Read lines of a saved tool output (not a file: read files with read_file) by the handle its preview "
    "names, numbered 'N: text'. "
    "Lines are 1-based and inclusive; without end_line, returns up to 200 lines and says how "
    "many remain. Lines over 2,000 characters are cut (use grep_output to find text in them)."
))

GREP_OUTPUT = function_tool(grep_output, kind="read", resolve_handles=False, description=(
    "Search a saved tool output (not a file) by the handle its preview names, with a Python regular "
    "expression (case-sensitive; use (?i) to ignore case). Returns matching lines as 'N: text' "
    "and context lines as 'N- text', up to 200 matches, and how many more there are."
))


TOOLS: tuple[Tool, ...] = (READ_OUTPUT, GREP_OUTPUT)  # then tools/structured.py: query_output, output_info
