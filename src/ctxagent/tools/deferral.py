"""Deferred tool schemas: when MCP tools' schemas would take too much of the window.

Past ``mcp.schema_budget`` the requests carry ``find_tools`` instead, its description naming each
deferred tool with one line; a ``find_tools`` call loads the schemas it selects into every later
request, after the others, so the prefix a provider cached stays the same. The shape of Anthropic's
tool search and Claude Code's deferred MCP tools. See docs/mcp.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from ctxagent.tools.base import Tool, ToolContext, ToolError
from ctxagent.tools.signature import function_tool

FIND_TOOLS = "find_tools"
SELECT_MAX = 5  # tools one find_tools call loads at most
ONE_LINE_MAX = 100  # characters of a deferred tool's description in the catalog
_WORD = re.compile(r"[a-z0-9]+")


def one_line(tool: Tool) -> str:
    """The first line of ``tool``'s description, cut to :data:`ONE_LINE_MAX` characters."""
    line = (tool.description.strip().splitlines() or [""])[0]
    return line if len(line) <= ONE_LINE_MAX else line[: ONE_LINE_MAX - 3] + "..."


def find_tools_tool(deferred: Sequence[Tool]) -> Tool:
    """The ``find_tools`` tool, its description cataloguing ``deferred`` (name: one line each)."""
    catalog = "\n".join(f"- {tool.name}: {one_line(tool)}" for tool in deferred)
    return function_tool(
        _not_here, name=FIND_TOOLS, resolve_handles=False,
        description=("Load the full schemas of more tools so you can call them. These tools exist but their "
                     "arguments are not shown yet; call find_tools with their exact names (comma-separated) or "
                     f"with keywords, and the selected ones (at most {SELECT_MAX}) become callable:\n{catalog}"),
    )


def _not_here(ctx: ToolContext, query: str) -> str:
    """Refuse: the toolset answers find_tools calls.

    Args:
        query: exact tool names, comma-separated, or keywords
    """
    raise ToolError("find_tools runs only inside a ctxagent run (the toolset answers it)")


def select(deferred: Sequence[Tool], query: str, limit: int = SELECT_MAX) -> list[Tool]:
    """The deferred tools ``query`` asks for: the exact names it lists, else the best keyword
    matches (words shared with the name and description, name words counting double; ties in
    catalogue order); at most ``limit``. Raises ``ToolError`` when nothing matches."""
    by_name = {tool.name: tool for tool in deferred}
    names = [part.strip() for part in query.split(",") if part.strip()]
    exact = [by_name[name] for name in dict.fromkeys(names) if name in by_name]
    if exact:
        return exact[:limit]
    words = set(_WORD.findall(query.lower()))
    scores = {tool.name: 2 * len(words & set(_WORD.findall(tool.name.lower())))
              + len(words & set(_WORD.findall(tool.description.lower()))) for tool in deferred}
    found = sorted((tool for tool in deferred if scores[tool.name]), key=lambda tool: -scores[tool.name])  # stable
    if not found:
        raise ToolError(f"no deferred tool matches {query!r}; the names are listed in find_tools' description")
    return found[:limit]


def loaded_text(tools: Sequence[Tool]) -> str:
    """The ``find_tools`` result: each selected tool's name, description and argument schema."""
    parts = [f"Loaded {len(tools)} tool(s); call them like any other tool from now on."]
    for tool in tools:
        arguments = json.dumps(dict(tool.parameters), ensure_ascii=False, separators=(",", ":"))
        parts.append(f"## {tool.name}\n{tool.description.strip()}\narguments: {arguments}")
    return "\n\n".join(parts)
