"""Never redo work: the file-activity ledger, repeat-call notes and the loop guard (issue 11).

An agent re-runs a tool it called 15 turns ago or re-reads the same file, paying its tokens each time,
and after a compaction no longer knows which files it read or wrote. Each rule is derived from
transcript records only (ONE STATE); what each does: docs/context.md, "Never redo work". ``shell`` is
never short-circuited: its output depends on the world (a test run after a fix must run).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ctxagent.messages import ToolCall, loads_json
from ctxagent.sessions.records import FileTouch, MessageRecord
from ctxagent.tools.base import ERROR_PREFIX

FILE_TOOLS = {"read_file": "read", "write_file": "write"}
PURE_TOOLS = frozenset({"read_output", "grep_output", "query_output", "output_info"})  # results from stored values
LEDGER_FILES = 30  # files named in the ledger line (the latest); older ones are counted
HASH_SHOWN = 12  # hex digits of a sha256 shown in the ledger and notes
MAX_HASH_BYTES = 256 * 1024 * 1024  # files larger than this are not hashed (no repeat notes)
SIGNATURES_KEPT = 64  # recent call signatures the state keeps (the loop guard needs K+1)


@dataclass(frozen=True)
class Touched:
    """One ledger row: the latest touch of a file, with the handle of the result that did it."""

    path: str
    op: str
    sha256: str
    handle: str
    turn: int
    args: str


@dataclass
class Ledger:
    """Files read or written, latest touch per path, and the latest read per (path, arguments)."""

    files: dict[str, Touched] = field(default_factory=dict)
    reads: dict[tuple[str, str], Touched] = field(default_factory=dict)

    def apply(self, record: MessageRecord) -> None:
        """Take the file touch of a tool result record (records without one change nothing)."""
        touch = record.file
        if touch is None or record.handle is None:
            return
        row = Touched(touch.path, touch.op, touch.sha256, record.handle, record.turn, touch.args)
        self.files.pop(touch.path, None)  # re-inserted last: dict order is recency
        self.files[touch.path] = row
        if touch.op == "read":
            self.reads[(touch.path, touch.args)] = row

    def line(self, workdir: str | None, rows: Iterable[Touched] | None = None) -> str:
        """The ledger as one pinned-fact line ("" when no file was touched), latest first."""
        ordered = list(reversed(list(self.files.values() if rows is None else rows)))
        if not ordered:
            return ""
        shown = [_describe(row, workdir) for row in ordered[:LEDGER_FILES]]
        more = len(ordered) - len(shown)
        tail = f"; and {more} older (recall finds them)" if more > 0 else ""
        return "files this session read or wrote (latest first): " + "; ".join(shown) + tail


def _describe(row: Touched, workdir: str | None) -> str:
    verb = "read" if row.op == "read" else "wrote"
    digest = f" sha256:{row.sha256[:HASH_SHOWN]}" if row.sha256 else ""
    return f"{verb} {display_path(row.path, workdir)} as {row.handle} (turn {row.turn}{digest})"


@lru_cache(maxsize=4096)
def display_path(path: str, workdir: str | None) -> str:
    """``path`` relative to ``workdir`` when inside it, else as is."""
    return str(Path(path).relative_to(workdir)) if workdir and Path(path).is_relative_to(workdir) else path


def signature(call: ToolCall) -> str:
    """The identity of a call for repeat and loop detection: tool name and canonical arguments."""
    return f"{call.name}\x00{canonical(call.arguments)}"


def canonical(arguments: str) -> str:
    """Arguments JSON with sorted keys and no spaces (the raw text when it is not JSON). Arguments of
    up to :data:`REMEMBERED_CHARS` characters are remembered: the loop guard asks for the signatures
    of the latest calls at every call."""
    return _remembered(arguments) if len(arguments) <= REMEMBERED_CHARS else _canonical(arguments)


REMEMBERED_CHARS = 4096


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(loads_json(arguments or "{}"), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return arguments


_remembered = lru_cache(maxsize=1024)(_canonical)


def file_target(call: ToolCall, workdir: Path) -> tuple[Path, str] | None:
    """The file a file tool call names (absolute) and its other arguments (canonical JSON), or None."""
    if call.name not in FILE_TOOLS:
        return None
    try:
        arguments = loads_json(call.arguments or "{}")
    except ValueError:
        return None
    if not isinstance(arguments, dict) or not isinstance(arguments.get("path"), str):
        return None
    rest = {k: v for k, v in arguments.items() if k not in ("path", "content") and v is not None}
    try:
        path = (workdir / arguments["path"]).resolve()
    except (OSError, ValueError, RuntimeError):
        return None
    return path, json.dumps(rest, sort_keys=True, separators=(",", ":"))


def digest(path: Path) -> str:
    """Hex sha256 of the file's bytes ("" when it cannot be read or is over MAX_HASH_BYTES)."""
    try:
        if path.stat().st_size > MAX_HASH_BYTES:
            return ""
        with path.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except (OSError, ValueError):
        return ""


def touch_of(call: ToolCall, workdir: Path) -> FileTouch | None:
    """The ledger entry of a successful file tool call (after it ran), or None."""
    target = file_target(call, workdir)
    if target is None:
        return None
    path, args = target
    return FileTouch(path=str(path), op=FILE_TOOLS[call.name], sha256=digest(path), args=args)  # type: ignore[arg-type]


def may_repeat(name: str) -> bool:
    """Whether a call of tool ``name`` can be answered by a repeat note (pure tools, file reads)."""
    return name in PURE_TOOLS or FILE_TOOLS.get(name) == "read"


def repeat_note(ledger: Ledger, call: ToolCall, workdir: Path, *, verbatim: set[str], stored: set[str],
                pure: dict[str, tuple[str, int]]) -> tuple[str, str] | None:
    """A short note instead of running ``call`` again and the handle it names, or None (run it).
    ``verbatim``: handles unchanged in the view; ``stored``: handles in the output store; ``pure``:
    signature -> (handle, turn) of earlier results of :data:`PURE_TOOLS`."""
    if call.name in PURE_TOOLS:
        earlier = pure.get(signature(call))
        if earlier and (earlier[0] in verbatim or earlier[0] in stored):
            handle, turn = earlier
            return (f"[ctxagent] the same {call.name} call ran at turn {turn}; its result is {handle} "
                    f"({'still in your context above' if handle in verbatim else 'stored'}) and cannot "
                    f"have changed. {_use_it(handle, handle in verbatim, handle in stored)}"), handle
        return None
    target = file_target(call, workdir) if may_repeat(call.name) else None
    if target is None:
        return None
    path, args = target
    read = ledger.reads.get((str(path), args))
    if read is None or not read.sha256 or (read.handle not in verbatim and read.handle not in stored) \
            or digest(path) != read.sha256:  # hashed last: it reads the file
        return None
    where = "is still in your context above" if read.handle in verbatim else "is stored"
    return (f"[ctxagent] {path.name} is unchanged since you read it at turn {read.turn} "
            f"(sha256:{read.sha256[:HASH_SHOWN]}); that result, {read.handle}, {where}. "
            f"{_use_it(read.handle, read.handle in verbatim, read.handle in stored)}"), read.handle


def _use_it(handle: str, in_view: bool, saved: bool) -> str:
    """What a repeat note tells the model to do. A result in view in full: answer from it (Qwen2.5-Coder-1.5B,
    told only how to show it again, repeated the call or said nothing); in view and saved (a preview):
    search the whole (told to answer, it answered from the preview's lines); out of view: read it back."""
    if in_view and saved:
        return (f"If what you see of it does not hold what you need, search the whole of it with "
                f"grep_output('{handle}', pattern).")
    if in_view:  # no read_output hint: the 1.5B model then called read_output on this note's handle, with
        return "If it holds what you need, answer from it now."  # the earlier call's line numbers
    return f"read_output('{handle}') shows it again."


def streak(signatures: Sequence[str], at: int, replies: Sequence[int] | None = None,
           results: Sequence[str | None] | None = None) -> int:
    """How many identical signatures end at index ``at`` (1 when the one before differs). With
    ``replies`` (the reply each call came in), calls of one reply count once. With ``results`` (each
    call's :func:`result_digest`, or None), only calls whose results equal the latest one's count: a
    repeat that brought a new result is progress, not a loop."""
    start = at
    latest = results[at - 1] if results is not None and at > 0 else None
    while start > 0 and signatures[start - 1] == signatures[at] and (
            results is None or results[start - 1] == latest):
        start -= 1
    return at - start + 1 if replies is None else len(set(replies[start:at + 1]))


def result_digest(content: str, stored_sha256: str | None = None) -> str:
    """What the loop guard compares of one tool result: the stored output's sha256 when offloaded (its
    preview names a new handle at every call), else its content's without the loop guard's warning."""
    if stored_sha256:
        return stored_sha256
    head, marker, _ = content.partition(LOOP_WARNING_MARK)
    return hashlib.sha256((head if marker else content).encode("utf-8", "surrogatepass")).hexdigest()


LOOP_WARNING_MARK = "\n[ctxagent loop guard] this is the "


def loop_warning(k: int) -> str:
    return (f"{LOOP_WARNING_MARK}{k}th identical call in a row (same tool, same arguments) and the "
            f"last {k - 1} results were identical: it is not making progress. Do something different; "
            "one more identical call with the same result stops the run.")


def loop_stop(k: int, session: str) -> str:
    return (f"[ctxagent loop guard] not run: {k} identical calls in a row (same tool, same arguments). "
            f"The run stopped; 'ctxagent resume --session {session}' continues.")


def result_is_error(message: dict[str, Any]) -> bool:
    """Whether a tool message reports an error (the toolset's :data:`ERROR_PREFIX`)."""
    return str(message.get("content") or "").startswith(ERROR_PREFIX)
