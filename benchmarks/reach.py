"""Whether a fact that left the view can be reached the way a model would have to reach it (issue 18).

"Through a handle the view names" only says the value is in *some* stored output the view points at.
A model must also pick that output and find the line. At the end of a session (:meth:`Reach.sweep`,
called by ``harness.Checks`` on the last request), for every fact planted before it that is not in
the request, :class:`Reach` records:

- ``named``: how many stored outputs (handles, or deepagents' evicted-file paths) the view names;
- ``same_call``: how many of those came from a call with the same tool and arguments as the call
  holding the fact: stubs that describe the same call, which a model cannot tell apart by their
  description (the holder included; 0 when no named output holds the fact);
- ``one_grep``: whether ONE ``grep_output`` on the holding handle (the real tool on ctxagent's store;
  an equivalent regex search for deepagents' files), with a pattern the model knows (the fact's line
  with every token holding a digit left open: a model knows "the memory limit of the worker pool",
  not "48213 MiB"), lists the value;
- ``one_recall`` (asked only when one ``grep_output`` on the only stub of that call does not do):
  whether ONE search over everything stored finds the value, asked with the line's
  digit-free words: ctxagent's ``recall`` (BM25, its default 8 hits, over the transcript and the
  stored outputs; only when the profile has the tool), or deepagents' ``grep`` over its
  ``/large_tool_results/`` folder (the pattern above, its default 1,000 matches);
- ``calls``: the calls a model would need: 0 in view; 1 when one search finds it; else one
  ``grep_output`` per indistinguishable stub (``same_call``, the worst case) when a grep finds it;
  None when no call of these finds it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.workloads import Trace

_DIGIT = re.compile(r"\d")


def pattern_of(line: str) -> str:
    """A regex of ``line`` with every whitespace-separated token that holds a digit left open."""
    return r"\s+".join(r"\S+" if _DIGIT.search(t) else re.escape(t) for t in line.split())


def keywords_of(line: str) -> str:
    """The words (3+ letters) of ``line``'s tokens that hold no digit: what a model knows of a fact."""
    return " ".join(w for t in line.split() if not _DIGIT.search(t) for w in re.findall(r"[A-Za-z]{3,}", t))


class Reach:
    """Per trace: the line holding each fact value, and the call (tool, arguments) behind each handle."""

    def __init__(self, trace: Trace):
        from ctxagent.handles import base_handle

        self.lines: dict[str, str] = {}
        self.holder: dict[str, tuple[str, str]] = {}  # value -> (tool, arguments) of the first call holding it
        self.call_of: dict[str, tuple[str, str]] = {}  # handle or call id -> (tool, arguments)
        values = {v for f in trace.facts for v in (f.value, f.corrected) if v}
        for turn in trace.turns:
            for text, key in [(turn.user or "", None), *((c.output, (c.name, c.arguments)) for c in turn.calls)]:
                for value in [v for v in values if v in text]:
                    values.discard(value)
                    self.lines[value] = next(line for line in text.split("\n") if value in line)
                    if key is not None:
                        self.holder[value] = key
            for c in turn.calls:
                self.call_of[base_handle(c.id)] = self.call_of[c.id] = (c.name, c.arguments)

    def key_of(self, ref: str) -> tuple[str, str] | None:
        """The call behind a handle (``@x``, ``@x.1``) or a deepagents path (``/large_tool_results/<id>``)."""
        name = ref.rsplit("/", 1)[-1]
        return self.call_of.get(name) or self.call_of.get(re.sub(r"\.\d+$", "", name))

    def sweep(self, manager: Any, view: Any, facts: Sequence[Any], turn: int) -> list[dict[str, Any]]:
        """Every fact planted before ``turn``: where its latest value is, and :meth:`check`."""
        from ctxagent.messages import text_of

        text = "\n".join(text_of(m) for m in view.messages)
        stored = manager.stored_texts(text)
        out = []
        for fact in facts:
            if fact.turn >= turn:
                continue
            value = fact.expected(turn)
            status = "in_view" if value in text else "handle" if any(value in t for t in stored) else "lost"
            out.append({"fact": fact.key, "turn": turn, "status": status, **self.check(manager, text, value, status)})
        return out

    def check(self, manager: Any, view_text: str, value: str, status: str) -> dict[str, Any]:
        """The fields above for one probe (``status`` as :func:`benchmarks.harness.probe` found it)."""
        if status == "in_view":
            return {"calls": 0}
        refs: dict[str, str] = manager.stored_refs(view_text) if hasattr(manager, "stored_refs") else {}
        line = self.lines.get(value, value)
        holders = [r for r, text in refs.items() if value in text]
        key = self.holder.get(value)
        same = sum(1 for r in refs if key is not None and self.key_of(r) == key) if holders else 0
        grep = bool(holders) and any(self._grep(manager, r, refs[r], line, value) for r in holders)
        if grep and same == 1:  # one grep_output on the only stub of that call: the search is not needed
            return {"named": len(refs), "same_call": same, "one_grep": grep, "one_recall": None, "calls": 1}
        recall = self._search(manager, line, value)
        calls = 1 if recall else (max(1, same) if grep else None)
        return {"named": len(refs), "same_call": same, "one_grep": grep, "one_recall": recall, "calls": calls}

    @staticmethod
    def _grep(manager: Any, ref: str, text: str, line: str, value: str) -> bool:
        """One ``grep_output(ref, pattern)``: the real tool on ctxagent's store, else the same search."""
        ctx = manager.tool_context() if hasattr(manager, "tool_context") else None
        pattern = pattern_of(line)
        if ctx is not None and ref.startswith("@"):
            from ctxagent.tools.base import ToolError
            from ctxagent.tools.outputs import grep_output

            try:
                return value in grep_output(ctx, ref, pattern)
            except ToolError:
                return False
        regex = re.compile(pattern)
        return value in "\n".join([x for x in text.split("\n") if regex.search(x)][:200])

    @staticmethod
    def _search(manager: Any, line: str, value: str) -> bool | None:
        """One search over everything stored (see the module docstring); None when the manager has none."""
        if hasattr(manager, "search_everything"):
            return bool(manager.search_everything(keywords_of(line), pattern_of(line), value))
        return None


def grep_files(folder: Path, pattern: str, value: str, max_count: int = 1000) -> bool:
    """deepagents' ``grep`` over a folder of evicted results: ``value`` in the first ``max_count``
    matching lines of the files under ``folder`` (sorted by name)."""
    regex = re.compile(pattern)
    found: list[str] = []
    for path in sorted(folder.glob("**/*")) if folder.is_dir() else []:
        if path.is_file():
            found += [x for x in path.read_text(encoding="utf-8", errors="replace").split("\n") if regex.search(x)]
            if len(found) >= max_count:
                break
    return value in "\n".join(found[:max_count])


NEAR = 5  # turns: a fact planted this close before (or after) a compaction is "at" it


def _pct(flags: list[bool]) -> float | None:
    return 100.0 * sum(flags) / len(flags) if flags else None


def summarize(probes: list[dict[str, Any]], compactions: list[int],
              sweeps: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Retention across compactions and the calls a model would need, over a run's probes (% of probes)."""
    import statistics
    from bisect import bisect_right

    if not probes:
        return {}
    kept = [p["status"] in ("in_view", "handle") for p in probes]
    crossed = [k for p, k in zip(probes, kept, strict=True) if p.get("crossed")]
    before, after = [], []
    for p, k in zip(probes, kept, strict=True):
        i = bisect_right(compactions, p["planted"])
        if i < len(compactions) and compactions[i] - p["planted"] <= NEAR and p["turn"] >= compactions[i]:
            before.append(k)  # planted just before a compaction, probed after it
        if i and p["planted"] - compactions[i - 1] <= NEAR:
            after.append(k)  # planted just after a compaction
    out: dict[str, Any] = {
        "retrievable_pct_across_compaction": _pct(crossed), "probes_across_compaction": len(crossed),
        "retrievable_pct_planted_before_compaction": _pct(before), "probes_planted_before_compaction": len(before),
        "retrievable_pct_planted_after_compaction": _pct(after), "probes_planted_after_compaction": len(after),
    }
    if not sweeps:
        return out
    away = [p for p in sweeps if p["status"] != "in_view"]
    via = [p for p in away if p["status"] == "handle"]
    calls = [p.get("calls") for p in sweeps]
    out.update({
        "reach_turns": sorted({p["turn"] for p in sweeps}), "reach_facts": len(sweeps),
        "reach_probes_out_of_view": len(away), "reach_probes_via_handle": len(via),
        "reach_named_median": statistics.median([p["named"] for p in via]) if via else None,
        "reach_same_call_median": statistics.median([p["same_call"] for p in via]) if via else None,
        "reach_same_call_max": max((p["same_call"] for p in via), default=None),
        "reach_one_grep_pct": _pct([bool(p.get("one_grep")) for p in via]),
        "reach_one_search_pct": _pct([bool(p["one_recall"]) for p in away if p.get("one_recall") is not None]),
        "reach_searched": sum(p.get("one_recall") is not None for p in away),
        "reach_one_call_pct": _pct([c is not None and c <= 1 for c in calls]),
        "reach_any_pct": _pct([c is not None for c in calls]),
        "reach_calls_max": max((c for c in calls if c is not None), default=None),
        "reach_calls_mean_out_of_view": (statistics.mean([p["calls"] for p in away if p.get("calls") is not None])
                                         if any(p.get("calls") is not None for p in away) else None),
    })
    return out


def table_rows(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the "reachable the way a model must" table (configurations with reach data)."""
    header = ["configuration", "facts out of view (of all checked)", "via a named handle",
              "handles the view names (median)",
              "stubs of the same call (median / max)", "one grep_output on the handle finds it",
              "one search finds it (recall; deepagents: grep), of those one grep cannot reach",
              "facts in ≤1 call", "reachable at all",
              "calls needed out of view (mean / max)"]

    def n(value: Any, digits: int = 0) -> str:
        return "–" if value is None else f"{value:,.{digits}f}"

    def pct(value: Any) -> str:
        return "–" if value is None else f"{value:.0f}%"

    cells = []
    for r in rows:
        if "reach_one_call_pct" not in r:
            continue
        cells.append([r["name"], f"{r['reach_probes_out_of_view']} of {r['reach_facts']}",
                      str(r["reach_probes_via_handle"]),
                      n(r["reach_named_median"]), f"{n(r['reach_same_call_median'])} / {n(r['reach_same_call_max'])}",
                      pct(r["reach_one_grep_pct"]),
                      f"{pct(r['reach_one_search_pct'])} of {r['reach_searched']}" if r["reach_searched"] else "–",
                      pct(r["reach_one_call_pct"]),
                      pct(r["reach_any_pct"]),
                      f"{n(r['reach_calls_mean_out_of_view'], 2)} / {n(r['reach_calls_max'])}"])
    return header, cells
