"""The recall index: every message record of a session's transcript and every stored text output,
as documents with their handle, seq, turn and line range, refreshed incrementally (tools/recall.py
ranks them). Units: chunk sizes in lines and characters, limits in bytes.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxagent.messages import text_of
from ctxagent.sessions import records
from ctxagent.sessions.store import OutputStore
from ctxagent.tools.base import ToolContext
from ctxagent.tools.preview import SNIFF_BYTES, looks_binary
from ctxagent.tools.values import read_meta

CHUNK_LINES = 35  # lines of one output chunk
CHUNK_CHARS = 6000  # characters of one output chunk, at most (a longer line is cut in pieces)
MAX_OUTPUT_BYTES = 16 * 1024 * 1024  # bytes of one output that are searched
MAX_SESSION_BYTES = 256 * 1024 * 1024  # bytes of all outputs of a session that are searched
RECALL_NAME = "recall"

_WORD = re.compile(r"[^\W_]+")
_RUN = re.compile(r"\w+")
_INNER = re.compile(r"[^\W_]_+[^\W_]")  # a run of word characters with an inner "_" is an identifier
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def words(text: str) -> list[str]:
    """The BM25 terms of ``text``: lowercase runs of letters and digits, plus each identifier with
    ``_`` (``max_tokens`` gives ``max``, ``tokens`` and ``max_tokens``)."""
    text = text.lower()
    if "_" not in text:  # no identifier: most text (one C scan instead of a regex search per word)
        return _WORD.findall(text)
    return _WORD.findall(text) + [run for run in _RUN.findall(text) if "_" in run and _INNER.search(run)]


@dataclass
class Doc:
    """One searchable document: a message (``seq``) or a chunk of a stored output (``lines``)."""

    text: str
    handle: str | None = None
    seq: int | None = None
    turn: int | None = None
    role: str = ""
    lines: tuple[int, int] | None = None


def _numbering() -> defaultdict[str, int]:
    """A dict that gives a missing key the next number (0, 1, 2, ...)."""
    numbers: defaultdict[str, int] = defaultdict()
    numbers.default_factory = numbers.__len__
    return numbers


@dataclass
class Index:
    """The documents of one session, their token ids, and what has been read so far."""

    docs: list[Doc] = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)
    vocab: defaultdict[str, int] = field(default_factory=_numbering)
    df: Counter[int] = field(default_factory=Counter)
    offset: int = 0  # bytes of the transcript read
    inode: int = -1
    outputs: dict[str, tuple[int, int]] = field(default_factory=dict)  # file name -> (size, mtime_ns)
    stored: set[str] = field(default_factory=set)  # handles with text chunks
    skipped: set[str] = field(default_factory=set)  # handles of binary outputs
    partial: set[str] = field(default_factory=set)  # handles of outputs searched only in part
    read_bytes: int = 0  # bytes of outputs indexed
    turns: dict[str, int] = field(default_factory=dict)  # handle -> turn of its tool message
    own: set[str | None] = field(default_factory=set)  # recall's own call ids and result handles (not searched)
    bm25: Any = None  # bm25s.BM25 over docs, None when stale
    vectors: dict[int, Any] = field(default_factory=dict)  # doc index -> embedding
    vector_model: str | None = None

    def add(self, doc: Doc) -> None:
        ids = list(map(self.vocab.__getitem__, words(doc.text)))  # a new term gets the next id
        self.docs.append(doc)
        self.ids.append(ids)
        self.df.update(set(ids))
        self.bm25 = None


def index_for(ctx: ToolContext) -> Index:
    """The session's index (kept in ``ctx.state``), refreshed with what was written since the last call."""
    index = ctx.state.get("recall") or Index()
    if not _refresh(index, ctx):
        index = Index()
        _refresh(index, ctx)
    ctx.state["recall"] = index
    return index


def _refresh(index: Index, ctx: ToolContext) -> bool:
    """Add new transcript messages and new outputs; False when the index must be rebuilt (the
    transcript was replaced or shrank, an output changed or went away)."""
    return _read_transcript(index, ctx.transcript) and _read_outputs(index, ctx)


def _read_transcript(index: Index, path: Path | None) -> bool:
    if path is None or not path.is_file():
        return index.offset == 0
    stat = path.stat()
    if index.offset and (stat.st_ino != index.inode or stat.st_size < index.offset):
        return False
    index.inode = stat.st_ino
    with open(path, "rb") as fh:
        fh.seek(index.offset)
        data = fh.read()
    end = data.rfind(b"\n") + 1  # a line still being written waits for the next call
    index.offset += end
    for line in data[:end].splitlines():
        _add_record(index, line)
    return True


def _add_record(index: Index, line: bytes) -> None:
    try:
        record = records.loads(line)
    except ValueError:
        return
    if not isinstance(record, records.MessageRecord):
        return
    message = record.message
    if record.handle:
        index.turns[record.handle] = record.turn
    if message.get("role") == "tool" and message.get("tool_call_id") in index.own:
        index.own.add(record.handle or "")  # a masked copy may be stored under it later
        return  # recall's own results would echo every query back
    calls = message.get("tool_calls") or []
    own = {c.get("id") for c in calls if isinstance(c, dict) and c.get("function", {}).get("name") == RECALL_NAME}
    index.own |= own
    text = text_of({**message, "tool_calls": [c for c in calls if not isinstance(c, dict) or c.get("id") not in own]})
    if text:
        index.add(Doc(text, record.handle, record.seq, record.turn, str(message.get("role", ""))))


def _read_outputs(index: Index, ctx: ToolContext) -> bool:
    found = ctx.store.value_files()  # oldest first
    files = {path.name: (stat.st_size, stat.st_mtime_ns) for _, path, stat in found}
    if any(files.get(name) != stamp for name, stamp in index.outputs.items()):
        return False
    for handle, path, _ in found:
        if path.name not in index.outputs:
            index.outputs[path.name] = files[path.name]
            _add_output(index, ctx.store, handle, path)
    return True


def _add_output(index: Index, store: OutputStore, handle: str, path: Path) -> None:
    if handle in index.own or read_meta(store, handle).get("tool") == RECALL_NAME:
        return  # recall's own results are not searched
    limit = min(MAX_OUTPUT_BYTES, MAX_SESSION_BYTES - index.read_bytes)
    with open(path, "rb") as fh:
        data = fh.read(max(limit, 0) + 1)
    if path.suffix == ".npy" or looks_binary(data[:SNIFF_BYTES]):
        index.skipped.add(handle)
        return
    if len(data) > limit:
        index.partial.add(handle)
        data = data[:max(limit, 0)]
    index.read_bytes += len(data)
    index.stored.add(handle)
    for first, last, text in chunks(data.decode("utf-8", errors="replace")):
        index.add(Doc(text, handle, lines=(first, last)))


def chunks(text: str) -> list[tuple[int, int, str]]:
    """``text`` cut into ``(first line, last line, text)`` pieces (1-based line numbers, as
    read_output counts them) of at most 35 lines and 6,000 characters; a longer line is cut into
    pieces that all name it."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out: list[tuple[int, int, str]] = []
    piece: list[str] = []
    first, size = 1, 0
    for number, line in enumerate(lines, 1):
        if piece and (len(piece) == CHUNK_LINES or size + len(line) > CHUNK_CHARS):
            out.append((first, number - 1, "\n".join(piece)))
            piece, size = [], 0
        if len(line) > CHUNK_CHARS:
            out += [(number, number, line[i:i + CHUNK_CHARS]) for i in range(0, len(line), CHUNK_CHARS)]
            first = number + 1
            continue
        if not piece:
            first = number
        piece.append(line)
        size += len(line) + 1
    if piece:
        out.append((first, first + len(piece) - 1, "\n".join(piece)))
    return out
