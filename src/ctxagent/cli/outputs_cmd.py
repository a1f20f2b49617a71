"""Stored values on the command line: ``inspect outputs``, ``inspect output HANDLE``, and answers by
handle (``run``/``resume`` print the value an answer names). Binary data is never dumped on a
terminal: ``--output FILE`` writes it (bytes exactly, arrays as ``.npy``).
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ctxagent.cli.options import SessionOpt, check_output, pick
from ctxagent.cli.sessions_export import when
from ctxagent.errors import UsageError
from ctxagent.handles import IN_TEXT_RE
from ctxagent.sessions import records
from ctxagent.tools import values
from ctxagent.tools.base import ToolError

if TYPE_CHECKING:
    from ctxagent.sessions.store import OutputStore
    from ctxagent.tools.values import Ref

INLINE_JSON_CHARS = 120  # a JSON value named inside an answer's text is shown on one line up to this

OutputOpt = Annotated[Path | None, typer.Option("--output", "-o", help="Write the value to FILE (bytes exactly, "
                                                "arrays as .npy, JSON pretty-printed).")]


@dataclass
class Shown:
    """A value ready for the terminal: ``text`` (None when binary), the value, what it is."""

    ref: Ref
    value: Any
    text: str | None
    path: Path
    type: str


def show(item: values.Stored, ref: Ref) -> Shown:
    """Load ``ref`` from ``item``, render it: text as is, JSON pretty, binary as None. Raises ``ToolError``."""
    value = values.part_of(values.load_file(item), ref)
    if isinstance(value, str):
        text: str | None = value
    elif isinstance(value, bytes) or values.is_ndarray(value):
        text = None
    else:
        text = values.json_text(value, indent=2)
    return Shown(ref, value, text, item.path, item.type)


def write_value(shown: Shown, target: Path) -> int:
    """Write a shown value to ``target`` faithfully (no folder created); the bytes written. Raises ``OSError``."""
    if not shown.ref.parts:
        shutil.copyfile(shown.path, target)  # exactly as stored (JSON is stored pretty-printed)
    elif values.is_ndarray(shown.value):
        with open(target, "wb") as fh:
            values.import_numpy().save(fh, shown.value, allow_pickle=False)
    elif isinstance(shown.value, bytes):
        target.write_bytes(shown.value)
    else:
        target.write_text((shown.text or "") + ("" if (shown.text or "").endswith("\n") else "\n"), encoding="utf-8")
    return target.stat().st_size


def _binary_note(shown: Shown) -> str:
    what = values.describe(shown.value) if values.is_ndarray(shown.value) else f"{len(shown.value):,} bytes"
    return f"{shown.ref} is binary ({what}): not printed; write it with --output FILE"


@dataclass
class Delivered:
    """An answer with its handles resolved: what to print, the handles found, notes for stderr."""

    text: str
    handles: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    written: int | None = None


def deliver(store: OutputStore, answer: str, output: Path | None = None) -> Delivered:
    """Resolve the handles of a final answer: an answer that is one handle becomes its value (text as is,
    JSON pretty), an answer that contains handles gets each replaced by its value (short JSON on one line).
    Binary values and unknown handles stay as written, with a note. With ``output``, what would be
    printed is written there instead, and the answer is printed as the model wrote it."""
    result = Delivered(answer)
    whole = answer.strip()
    found = [whole] if _is_one_handle(whole) else values.handles_in(answer)
    shown: dict[str, Shown] = {}
    for name in found:
        try:
            ref = values.parse_ref(name)
            if ref is None:
                continue
            shown[name] = show(values.stored(store, ref.handle), ref)
        except (ToolError, OSError) as err:
            result.notes.append(f"the answer names {name}, which cannot be shown: {err}")
            continue
        result.handles.append({"handle": name, "path": str(shown[name].path.absolute()), "type": shown[name].type})
    if whole in shown:
        value = shown[whole]
        if output is not None:
            result.written = write_value(value, output)
        elif value.text is None:
            result.notes.append(_binary_note(value))
        else:  # printed with a newline after it: a text that ends with one is printed exactly
            result.text = value.text.removesuffix("\n")
        return result
    result.notes += [_binary_note(value) for value in shown.values() if value.text is None]
    printable = {name: value for name, value in shown.items() if value.text is not None}
    text = IN_TEXT_RE.sub(lambda m: _inline(printable[m[0]]) if m[0] in printable else m[0], answer)
    if output is not None:
        output.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        result.written = output.stat().st_size
    else:
        result.text = text
    return result


def _is_one_handle(text: str) -> bool:
    try:
        return values.parse_ref(text) is not None
    except ToolError:
        return False


def _inline(shown: Shown) -> str:
    """A value as it replaces its handle inside text: text as is, short JSON on one line."""
    if isinstance(shown.value, str):
        return shown.value
    compact = values.json_text(shown.value)
    return compact if len(compact) <= INLINE_JSON_CHARS else "\n" + (shown.text or compact) + "\n"


def outputs(ctx: typer.Context, session: SessionOpt = None,
            json_out: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False) -> None:
    """The session's stored outputs, oldest first: handle, tool, type, size, created."""
    target = pick(session, ctx.obj)
    latest: dict[str, Any] = {}
    for rec in target.transcript.load():
        if isinstance(rec, records.OutputRecord):
            latest.pop(rec.handle, None)
            latest[rec.handle] = rec  # a handle stored again (masked later) shows once, as last stored
    rows = [_row(rec, target.root) for rec in latest.values()]
    if json_out:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
        return
    if not rows:
        print(f"session {target.name} has no stored outputs")
        return
    table = [("handle", "tool", "type", "size", "created")]
    table += [(r["handle"], r["tool"] or "-", r["type"], _size(r),
               when(r["created"]) + ("" if r["exists"] else "  (file missing)")) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    for handle, tool, kind, size, created in table:
        print(f"{handle:<{widths[0]}}  {tool:<{widths[1]}}  {kind:<{widths[2]}}  {size:>{widths[3]}}  {created}")


def _row(rec: Any, root: Path) -> dict[str, Any]:
    path = root / rec.path
    kind = "bytes" if rec.binary and rec.type == "text" else rec.type
    row = {"handle": rec.handle, "tool": rec.tool, "type": kind, "bytes": rec.bytes, "lines": rec.lines,
           "tokens": rec.tokens, "sha256": rec.sha256, "created": rec.ts, "call_id": rec.call_id,
           "path": str(path), "exists": path.is_file()}
    row.update({k: getattr(rec, k) for k in ("length", "shape", "dtype") if getattr(rec, k) is not None})
    return row


def _size(row: dict[str, Any]) -> str:
    if row["type"] == "ndarray" and row.get("shape") is not None:
        return f"{row.get('dtype', '')}{list(row['shape'])}, {row['bytes']:,} B"
    return f"{row['bytes']:,} B"


def output(
    ctx: typer.Context,
    handle: Annotated[str, typer.Argument(help="The handle (@abc123, or a part like @abc123/key).")],
    session: SessionOpt = None, output_file: OutputOpt = None,
) -> None:
    """Print one stored value: text as stored, JSON pretty; binary only to a file (--output)."""
    check_output(output_file)  # a directory or an unwritable path fails before anything is read
    target = pick(session, ctx.obj)
    name = handle if handle.startswith("@") else "@" + handle
    try:
        ref = values.parse_ref(name)
        if ref is None:
            raise ToolError(f"not a handle: {handle!r} (handles look like @abc123)")
        item = values.stored(target.store, ref.handle)
        whole = not ref.parts and (output_file is not None or item.type in ("text", "json"))
        shown = None if whole else show(item, ref)  # the whole stored file is copied: no size limit
    except ToolError as err:
        raise UsageError(f"session {target.name}: {err}") from None
    if output_file is not None:
        size = (shutil.copyfile(item.path, output_file).stat().st_size if shown is None
                else write_value(shown, output_file))
        print(f"wrote {size:,} bytes to {output_file}", file=sys.stderr)
    elif shown is None:  # bytes as stored
        sys.stdout.flush()
        with open(item.path, "rb") as fh:
            shutil.copyfileobj(fh, sys.stdout.buffer)
        sys.stdout.flush()
    elif shown.text is None:
        raise UsageError(_binary_note(shown))
    else:
        print(shown.text)
