"""What an offloaded output costs and shows, read back from the store (the stored file, never the
tool's value: a redacting store's file has no secret, so neither has anything derived from it).

Sizes are bytes; tokens are counted with the tokenizer of ``model`` (a litellm model string).
"""

from __future__ import annotations

from pathlib import Path

from ctxagent import tokens
from ctxagent.tools.clean import clean
from ctxagent.tools.preview import EXACT_TOKENS_MAX_BYTES, SNIFF_BYTES, estimate_tokens, looks_binary


def file_tokens(path: Path, size: int, model: str) -> tuple[bool, int, bool]:
    """``(binary, tokens, exact)`` of a stored output: text under 4 MiB is counted once cleaned of
    terminal control (what reading it costs the model); the rest is estimated at 4 bytes a token."""
    with open(path, "rb") as fh:
        binary = looks_binary(fh.read(SNIFF_BYTES))
    if binary or size >= EXACT_TOKENS_MAX_BYTES:
        return binary, estimate_tokens(size), False
    return binary, tokens.count_text(clean(path.read_bytes().decode("utf-8", "replace")), model), True


def cleaned_file(path: Path) -> bytes | None:
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
