"""Terminal control out of tool text: what a terminal would show, not the bytes that drew it.

Escape sequences and carriage-return frames cost tokens and say nothing (issue 11: 20,001 progress
frames on one line cost 139,019 tokens where the terminal shows one line of ~20). :func:`clean`:

1. removes escape sequences (ECMA-48, 5th edition, 1991, sections 5.3-5.6): control sequences (CSI),
   control strings (OSC, DCS, SOS, PM, APC, up to BEL or ST; one left open ends at the end of its
   line) and other escape sequences (``ESC ( B``, ``ESC 7``);
2. keeps the last non-empty ``\\r`` frame of a line (a ``\\r`` right before ``\\n`` is a CRLF end);
3. applies backspaces (``_\\bX`` -> ``X``);
4. removes the other C0 controls but tab, newline, vertical tab and form feed, DEL and the C1 controls;
5. makes lone surrogates visible (:func:`mend`): UTF-8 (the transcript, every provider) cannot hold them.

The number of lines never changes, so line numbers of a cleaned preview are those of the raw output;
cleaning is idempotent. Lengths are characters. See docs/tools.md.
"""

from __future__ import annotations

import re

# Anything :func:`clean` would change starts with one of these characters (CRLF-only text too).
_CONTROL = re.compile("[\x00-\x08\x0d-\x1f\x7f-\x9f\ud800-\udfff]")
_ESCAPES = re.compile(
    "(?:\x1b\\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"  # CSI (an unfinished one to its end)
    "|(?:\x1b[\\]PX^_]|\x9d)[^\x07\x1b\n]*(?:\x07|\x1b\\\\)?"  # control strings, to BEL or ST
    "|\x1b[\x20-\x2f]*[\x30-\x7e]?"  # other escape sequences, or a lone ESC
)
_LEFTOVER = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f]")  # \r and \b are handled before
_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_BYTES = range(0xDC80, 0xDD00)  # surrogateescape: U+DC80 + byte, for bytes 0x80-0xFF


def clean(text: str, *, keep_escapes: bool = False) -> str:
    """``text`` as a terminal would show it (the steps of the module docstring).

    ``keep_escapes``: leave lone surrogates as they are (for text decoded with ``surrogateescape``
    that the caller encodes back to its bytes). Returns ``text`` itself when it holds no control
    character. Time is linear in its length.
    """
    if _CONTROL.search(text) is None:
        return text
    text = _ESCAPES.sub("", text if keep_escapes else mend(text))
    if "\r" in text or "\b" in text:
        text = "\n".join(_clean_line(line) for line in text.split("\n"))
    return _LEFTOVER.sub("", text)


def mend(text: str) -> str:
    """``text`` with every lone surrogate made visible, so that it can be written as UTF-8: one that
    stands for an undecodable byte (``surrogateescape``: U+DC80-U+DCFF, what ``os.fsdecode`` gives
    for byte 0xFF of a file name) becomes the 4 characters ``\\xff``, any other U+FFFD.

    Returns ``text`` itself when it holds none. Time is linear in its length.
    """
    return _SURROGATE.sub(_visible, text)  # "If the pattern isn't found, string is returned unchanged" (re.sub)


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if code in _ESCAPED_BYTES else "\ufffd"


def plain(text: str) -> str:
    """Text typed or piped in (a task, a message): lone surrogates made visible (:func:`mend`),
    NUL and the other control characters but tab, newline, carriage return, vertical tab and form
    feed removed. Returns ``text`` itself when there is nothing to change."""
    return _LEFTOVER.sub("", mend(text))


def encode_exact(text: str) -> bytes:
    """``text`` as the bytes it came from: UTF-8, with ``surrogateescape`` characters back to the
    bytes they stand for (a file name's 0xFF stays 0xFF); other lone surrogates as their 3 bytes."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def _clean_line(line: str) -> str:
    """One line (no ``\\n``): its last carriage-return frame, then its backspaces applied."""
    if "\r" in line.rstrip("\r") or line.endswith("\r\r"):
        line = last_frame(line)
    return apply_backspaces(line) if "\b" in line else line


def last_frame(line: str) -> str:
    """The text after the last ``\\r`` of ``line`` that is followed by text; ``""`` when none is."""
    frames = [frame for frame in line.split("\r") if frame]
    return frames[-1] if frames else ""


def apply_backspaces(line: str) -> str:
    """``line`` with each ``\\b`` and the character before it removed (none at the line start)."""
    kept: list[str] = []
    for char in line:
        if char != "\b":
            kept.append(char)
        elif kept:
            kept.pop()
    return "".join(kept)
