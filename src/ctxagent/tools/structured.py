"""Tools over stored structured values: ``query_output`` (a JSONPath query, jsonpath-ng with its
filter extensions, on a JSON value or on text that is JSON) and ``output_info`` (a stored value
described from its metadata sidecar). Handles are taken as text (``resolve_handles=False``); every
result is bounded (at most 200 values listed, 20,000 characters of one value).
"""

from __future__ import annotations

import json
import time
from typing import Any

from ctxagent.handles import REF_RE
from ctxagent.sessions.redact import scan
from ctxagent.tools import values
from ctxagent.tools.base import Tool, ToolContext, ToolError
from ctxagent.tools.outputs import ref_of
from ctxagent.tools.patterns import Budget, Timed, compile_pattern, too_slow
from ctxagent.tools.preview import plural
from ctxagent.tools.signature import function_tool

MAX_QUERY_MATCHES = 200  # matches query_output lists
VALUE_MAX_CHARS = 20_000  # characters of one matched value shown by query_output

# --- query_output -------------------------------------------------------------------------------


def query_output(ctx: ToolContext, handle: str, path: str) -> str:
    """The parts of the JSON value ``handle`` (or a sub-handle) that the JSONPath ``path`` selects.

    One line per match, ``NAME = JSON`` (NAME: the match's sub-handle when it has one, else its
    JSONPath); at most 200 matches, values over 20,000 characters cut. A stored text output that is
    valid JSON is queried too. The path's regular expressions share a budget of 10 s. Raises
    ``ToolError`` for an unknown or malformed handle, an invalid path or regex, a value that is not
    JSON (text that does not parse, bytes, an array), or a regex that used up its budget.

    Args:
        handle: the value's handle, e.g. @abc123
        path: JSONPath expression, starting with $
    """
    ref = ref_of(handle)
    item = values.stored(ctx.store, ref.handle)
    if item.type in ("ndarray", "bytes"):
        kind = "a numpy array" if item.type == "ndarray" else "binary data"
        raise ToolError(f"query_output reads JSON values, and {ref.handle} is {kind}; pass it to a tool as an "
                        f'argument, or see output_info("{ref.handle}")')
    budget = Budget()
    expression = _jsonpath(path, budget)
    value = values.part_of(values.load_file(item), ref)
    if not ref.parts and isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except ValueError as err:
            raise ToolError(f"{handle} is text, not JSON ({err}); search it with grep_output or read it "
                            "with read_output") from None
    try:
        matches = expression.find(value)
    except TimeoutError:
        raise too_slow("query_output", path, handle, budget) from None
    except Exception as err:  # a filter comparing a number with a string, ...
        raise ToolError(f"JSON path {path!r} failed on {handle}: {type(err).__name__}: {err}") from err
    if not matches:
        return f"no match for {path} in {handle} ({values.describe(value)})"
    lines = [f"{len(matches):,} {'match' if len(matches) == 1 else 'matches'} of {path} in {handle}:"]
    lines += [f"{_match_name(handle, match)} = {_shown_value(match.value)}" for match in matches[:MAX_QUERY_MATCHES]]
    if len(matches) > MAX_QUERY_MATCHES:
        lines.append(f"[{len(matches) - MAX_QUERY_MATCHES:,} more matches not listed; narrow the path]")
    return "\n".join(lines)


def _jsonpath(path: str, budget: Budget) -> Any:
    """The parsed JSONPath (jsonpath-ng, extended syntax), its regular expressions bounded by
    ``budget`` (:func:`_bounded`); ``ToolError`` naming the problem."""
    from jsonpath_ng.ext.parser import parse

    if not path.strip():
        raise ToolError("empty JSON path; examples: $.key, $.items[0], $.items[*].name, $..price")
    try:
        parsed = parse(path)
    except Exception as err:  # jsonpath-ng raises plain Exception subclasses (lexer, parser)
        raise ToolError(f"invalid JSON path {path!r}: {err}; examples: $.key, $.items[0], $.items[*].name, "
                        "$..price, $.items[?(@.qty > 1)]") from err
    return _bounded(parsed, budget)


def _bounded(node: Any, budget: Budget) -> Any:
    """The parsed JSONPath ``node`` with each regular expression it runs, a filter's ``=~`` and a
    ``sub(/regex/, repl)``, run by the ``regex`` package within ``budget`` (tools/patterns.py):
    jsonpath-ng runs them with ``re``, which no timeout stops. The tree, fresh from ``parse``, is
    changed in place; every other node is kept."""
    from jsonpath_ng import JSONPath
    from jsonpath_ng.ext.filter import Expression
    from jsonpath_ng.ext.string import Sub

    if isinstance(node, Expression) and node.op == "=~" and isinstance(node.value, str):
        return _regex_filter(_bounded(node.target, budget), node.value, budget)
    if isinstance(node, Sub):
        return _regex_sub(node, budget)
    if isinstance(node, list | tuple):
        return type(node)(_bounded(item, budget) for item in node)
    if isinstance(node, JSONPath):
        for key, item in vars(node).items():
            setattr(node, key, _bounded(item, budget))
    return node


def _regex_filter(target: Any, pattern: str, budget: Budget) -> Any:
    """A filter expression ``target =~ pattern``: the values ``target`` finds that are strings the
    pattern matches (as jsonpath-ng's own), searched by a :class:`~ctxagent.tools.patterns.Timed`."""
    from jsonpath_ng import DatumInContext
    from jsonpath_ng.ext.filter import Expression

    timed = Timed(compile_pattern(pattern), budget)

    class BoundedRegex(Expression):
        def find(self, datum: Any) -> list[Any]:
            found = self.target.find(DatumInContext.wrap(datum))
            return [match for match in found if isinstance(match.value, str) and timed.search(match.value)]

    return BoundedRegex(target, "=~", pattern)


def _regex_sub(node: Any, budget: Budget) -> Any:
    """A ``sub(/regex/, repl)`` that substitutes with a :class:`~ctxagent.tools.patterns.Timed`."""
    from jsonpath_ng import DatumInContext
    from jsonpath_ng.ext.string import Sub

    timed = Timed(compile_pattern(node.expr), budget)

    class BoundedSub(Sub):
        def find(self, datum: Any) -> list[Any]:
            datum = DatumInContext.wrap(datum)
            value = timed.sub(self.repl, datum.value)
            return [] if value == datum.value else [DatumInContext.wrap(value)]

    return BoundedSub(node.method)


def _match_name(handle: str, match: Any) -> str:
    """The sub-handle of a match (``@h/items/0/name``) when every key can be one, else its JSONPath."""
    parts: list[str] = []
    node = match
    while node is not None:
        kind = type(node.path).__name__
        if kind == "Fields":
            parts.extend(reversed([str(f) for f in node.path.fields]))
        elif kind == "Index":
            indices = getattr(node.path, "indices", None) or (node.path.index,)
            parts.extend(str(i) for i in reversed(indices))
        elif kind not in ("Root", "This"):
            return "$." + str(match.full_path)
        node = node.context
    parts.reverse()
    sub = str(values.Ref(handle, tuple(parts)))
    if REF_RE.match(sub):  # what parse_ref takes
        return sub
    return "$" + "".join(f"[{p}]" if p.lstrip("-").isdigit() else f"['{p}']" for p in parts)


def _shown_value(value: Any) -> str:
    text = values.json_text(value)
    if len(text) <= VALUE_MAX_CHARS:
        return text
    return text[:VALUE_MAX_CHARS] + f" [... value cut: {len(text):,} characters; query a narrower path]"


# --- output_info --------------------------------------------------------------------------------


def output_info(ctx: ToolContext, handle: str) -> str:
    """What ``handle`` (or a sub-handle) holds: type, size, lines, shape, sha256, the tool and
    arguments that made it, when, and where the file is. Reads the metadata sidecar written when
    the value was stored (measures the file when there is none). Raises ``ToolError`` for an
    unknown or malformed handle or part.

    Args:
        handle: the output's handle, e.g. @abc123 or @abc123/key
    """
    ref = ref_of(handle)
    item = values.stored(ctx.store, ref.handle)
    if ref.parts:
        part = values.part_of(values.load_file(item), ref)
        return (f"{handle}: {values.describe(part)}; a part of {ref.handle} ({item.type}); "
                f"pass \"{handle}\" to a tool as an argument to use it")
    meta = item.meta or _measured(item)
    lines = [f"{ref.handle}: {_summary(item, meta)}"]
    size = f"{meta.get('bytes', 0):,} bytes"
    if item.type in ("text", "json"):
        tokens = meta.get("tokens")
        size += f", {plural(meta.get('lines', 0), 'line')}" + (f", {'' if meta.get('tokens_exact', True) else '~'}"
                                                               f"{tokens:,} tokens" if tokens is not None else "")
    lines.append(f"size: {size}; sha256 {meta.get('sha256', '?')}")
    if meta.get("tool"):
        arguments = meta.get("arguments") or ""
        made = f"made by: {meta['tool']}({arguments})" + (f", call {meta['call_id']}" if meta.get("call_id") else "")
        if isinstance(meta.get("ts"), int | float):
            made += ", " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(meta["ts"]))
        lines.append(made)
    lines.append(f"file: {item.path.absolute()}")
    lines.append(_how_to_read(item))
    return "\n".join(lines)


def _measured(item: values.Stored) -> dict[str, Any]:
    """Metadata measured from the file, for an output stored without a sidecar."""
    stats = scan.measure(item.path).stats
    return {"bytes": stats.bytes, "lines": stats.lines, "sha256": stats.sha256, "type": item.type}


def _summary(item: values.Stored, meta: dict[str, Any]) -> str:
    if item.type == "ndarray":
        return f"ndarray {meta.get('dtype', '?')}, shape {tuple(meta.get('shape') or ())}"
    if item.type == "json":
        try:
            return "JSON " + values.describe(values.load_file(item))
        except ToolError:
            return f"JSON value of {meta.get('length', '?')} items"
    return "binary data" if item.type == "bytes" else "text"


def _how_to_read(item: values.Stored) -> str:
    handle = item.handle
    use = f'pass "{handle}" to a tool as an argument to use the whole value'
    if item.type == "json":
        return f'{use}, "{handle}/KEY" or "{handle}/INDEX" for a part; query_output("{handle}", "$...") reads parts'
    if item.type == "text":
        return f"{use}; read_output and grep_output read parts"
    return use


QUERY_OUTPUT = function_tool(query_output, kind="read", resolve_handles=False, description=(
    "Query a stored JSON value by its handle (like @abc123, or a part like @abc123/items) with a "
    "JSONPath expression: $.key, $.items[0], $.items[*].name, $..price, $.items[?(@.qty > 1)], "
    "$.items[?(@.name =~ 'ab.*')]. Returns up to 200 matches as 'NAME = JSON', NAME being a handle you can "
    "pass to other tools. Regular expressions get 10 seconds in all."
))

OUTPUT_INFO = function_tool(output_info, kind="read", resolve_handles=False, description=(
    "Describe a stored output by its handle (like @abc123): type (text, bytes, json, ndarray), "
    "size, lines, shape, sha256, the tool call that made it, and how to read it."
))

TOOLS: tuple[Tool, ...] = (QUERY_OUTPUT, OUTPUT_INFO)
