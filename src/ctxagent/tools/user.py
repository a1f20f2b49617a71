"""User tools: plain Python functions offered to the model, with a schema made from their signature.

Where they come from:

- ``--tools SPEC`` (repeatable), SPEC being ``module:attr`` (the module is imported with the
  working directory on ``sys.path``, as uvicorn does), ``path/to/file.py:attr``, or ``NAME``: a
  built-in tool or one installed under the ``ctxagent.tools`` entry point group. ``attr`` is a
  function, a :class:`Tool`, or a list or tuple of them.
- The ``ctxagent.tools`` entry point group: an installed package declares
  ``[project.entry-points."ctxagent.tools"] my_tool = "my_pkg.tools:my_tool"``; the tool is then
  available by name (``--tools my_tool`` or a profile's ``tools`` list), never added silently.

The schema comes from the type hints: ``str``, ``int``, ``float``, ``bool``, ``list[...]``,
``tuple``, ``dict``, ``Literal[...]`` and ``X | None`` map to JSON schema types; a parameter with
a default is not required; any other type (``numpy.ndarray``, ``bytes``, ``Any``) takes any value,
which in practice is a handle (``@abc123``) whose stored value the tool receives. The description is
the docstring's first paragraph; a Google-style ``Args:`` section describes the parameters.

A function whose first parameter is annotated :class:`ToolContext` receives the context (output
store, working directory) first; any other function receives only its arguments. User tools go
through the same toolset as the built-ins: handle arguments are resolved to values, results are
offloaded or stored under handles, and anything they raise becomes an error tool result. Their
``kind`` is ``exec`` (they may do anything) unless built with :func:`make_tool`.
"""

from __future__ import annotations

import enum
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from ctxagent.errors import UsageError
from ctxagent.tools.base import Tool, ToolContext, ToolKind
from ctxagent.tools.catalog import BUILTIN

ENTRY_POINT_GROUP = "ctxagent.tools"
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what providers accept as a function name
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns?|Yields?|Raises|Examples?|Notes?|Attributes):\s*$")
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_ANY_VALUE = "any value; in practice a handle (@abc123) of a stored value, which the tool receives"


def make_tool(fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
              kind: ToolKind = "exec") -> Tool:
    """A :class:`Tool` for the function ``fn``: schema from its type hints, description from its
    docstring (see the module docstring).

    Raises ``UsageError`` when ``fn`` cannot be a tool (``*args``/``**kwargs``, positional-only
    parameters, a name providers refuse).
    """
    fn_name: str = getattr(fn, "__name__", "")
    tool_name = name or fn_name
    if not NAME_RE.match(tool_name):
        raise UsageError(f"cannot make a tool of {fn!r}: its name {tool_name!r} must be 1-64 letters, digits, "
                         "'_' or '-'")
    summary, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
    parameters, takes_ctx = function_schema(fn, arg_docs)

    def call(ctx: ToolContext, **arguments: Any) -> Any:
        return fn(ctx, **arguments) if takes_ctx else fn(**arguments)

    call.__name__ = tool_name
    call.__doc__ = fn.__doc__
    return Tool(name=tool_name, description=description or summary or f"The Python function {tool_name}.",
                parameters=parameters, fn=call, kind=kind)


def function_schema(fn: Callable[..., Any], arg_docs: Mapping[str, str] | None = None) -> tuple[dict[str, Any], bool]:
    """``(JSON schema of fn's parameters, whether its first parameter is a ToolContext)``.

    Raises ``UsageError`` for ``*args``, ``**kwargs`` or positional-only parameters.
    """
    signature = inspect.signature(fn)
    hints = _hints(fn)
    params = list(signature.parameters.values())
    takes_ctx = bool(params) and _is_context(hints.get(params[0].name, params[0].annotation))
    if takes_ctx:
        params = params[1:]
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise UsageError(f"cannot make a tool of {getattr(fn, '__name__', fn)!r}: parameter {param.name!r} "
                             "must be passable by keyword (no *args, **kwargs or positional-only parameters)")
        spec = type_schema(hints.get(param.name, param.annotation))
        doc = (arg_docs or {}).get(param.name, "")
        if not spec.get("type") and "enum" not in spec and "anyOf" not in spec:
            doc = f"{doc} ({_ANY_VALUE})" if doc else _ANY_VALUE
        if doc:
            spec["description"] = doc
        if param.default is param.empty:
            required.append(param.name)
        elif _json_able(param.default) and param.default is not None:
            spec["default"] = param.default
        properties[param.name] = spec
    return {"type": "object", "properties": properties, "required": required}, takes_ctx


def type_schema(annotation: Any) -> dict[str, Any]:
    """The JSON schema of one type hint; ``{}`` (any value) for types JSON cannot name."""
    if annotation in (inspect.Parameter.empty, Any, object):
        return {}
    simple = {str: "string", bool: "boolean", int: "integer", float: "number", dict: "object",
              list: "array", tuple: "array", type(None): "null"}
    if annotation in simple:
        return {"type": simple[annotation]}
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return _literal(args)
    if origin in (typing.Union, types.UnionType):
        return _union(args)
    if origin in (list, tuple, set, frozenset, Sequence) or origin is typing.Sequence:
        items = [a for a in args if a is not Ellipsis]
        spec: dict[str, Any] = {"type": "array"}
        if len(items) == 1 or (items and all(a == items[0] for a in items)):
            item_spec = type_schema(items[0])
            if item_spec:
                spec["items"] = item_spec
        return spec
    if origin in (dict, Mapping) or origin is typing.Mapping:
        return {"type": "object"}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _literal(tuple(member.value for member in annotation))
    return {}


def _literal(values: tuple[Any, ...]) -> dict[str, Any]:
    types_ = sorted({type_schema(type(v)).get("type", "") for v in values} - {""})
    spec: dict[str, Any] = {"enum": list(values)}
    if len(types_) == 1:
        spec["type"] = types_[0]
    return spec


def _union(args: tuple[Any, ...]) -> dict[str, Any]:
    nullable = type(None) in args
    members = [type_schema(a) for a in args if a is not type(None)]
    if any(not m for m in members):
        return {}  # one member takes any value: so does the union
    if len(members) == 1:
        spec = dict(members[0])
        if nullable and isinstance(spec.get("type"), str):
            spec["type"] = [spec["type"], "null"]
        return spec
    if all(set(m) == {"type"} and isinstance(m["type"], str) for m in members):
        return {"type": [m["type"] for m in members] + (["null"] if nullable else [])}
    return {"anyOf": members + ([{"type": "null"}] if nullable else [])}


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """``(first paragraph on one line, {parameter: description})`` from a Google-style docstring."""
    lines = doc.splitlines()
    first: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line.strip()):
            break
        first.append(line.strip())
    args: dict[str, str] = {}
    current: str | None = None
    in_args = False
    indent = 0
    for line in lines:
        stripped = line.strip()
        if _SECTION.match(stripped) and len(line) - len(line.lstrip()) == 0:
            in_args = stripped.rstrip(":") in ("Args", "Arguments", "Parameters")
            current, indent = None, 0
            continue
        if not in_args or not stripped:
            continue
        depth = len(line) - len(line.lstrip())
        match = _ARG_LINE.match(stripped)
        if match and (current is None or depth <= indent):
            current, indent = match.group(1), depth
            args[current] = match.group(2).strip()
        elif current is not None and depth > indent:
            args[current] = f"{args[current]} {stripped}".strip()
    return " ".join(first), args


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """Resolved type hints; the raw annotations when they cannot be resolved."""
    try:
        return typing.get_type_hints(fn)
    except Exception:
        return dict(getattr(fn, "__annotations__", {}))


def _is_context(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation == "ToolContext" or annotation.endswith(".ToolContext")
    return annotation is ToolContext


def _json_able(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


# --- loading ---------------------------------------------------------------------------------


def load_spec(spec: str) -> list[Tool]:
    """The tools a ``--tools`` SPEC names (see the module docstring).

    Raises ``UsageError`` when the module, file or attribute cannot be loaded or is not a tool.
    """
    if ":" not in spec:
        if spec in BUILTIN:
            return [BUILTIN[spec]]
        if spec in installed_names():
            return [installed_tool(spec)]
        raise UsageError(f"--tools {spec}: not a built-in tool ({', '.join(BUILTIN)}) nor an installed one; "
                         "give module:function or path/to/file.py:function")
    where, attr = spec.rsplit(":", 1)
    module = _import_file(where, spec) if _is_path(where) else _import_module(where, spec)
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise UsageError(f"--tools {spec}: {where} has no attribute {attr!r}") from None
    items = list(obj) if isinstance(obj, list | tuple) else [obj]
    return [_as_tool(item, spec) for item in items]


def _as_tool(obj: Any, where: str, name: str | None = None) -> Tool:
    if isinstance(obj, Tool):
        return obj if name is None or obj.name == name else Tool(name, obj.description, obj.parameters, obj.fn,
                                                                obj.kind, obj.resolve_handles)
    if callable(obj):
        return make_tool(obj, name=name)
    raise UsageError(f"{where}: {obj!r} is not a function or a Tool")


def _is_path(where: str) -> bool:
    return where.endswith(".py") or "/" in where or os.sep in where


def _import_module(name: str, spec: str) -> types.ModuleType:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except Exception as err:
        raise UsageError(f"--tools {spec}: cannot import {name}: {type(err).__name__}: {err}") from err


def _import_file(where: str, spec: str) -> types.ModuleType:
    path = Path(where).expanduser().resolve()
    if not path.is_file():
        raise UsageError(f"--tools {spec}: no such file {path}")
    name = f"ctxagent_user_tools.{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise UsageError(f"--tools {spec}: cannot load {path} as Python")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise UsageError(f"--tools {spec}: {path} failed to load: {type(err).__name__}: {err}") from err
    return module


def installed_names() -> list[str]:
    """Names of the tools installed under the ``ctxagent.tools`` entry point group, sorted."""
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)})


def installed_tool(name: str) -> Tool:
    """The installed tool ``name`` (its entry point loaded; the tool takes the entry point's name).

    Raises ``UsageError`` when there is none or it cannot be loaded.
    """
    found = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        raise UsageError(f"no tool {name!r} is installed under the {ENTRY_POINT_GROUP} entry point group")
    entry = found[0]
    where = f"entry point {name} = {entry.value}"
    try:
        obj = entry.load()
    except Exception as err:
        raise UsageError(f"{where} cannot be loaded: {type(err).__name__}: {err}") from err
    return _as_tool(obj, where, name)


def absolute_spec(spec: str) -> str:
    """``spec`` with a file path made absolute (so a resumed session finds it from anywhere)."""
    if ":" in spec:
        where, attr = spec.rsplit(":", 1)
        if _is_path(where):
            return f"{Path(where).expanduser().resolve()}:{attr}"
    return spec


def load_tools(specs: Sequence[str]) -> list[Tool]:
    """Every tool the ``--tools`` SPECs name, in order. Raises ``UsageError``."""
    return [tool for spec in specs for tool in load_spec(spec)]
