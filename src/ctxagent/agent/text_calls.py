"""Tool calls written as text: reading them from a reply that has no native tool calls.

Small local models often write a call in their text instead of the API's ``tool_calls`` (Qwen2.5-Coder-1.5B
on llama.cpp nearly always, FIELD-NOTES.md). Goose (a second model turns the text into calls) and
OpenHands (tools described in the prompt, ``<function=NAME>`` blocks parsed back) show two ways out; this
module reads the shapes small models write on their own, with no second model and nothing added to the
prompt. The shapes and the modes (the profile's ``text_tool_calls``): docs/local-models.md, "Tool calls
written as text". A call read from text is recorded as a native call (PAIR), the whole text kept on the
record as ``written`` (NO LOSS).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ctxagent.agent.model_types import Reply, ToolCall
from ctxagent.tools.arguments import arguments_fit

NAME_KEYS = ("name", "tool", "tool_name", "function")
ARGUMENT_KEYS = ("arguments", "parameters", "args", "input", "tool_input")
OTHER_KEYS = frozenset({"type", "id", "index"})  # a call may carry these too; any other key means data
MAX_FAILED_STARTS = 1000  # "{" or "[" that begin no JSON value, tried before a text is given up
TAGS = ("tool_call", "tool_calls", "tools", "function_call", "function_calls", "toolcall", "tool_use")
_FENCE = re.compile(r"```[ \t]*([\w+.-]*)[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_TAG = re.compile(r"<(" + "|".join(TAGS) + r")>(.*?)(?:</\1>|\Z)", re.DOTALL | re.IGNORECASE)
_FUNCTION = re.compile(r"<function=([\w.-]+)>(.*?)(?:</function>|\Z)", re.DOTALL)
_FUNCTION_ATTRS = re.compile(r"""<function\s+name=(["'])([\w.-]+)\1\s+(?:arguments|parameters)=(["'])(.*?)\3\s*/?>"""
                             r"(?:\s*</function>)?", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([\w.-]+)>(.*?)</parameter>", re.DOTALL)


@dataclass(frozen=True)
class _Found:
    """One call found: its name and arguments (a dict, or text that is not a JSON object)."""

    name: str
    arguments: dict[str, Any] | str


@dataclass(frozen=True)
class _Block:
    """A region of the text that holds calls and nothing else: ``start``..``end`` (characters)."""

    start: int
    end: int
    calls: tuple[_Found, ...]


def read_calls(reply: Reply, mode: str, tools: Sequence[Mapping[str, Any]]) -> Reply:
    """``reply`` with the tool calls its text holds, or ``reply`` itself (it has native calls, ``mode`` is
    ``off``, or no ``tools``, the request's OpenAI tool schemas, were offered). The calls get empty ids (the
    runner numbers them), the content the text around them (or None), ``written`` the whole text."""
    text = reply.content or ""
    if mode == "off" or reply.tool_calls or not tools or not text.strip():
        return reply
    schemas = {str(t["function"]["name"]): t["function"].get("parameters") or {}
               for t in tools if isinstance(t.get("function"), Mapping)}
    blocks = [b for b in _blocks(text, schemas, lenient=mode == "always") if _accepted(b, schemas, mode)]
    if not blocks:
        return reply
    calls = tuple(ToolCall("", c.name, c.arguments if isinstance(c.arguments, str) else
                           json.dumps(c.arguments, ensure_ascii=False)) for b in blocks for c in b.calls)
    return replace(reply, content=_without(text, blocks) or None, tool_calls=calls, written=text)


def _accepted(block: _Block, schemas: Mapping[str, Mapping[str, Any]], mode: str) -> bool:
    """Whether every call of ``block`` is taken in ``mode`` (auto: known tools, arguments that fit)."""
    return mode == "always" or all(
        c.name in schemas and isinstance(c.arguments, dict) and arguments_fit(c.arguments, schemas[c.name])
        for c in block.calls)


def _without(text: str, blocks: Sequence[_Block]) -> str:
    """``text`` with ``blocks`` cut out: the pieces between them, each without the blank lines at
    its cut edges, joined by one blank line; the writer's own lines otherwise as written."""
    pieces = _outside(text, [(b.start, b.end) for b in blocks])
    return "\n\n".join(kept for piece in pieces if (kept := piece.strip("\n").rstrip())).strip()


def _outside(text: str, spans: Sequence[tuple[int, int]]) -> list[str]:
    """The pieces of ``text`` between ``spans`` (``(start, end)``, characters, in any order), in text order."""
    pieces, at = [], 0
    for start, end in sorted(spans):
        pieces.append(text[at:start])
        at = max(at, end)
    pieces.append(text[at:])
    return pieces


def _blocks(text: str, schemas: Mapping[str, Mapping[str, Any]], *, lenient: bool) -> list[_Block]:
    """Every region of ``text`` that holds calls only: fenced blocks, tagged blocks, OpenHands
    function blocks, then bare JSON on lines of its own (anywhere, when ``lenient``); in text order."""
    found: list[_Block] = []
    taken: list[tuple[int, int]] = []
    for pattern in (_FENCE, _TAG, _FUNCTION):
        for match in pattern.finditer(text):
            if any(s <= match.start() < e for s, e in taken):
                continue
            taken.append(match.span())
            inner = match.group(2)
            if pattern is _FUNCTION:
                calls: tuple[_Found, ...] = (_function_block(match, schemas),)
            else:
                calls = _only_calls(inner) or (_command_lines(inner, schemas) if pattern is _FENCE else ())
            if calls:
                found.append(_Block(match.start(), match.end(), calls))
    found += [b for b in _bare(text, lenient) if not any(s <= b.start < e for s, e in taken)]
    if not found and (calls := _only_calls(text)):  # a whole reply of <function name=...> elements
        found.append(_Block(0, len(text), calls))
    return sorted(found, key=lambda b: b.start)


def _only_calls(inner: str) -> tuple[_Found, ...]:
    """The calls of a fenced or tagged block whose text is calls and nothing else (JSON calls and
    ``<function name=... arguments=...>`` elements; commas and blank space between them allowed), else ()."""
    pieces = [(match.start(), match.end(), _calls_of({"name": match.group(2), "arguments": match.group(4)}))
              for match in _FUNCTION_ATTRS.finditer(inner)]
    pieces += [(start, end, _calls_of(value)) for start, end, value in _json_values(inner)
               if not any(s <= start < e for s, e, _ in pieces)]
    if not pieces or not all(found for _, _, found in pieces):
        return ()
    if "".join(_outside(inner, [(start, end) for start, end, _ in pieces])).strip(" \t\r\n,"):
        return ()
    return tuple(c for _, _, found in sorted(pieces, key=lambda p: p[0]) for c in found)


def _command_lines(inner: str, schemas: Mapping[str, Mapping[str, Any]]) -> tuple[_Found, ...]:
    """The calls of a fenced block of command lines, ``read_file config/db.ini``, each a tool taking one
    required string argument, then that argument (quotes stripped); () when any line is anything else."""
    calls = []
    for line in (raw.strip() for raw in inner.splitlines()):
        if not line:
            continue
        name, _, arg = line.partition(" ")
        required = list((schemas.get(name) or {}).get("required") or [])
        spec = ((schemas.get(name) or {}).get("properties") or {}).get(required[0]) if len(required) == 1 else None
        value = arg.strip().strip("'\"")
        if not (isinstance(spec, Mapping) and spec.get("type") == "string" and value):
            return ()
        calls.append(_Found(name, {required[0]: value}))
    return tuple(calls)


def _bare(text: str, lenient: bool) -> Iterator[_Block]:
    """Calls written as bare JSON: each value alone on its lines (``lenient``: anywhere)."""
    for start, end, value in _json_values(text):
        found = _calls_of(value)
        if not found:
            continue
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        line_end = len(text) if line_end < 0 else line_end
        # stray braces around it count as blank: Qwen2.5-Coder-1.5B wrote {{"name": ...}} and <{{...}}>
        alone = not text[line_start:start].strip(" \t{<") and not text[end:line_end].strip(" \t\r,}>")
        if alone or lenient:
            yield _Block(line_start if alone else start, line_end if alone else end, tuple(found))


def _json_values(text: str) -> Iterator[tuple[int, int, Any]]:
    """Every outermost JSON object or array in ``text``, with its span (characters), in order; at most
    :data:`MAX_FAILED_STARTS` starts that do not decode are tried (a reply full of braces costs bounded work)."""
    decoder = json.JSONDecoder()
    at, failed = 0, 0
    while failed < MAX_FAILED_STARTS:
        starts = [i for i in (text.find("{", at), text.find("[", at)) if i >= 0]
        if not starts:
            return
        start = min(starts)
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):  # nesting deeper than the interpreter allows raises the latter
            at, failed = start + 1, failed + 1
            continue
        yield start, end, value
        at = end


def _calls_of(value: Any) -> list[_Found]:
    """The calls a decoded JSON value is: one call object, ``{"tool_calls": [...]}``, or a list of
    call objects; [] when it is anything else (all of a list must be calls)."""
    if isinstance(value, list):
        calls = [_call_of(item) for item in value]
        return [c for c in calls if c is not None] if value and all(calls) else []
    if isinstance(value, dict) and set(value) == {"tool_calls"} and isinstance(value["tool_calls"], list):
        return _calls_of(value["tool_calls"])
    call = _call_of(value)
    return [call] if call is not None else []


def _call_of(value: Any) -> _Found | None:
    """One call object (see the module doc), or None."""
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("function"), dict) and set(value) <= {"function", *OTHER_KEYS}:
        value = value["function"]  # OpenAI's shape: {"type": "function", "function": {...}}
    names = [k for k in NAME_KEYS if isinstance(value.get(k), str)]
    args = [k for k in ARGUMENT_KEYS if k in value]
    if len(names) != 1 or len(args) > 1 or not set(value) <= {*names, *args, *OTHER_KEYS}:
        return None
    name = str(value[names[0]]).strip()
    raw = value[args[0]] if args else {}
    if not re.fullmatch(r"[\w.-]{1,64}", name):
        return None
    if isinstance(raw, str):  # arguments as JSON text, as the API sends them
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return _Found(name, raw)
        raw = parsed if isinstance(parsed, dict) else raw
    if raw is None:
        raw = {}
    return _Found(name, raw if isinstance(raw, dict | str) else json.dumps(raw))


def _function_block(match: re.Match[str], schemas: Mapping[str, Mapping[str, Any]]) -> _Found:
    """An OpenHands ``<function=NAME>`` block: its parameters, typed by the tool's schema."""
    name = match.group(1)
    properties = (schemas.get(name) or {}).get("properties") or {}
    arguments = {key: _typed(value.strip("\n"), properties.get(key) or {})
                 for key, value in _PARAMETER.findall(match.group(2))}
    return _Found(name, arguments)


def _typed(text: str, schema: Mapping[str, Any]) -> Any:
    """``text`` as the JSON type ``schema`` declares (integer, number, boolean, array, object), else
    the text itself (a value that does not convert is left as text: validation says why)."""
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else list(declared or [])
    if "string" in types or not types:
        return text
    try:
        return json.loads(text.strip())
    except ValueError:
        return text
