"""Values behind handles: how they are stored, named, described and resolved.

A handle (``@abc123``) names one stored output of the session (``ctxagent.sessions.store``): text or
bytes (``.out``), JSON (``.json``) or a numpy array (``.npy``), with a ``<name>.meta.json`` sidecar.
A sub-handle (``@h/key``, ``@h/0``, ``@h/a/0/b``) names a part of a structured value; in a key, ``~1``
stands for ``/`` and ``~0`` for ``~`` (JSON Pointer escaping). Names resolve only inside the session's
own store: the base name is checked against the handle grammar before any path is built, and parts
index into the value, never the disk. See docs/tools.md#handles.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ctxagent.handles import IN_TEXT_RE, REF_RE
from ctxagent.sessions.store import META_SUFFIX, OutputStore
from ctxagent.tools.base import ToolError
from ctxagent.tools.preview import SNIFF_BYTES, looks_binary, plural

ValueType = Literal["text", "bytes", "json", "ndarray"]

RESOLVE_MAX_BYTES = 256 * 1024 * 1024  # largest stored value passed to a tool by value
NEAREST = 3  # handles suggested for an unknown one
LISTED = 10  # handles (or keys) listed when none is near
KEYS_DESCRIBED = 12  # keys of an object named in a one-line description

HANDLE_LIKE = re.compile(r"^@[^\s@]\S*\Z")  # looks like a handle: it must then parse, or fail loudly
_ESCAPED = re.compile(r"^@(@[^\s@]\S*)\Z")
_INT = re.compile(r"^-?[0-9]+$")


@dataclass(frozen=True)
class Ref:
    """A parsed handle: the stored output's handle and the parts (keys, indexes) below it."""

    handle: str
    parts: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.handle + "".join("/" + _escape(p) for p in self.parts)


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def looks_like_handle(text: str) -> bool:
    """Whether ``text`` is one ``@word`` without whitespace (and not an ``@@`` escape)."""
    return bool(HANDLE_LIKE.match(text))


def parse_ref(text: str) -> Ref | None:
    """The :class:`Ref` that ``text`` is; None when it does not look like a handle.

    Raises ``ToolError`` when it looks like a handle (``@`` then no whitespace) but is malformed.
    """
    if not looks_like_handle(text):
        return None
    match = REF_RE.match(text)
    if match is None:
        raise ToolError(
            f"not a handle: {text!r} is malformed; a handle is @ then up to 32 letters, digits, '_' or '-' "
            "(like @abc123), optionally followed by parts of a stored value (@abc123/key, "
            "@abc123/0); handles name outputs of this session only, never paths (read a file with "
            f"read_file and its path). To pass text that starts with @, write @{text}"
        )
    parts = tuple(_unescape(p) for p in match.group(2).split("/")[1:])
    return Ref(match.group(1), parts)


# --- what a value is ------------------------------------------------------------------------


def is_ndarray(value: Any) -> bool:
    """Whether ``value`` is a numpy array (it cannot be one unless numpy is already imported)."""
    array = getattr(sys.modules.get("numpy"), "ndarray", None)
    return array is not None and isinstance(value, array)


def is_numpy_scalar(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.generic)


def import_numpy(handle: str | None = None) -> Any:
    """The numpy module, imported here on first use and nowhere else: numpy stays optional, and
    ``ctxagent --help`` never pays its import. Raises ``ToolError`` (naming the array ``handle``, if
    given) when numpy is not installed."""
    try:
        import numpy
    except ImportError as err:
        what = f"{handle} is a numpy array (.npy) but numpy" if handle else "numpy"
        raise ToolError(f"{what} is not installed here") from err
    return numpy


def is_structured(value: Any) -> bool:
    """Whether a tool's return value is stored as JSON or ``.npy`` (dict, list, tuple, ndarray)."""
    return isinstance(value, dict | list | tuple) or is_ndarray(value)


def is_scalar(value: Any) -> bool:
    """JSON scalars (and numpy scalars): a tool returning one gets its JSON text inline."""
    return value is None or isinstance(value, bool | int | float) or is_numpy_scalar(value)


def json_text(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON text, compact on one line unless ``indent``; numpy scalars and arrays inside
    become plain numbers and lists. Raises ``TypeError`` for what JSON cannot hold (bytes, sets,
    objects) and ``ValueError`` for circular references."""
    return json.dumps(value, ensure_ascii=False, indent=indent, default=_json_default)


def _json_default(value: Any) -> Any:
    if is_numpy_scalar(value) or is_ndarray(value):
        return value.tolist()
    raise TypeError(f"a {type(value).__name__} cannot be stored in a JSON value")


def describe(value: Any) -> str:
    """A one-line description: type and size, never the value itself (keys of an object, named)."""
    if is_ndarray(value):
        return f"ndarray {value.dtype} shape {tuple(value.shape)}"
    if isinstance(value, dict):
        keys = [f"{k} ({_kind(v)})" for k, v in list(value.items())[:KEYS_DESCRIBED]]
        more = f", … {len(value) - KEYS_DESCRIBED:,} more" if len(value) > KEYS_DESCRIBED else ""
        return f"object of {plural(len(value), 'key')}" + (f": {', '.join(keys)}{more}" if keys else "")
    if isinstance(value, list | tuple):
        kinds = {_kind(item, short=True) for item in value}
        items = f" ({kinds.pop()})" if len(kinds) == 1 else ""
        return f"list of {plural(len(value), 'item')}{items}"
    return _kind(value)


def _kind(value: Any, short: bool = False) -> str:
    if is_numpy_scalar(value):
        value = value.item()
    if isinstance(value, dict):
        return "object" if short else f"object of {plural(len(value), 'key')}"
    if isinstance(value, list | tuple):
        return "list" if short else f"list of {plural(len(value), 'item')}"
    if isinstance(value, str):
        return "string" if short else f"string of {plural(len(value), 'character')}"
    if isinstance(value, bytes):
        return f"{len(value):,} bytes"
    if is_ndarray(value):
        return f"ndarray {value.dtype} {tuple(value.shape)}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "integer" if isinstance(value, int) else "number" if isinstance(value, float) else type(value).__name__


# --- stored values --------------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    """One stored output: its handle, value file, type and metadata (the sidecar; {} if none)."""

    handle: str
    path: Path
    type: ValueType
    meta: dict[str, Any] = field(default_factory=dict)


def read_meta(store: OutputStore, handle: str) -> dict[str, Any]:
    """The sidecar metadata of ``handle`` ({} when missing or unreadable)."""
    try:
        data = json.loads(store.meta_path(handle).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_meta(store: OutputStore, handle: str, meta: Mapping[str, Any]) -> None:
    """Write the sidecar of ``handle`` (replacing it) through the store, so whatever the store does
    to what it writes (a redacting store removes secrets, files are owner-only) applies; with a
    store that has a ``redactor``, every string is redacted first. Raises ``OSError``."""
    redactor = getattr(store, "redactor", None)
    data = redactor.value(dict(meta)) if redactor is not None else dict(meta)
    store.put_bytes(handle, (json.dumps(data, ensure_ascii=False, indent=1) + "\n").encode("utf-8"), META_SUFFIX)


def stored(store: OutputStore, handle: str) -> Stored:
    """The stored output ``handle`` (no parts). Raises ``ToolError`` naming the nearest handles
    when there is none."""
    path = store.find(handle)
    if path is None:
        raise unknown_handle(store, handle)
    meta = read_meta(store, handle)
    return Stored(handle, path, _type_of(path, meta), meta)


def _type_of(path: Path, meta: Mapping[str, Any]) -> ValueType:
    if path.suffix == ".json":
        return "json"
    if path.suffix == ".npy":
        return "ndarray"
    if meta.get("type") in ("text", "bytes"):
        return "bytes" if meta.get("binary") else meta["type"]
    with open(path, "rb") as fh:
        return "bytes" if looks_binary(fh.read(SNIFF_BYTES)) else "text"


def unknown_handle(store: OutputStore, handle: str) -> ToolError:
    """The error for a handle that names no stored output: the nearest known ones, or a list."""
    known = store.handles()
    near = difflib.get_close_matches(handle, known, n=NEAREST, cutoff=0.5)
    if near:
        hint = f"nearest: {', '.join(near)}"
    elif known:
        hint = f"this session's handles{' (newest)' if len(known) > LISTED else ''}: {', '.join(known[-LISTED:])}"
    else:
        hint = "this session has no stored outputs yet"
    return ToolError(f"unknown handle {handle}: this session has no output by that name; {hint}. "
                     f"(To pass text that starts with @, write @{handle}.)")


def load(store: OutputStore, ref: Ref, cache: dict[str, Any] | None = None) -> Any:
    """The value ``ref`` names: the stored value, then each part of it.

    text -> ``str`` (``bytes`` when it is not valid UTF-8), bytes -> ``bytes``, json -> the parsed
    value, ndarray -> ``numpy.ndarray``. Raises ``ToolError`` for an unknown handle or part, a
    value over 256 MiB, or an array when numpy is not installed.
    """
    cache = {} if cache is None else cache
    if ref.handle not in cache:
        cache[ref.handle] = load_file(stored(store, ref.handle))
    return part_of(cache[ref.handle], ref)


def part_of(value: Any, ref: Ref) -> Any:
    """The part ``ref`` names of ``value``, the whole value of ``ref.handle``. Raises ``ToolError``."""
    for depth in range(len(ref.parts)):
        value = _part(value, Ref(ref.handle, ref.parts[:depth]), ref.parts[depth])
    if ref.parts and is_numpy_scalar(value):
        value = value.item()
    return value


def load_file(item: Stored) -> Any:
    """The whole value of a stored output (see :func:`load`). Raises ``ToolError``."""
    size = item.path.stat().st_size
    if size > RESOLVE_MAX_BYTES:
        raise ToolError(f"{item.handle} is {size:,} bytes, too large to pass by value (at most "
                        f"{RESOLVE_MAX_BYTES:,}); read parts of it with read_output, grep_output or query_output")
    try:
        if item.type == "json":
            return json.loads(item.path.read_bytes())
        if item.type == "ndarray":
            return import_numpy(item.handle).load(item.path, allow_pickle=False)
        data = item.path.read_bytes()
    except (OSError, ValueError, EOFError) as err:  # a file damaged or removed under us
        raise ToolError(f"{item.handle}: the stored {item.type} value cannot be read ({type(err).__name__}: "
                        f"{err})") from err
    if item.type == "bytes":
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def _part(value: Any, where: Ref, part: str) -> Any:
    """``value[part]`` for the value at ``where``; ``ToolError`` when it has no such part."""
    if isinstance(value, str) and where.parts == ():
        try:
            value = json.loads(value)
        except ValueError:
            raise ToolError(f"{where} is text, not JSON: it has no parts like {where}/{_escape(part)} "
                            "(read it with read_output or grep_output)") from None
    if isinstance(value, dict):
        if part in value:
            return value[part]
        near = difflib.get_close_matches(part, [str(k) for k in value], n=NEAREST, cutoff=0.5)
        keys = list(value)[:LISTED]
        hint = (f"nearest: {', '.join(map(repr, near))}" if near
                else f"its keys: {', '.join(map(repr, keys))}{', …' if len(value) > LISTED else ''}" if keys
                else "it is empty")
        raise ToolError(f"{where}/{_escape(part)}: {where} has no key {part!r}; {hint}")
    if isinstance(value, list) or is_ndarray(value):
        length = len(value) if isinstance(value, list) else (value.shape[0] if value.ndim else 0)
        what = "a list" if isinstance(value, list) else f"an ndarray of shape {tuple(value.shape)}"
        if not _INT.match(part):
            raise ToolError(f"{where}/{_escape(part)}: {where} is {what}; its parts are indexes "
                            f"0..{length - 1}, not {part!r}")
        index = int(part)
        if not -length <= index < length:
            raise ToolError(f"{where}/{part}: index {index} is out of range; {where} is {what} "
                            f"of {plural(length, 'item')} (indexes 0..{length - 1}, or -1 for the last)")
        return value[index]
    raise ToolError(f"{where}/{_escape(part)}: {where} is {_kind(value)}; it has no parts")


# --- resolving arguments --------------------------------------------------------------------


def resolve_arguments(arguments: Mapping[str, Any], store: OutputStore) -> dict[str, Any]:
    """``arguments`` with every string that is exactly a handle or sub-handle, at any depth, replaced
    by its value.

    ``@@text`` becomes the literal ``@text``. A value loaded once is reused within the call.
    Raises ``ToolError`` for a malformed or unknown handle or part.
    """
    cache: dict[str, Any] = {}

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            if escaped := _ESCAPED.match(value):
                return escaped.group(1)
            ref = parse_ref(value)
            return value if ref is None else load(store, ref, cache)
        if isinstance(value, list):
            return [walk(item) for item in value]
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items()}
        return value

    return {name: walk(value) for name, value in arguments.items()}


def handles_in(text: str) -> list[str]:
    """The handle-shaped words of free text (an answer), in order, without repeats."""
    return list(dict.fromkeys(IN_TEXT_RE.findall(text)))
