"""A parsed-encoding cache for tiktoken: the first token count of a process in ~0.14 s, not ~0.22 s.

``tiktoken.get_encoding("o200k_base")`` reads the 3.6 MB ``.tiktoken`` file and base64-decodes its
200,000 lines in Python on every process start (~0.13 s here), then builds the Rust ``CoreBPE``
(~0.10 s, holding the GIL, so it cannot overlap litellm's import). This module keeps the decoded
constructor arguments of an encoding (name, pattern, mergeable ranks, special tokens) as one
``marshal`` file in ctxagent's user cache dir; loading it takes ~0.04 s. Issue 16 measured the
start-up of a one-turn run; this is a third of what ctxagent itself added to ``import litellm``.

The cache is only an accelerator: it is keyed by the encoding name, tiktoken's version, Python's
version (marshal's format is per version) and the size and mtime of the source file tiktoken would
read, written atomically (temporary file + rename), and any failure to read or write it falls back
to ``tiktoken.get_encoding``. The encodings are the same objects either way (tests compare them).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import marshal
import os
import sys
from pathlib import Path
from typing import Any

from ctxagent import rank_table

Ranks = dict[bytes, int] | rank_table.RankTable
"""Mergeable ranks: tiktoken's dict, or the same as a memory-mapped table."""

FIELDS = ("name", "pat_str", "mergeable_ranks", "special_tokens")  # tiktoken.Encoding's arguments


def encoding(name: str, source_dir: str | None) -> Any:
    """The tiktoken ``Encoding`` called ``name``, from the cache when a valid entry exists.

    ``source_dir``: the folder of the ``.tiktoken`` files tiktoken reads (``TIKTOKEN_CACHE_DIR``),
    part of the cache key; None disables the cache (tiktoken would download: nothing to key on).
    Raises what ``tiktoken.get_encoding`` raises for an unknown name.
    """
    import tiktoken

    args = _cached_args(name, source_dir)
    _ARGS.pop((name, source_dir), None)  # ~30 MB of ranks: the encoding holds its own copy
    if args is not None:
        try:
            return tiktoken.Encoding(**args)
        except (ValueError, TypeError):
            pass
    enc = tiktoken.get_encoding(name)
    path = _entry(name, source_dir)
    if path is not None:
        _save(path, enc)
    return enc


_ARGS: dict[tuple[str, str | None], dict[str, Any]] = {}


def _cached_args(name: str, source_dir: str | None) -> dict[str, Any] | None:
    """The cached constructor arguments of ``name`` (see :data:`FIELDS`), or None when there is no
    valid entry yet. A hit is kept for the process: the light counter and the encoding share it."""
    if (name, source_dir) in _ARGS:
        return _ARGS[name, source_dir]
    path = _entry(name, source_dir)
    if path is None:
        return None
    try:
        args = marshal.loads(path.read_bytes())
        _ARGS[name, source_dir] = found = {k: args[k] for k in FIELDS}
        return found
    except (OSError, ValueError, EOFError, TypeError, KeyError):
        return None


class LightCounter:
    """Token counts of ASCII text, exactly as ``Encoding.encode_ordinary`` gives them, without
    building tiktoken's Rust ``CoreBPE`` (~0.12 s, holding the GIL): the text is split with the
    encoding's own pattern (the ``regex`` module, as tiktoken's ``_educational`` reference does) and
    each piece not in the vocabulary is merged pair by pair, lowest rank first (tiktoken's byte-pair
    merge). ASCII only: the pattern's Unicode classes could differ between Python's ``regex`` and
    Rust's Unicode tables; for ASCII they cannot. A one-turn run counts only a short task this way.
    """

    def __init__(self, pat_str: str, ranks: Ranks):
        import regex

        self._split = regex.compile(pat_str).findall
        self._ranks = ranks

    def count(self, text: str) -> int:
        """Tokens in ``text``. Raises ``ValueError`` when ``text`` is not ASCII, or when merging its
        pieces that are not tokens would cost more than :data:`MERGE_COST` (the merge is quadratic
        in a piece's length: 4,000 letters in a row took 12 s; tiktoken's CoreBPE is faster then)."""
        if not text.isascii():
            raise ValueError("LightCounter counts ASCII text only")
        ranks = self._ranks
        pieces = [piece.encode() for piece in self._split(text)]
        merged = [piece for piece in pieces if piece not in ranks]
        if sum(len(piece) ** 2 for piece in merged) > MERGE_COST:
            raise ValueError("LightCounter: too costly a merge; count with the encoding")
        return len(pieces) - len(merged) + sum(_merged(ranks, piece) for piece in merged)


MERGE_COST = 64 * 1024
"""The most a :meth:`LightCounter.count` merges: the sum of the squared lengths of the pieces that
are not tokens (~30 ms; 16K characters of this project's README sum to 16K, the default tools'
schemas to 1.7K)."""


def light_counter(name: str, source_dir: str | None) -> LightCounter | None:
    """A :class:`LightCounter` for ``name`` over its memory-mapped rank table
    (:mod:`ctxagent.rank_table`: a few pages read, not ~30 MB of ranks loaded), made from the cache
    entry the first time; None when the cache holds no entry yet."""
    path = _entry(name, source_dir)
    if path is None:
        return None
    table_path = path.with_suffix(".ranks")
    try:
        table = rank_table.RankTable(table_path)
        return LightCounter(table.pattern, table)
    except (OSError, ValueError):
        pass
    args = _cached_args(name, source_dir)
    if args is None:
        return None
    try:
        rank_table.write(table_path, args["pat_str"], args["mergeable_ranks"])
        table = rank_table.RankTable(table_path)
    except (OSError, ValueError):
        return LightCounter(args["pat_str"], args["mergeable_ranks"])
    _ARGS.pop((name, source_dir), None)
    return LightCounter(table.pattern, table)


def _merged(ranks: Ranks, piece: bytes) -> int:
    """Tokens of one pre-split ``piece``: merge the adjacent pair of lowest rank (the first such
    pair on a tie) until no pair is in ``ranks``; the number of parts left."""
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (best is None or rank < best):
                best, at = rank, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return len(parts)


def _entry(name: str, source_dir: str | None) -> Path | None:
    """The cache file of ``name`` for these versions and this source, or None (no source folder)."""
    if not source_dir or not Path(source_dir).is_dir():
        return None
    stats = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in Path(source_dir).iterdir() if p.is_file())
    key = repr((name, importlib.metadata.version("tiktoken"), sys.version_info[:2], stats))
    from ctxagent.dirs import user_dir

    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return user_dir("cache") / "tokenizers" / f"{name}-{digest}.marshal"


def _save(path: Path, enc: Any) -> None:
    """Write ``enc``'s constructor arguments to ``path`` atomically; a failure is ignored."""
    args = {"name": enc.name, "pat_str": enc._pat_str, "mergeable_ranks": enc._mergeable_ranks,
            "special_tokens": enc._special_tokens}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f".{path.name}.{os.getpid()}")
        part.write_bytes(marshal.dumps(args))
        os.replace(part, path)
    except (OSError, ValueError, AttributeError):
        pass
