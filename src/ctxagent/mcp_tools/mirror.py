"""MCP tools as mirrored ctxagent tools named ``SERVER__TOOL``, of kind ``mcp`` and group ``SERVER``
(docs/mcp.md): handle arguments arrive as their stored values (tools/values.py, made JSON by
:func:`~ctxagent.mcp_tools.results.json_ready`), results are settled by the toolset. A session's
recorded tool list is offered again on resume, even when its server changed or is gone.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ctxagent.mcp_tools import hub
from ctxagent.mcp_tools.config import McpTools, ServerConfig
from ctxagent.mcp_tools.results import json_ready, value_of
from ctxagent.tools.base import Tool, ToolContext, ToolError

SEPARATOR = "__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """``server__tool`` as a name providers accept (``^[A-Za-z0-9_-]{1,64}$``)."""
    name = f"{server}{SEPARATOR}{_UNSAFE.sub('_', tool)}"
    return name if len(name) <= 64 else _hashed(name, tool)


def _hashed(name: str, seed: str) -> str:
    """``name`` cut to 55 characters and told apart by a hash of ``seed`` (64 characters at most)."""
    return f"{name[:55]}_{hashlib.sha256(seed.encode()).hexdigest()[:8]}"


def input_schema(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A server's input schema as a function's parameters: an object schema with ``properties``
    (``$schema`` and the ``title`` annotations SDK servers add to every level dropped: they cost
    tokens in every request and tell the model nothing the names do not; a schema that is not an
    object takes no arguments)."""
    data: dict[str, Any] = _lean({k: v for k, v in raw.items() if k != "$schema"})  # a dict stays a dict
    if data.get("type") != "object":
        return {"type": "object", "properties": {}}
    data.setdefault("properties", {})
    return data


_NAMED = ("properties", "patternProperties", "$defs", "definitions")  # maps of names to schemas


def _lean(schema: Any) -> Any:
    """``schema`` without its ``title`` annotations (a property *named* title is kept)."""
    if isinstance(schema, list):
        return [_lean(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {key: ({name: _lean(sub) for name, sub in value.items()} if key in _NAMED and isinstance(value, dict)
                  else _lean(value))
            for key, value in schema.items() if not (key == "title" and isinstance(value, str))}


def mcp_tools(servers: Mapping[str, ServerConfig], recorded: Mapping[str, list[dict[str, Any]]], *,
              log_dir: Path, workdir: Path, connect: bool = True) -> McpTools:
    """The mirrored tools of ``servers`` (and of servers a session ``recorded`` that are gone).

    With ``connect``, every server starts now (in parallel, in the background); those without a
    recorded tool list are waited for and listed (``listed``); one that cannot start is a warning,
    and its tools are simply absent from this run. Without ``connect`` (``inspect``), nothing
    starts: only recorded lists are offered, connecting on a first call."""
    out = McpTools(servers=list(dict.fromkeys([*recorded, *servers])))
    connections = {name: hub.connection(name, config, log_dir=log_dir, workdir=workdir)
                   for name, config in servers.items()}
    for each in connections.values():
        if connect and not each.down:  # a server down for good is not restarted
            each.start()
    for name in out.servers:
        conn = connections.get(name)
        listing = recorded.get(name)
        if listing is None and conn is not None and connect:
            try:
                listing = conn.tools()
            except hub.McpUnavailable as err:
                out.warnings.append(str(err))
                continue
            out.listed[name] = listing
        out.tools += [mirror(name, entry, conn) for entry in listing or ()]
    out.tools = unique_names(out.tools)
    return out


def unique_names(tools: list[Tool]) -> list[Tool]:
    """``tools`` with a name that another tool already took (``a.b`` and ``a_b`` both become
    ``srv__a_b``) made unique with a hash of its position and name; the first keeps its name."""
    taken: set[str] = set()
    out = []
    for index, tool in enumerate(tools):
        if tool.name in taken:
            tool = replace(tool, name=_hashed(tool.name, f"{index}:{tool.name}"))
        taken.add(tool.name)
        out.append(tool)
    return out


def mirror(server: str, entry: Mapping[str, Any], conn: hub.Connection | None) -> Tool:
    """The ctxagent tool for the MCP tool ``entry`` (``name``, ``description``, ``input_schema``)
    of ``server``; ``conn`` None: the server is no longer configured (calls are error results)."""
    remote = str(entry["name"])

    def call(ctx: ToolContext, **arguments: Any) -> Any:
        if conn is None:
            raise ToolError(f"the MCP server {server!r} is not configured for this run (it was when the session "
                            "recorded this tool); add it back to the profile's mcp_servers or --mcp-config")
        try:
            result = conn.call(remote, json_ready(arguments), stop=ctx.stop)
        except hub.McpUnavailable as err:
            raise ToolError(str(err)) from err
        except Exception as err:  # the SDK's MCPError: the server answered with an error
            raise ToolError(f"the MCP server {server!r} answered {remote} with an error: {hub.describe(err)}") from err
        return value_of(result, ctx.store)

    description = str(entry.get("description") or f"The tool {remote} of the MCP server {server}.")
    return Tool(name=tool_name(server, remote), description=description,
                parameters=input_schema(entry.get("input_schema") or {}), fn=call, kind="mcp", group=server)

