"""The built-in tools by name (:data:`BUILTIN`), and :func:`registry`, which indexes tools by name.

Here so that tools.toolset and tools.user both look tools up without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxagent.tools import agent_tools, builtin, outputs, recall, structured
from ctxagent.tools.base import Tool

__all__ = ["BUILTIN", "registry"]


def registry(tools: Sequence[Tool]) -> dict[str, Tool]:
    """``tools`` by name, in order. Raises ``ValueError`` when two share a name."""
    by_name: dict[str, Tool] = {}
    for tool in tools:
        if tool.name in by_name:
            raise ValueError(f"two tools are named {tool.name!r}")
        by_name[tool.name] = tool
    return by_name


BUILTIN: dict[str, Tool] = registry([*builtin.TOOLS, *outputs.TOOLS, *structured.TOOLS, recall.RECALL, agent_tools.PIN,
                                    agent_tools.DELEGATE])
