"""The baselines a user could actually run, and savings stated against them first (issue 18).

- *no management*: every message in every request. A bound, not a baseline: it goes over the window
  in most requests of a long session, so it could never be sent.
- *plain truncation*: the ``minimal`` profile (drop the oldest whole turns past 80% of the window,
  with ctxagent's offloading of big outputs). The simplest management a user could run.
- *the best peer setting*: of the peer configurations that sent every request within the window, the
  one with the lowest cache-billed input (the hardest to beat on tokens; its facts kept are shown
  beside it, because the cheapest peer is often the one that forgets most).

Ratios are over the same requests (a run that stopped early is not compared: "–").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MINIMAL = "profile minimal (both paths)"
HEADLINE = ("profile default (interactive)", "profile default (batch)", "profile batch (both paths)",
            "profile long-horizon (interactive)", "profile long-horizon (batch)")


def _runnable(result: Any) -> bool:
    return result.stopped_at is None and result.over_budget_requests == 0


def compare(results: Sequence[Any], rows: list[dict[str, Any]], ratio: float) -> dict[str, Any]:
    """Adds ``ratio_vs_minimal``, ``billed_ratio_vs_minimal``, ``ratio_vs_best_peer`` and
    ``billed_ratio_vs_best_peer`` (fractions) to ``rows`` (the summaries of ``results``, same order);
    returns which runs are the baselines and how often the unmanaged bound was over the window."""
    by_name = {r.name: r for r in results}
    peers = [r for r in results if r.group == "peer" and _runnable(r)]
    best = min(peers, key=lambda r: r.billed(ratio), default=None)
    none = by_name.get("no management")
    info: dict[str, Any] = {"minimal": MINIMAL if MINIMAL in by_name else None,
                            "best_peer": best.name if best else None,
                            "unmanaged_over_window": none.over_budget_requests if none else None,
                            "requests": none.turns if none else None}
    for row, result in zip(rows, results, strict=True):
        for key, base in (("minimal", by_name.get(MINIMAL)), ("best_peer", best)):
            ok = base is not None and result.stopped_at is None and base.turns == result.turns and result.turns
            row[f"ratio_vs_{key}"] = result.total() / base.total() if ok and base is not None else None
            row[f"billed_ratio_vs_{key}"] = (result.billed(ratio) / base.billed(ratio)
                                             if ok and base is not None else None)
    return info


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}%"


def rows_of(label: str, rows: Sequence[dict[str, Any]], info: dict[str, Any]) -> list[list[str]]:
    """Cells of the baselines table for one workload: the bound, the two baselines, the headline
    profiles (raw and cache-billed input against each; facts kept; one-call reach)."""
    wanted = ["no management", MINIMAL, info.get("best_peer"), *HEADLINE]
    by_name = {r["name"]: r for r in rows}
    cells = []
    for name in wanted:
        r = by_name.get(name or "")
        if r is None:
            continue
        role = {"no management": "bound (never sendable)", MINIMAL: "baseline: truncation",
                info.get("best_peer"): "baseline: best peer"}.get(name, "ctxagent")
        cells.append([label, f"{name} ({role})", f"{r['total_input_tokens']:,}", f"{r['billed_input_tokens']:,.0f}",
                      f"{r['over_budget_requests']}", _pct(r.get("ratio_vs_minimal")),
                      _pct(r.get("billed_ratio_vs_minimal")), _pct(r.get("ratio_vs_best_peer")),
                      _pct(r.get("billed_ratio_vs_best_peer")), _pct(r.get("ratio")), _pct(r.get("billed_ratio")),
                      _percent(r.get("retrievable_pct")), _percent(r.get("reach_one_call_pct"))])
    return cells


HEADER = ["workload", "configuration", "raw input", "cache-billed", "requests over window",
          "raw % of truncation", "billed % of truncation", "raw % of best peer", "billed % of best peer",
          "raw % of unmanaged", "billed % of unmanaged", "facts kept (view or handle)", "facts in ≤1 call"]


def table(workloads: Sequence[tuple[str, Sequence[dict[str, Any]], dict[str, Any]]],
          ratio: float) -> tuple[str, list[str], list[list[str]]]:
    """The baselines table over every workload: ``(label, rows, compare() info)``."""
    cells: list[list[str]] = []
    notes = []
    for label, rows, info in workloads:
        cells += rows_of(label, rows, info)
        if info.get("unmanaged_over_window") is not None:
            notes.append(f"{label}: unmanaged over the window in {info['unmanaged_over_window']} of "
                         f"{info['requests']} requests")
    title = (f"Savings against what a user could run (cache-read ratio {ratio:g}): truncation = the `minimal` "
             f"profile, best peer = the runnable peer with the lowest cache-billed input; {'; '.join(notes)}")
    return title, HEADER, cells


HOW_TO_READ = """\
**How to read this.** Every number below comes from one run of `python -m benchmarks` on the machine
named above; the model's turns are scripted (the same trace for every configuration), so the runs
differ only in what each configuration sends.

- *Unmanaged* ("no management") sends every message every time. It is a **bound**, not a baseline:
  in a long session it is over the window in most requests (the count is in the first table's title),
  so no user could run it. "% of unmanaged" columns say how much smaller than that bound a run is.
- *Truncation* is the `minimal` profile: drop the oldest whole turns past 80% of the window (with
  ctxagent's offloading of big outputs). It is the simplest thing a user could run; savings are stated
  against it first.
- *Best peer* is, per workload, the peer configuration (LangChain `trim_messages` or context editing,
  deepagents) that never went over the window and had the lowest cache-billed input. Peers run with
  their defaults and with the same offloading ctxagent gets ("+ offload", "eviction at N K"), as their
  users would configure them. The cheapest peer is often the one that forgets most: read its
  "facts kept" beside its tokens.
- *Cache-billed* input = uncached input + ratio x cached input (ratio 0.1 by default, the model's own
  in the titles). "Cached" is **estimated**: the leading messages identical to the previous request's,
  plus the tool schemas (no minimum length, no expiry, no write surcharge).
- *Facts kept*: facts are planted in tool outputs and user messages all through each session (one
  every 5 turns in the coding session, every 6 in workloads 7-8), some corrected later, and probed
  1-400 turns after. Kept = the latest value is in the request, or in a stored output whose handle the
  request names. "Facts in ≤1 call" is stricter: in the request, or found by ONE call a model could
  make (ctxagent's `recall`, a `grep_output` on the only stub describing that call, or deepagents'
  `grep` of its evicted files), asked with the fact's words, not its value.
- The summarizer is a deterministic fake (it keeps earlier summaries and the newest fact-like lines):
  a generous stand-in for an LLM, so retention under the LLM strategies is **estimated** upward.
- Timing ratios against a floor are medians of alternating pairs (A B A B) in one run
  (`benchmarks/pairs.py`); absolute times are this machine's, under whatever else ran on it.
"""
