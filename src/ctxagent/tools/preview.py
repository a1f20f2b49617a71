"""Middle-out preview of an output stored in a file: its head, its tail, and what lies between.

The file is never read whole (the head from the start, the tail after a seek from the end, lines
counted in 1 MiB chunks). ``max_chars`` and every ``*_chars`` are *characters*; sizes are *bytes*;
lines end in ``\\n`` (an unterminated last line counts); tokens are exact under 4 MiB, else ``bytes / 4``.
Undecodable bytes show as U+FFFD and no cut splits a character, so a preview is valid UTF-8; what it
shows is cleaned of terminal control (:func:`ctxagent.tools.clean.clean`), the file never changed.
"""

from __future__ import annotations

import codecs
import io
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ctxagent import tokens
from ctxagent.tools.clean import clean

CHUNK_BYTES = 1024 * 1024  # streaming reads
SNIFF_BYTES = 8 * 1024  # bytes looked at to tell binary from text
EXACT_TOKENS_MAX_BYTES = 4 * 1024 * 1024  # below this, token counts are exact; above, bytes / 4
BINARY_INVALID_SHARE = 0.3  # more undecodable bytes than this share of the sample: binary
HEAD_SHARE = 0.6  # share of max_chars given to the head; the tail gets the rest
MAX_CHAR_BYTES = 4  # a UTF-8 character takes at most 4 bytes

_ESCAPED = re.compile("[\udc80-\udcff]")  # undecodable bytes after surrogateescape decoding
_TO_REPLACEMENT = {code: "\ufffd" for code in range(0xDC80, 0xDD00)}
_CONTINUATION = bytes(range(0x80, 0xC0))  # the bytes that continue a UTF-8 character

_PARTLY = ("", "part of ", "middle of ")  # by how many ends of the one omitted line are shown

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"%PDF-", "PDF document"),
    (b"\x1f\x8b", "gzip data"),
    (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ\x00", "xz data"),
    (b"\x28\xb5\x2f\xfd", "zstd data"),
    (b"PK\x03\x04", "zip archive"),
    (b"PK\x05\x06", "zip archive (empty)"),
    (b"\x7fELF", "ELF executable"),
    (b"\x00asm", "WebAssembly module"),
    (b"SQLite format 3\x00", "SQLite database"),
)


@dataclass(frozen=True)
class Preview:
    """A preview of one stored output.

    Attributes:
        text: the preview (characters, valid UTF-8): head, ``marker``, tail; or, for a binary
            output, a one-line description.
        lines: lines in the whole file.
        bytes: bytes in the whole file.
        omitted_lines: whole lines not shown (a line cut by the preview is partly shown).
        omitted_bytes: bytes not shown.
        binary: the output is binary (described, not shown).
        marker: the exact text inserted between head and tail, newlines included ("" when nothing
            was left out); ``len(text) <= max_chars + len(marker)`` always holds for text output.
        omitted_tokens: tokens not shown; exact when ``tokens_exact``, else ``bytes / 4``.
        tokens_exact: whether ``omitted_tokens`` was counted (file under 4 MiB) or estimated.
    """

    text: str
    lines: int
    bytes: int
    omitted_lines: int
    omitted_bytes: int
    binary: bool
    marker: str = ""
    omitted_tokens: int = 0
    tokens_exact: bool = True


@dataclass(frozen=True)
class _Part:
    """A head or a tail: surrogate-escaped text, the bytes it covers, its newlines, a cut flag."""

    text: str = ""
    nbytes: int = 0
    newlines: int = 0
    cut: bool = False  # the head ends, or the tail starts, inside a line


def looks_binary(sample: bytes) -> bool:
    """Whether ``sample`` (the first bytes of an output, ~8 KiB) is binary.

    Binary: it holds a NUL byte, or more than 30 % of its bytes are not valid UTF-8. A multibyte
    character cut at the end of the sample is not counted as invalid.
    """
    invalid = len(_ESCAPED.findall(_decode(sample, final=False)))
    return b"\x00" in sample or invalid > BINARY_INVALID_SHARE * len(sample)


def guess_type(head: bytes) -> str | None:
    """A name for the format whose magic bytes start ``head`` (``"PNG image"``), or None."""
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    if head[257:262] == b"ustar":
        return "tar archive"
    return None


def move_lines(fh: BinaryIO, count: int | None = None, out: BinaryIO | None = None) -> int:
    """Move ``fh`` past its next ``count`` lines (None: all that are left) without decoding them,
    copying them to ``out`` when given, a block (1 MiB) at a time whatever the length of a line:
    memory stays one block. Returns how many lines it moved past: fewer than ``count`` at the end
    of the file, where a last line without ``\\n`` counts."""
    moved, last = 0, b""
    while (count is None or moved < count) and (chunk := fh.read(CHUNK_BYTES)):
        newlines = chunk.count(b"\n")
        if count is not None and moved + newlines >= count:
            index = -1
            for _ in range(count - moved):
                index = chunk.index(b"\n", index + 1)
            fh.seek(index + 1 - len(chunk), os.SEEK_CUR)
            chunk, newlines = chunk[: index + 1], count - moved
        if out is not None:
            out.write(chunk)
        moved += newlines
        last = chunk[-1:]
    return moved + (1 if last not in (b"", b"\n") else 0)


@dataclass(frozen=True)
class FileStats:
    """Size (bytes), lines and sha256 (hex) of a stored output, computed in one streaming pass."""

    bytes: int
    lines: int
    sha256: str


def estimate_tokens(nbytes: int) -> int:
    """Tokens estimated from a size in bytes (4 bytes a token), for outputs too big to count."""
    return (nbytes + 3) // 4


def preview_file(
    path: Path,
    *,
    head_lines: int,
    tail_lines: int,
    max_chars: int,
    model: str = "",
    lines: int | None = None,
) -> Preview:
    """The middle-out preview of the file at ``path``.

    Keeps at most ``head_lines`` first and ``tail_lines`` last lines, within ``max_chars``
    characters in all (about 60 % for the head; the tail may use what the head left). Cuts on line
    boundaries; a line too long for the budget is cut inside (the head keeps its start, the tail
    its end). ``lines`` is the file's line count when the caller already knows it (saves one
    streaming pass); ``model`` picks the tokenizer for the marker's token count.

    Raises ``OSError`` when the file cannot be read.
    """
    with open(path, "rb") as fh:
        return _preview(fh, lines, head_lines=head_lines, tail_lines=tail_lines, max_chars=max_chars, model=model)


def preview_bytes(data: bytes, *, head_lines: int, tail_lines: int, max_chars: int, model: str = "") -> Preview:
    """The middle-out preview of ``data`` held in memory (e.g. an output's cleaned text, UTF-8), as
    :func:`preview_file` makes it of a file; sizes and lines are those of ``data``."""
    return _preview(io.BytesIO(data), None, head_lines=head_lines, tail_lines=tail_lines, max_chars=max_chars,
                    model=model)


def _preview(fh: BinaryIO, lines: int | None, *, head_lines: int, tail_lines: int, max_chars: int,
             model: str) -> Preview:
    """The preview of what ``fh`` (seekable) holds, of ``lines`` lines (None: counted here)."""
    size = fh.seek(0, os.SEEK_END)
    fh.seek(0)
    if lines is None:
        lines = move_lines(fh)
        fh.seek(0)
    sample = fh.read(SNIFF_BYTES)
    if looks_binary(sample):
        return _binary_preview(sample, size, lines)
    head = _read_head(fh, size, head_lines, int(max_chars * HEAD_SHARE))
    tail = _read_tail(fh, size, head, tail_lines, max(0, max_chars - len(head.text)))
    ends_with_newline = _ends_with_newline(fh, size)
    gap_start, gap_end = head.nbytes, size - tail.nbytes
    if gap_start == gap_end:
        return Preview(_shown(head.text + tail.text), lines, size, 0, 0, binary=False)
    omitted_tokens, exact = span_tokens(fh, gap_start, gap_end, size, model)
    gap, whole_lines = _gap(head, tail, lines, ends_with_newline, gap_end - gap_start, omitted_tokens, exact)
    marker = ("" if head.text.endswith("\n") or not head.text else "\n") + gap + "\n"
    text = _shown(head.text) + marker + _shown(tail.text)
    return Preview(text, lines, size, whole_lines, gap_end - gap_start, False, marker, omitted_tokens, exact)


def _decode(data: bytes, *, final: bool) -> str:
    """UTF-8 with one surrogate character per undecodable byte; holds back a cut character
    at the end unless ``final``."""
    return codecs.getincrementaldecoder("utf-8")("surrogateescape").decode(data, final=final)


def _shown(text: str) -> str:
    """Surrogate-escaped text made valid (each undecodable byte becomes U+FFFD) and cleaned of
    terminal control: never longer (characters) than ``text``."""
    return clean(text.translate(_TO_REPLACEMENT))


def _split_lines(text: str) -> list[str]:
    """``text`` cut after each ``\\n`` (kept); the last piece has no ``\\n`` when text does not end
    with one. Unlike ``str.splitlines``, only ``\\n`` ends a line, as in the line counts."""
    return [piece for piece in re.split("(?<=\n)", text) if piece]


def _part(text: str, *, cut: bool) -> _Part:
    return _Part(text, len(text.encode("utf-8", "surrogateescape")), text.count("\n"), cut)


def _read_head(fh: BinaryIO, size: int, max_lines: int, budget: int) -> _Part:
    """The first whole lines (at most ``max_lines``, ``budget`` characters); else the cut start
    of the first line."""
    if max_lines <= 0 or budget <= 0 or size == 0:
        return _Part()
    fh.seek(0)
    raw = fh.read(min(size, budget * MAX_CHAR_BYTES + MAX_CHAR_BYTES))
    at_eof = len(raw) == size
    pieces = _split_lines(_decode(raw, final=at_eof))
    taken = _take(((piece, piece.endswith("\n") or at_eof) for piece in pieces), max_lines, budget)
    if taken:
        return _part("".join(taken), cut=False)
    # The first line alone is over the budget: keep its start (the read holds > budget chars).
    return _part(pieces[0][:budget], cut=True)


def _read_tail(fh: BinaryIO, size: int, head: _Part, max_lines: int, budget: int) -> _Part:
    """The last whole lines after the head (at most ``max_lines``, ``budget`` characters); else
    the cut end of the last line."""
    if max_lines <= 0 or budget <= 0 or head.nbytes >= size:
        return _Part()
    start = max(head.nbytes, size - (budget * MAX_CHAR_BYTES + MAX_CHAR_BYTES))
    fh.seek(start)
    raw = fh.read(size - start)
    skip = _continuation_bytes(raw) if start > head.nbytes else 0
    pieces = _split_lines(_decode(raw[skip:], final=True))
    if not pieces:
        return _Part()
    # The first piece starts mid-line unless the read began right where the head ended.
    first_ok = start + skip == head.nbytes
    backwards = ((pieces[i], i > 0 or first_ok) for i in range(len(pieces) - 1, -1, -1))
    taken = _take(backwards, max_lines, budget)
    if taken:
        return _part("".join(reversed(taken)), cut=False)
    # The last line alone is over the budget: keep its end (the read holds > budget chars).
    return _part(pieces[-1][-budget:], cut=True)


def _take(pieces: Iterable[tuple[str, bool]], max_lines: int, budget: int) -> list[str]:
    """Lines taken in the order given while each is whole, at most ``max_lines`` of them and
    ``budget`` characters in all."""
    taken: list[str] = []
    used = 0
    for piece, whole in pieces:
        if len(taken) == max_lines or not whole or used + len(piece) > budget:
            break
        taken.append(piece)
        used += len(piece)
    return taken


def _continuation_bytes(raw: bytes) -> int:
    """How many UTF-8 continuation bytes (at most 3) start ``raw``: the rest of a cut character."""
    return len(raw[:3]) - len(raw[:3].lstrip(_CONTINUATION))


def _ends_with_newline(fh: BinaryIO, size: int) -> bool:
    if size == 0:
        return False
    fh.seek(size - 1)
    return fh.read(1) == b"\n"


def span_tokens(fh: BinaryIO, start: int, end: int, size: int, model: str) -> tuple[int, bool]:
    """Tokens of bytes ``start:end`` of ``fh`` (``size`` bytes in all) cleaned of terminal control (what
    reading them costs the model): counted (and True) under 4 MiB, else estimated from their size (and False)."""
    if size >= EXACT_TOKENS_MAX_BYTES:
        return estimate_tokens(end - start), False
    fh.seek(start)
    return tokens.count_text(clean(fh.read(end - start).decode("utf-8", "replace")), model), True


def _gap(head: _Part, tail: _Part, lines: int, ends_with_newline: bool, nbytes: int, tokens: int,
         exact: bool) -> tuple[str, int]:
    """What the preview leaves out between ``head`` and ``tail`` of a file of ``lines`` lines, said
    (``[... 9,940 lines, 1,234,567 bytes, 300,123 tokens omitted: lines 41-9,980 ...]``), and the lines
    of which nothing is shown (the first and last lines it touches may be shown in part)."""
    newlines = lines - (1 if lines and not ends_with_newline else 0)
    # The gap ends a line when the tail starts one (or, with no tail, when the file ends one).
    gap_ends_line = not tail.cut if tail.text else ends_with_newline
    first = head.newlines + 1
    last = first + newlines - head.newlines - tail.newlines - (1 if gap_ends_line else 0)
    whole_lines = max(0, last - first + 1 - head.cut - tail.cut)
    if first == last:
        where = f"{_PARTLY[head.cut + tail.cut]}line {first:,}"
    else:
        where = f"lines {first:,}-{last:,}"
        partly = [f"{n:,}" for n, cut in ((first, head.cut), (last, tail.cut)) if cut]
        if partly:
            where += f" (line {' and '.join(partly)} only partly)"
    sizes = [plural(whole_lines, "line"), plural(nbytes, "byte"), plural(tokens, "token", "" if exact else "~")]
    return f"[... {', '.join(sizes)} omitted: {where} ...]", whole_lines


def plural(count: int, noun: str, prefix: str = "") -> str:
    """``1 line``, ``~2,048 tokens``: the count with thousands separators and the noun."""
    return f"{prefix}{count:,} {noun}{'' if count == 1 else 's'}"


def _binary_preview(sample: bytes, size: int, lines: int) -> Preview:
    """A one-line description of a binary output: size, guessed type, first bytes in hex."""
    kind = guess_type(sample)
    looks = f", {kind} (by its magic bytes)" if kind else ""
    text = f"[binary output: {size:,} bytes{looks}; first bytes: {sample[:16].hex(' ')}]"
    return Preview(text, lines, size, lines, size, True, "", estimate_tokens(size), False)
