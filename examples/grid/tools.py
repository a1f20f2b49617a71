"""Synthetic tools for the grid workflow of the pointer paper ("Solving Context Window Overflow in AI
Agents", 2025), re-created offline: one tool makes a seeded 128x128x128 float32 grid (8 MiB, ~20
million tokens as a JSON list), another takes the grid *by handle* and finds a value in it.

Plain functions: ctxagent makes their schemas from the type hints and docstrings (``--tools
examples/grid/tools.py:make_grid``). They never see a handle: ctxagent passes the stored array.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

MAX_SIZE = 256


def make_grid(seed: int = 7, size: int = 128) -> np.ndarray:
    """Generate a seeded 3-D grid of float32 values in [0, 1), size x size x size.

    Args:
        seed: seed of the random generator (the same seed gives the same grid)
        size: cells along each axis, 1 to 256
    """
    if not 1 <= size <= MAX_SIZE:
        raise ValueError(f"size must be 1 to {MAX_SIZE}, not {size}")
    return np.random.default_rng(seed).random((size, size, size), dtype=np.float32)


def locate(grid: np.ndarray, find: Literal["max", "min", "value"] = "max", index: list[int] | None = None) -> dict:
    """Find the maximum or minimum of a 3-D grid, or read one cell; returns the cell index and value.

    Args:
        grid: the grid, given by its handle (e.g. @grid)
        find: "max" or "min" for that extremum (the first in C order on ties), "value" for the cell at index
        index: [i, j, k] coordinates of the cell to read when find is "value"
    """
    if grid.ndim != 3:
        raise ValueError(f"expected a 3-D grid, got shape {grid.shape}")
    if find == "value":
        if index is None or len(index) != 3:
            raise ValueError("find='value' needs index=[i, j, k]")
        cell = tuple(int(i) for i in index)
    else:
        flat = int(np.argmax(grid) if find == "max" else np.argmin(grid))
        cell = tuple(int(i) for i in np.unravel_index(flat, grid.shape))
    return {"find": find, "index": list(cell), "value": float(grid[cell])}
