"""The computed floor of cache-billed input for a workload, and the table that puts every profile beside it
(issue 34: "cost at the limit").

With prompt caching, a view that grows from L to H tokens and is then cut back to L costs per turn about
``new + r * (L + H) / 2 + (1 - r) * L / k`` (issue 34's formula; ``new``: the tokens a turn adds, ``r``: the
cache-read price ratio, ``k``: the turns between cuts, ``(H - L) / new``), where L is the part no cut removes
(system prompt, tool schemas, pins, task) plus the current turn: after a cut the whole of L is read uncached
once. Its minimum over H is at ``H = L + sqrt(2 (1 - r) L new / r)`` (``sqrt(18 L new)`` at r = 0.1), bounded
by what the window can hold.

The floor here is that policy run over the workload's own requests (:func:`simulate`: each turn adds what it
added to the unmanaged session; a request that would pass H is cut back to the stable head and that turn, and
read uncached), with the best H found by search, so bursts of big outputs count as they came. It is the cost of
a manager that keeps the stable head and the newest turns and reaches everything else through handles and
``recall``: it loses no fact (each dropped result stays one handle or one ``recall`` away) but says nothing
about whether a model still finds it, which is the real-model benchmark's question. A real run can come in
under it: our billing model (:func:`benchmarks.harness.cached_prefix`) still serves the system prompt and the
tool schemas from the cache after a cut, which the formula does not count on.

Units: tokens throughout; ratios are fractions.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

H_STEPS = 400  # values of H tried between the smallest possible and the window's room


def simulate(news: Sequence[int], stable: int, high: int, ratio: float) -> tuple[float, int]:
    """``(billed tokens, cuts)`` of the grow-then-cut policy: requests start at ``stable`` (the first
    request) and add ``news[t]`` each, cached but for what they add; a request that would pass ``high`` is
    cut back to ``stable`` plus that turn's tokens, all read uncached."""
    size = stable
    total = float(stable)
    cuts = 0
    for new in news:
        if size + new > high and size > stable:
            size = stable + new
            total += size
            cuts += 1
        else:
            total += ratio * size + new
            size += new
    return total, cuts


def floor(tokens: Sequence[int], window: int, reserved: int, ratio: float) -> dict[str, Any]:
    """The floor of a workload whose unmanaged requests cost ``tokens`` (input tokens per request, tool
    schemas included; the first request holds only the stable head): the billed input of the best
    grow-then-cut policy (H searched between the largest single turn and ``window - reserved``), H, the
    cuts, and the closed form's H and per-turn cost for comparison."""
    if not tokens:
        return {}
    stable = tokens[0]
    news = [max(0, b - a) for a, b in itertools.pairwise(tokens)]
    room = window - reserved
    low = min(room, stable + max(news, default=0))
    best: tuple[float, int, int] | None = None
    for step in range(H_STEPS + 1):
        high = low + (room - low) * step // H_STEPS
        billed, cuts = simulate(news, stable, high, ratio)
        if best is None or billed < best[0]:
            best = (billed, cuts, high)
    assert best is not None
    billed, cuts, high = best
    g = sum(news) / len(news) if news else 0.0
    fixed = stable + g  # L: the stable head and the current turn
    closed_h = min(room, fixed + math.sqrt(2 * (1 - ratio) * fixed * g / ratio)) if g and ratio else room
    closed = g + ratio * (fixed + closed_h) / 2 + ((1 - ratio) * fixed * g / (closed_h - fixed)
                                                    if closed_h > fixed else 0.0)
    return {"billed_input_tokens": billed, "requests": len(tokens), "cuts": cuts, "high": high,
            "high_pct_of_window": 100.0 * high / window, "stable": stable, "new_per_turn": g,
            "turns_between_cuts": len(news) / cuts if cuts else None, "closed_form_high": closed_h,
            "closed_form_per_turn": closed, "per_turn": billed / len(tokens), "ratio": ratio}


def add(rows: list[dict[str, Any]], found: dict[str, Any]) -> None:
    """``floor_ratio`` (billed / floor, a fraction) on every row that sent every request."""
    for row in rows:
        whole = row.get("stopped_at") is None and row.get("turns") == found.get("requests")
        row["floor_ratio"] = row["billed_input_tokens"] / found["billed_input_tokens"] if whole and found else None


def base_series(results: Sequence[Any]) -> Any:
    """The run whose requests define the floor: "offload only" when it ran (big outputs are handles in
    every managed run too), else "no management"."""
    by_name = {r.name: r for r in results}
    return by_name.get("offload only (no strategy)") or by_name.get("no management")


HEADER = ["workload", "configuration", "cache-billed input", "% of truncation", "% of the floor",
          "facts kept (view or handle)", "facts in ≤1 call", "prefix breaks"]


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def table(workloads: Sequence[tuple[str, Sequence[dict[str, Any]], dict[str, Any]]],
          ratio: float) -> tuple[str, list[str], list[list[str]]]:
    """Every profile row of every workload beside truncation and the floor: ``(label, rows, floor)``."""
    cells: list[list[str]] = []
    for label, rows, found in workloads:
        if not found:
            continue
        every = found.get("turns_between_cuts")
        cells.append([label, f"the floor (grow to {found['high']:,} tokens, {found['high_pct_of_window']:.0f}% of the "
                      f"window, then cut; every {every:.1f} turns)" if every else "the floor (never cut)",
                      f"{found['billed_input_tokens']:,.0f}", "", "100.0%", "", "", str(found["cuts"])])
        for row in rows:
            if row["group"] != "profile":
                continue
            cells.append([label, row["name"], f"{row['billed_input_tokens']:,.0f}",
                          _pct(row.get("billed_ratio_vs_minimal")), _pct(row.get("floor_ratio")),
                          _percent(row.get("retrievable_pct")), _percent(row.get("reach_one_call_pct")),
                          str(row["prefix_breaks"])])
    title = (f"Cost at the limit (issue 34): cache-billed input (cache reads at {ratio:g}) of every bundled profile "
             "against plain truncation (`minimal`) and the computed floor (the best grow-then-cut policy over the "
             "same requests; benchmarks/cost_floor.py)")
    return title, HEADER, cells


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}%"
