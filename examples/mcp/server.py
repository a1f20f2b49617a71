"""The pointer paper's two workflows with their tools served over MCP (a server written with the SDK).

    python examples/mcp/server.py          # an MCP server on stdin/stdout (needs ctxagent[mcp])

The tools are those of examples/grid/tools.py and examples/extraction/tools.py, wrapped as MCP tools:
the grid travels as a JSON list of lists (MCP has no arrays), the sheet as text, the ingredients as
structured content. ctxagent mirrors them as ``wf__make_grid``, ``wf__locate``, ``wf__make_sds`` and
``wf__extract_ingredients`` (``--mcp-config examples/mcp/mcp.json``): large results become handles,
handles in arguments arrive at the server as the full values.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Literal

import numpy as np
from mcp.server.mcpserver import MCPServer

HERE = Path(__file__).resolve().parent
app = MCPServer("workflows")


def _tools(example: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"mcp_example_{example}", HERE.parent / example / "tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


grid_tools, sds_tools = _tools("grid"), _tools("extraction")


@app.tool()
def make_grid(seed: int = 7, size: int = 128) -> list[list[list[float]]]:
    """Generate a seeded 3-D grid of float32 values in [0, 1), size x size x size, as nested lists."""
    return grid_tools.make_grid(seed, size).tolist()


@app.tool()
def locate(grid: list[list[list[float]]], find: Literal["max", "min", "value"] = "max",
           index: list[int] | None = None) -> dict:
    """Find the maximum or minimum of a 3-D grid (nested lists, or its handle), or read one cell."""
    return grid_tools.locate(np.asarray(grid, dtype=np.float32), find, index)


@app.tool()
def make_sds(product: str = "Solvent blend SB-200", seed: int = 11) -> str:
    """Return the full safety data sheet of a product (16 sections, tens of thousands of tokens)."""
    return sds_tools.make_sds(product, seed)


@app.tool()
def extract_ingredients(document: str) -> list[dict[str, str]]:
    """The ingredients of a safety data sheet (its text, or its handle): name, CAS, EC, concentration."""
    return sds_tools.extract_ingredients(document)


if __name__ == "__main__":
    app.run("stdio")
