"""Turning results into the rich table, the markdown for benchmarks/README.md, the targets, and plots."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.workloads import FITS, PROBE_DISTANCES

SIZED_NUMBER = {"shell-1500": 7, "logs-2300": 8}  # workload numbers in the README
ISSUE9_PROFILES = re.compile(r"^profile (default|batch|long-horizon) \(")  # whose numbers issue 9's targets bind
PACKAGES = ("ctxagent", "litellm", "tiktoken", "pydantic", "typer", "rich", "langchain-core", "langchain", "deepagents",
            "matplotlib", "openhands-sdk")


def machine() -> dict[str, Any]:
    """Where the numbers come from: cores, memory, CPU, OS, Python and package versions."""
    mem = cpu = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for dist in PACKAGES:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return {"nproc": os.cpu_count(), "memory": mem, "cpu": cpu, "os": platform.platform(),
            "python": platform.python_version(), "packages": versions}


def _n(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    """A fraction as a percentage."""
    return "–" if value is None else f"{100 * value:.1f}%"


def _percent(value: float | None) -> str:
    """A value already in percent."""
    return "–" if value is None else f"{value:.0f}%"


def billing_note(ratio: float | None, model_ratio: float | None, model: str | None) -> str:
    """What the cache-billed columns assume, for a table's title."""
    own = f"{model or 'the model'}'s own ratio {model_ratio:g}" if model_ratio is not None else "no model ratio known"
    return (f"cache-billed = uncached + {ratio:g} x cached input (cache-read ratio {ratio:g}; {own}; cached = the "
            "leading messages identical to the previous request's, plus the tool schemas)")


def long_rows(rows: Sequence[dict[str, Any]], marks: Sequence[int]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the long-session table (workloads 1 and 5)."""
    header = ["configuration", "peak ctx", "total input", *(f"% of none @{m}" for m in marks), "cache-billed input",
              *(f"billed % of none @{m}" for m in marks), "prefix breaks", "over budget",
              "PAIR bad", "HEAD bad", "stopped at", "overhead ms p50 / p99", "p50 first / last 100",
              "compactions", "LLM calls (tok in/out), saved vs none ÷ spent", "retrievable"]
    cells = []
    for r in rows:
        llm = "–"
        if r["summarizer_calls"]:
            llm = f"{r['summarizer_calls']} ({r['summarizer_tokens_in']:,}/{r['summarizer_tokens_out']:,})"
            if r.get("saved_per_spent"):
                llm += f", saved {r['saved_per_spent']:,.0f}× spent"
        cells.append([
            r["name"], _n(r["peak_tokens"]), _n(r["total_input_tokens"]),
            *(_pct(r.get(f"ratio_at_{m}")) for m in marks), _n(r.get("billed_input_tokens")),
            *(_pct(r.get(f"billed_ratio_at_{m}")) for m in marks), str(r.get("prefix_breaks", "–")),
            str(r["over_budget_requests"]), str(r["pair_violation_requests"]), str(r["head_violation_requests"]),
            "–" if r["stopped_at"] is None else str(r["stopped_at"]),
            f"{r['overhead_ms_p50']:.2f} / {r['overhead_ms_p99']:.2f}",
            f"{r['overhead_ms_p50_first100']:.2f} / {r['overhead_ms_p50_last100']:.2f}",
            str(r["compactions"]), llm,
            "–" if r.get("retrievable_pct") is None else f"{r['retrievable_pct']:.0f}%",
        ])
    return header, cells


def sized_rows(rows: Sequence[dict[str, Any]], marks: Sequence[int],
               model_ratio: float | None) -> tuple[list[str], list[list[str]]]:
    """Header and cells of a workload 7/8 table (issue 9): raw and cache-billed input against no
    management, the laws and the facts, at each checkpoint (first ``m`` requests)."""
    last = marks[-1]
    own = [f"billed % of none @{last}, ratio {model_ratio:g}"] if model_ratio is not None else []
    header = ["configuration", *(f"raw % of none @{m}" for m in marks), *(f"billed % of none @{m}" for m in marks),
              *own, "cache hits", "prefix breaks", "compactions", *(f"over budget @{m}" for m in marks),
              *(f"PAIR bad @{m}" for m in marks), *(f"retrievable @{m}" for m in marks), "stopped at"]
    cells = []
    for r in rows:
        cells.append([
            r["name"], *(_pct(r.get(f"ratio_at_{m}")) for m in marks),
            *(_pct(r.get(f"billed_ratio_at_{m}")) for m in marks),
            *([_pct(r.get(f"billed_model_ratio_at_{last}"))] if own else []),
            f"{r['cache_hit_pct']:.0f}%", str(r["prefix_breaks"]), str(r["compactions"]),
            *(str(r.get(f"over_budget_at_{m}", "–")) for m in marks),
            *(str(r.get(f"pair_bad_at_{m}", "–")) for m in marks),
            *(_percent(r.get(f"retrievable_pct_at_{m}")) for m in marks),
            "–" if r["stopped_at"] is None else str(r["stopped_at"]),
        ])
    return header, cells


def retention_rows(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Retention by probe distance, across compactions, and for facts planted just before or after one
    (within 5 turns; % of those probes, with their count)."""
    header = ["configuration", *(f"+{d}" for d in PROBE_DISTANCES), "all", "across ≥1 compaction",
              "planted ≤5 before a compaction", "planted ≤5 after one", "in view", "via handle", "stale", "lost"]
    cells = []
    for r in rows:
        by = r.get("retention_by_distance") or {}
        if not by:
            continue
        counts = r.get("retention", {})

        def share(key: str, r: dict[str, Any] = r) -> str:
            value, count = r.get(f"retrievable_pct_{key}"), r.get(f"probes_{key}", 0)
            return "–" if value is None else f"{value:.0f}% of {count}"

        cells.append([r["name"], *(("–" if str(d) not in by else f"{by[str(d)]:.0f}%") for d in PROBE_DISTANCES),
                      _percent(r.get("retrievable_pct")), share("across_compaction"),
                      share("planted_before_compaction"), share("planted_after_compaction"),
                      *(str(counts.get(k, 0)) for k in ("in_view", "handle", "stale", "lost"))])
    return header, cells


def dedupe_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["configuration", "total input", "offload only", "saved", "results → reference", "repeats flagged",
              "wrong references", "changed results deduped", "PAIR bad", "stopped at"]
    cells = [[c["name"], _n(c["total_input_tokens"]), _n(c["offload_only_tokens"]),
              f"{_n(c['tokens_saved'])} ({c['saved_pct']:.1f}%)", str(c["results_replaced_by_reference"]),
              str(c["repeated_calls_flagged"]), str(c["wrong_references"]), str(c["changed_results_deduped"]),
              str(c["pair_violation_requests"]), "–" if c["stopped_at"] is None else str(c["stopped_at"])]
             for c in data.get("configs", [])]
    return header, cells


def scale_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["measure", "value"]
    cells: list[list[str]] = []
    if "error" in data:
        return header, [["scale", data["error"]]]
    s = data["startup_s"]
    typer = s["python -c 'import typer'"]
    cells.append(["start-up: python -c pass / import typer / ctxagent --help",
                  f"{s['python -c pass']:.3f} s / {typer:.3f} s / {s['ctxagent --help']:.3f} s "
                  f"({s['ctxagent --help'] / typer:.2f}x import typer)"])
    for r in data["resume"]:
        cells.append([f"resume {r['messages']:,} messages ({r['transcript_mb']:.1f} MB transcript)",
                      f"{r['resume_ms']:.0f} ms warm in-process (median); cold process {r['cold_resume_ms']:.0f} ms, "
                      f"peak RSS {r['rss_peak_mb']:.0f} MB (after imports {r['rss_before_mb']:.0f} MB); "
                      f"`inspect transcript --json` {r['cli_inspect_transcript_json_s']:.2f} s"])
    o = data["offload"]
    for store, what in (("redact", "secret scan on (default)"), ("plain", "secret scan off")):
        cells.append([f"offload {o[f'{store}_bytes'] / 1e9:.2f} GB shell output, {what}",
                      f"{o[f'{store}_seconds']:.2f} s vs shell to a file {o['shell_to_file_s']:.2f} s "
                      f"({o[f'{store}_ratio_to_shell']:.2f}x); peak RSS {o[f'{store}_rss_peak_mb']:.0f} MB "
                      f"(+{o[f'{store}_rss_peak_mb'] - o[f'{store}_rss_before_mb']:.0f} MB over the process before "
                      "the call)"])
    return header, cells


def handles_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["workload", "tokens with handles", "tokens inline", "ratio", "exact answer", "notes"]
    if data.get("todo"):
        return header, [["2. grid pipeline", "–", "–", "–", "–", data["todo"]],
                        ["3. extraction", "–", "–", "–", "–", data["todo"]]]
    cells = []
    for key, label in (("grid", "2. grid pipeline"), ("extraction", "3. extraction")):
        row = data.get(key)
        if not isinstance(row, dict):
            cells.append([label, "–", "–", "–", "–", f"benchmarks/handles.py returned no {key!r} entry"])
            continue
        cells.append([label, f"{row.get('context_tokens_with_handles', 0):,} ({row.get('requests', '?')} requests)",
                      f"{row.get('tokens_inline', 0):,} ({row.get('inline', '')})", f"{row.get('ratio', 0):,}x",
                      str(row.get("exact_answer")), str(row.get("reference", ""))])
    return header, cells


def _flat(value: Any) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_flat(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:,.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown(header: Sequence[str], cells: Sequence[Sequence[str]]) -> str:
    def esc(x: str) -> str:
        return x.replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in cells]
    return "\n".join(lines)


def titled(tables: Sequence[tuple[str, Sequence[str], Sequence[Sequence[str]]]]) -> str:
    """``(title, header, rows)`` tables as Markdown, each under its bold title."""
    return "\n\n".join(f"**{title}**\n\n{markdown(header, rows)}" for title, header, rows in tables)


def rich_table(title: str, header: Sequence[str], cells: Sequence[Sequence[str]]) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False, header_style="bold")
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 else "right", overflow="fold")
    for row in cells:
        table.add_row(*row)
    return table


# --- targets ------------------------------------------------------------------------------------


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Where each target of issue 5 stands (met: True/False/None for not measured)."""
    out: list[dict[str, Any]] = []
    long = results.get("long_session", {})
    rows = long.get("rows", [])
    marks = long.get("marks", [])
    profiles = [r for r in rows if r["group"] == "profile"]
    ours = [r for r in rows if r["group"] in ("profile", "strategy")]

    def add(target: str, met: bool | None, detail: str) -> None:
        out.append({"target": target, "met": met, "detail": detail})

    if profiles:
        bad = [r["name"] for r in profiles if r["over_budget_requests"] or r["stopped_at"] is not None]
        add("long session never over budget (bundled profiles)", not bad,
            "every bundled pipeline stayed within the window" if not bad else "over or stopped: " + ", ".join(bad))
        alone = [f"{r['name']} (stopped at {r['stopped_at']})" for r in rows
                 if r["group"] == "strategy" and r["stopped_at"] is not None]
        if alone:
            add("(info) strategies alone that cannot bound the context", None, ", ".join(alone))
        for mark, limit in zip(marks, (0.25, 0.16), strict=False):
            values = [(r.get(f"ratio_at_{mark}"), r["name"]) for r in profiles if r.get(f"ratio_at_{mark}") is not None]
            if values:
                add(f"total input ≤ {limit:.0%} of no management at {mark} turns", all(v <= limit for v, _ in values),
                    _split(values, lambda v, limit=limit: v <= limit, "{:.1%}"))
        p50 = [(r["overhead_ms_p50"], r["name"]) for r in profiles]
        p99 = [(r["overhead_ms_p99"], r["name"]) for r in profiles]
        add("overhead ≤ 2 ms median per turn (bundled profiles)", all(v <= 2 for v, _ in p50),
            _split(p50, lambda v: v <= 2, "{:.2f} ms"))
        add("overhead ≤ 10 ms p99 per turn (bundled profiles)", all(v <= 10 for v, _ in p99),
            _split(p99, lambda v: v <= 10, "{:.2f} ms"))
        growth = [(r["overhead_ms_p50_last100"] / max(r["overhead_ms_p50_first100"], 0.01), r["name"])
                  for r in profiles]
        add("overhead flat as the transcript grows (p50 of the last 100 turns ≤ 2× the first 100)",
            all(g <= 2 for g, _ in growth), _split(growth, lambda g: g <= 2, "{:.1f}×"))
        kept = [(r.get("retrievable_pct", 100.0), r["name"]) for r in profiles]
        add("fact retention 100% retrievable at every probe distance (bundled profiles)",
            all(v >= 100 for v, _ in kept), _split(kept, lambda v: v >= 100, "{:.0f}%"))
    dedupe = results.get("repeated_calls", {}).get("configs", [])
    pair_bad = [r["name"] for r in ours if r["pair_violation_requests"]]
    pair_bad += [c["name"] + " (workload 4)" for c in dedupe if c["pair_violation_requests"]]
    if ours:
        add("zero PAIR violations for every ctxagent strategy and profile", not pair_bad,
            "none in any request" if not pair_bad else "violations: " + ", ".join(pair_bad))
    if dedupe:
        wrong = sum(c["wrong_references"] + c["changed_results_deduped"] for c in dedupe)
        add("(law) dedupe never stands in for a changed result", wrong == 0,
            f"{wrong} wrong references over {len(dedupe)} configurations")
    handles = results.get("handles", {})
    if handles.get("todo"):
        add("grid pipeline < 1,000 context tokens", None, handles["todo"])
        add("extraction ≥ 10× fewer tokens than inline", None, handles["todo"])
    elif handles:
        grid, extraction = handles.get("grid") or {}, handles.get("extraction") or {}
        if grid:
            tokens = grid.get("context_tokens_with_handles", 0)
            add("grid pipeline < 1,000 context tokens", tokens < 1000,
                f"{tokens:,} tokens: the sum of prompt tokens over its {grid.get('requests')} requests "
                "(benchmarks/handles.py; it reports no per-request peak)")
        if extraction:
            ratio = extraction.get("ratio", 0)
            add("extraction ≥ 10× fewer tokens than inline", ratio >= 10,
                f"{ratio}× ({extraction.get('context_tokens_with_handles', 0):,} vs "
                f"{extraction.get('tokens_inline', 0):,} inline, measured)")
    scale = results.get("scale", {})
    if scale and "error" not in scale:
        ten = next((r for r in scale["resume"] if r["messages"] == 10_000), None)
        if ten:
            add("resume of 10,000 messages ≤ 150 ms", ten["resume_ms"] <= 150,
                f"{ten['resume_ms']:.0f} ms warm in-process; {ten['cold_resume_ms']:.0f} ms in a cold process "
                "(includes loading the tokenizer)")
        s = scale["startup_s"]
        typer = s["python -c 'import typer'"]
        ratio = s["ctxagent --help"] / typer
        add("`ctxagent --help` ≤ 1.3× `python -c \"import typer\"` (issue 18; medians of pairs)", ratio <= 1.3,
            f"{ratio:.2f}× ({s['ctxagent --help']:.3f} s vs {typer:.3f} s, "
            f"{s.get('pairs', '?')} pairs)")
        o = scale["offload"]
        add(f"offloading {o['redact_bytes'] / 1e9:.2f} GB within 2× of the shell writing it to a file",
            o["redact_ratio_to_shell"] <= 2, f"{o['redact_ratio_to_shell']:.2f}× with the secret scan (default), "
            f"{o['plain_ratio_to_shell']:.2f}× without (medians of {o.get('pairs', 1)} pairs; `yes` output, the "
            "scanner's best case: benchmarks/offload_floor.py has the hard inputs)")
        add("offload peak memory < 100 MB", o["redact_rss_peak_mb"] < 100,
            f"peak RSS {o['redact_rss_peak_mb']:.0f} MB (process before the call: {o['redact_rss_before_mb']:.0f} MB)")
    return out


CACHE_TARGETS: list[tuple[str, str, Any, str]] = [  # (target, value key at checkpoint m, ok, format)
    ("cache-billed input ≤ 50% of no management's", "billed_ratio_at_{m}", lambda v: v <= 0.5, "{:.1%}"),
    ("raw input ≤ 30% of no management's", "ratio_at_{m}", lambda v: v <= 0.3, "{:.1%}"),
    ("never over budget", "over_budget_at_{m}", lambda v: v == 0, "{:d}"),
    ("0 PAIR violations", "pair_bad_at_{m}", lambda v: v == 0, "{:d}"),
    ("every planted fact in view or through a handle the view names", "retrievable_pct_at_{m}",
     lambda v: v >= 100, "{:.0f}%"),
]


def cache_workloads(results: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]], list[int]]]:
    """(workload label, rows, checkpoints) of every workload issue 9's targets apply to."""
    out = []
    long = results.get("long_session")
    if long and long.get("cache_marks"):
        out.append((f"coding session ({long['window'] // 1000}K)", long["rows"], long["cache_marks"]))
    for name, data in results.get("sized_sessions", {}).items():
        if name not in FITS:  # issue 9's targets are for long sessions; fits-20 has issue 34's own
            out.append((f"{name} ({data['window'] // 1000}K)", data["rows"], data["marks"]))
    return out


def cache_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 9's targets on every workload at each checkpoint (80 and the last turn), for the profiles
    default, batch and long-horizon on both paths: met (True/False) or not measured (None)."""
    out = []
    for workload, rows, marks in cache_workloads(results):
        chosen = [r for r in rows if r["group"] == "profile" and ISSUE9_PROFILES.match(r["name"])]
        for target, key, ok, fmt in CACHE_TARGETS:
            item: dict[str, Any] = {"target": target, "workload": workload, "met_at": {}, "details": []}
            for m in marks:
                values = [(r.get(key.format(m=m)), r["name"]) for r in chosen]
                if not values or all(v is None for v, _ in values):
                    item["met_at"][str(m)] = None
                    continue
                missing = [name for v, name in values if v is None]  # stopped before m, or no baseline
                have = [(v, name) for v, name in values if v is not None]
                item["met_at"][str(m)] = not missing and all(ok(v) for v, _ in have)
                detail = _split(have, ok, fmt) + (f"; not measured: {', '.join(missing)}" if missing else "")
                item["details"].append(f"@{m}: {detail}")
            out.append(item)
    return out


def cache_targets_rows(items: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    mark = {True: "met", False: "NOT met", None: "–"}
    marks = sorted({m for t in items for m in t["met_at"]}, key=int)
    header = ["target", "workload", *(f"@{m}" for m in marks), "where it stands"]
    return header, [[t["target"], t["workload"], *(mark[t["met_at"].get(m)] for m in marks), "; ".join(t["details"])]
                    for t in items]


def _split(values: Sequence[tuple[float, str]], ok: Any, fmt: str) -> str:
    """"met by A (x), B (y); not by C (z)" for per-profile values."""
    def show(items: Sequence[tuple[float, str]]) -> str:
        return ", ".join(f"{name.removeprefix('profile ')} {fmt.format(v)}" for v, name in items)

    good = [x for x in values if ok(x[0])]
    bad = [x for x in values if not ok(x[0])]
    parts = []
    if good:
        parts.append("met by " + show(good))
    if bad:
        parts.append("not by " + show(bad))
    return "; ".join(parts)


def targets_rows(items: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    mark = {True: "met", False: "NOT met", None: "–"}
    return ["target", "status", "where it stands"], [[t["target"], mark[t["met"]], t["detail"]] for t in items]


# --- plots --------------------------------------------------------------------------------------


def plots(results: dict[str, Any], series: dict[str, dict[str, Any]], out: Path) -> list[str]:
    """PNG plots: context tokens per turn (compactions marked) and retention by probe distance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    long = results["long_session"]
    window = long["window"]
    baseline = ("no manage", "offload")
    groups = [("ctxagent bundled profiles", lambda r: r["group"] == "profile" or r["name"].startswith(baseline)),
              ("ctxagent strategies alone", lambda r: r["group"] == "strategy" or r["name"].startswith("no manage")),
              ("peers (and ctxagent's default profile)", lambda r: r["group"] == "peer" or r["name"].startswith(
                  ("no manage", "profile default (")))]
    fig, axes = plt.subplots(len(groups), 1, figsize=(13, 5 * len(groups)), sharex=True)
    palette = plt.get_cmap("tab20").colors
    for ax, (title, pick) in zip(axes, groups, strict=True):
        for i, row in enumerate(r for r in long["rows"] if pick(r) and r["name"] in series):
            s = series[row["name"]]
            line, = ax.plot(range(1, len(s["tokens"]) + 1), s["tokens"], lw=1, label=_short(row["name"]),
                            color=palette[i % len(palette)])
            marks = [t for t in s["compaction_turns"] if t <= len(s["tokens"])]
            ax.plot(marks, [s["tokens"][t - 1] for t in marks], "v", ms=4, color=line.get_color())
            if row["stopped_at"] is not None:
                ax.plot([len(s["tokens"])], [s["tokens"][-1]], "x", ms=9, color=line.get_color())
        ax.axhline(window, color="k", ls="--", lw=0.8)
        ax.text(2, window * 1.01, f"context window {window:,}", fontsize=8)
        ax.set_ylim(0, window * 1.6)
        ax.set_title(f"{title}: input tokens per request (▼ compaction recorded, × run stopped)", fontsize=10)
        ax.set_ylabel("tokens")
        ax.legend(fontsize=7, ncol=2, loc="upper left")
    axes[-1].set_xlabel("turn (model request)")
    fig.tight_layout()
    path = out / "tokens_per_turn.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    written.append(str(path))

    fig, ax = plt.subplots(figsize=(11, 6))
    shown = [r for r in long["rows"] if r.get("retention_by_distance") and r["group"] != "strategy"]
    colors = plt.get_cmap("tab20").colors
    styles = {"baseline": ":", "profile": "-", "peer": "--"}
    for i, row in enumerate(shown):
        by = row["retention_by_distance"]
        xs = [d for d in PROBE_DISTANCES if str(d) in by]
        offset = (i - len(shown) / 2) * 0.5  # lines at the same value stay visible side by side
        ax.plot(range(len(xs)), [by[str(d)] + offset for d in xs], marker="os^Dv<>"[i % 7], ms=4, lw=1.2,
                ls=styles.get(row["group"], "-"), color=colors[i % len(colors)], label=_short(row["name"]))
    ax.set_xticks(range(len(PROBE_DISTANCES)), [f"+{d}" for d in PROBE_DISTANCES])
    ax.set_ylim(-5, 105)
    ax.set_xlabel("probe distance (turns after the fact was planted)")
    ax.set_ylabel("% of facts retrievable (in view or through a handle)")
    ax.set_title("Fact retention by probe distance (lines nudged apart vertically; dotted: baselines, "
                 "solid: ctxagent profiles, dashed: peers)", fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path = out / "retention.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    written.append(str(path))
    return written


def _short(name: str) -> str:
    return re.sub(r"\s+", " ", name)[:60]
