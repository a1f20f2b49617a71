"""A tool's JSON schema and argument validator, both made from its function's signature and docstring.

The approach of openai-agents' function schemas: a pydantic model built from the signature, parameter
descriptions from the docstring's Google-style ``Args:``, constraints on the annotation. The same model
validates a call's arguments (handles resolved), so the schema the model reads and the check a call
passes cannot disagree. A type JSON cannot describe (``numpy.ndarray``, ``bytes``, ``Any``) takes any
value, in practice a handle. The schema is deterministic: it is part of every request and of the
provider's prompt-cache prefix. See docs/tools.md ("Schemas from signatures").
"""

from __future__ import annotations

import inspect
import itertools
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, Strict, TypeAdapter, create_model

from ctxagent.errors import UsageError
from ctxagent.tools.base import Tool, ToolContext, ToolKind

ANY_VALUE = "any value; in practice a handle (@abc123) of a stored value, which the tool receives"
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns?|Yields?|Raises|Examples?|Notes?|Attributes):\s*$")
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_CONFIG = ConfigDict(extra="forbid", arbitrary_types_allowed=True, populate_by_name=False)


def function_tool(fn: Callable[..., Any], *, description: str | None = None, name: str | None = None,
                  kind: ToolKind = "read", resolve_handles: bool = True) -> Tool:
    """A :class:`Tool` of ``fn``: the JSON schema of its arguments and the pydantic model that validates
    them (fields aliased by argument name), both from its signature; ``description`` for the model
    (default: the docstring's first paragraph). ``fn`` receives the context first when its first
    parameter is a :class:`ToolContext`. Raises ``UsageError`` for ``*args``, ``**kwargs`` or
    positional-only parameters."""
    tool_name = name or str(getattr(fn, "__name__", ""))
    summary, docs = parse_docstring(inspect.getdoc(fn) or "")
    hints = _hints(fn)
    params = list(inspect.signature(fn).parameters.values())
    takes_ctx = bool(params) and _is_context(hints.get(params[0].name, params[0].annotation))
    fields: dict[str, Any] = {}
    for index, param in enumerate(params[1:] if takes_ctx else params):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise UsageError(f"cannot make a tool of {getattr(fn, '__name__', fn)!r}: parameter {param.name!r} "
                             "must be passable by keyword (no *args, **kwargs or positional-only parameters)")
        annotation = hints.get(param.name, param.annotation)
        about = docs.get(param.name)
        if not _describable(annotation):
            annotation, about = Any, f"{about} ({ANY_VALUE})" if about else ANY_VALUE
        default = ... if param.default is param.empty else param.default
        annotation = _strict(annotation)
        # aliased: an argument may be called anything, even a name BaseModel uses (json, copy, schema)
        fields[f"a{index}"] = (annotation, Field(default, alias=param.name, description=about))
    model: type[BaseModel] = create_model(re.sub(r"\W", "_", tool_name) or "tool", __config__=_CONFIG, **fields)
    parameters = _clean(model.model_json_schema())
    parameters.pop("additionalProperties", None)  # ~5 tokens a tool in every request; the validator refuses extras
    call = fn
    if not takes_ctx:
        def call(ctx: ToolContext, **arguments: Any) -> Any:
            return fn(**arguments)

        call.__name__, call.__doc__ = tool_name, fn.__doc__
    return Tool(name=tool_name, description=description or summary or f"The Python function {tool_name}.",
                parameters=parameters, fn=call, kind=kind, resolve_handles=resolve_handles, validator=model)


def _clean(schema: Any, *, names: bool = False) -> Any:
    """``schema`` without pydantic's ``title`` keywords (a property called ``title`` stays), and
    ``X | None`` written ``"type": [X, "null"]`` where X is one JSON type, no ``"default": null`` and
    no ``"additionalProperties": true`` (fewer tokens: the schema is in every request)."""
    if isinstance(schema, list):
        return [_clean(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if names:  # a mapping of property (or definition) names to schemas
        return {key: _clean(value) for key, value in schema.items()}
    out = {key: _clean(value, names=key in ("properties", "$defs")) for key, value in schema.items()
           if key != "title"}
    members = out.get("anyOf")
    if isinstance(members, list) and len(members) == 2 and {"type": "null"} in members:
        other = members[1 - members.index({"type": "null"})]
        if isinstance(other.get("type"), str):
            out.pop("anyOf")
            out = {**other, **out, "type": [other["type"], "null"]}
    if "default" in out and out["default"] is None:  # an optional argument: "required" says so already
        del out["default"]
    if out.get("additionalProperties") is True:  # JSON Schema's default
        del out["additionalProperties"]
    return out


_JSON_SCALARS = (int, float, str, bool)


def _strict(annotation: Any) -> Any:
    """``annotation`` taking only values of the JSON type its schema declares when it is an int,
    float, str or bool (or one of them or None): pydantic's lax mode would take ``true`` for 1 and
    ``"5"`` for 5, and the model was told ``integer`` (a float takes an integer, as in JSON Schema)."""
    base = typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation
    members = typing.get_args(base) if isinstance(base, types.UnionType) or typing.get_origin(base) is typing.Union \
        else (base,)
    if all(member in _JSON_SCALARS or member is type(None) for member in members):
        return typing.Annotated[annotation, Strict()]
    return annotation


def _describable(annotation: Any) -> bool:
    """Whether JSON Schema can describe ``annotation`` (else the argument takes any value)."""
    if annotation in (inspect.Parameter.empty, Any, object) or isinstance(annotation, str):
        return False
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(annotation, config=_CONFIG)
        schema = adapter.json_schema()
    except Exception:  # pydantic cannot build or describe it: a foreign type (numpy.ndarray, ...)
        return False
    return schema != {} and "bytes" not in str(schema.get("format", ""))


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """Resolved type hints (``Annotated`` kept); the raw annotations when they cannot be resolved."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return dict(getattr(fn, "__annotations__", {}))


def _is_context(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation == "ToolContext" or annotation.endswith(".ToolContext")
    return annotation is ToolContext


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """``(first paragraph on one line, {parameter: description})`` from a Google-style docstring."""
    lines = doc.splitlines()
    first = itertools.takewhile(lambda line: line.strip() and not _SECTION.match(line.strip()), lines)
    args: dict[str, str] = {}
    current: str | None = None
    in_args, indent = False, 0
    for line in lines:
        stripped = line.strip()
        if _SECTION.match(stripped) and not line[:1].isspace():
            in_args, current = stripped.rstrip(":") in ("Args", "Arguments", "Parameters"), None
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
    return " ".join(line.strip() for line in first), args

