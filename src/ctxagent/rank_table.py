"""A tokenizer's mergeable ranks as a memory-mapped hash table: rank lookups without loading them.

tiktoken's ``o200k_base`` has 200,000 mergeable ranks; as a Python ``dict[bytes, int]`` they take
~30 MB and ~0.1 s to unmarshal, which is most of the memory a one-turn run uses before it needs the
real encoder (issue 18: a run <= 60 MB beyond the interpreter). The light counter
(:class:`ctxagent.bpe_cache.LightCounter`) looks up a few hundred pairs for a short text, so it
reads them from this file instead: an open-addressing table mapped read-only, whose pages the
kernel loads on first touch (a short text touches a few dozen 4 KiB pages).

Layout (native byte order and ``unsigned int`` size: a per-machine cache, never shipped):
``MAGIC``, slot count (a power of two), entry count, pattern length; the encoding's split pattern
(UTF-8, padded to a word); then the slots (entry index + 1, 0 = empty), the entries (offset into
the blob, length, rank), the blob of token bytes. The slot of ``b`` is
``zlib.crc32(b)`` masked, probing linearly. A leaf module: it imports nothing of ctxagent.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from array import array
from collections.abc import Mapping
from pathlib import Path

MAGIC = b"CTXRANK1"
HEADER = struct.Struct("=8sIII")  # magic, slots, entries, pattern bytes
WORD = array("I").itemsize  # bytes of one unsigned int


class RankTable:
    """Read-only ``bytes -> rank`` lookups (``get``, ``in``) over a table file :func:`write` made,
    and the encoding's split ``pattern``.

    Raises ``ValueError`` when ``path`` is not such a file, ``OSError`` when it cannot be read.
    """

    def __init__(self, path: Path):
        with open(path, "rb") as fh:
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        if len(self._map) < HEADER.size:
            raise ValueError(f"{path}: not a rank table")
        magic, slots, entries, pattern = HEADER.unpack_from(self._map, 0)
        if magic != MAGIC or slots & (slots - 1):
            raise ValueError(f"{path}: not a rank table")
        view = memoryview(self._map)
        start = HEADER.size + _padded(pattern)
        self.pattern = bytes(view[HEADER.size:HEADER.size + pattern]).decode()
        self._slots = view[start:start + slots * WORD].cast("I")
        start += slots * WORD
        self._entries = view[start:start + 3 * entries * WORD].cast("I")
        self._blob = start + 3 * entries * WORD
        self._mask = slots - 1
        if len(self._slots) != slots or len(self._entries) != 3 * entries:
            raise ValueError(f"{path}: a rank table cut short")

    def get(self, key: bytes) -> int | None:
        """The rank of ``key``, or None when it is not a mergeable token."""
        slot = zlib.crc32(key) & self._mask
        slots, entries, data, size = self._slots, self._entries, self._map, len(key)
        while index := slots[slot]:
            at = 3 * (index - 1)
            offset = self._blob + entries[at]
            if entries[at + 1] == size and data[offset:offset + size] == key:
                return int(entries[at + 2])
            slot = (slot + 1) & self._mask
        return None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes) and self.get(key) is not None


def write(path: Path, pattern: str, ranks: Mapping[bytes, int]) -> None:
    """Write ``ranks`` and the split ``pattern`` as a table file at ``path`` (atomically: a
    temporary file, then a rename). Slots: the power of two at least twice the entries (probes stay
    short). Raises ``OSError`` when it cannot be written."""
    slots_n = 1 << max(4, (2 * len(ranks)).bit_length())
    slots = array("I", bytes(slots_n * WORD))
    entries = array("I")
    blob = bytearray()
    mask = slots_n - 1
    for index, (token, rank) in enumerate(ranks.items(), start=1):
        entries.extend((len(blob), len(token), rank))
        blob += token
        slot = zlib.crc32(token) & mask
        while slots[slot]:
            slot = (slot + 1) & mask
        slots[slot] = index
    part = path.with_name(f".{path.name}.{os.getpid()}")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = pattern.encode()
    with open(part, "wb") as fh:
        fh.write(HEADER.pack(MAGIC, slots_n, len(ranks), len(text)))
        fh.write(text.ljust(_padded(len(text)), b"\0"))
        fh.write(slots.tobytes())
        fh.write(entries.tobytes())
        fh.write(bytes(blob))
    os.replace(part, path)


def _padded(size: int) -> int:
    """``size`` bytes rounded up to a whole word (the slots that follow start aligned)."""
    return -(-size // WORD) * WORD
