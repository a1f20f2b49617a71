"""User tools: plain Python functions offered to the model, with a schema made from their signature.

They come from ``--tools SPEC`` (``module:attr``, the module imported with the working directory on
``sys.path`` as uvicorn does; ``path/to/file.py:attr``; or ``NAME``, a built-in tool or one installed
under the ``ctxagent.tools`` entry point group: ``[project.entry-points."ctxagent.tools"] my_tool =
"my_pkg.tools:my_tool"``), ``attr`` being a function, a :class:`Tool`, or a list or tuple of them.
Schema and validation come from the signature (:mod:`ctxagent.tools.signature`); they go through the
same toolset as the built-ins, as ``exec`` tools unless built with :func:`make_tool`. See
docs/tools.md ("User tools").
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ctxagent.errors import UsageError
from ctxagent.tools.base import Tool, ToolKind
from ctxagent.tools.catalog import BUILTIN
from ctxagent.tools.signature import function_tool

ENTRY_POINT_GROUP = "ctxagent.tools"
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")  # what providers accept as a function name


def make_tool(fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
              kind: ToolKind = "exec") -> Tool:
    """A :class:`Tool` for the function ``fn``: schema and argument validation from its signature,
    description from its docstring (:func:`ctxagent.tools.signature.function_tool`).

    Raises ``UsageError`` when ``fn`` cannot be a tool (``*args``/``**kwargs``, positional-only
    parameters, a name providers refuse).
    """
    tool_name = name or str(getattr(fn, "__name__", ""))
    if not NAME_RE.match(tool_name):
        raise UsageError(f"cannot make a tool of {fn!r}: its name {tool_name!r} must be 1-64 letters, digits, "
                         "'_' or '-'")
    return function_tool(fn, name=tool_name, description=description, kind=kind)


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
        return obj if name is None or obj.name == name else dataclasses.replace(obj, name=name)
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
    entry = next(iter(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name)), None)
    if entry is None:
        raise UsageError(f"no tool {name!r} is installed under the {ENTRY_POINT_GROUP} entry point group")
    where = f"entry point {name} = {entry.value}"
    try:
        obj = entry.load()
    except Exception as err:
        raise UsageError(f"{where} cannot be loaded: {type(err).__name__}: {err}") from err
    return _as_tool(obj, where, name)


def absolute_spec(spec: str) -> str:
    """``spec`` with a file path made absolute (so a resumed session finds it from anywhere)."""
    where, _, attr = spec.rpartition(":")
    return f"{Path(where).expanduser().resolve()}:{attr}" if where and _is_path(where) else spec


def spec_file(spec: str) -> Path | None:
    """The Python file a ``--tools`` SPEC runs: its path, or the file of its module once imported
    (:func:`load_tools` imports it); None for a tool name or a module not imported."""
    if ":" not in spec:
        return None
    where = spec.rsplit(":", 1)[0]
    if _is_path(where):
        return Path(where).expanduser().resolve()
    found = getattr(sys.modules.get(where), "__file__", None)
    return Path(found) if found else None


def load_tools(specs: Sequence[str]) -> list[Tool]:
    """Every tool the ``--tools`` SPECs name, in order. Raises ``UsageError``."""
    return [tool for spec in specs for tool in load_spec(spec)]
