"""A tool call's arguments: parsed once (:func:`parse_arguments`: the permission gate and the tool see the
same object), validated once after handles are resolved (:func:`validate_arguments`: by the tool's
pydantic model, else an MCP tool's JSON Schema with ``jsonschema``). Every problem becomes one
``ToolError``: ``bad arguments for TOOL: PROBLEM; PROBLEM. It takes: NAME (TYPE, required), ...``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from ctxagent.messages import loads_json
from ctxagent.tools import values
from ctxagent.tools.base import Tool, ToolError

RAW_ARGUMENTS_SHOWN = 200  # characters of invalid JSON quoted back to the model

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "array": (list,),
    "object": (dict,),
}


def parse_arguments(tool: str, raw: str) -> dict[str, Any]:
    """The arguments object of a call of ``tool`` (empty text means no arguments). Raises
    ``ToolError`` for invalid JSON (quoting at most :data:`RAW_ARGUMENTS_SHOWN` characters,
    redacted) or JSON that is not an object."""
    if not raw.strip():
        return {}
    try:
        arguments = loads_json(raw)
    except ValueError as err:
        from ctxagent.sessions.redact import clip  # redact, then cut: a cut key is no key's shape

        raise ToolError(f"the arguments of {tool} are not valid JSON ({err}): "
                        f"{clip(raw, RAW_ARGUMENTS_SHOWN)!r}") from err
    if not isinstance(arguments, dict):
        raise ToolError(f"the arguments of {tool} must be a JSON object, not {type(arguments).__name__}")
    return arguments


def without_nulls(arguments: Mapping[str, Any], parameters: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` without a ``null`` given for an optional argument that takes no null (its
    default applies: models send null for "not given")."""
    properties: Mapping[str, Any] = parameters.get("properties", {})
    required = set(parameters.get("required", ()))
    return {name: value for name, value in arguments.items()
            if not (value is None and name in properties and name not in required and not _has_type(None,
                                                                                                 properties[name]))}


def validate_arguments(tool: Tool, arguments: dict[str, Any], handles: Mapping[str, str]) -> dict[str, Any]:
    """``arguments`` (handles resolved; ``handles``: top-level argument -> the handle it was)
    validated once: by ``tool.validator`` (the ones given, as the annotations make them) or, without
    one, by ``tool.parameters`` as a JSON Schema. Raises ``ToolError`` naming every problem."""
    if tool.validator is None:
        sent = {name: "" if tool.kind == "mcp" and name in handles and isinstance(value, bytes) else value
                for name, value in arguments.items()}  # an MCP server gets bytes as text (mcp_tools/results.py)
        _refuse(tool, arguments, handles, list(_schema_problems(sent, tool.parameters)))
        return arguments
    try:
        checked = tool.validator.model_validate(arguments)
    except ValidationError as err:
        _refuse(tool, arguments, handles, [_pydantic_problem(e) for e in err.errors()])
    fields = tool.validator.model_fields
    return {fields[key].alias or key: getattr(checked, key) for key in checked.model_fields_set}


def arguments_fit(arguments: Mapping[str, Any], parameters: Mapping[str, Any]) -> bool:
    """Whether ``arguments`` (parsed JSON) fit the JSON Schema ``parameters`` (a string that looks
    like a handle fits any type: it is resolved when the call runs), without running anything."""
    return all(kind == "type" and isinstance(value, str) and values.looks_like_handle(value)
               for _, kind, value, _ in _schema_problems(without_nulls(arguments, parameters), parameters))


Problem = tuple[str, str, Any, str]
"""``(argument, kind, value, text)``: the top-level argument ("" for the whole object), the kind
(``missing``, ``unexpected``, ``type``, ``other``), the value given, and the problem in words."""


def _pydantic_problem(error: Any) -> Problem:
    """A pydantic error (``ErrorDetails``) as a :data:`Problem`."""
    loc = [str(part) for part in error["loc"]]
    kind = {"missing": "missing", "extra_forbidden": "unexpected"}.get(error["type"], "other")
    message = error["msg"][:1].lower() + error["msg"][1:]
    return (loc or [""])[0], kind, error.get("input"), \
        f"argument {'.'.join(loc)!r}: {message}, not {_shown(error.get('input'))}"


def _schema_problems(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> Iterator[Problem]:
    """The ways ``arguments`` break the JSON Schema ``schema`` (none when the schema itself is
    broken: the tool's server judges then)."""
    import jsonschema  # only where a tool has no pydantic model (MCP tools)

    try:
        errors = list(jsonschema.validators.validator_for(schema)(schema).iter_errors(dict(arguments)))
    except (jsonschema.exceptions.SchemaError, jsonschema.exceptions.UnknownType, TypeError):
        return
    for error in errors:
        name = str(error.path[0]) if error.path else ""
        if error.validator == "required" and not name and isinstance(error.validator_value, list):
            yield from ((key, "missing", None, "") for key in error.validator_value if key not in arguments)
        elif error.validator == "additionalProperties" and not name:
            yield from ((key, "unexpected", value, "") for key, value in arguments.items()
                        if key not in schema.get("properties", {}))
        else:
            kind = "type" if error.validator == "type" and len(error.path) == 1 else "other"
            yield name, kind, error.instance, f"argument {'.'.join(map(str, error.path))!r}: {error.message}"


def _refuse(tool: Tool, arguments: Mapping[str, Any], handles: Mapping[str, str], problems: list[Problem]) -> None:
    """Raise the ``ToolError`` naming ``problems`` (if any) and what ``tool`` takes."""
    if not problems:
        return
    properties: Mapping[str, Any] = tool.parameters.get("properties", {})
    required = set(tool.parameters.get("required", ()))
    said = dict.fromkeys(_said(name, kind, text, arguments, handles, properties.get(name))
                         for name, kind, _, text in problems)
    expected = ", ".join(f"{name} ({_type_text(spec)}{', required' if name in required else ''})"
                         for name, spec in properties.items())
    raise ToolError(f"bad arguments for {tool.name}: {'; '.join(said)}. It takes: {expected or 'nothing'}")


def _said(name: str, kind: str, text: str, arguments: Mapping[str, Any], handles: Mapping[str, str],
          spec: Mapping[str, Any] | None) -> str:
    """One problem in the words the model reads: a value of another JSON type than declared is said
    as such (with the handle it came from)."""
    if kind in ("missing", "unexpected"):
        return f"{kind} argument {name!r}"
    if spec is None or name not in arguments or _has_type(arguments[name], spec):
        return text
    given = arguments[name]
    if name in handles:
        return f"argument {name!r} must be {_type_text(spec)}, but {handles[name]} holds {values.describe(given)}"
    return f"argument {name!r} must be {_type_text(spec)}, not {json.dumps(given, default=str)[:50]}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _types(spec: Mapping[str, Any]) -> list[str]:
    declared = spec.get("type") or []
    return [declared] if isinstance(declared, str) else list(declared)


def _type_text(spec: Mapping[str, Any]) -> str:
    return " or ".join(_types(spec)) or "any value"


def _has_type(value: Any, spec: Mapping[str, Any]) -> bool:
    """Whether ``value`` (parsed JSON) has one of the JSON types ``spec`` declares (any when none)."""
    allowed = [_JSON_TYPES.get(name, (object,)) for name in _types(spec)]
    # JSON true/false is not an integer or a number
    return not allowed or any(isinstance(value, python_types) and (bool in python_types or not isinstance(value, bool))
                              for python_types in allowed)
