"""MCP tool results to tool values, and resolved handle values to MCP arguments (docs/mcp.md: Results,
Arguments). The toolset settles a result like a built-in tool's (tools/offload.py): offloaded over the
threshold, previewed, stored under a handle."""

from __future__ import annotations

import base64
from typing import Any

from ctxagent.messages import loads_json
from ctxagent.sessions.store import OutputStore
from ctxagent.tools.base import Spooled, ToolError

TEXT_NOTE_MAX = 500  # characters of text kept in the note of a binary result


def value_of(result: Any, store: OutputStore) -> Any:
    """The tool value of the SDK ``CallToolResult`` ``result``: its structured content (the SDK's
    ``{"result": X}`` wrapper of a plain return value is ``X``; one text block holding a whole JSON
    object or array counts too); else the text blocks, joined by a blank line (a text resource headed
    by its URI); else one binary block (image, audio, blob) spooled as bytes with a note
    (``image image/png, 31.2 kB``) and any text; else ``{"summary", "text", "content": [...]}`` with each
    block's type, MIME type, size and base64 data (``@handle/content/1/data`` is one block).

    Raises ``ToolError`` with the text blocks for an ``is_error`` result."""
    texts, binaries = _blocks(result.content or [])
    text = "\n\n".join(texts)
    if result.is_error:
        raise ToolError(text or "the MCP tool reported an error without a message")
    structured = result.structured_content
    if isinstance(structured, dict) and list(structured) == ["result"]:
        structured = structured["result"]  # the SDK's wrapper of a function's plain return value
    if structured is None and not binaries and len(texts) == 1:
        structured = _json_document(texts[0])
    if structured is not None:
        return structured
    if not binaries:
        return text
    if len(binaries) == 1:
        kind, mime, data = binaries[0]
        with store.open_spool() as (out, path):
            out.write(data)
        note = text if len(text) <= TEXT_NOTE_MAX else text[:TEXT_NOTE_MAX] + " [...]"
        return Spooled(path, note=f"{kind} {mime}, {_size(len(data))}" + (f"; text: {note}" if note else ""))
    summary = ", ".join(f"{kind} {mime} {_size(len(data))}" for kind, mime, data in binaries)
    return {"summary": summary, "text": text,
            "content": [{"type": kind, "mime_type": mime, "bytes": len(data),
                         "data": base64.b64encode(data).decode("ascii")} for kind, mime, data in binaries]}


def _blocks(content: list[Any]) -> tuple[list[str], list[tuple[str, str, bytes]]]:
    """``(texts, binaries)`` of the content blocks; a binary is ``(kind, mime type, bytes)``."""
    texts: list[str] = []
    binaries: list[tuple[str, str, bytes]] = []
    for block in content:
        kind = getattr(block, "type", "")
        if kind == "text":
            texts.append(block.text)
        elif kind in ("image", "audio"):
            binaries.append((kind, block.mime_type or "application/octet-stream", _decode(block.data)))
        elif kind == "resource":
            resource = block.resource
            uri, mime = str(resource.uri), resource.mime_type or "application/octet-stream"
            if getattr(resource, "text", None) is not None:
                texts.append(f"[resource {uri}]\n{resource.text}")
            else:
                binaries.append((f"resource {uri}", mime, _decode(resource.blob)))
        elif kind == "resource_link":
            texts.append(f"[resource link {block.uri}: {block.name}"
                         + (f" ({block.mime_type})" if getattr(block, "mime_type", None) else "") + "]")
        else:
            texts.append(f"[{kind or 'unknown'} content block not shown]")
    return texts, binaries


def _json_document(text: str) -> Any:
    """The JSON object or array ``text`` holds in full (how SDK servers send a dict or list result
    without an output schema), else None."""
    stripped = text.strip()
    if (stripped[:1], stripped[-1:]) not in (("{", "}"), ("[", "]")):
        return None
    try:
        return loads_json(stripped)
    except ValueError:
        return None


def _decode(data: str | bytes) -> bytes:
    return base64.b64decode(data) if isinstance(data, str) else data


def _size(n: int) -> str:
    """``n`` bytes in decimal units, as rich.filesize.decimal writes them: ``1 byte``, ``950 bytes``, ``31.2 kB``."""
    if n < 1000:
        return "1 byte" if n == 1 else f"{n} bytes"
    units = ("kB", "MB", "GB", "TB", "PB", "EB")
    power = min((len(str(n)) - 1) // 3, len(units))
    return f"{n / 1000 ** power:,.1f} {units[power - 1]}"


def json_ready(value: Any) -> Any:
    """``value`` (a resolved handle's stored value or the model's JSON) as JSON for the server:
    bytes become text when they are UTF-8, else base64; numpy arrays and scalars become lists and
    numbers; tuples become lists."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return json_ready(value.tolist())
    return value
