"""``python -m benchmarks``: what context management buys and what it costs, against peers, in one run.

Workloads (deterministic, seeded; model turns scripted, tool outputs synthetic): 1 long coding
session, 2 grid pipeline and 3 extraction (from benchmarks/handles.py when it exists), 4 repeated
calls, 5 fact retention (planted in workload 1), 6 scale (benchmarks/spine.py), 7 and 8 shell-1500
and logs-2300 (issue 9: raw and cache-billed input in a 32K window). Prints rich tables,
writes ``<out>/latest.json`` and PNG plots; ``--readme`` rewrites the results section of
benchmarks/README.md. ``--quick`` runs small sizes (under a minute); ``--live --model M`` adds the
retention questions against a real model when its key is in the environment.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SELF_RENDERING = (("quality", "quality"), ("delegation", "delegation"), ("mcp", "mcp_workflows"),
                  ("lessons", "lessons"), ("batch", "batch"), ("startup", "startup"),
                  ("offload_floor", "offload_floor"), ("resume_floor", "resume_floor"))  # result key, module
# Issue 18's floors: modules with run(quick) -> dict and tables(data), run when they are in the repository
# (they land from other branches). To add one: append (result key, module, what it measures) here.
FLOORS = (("offload_floor", "offload_floor", "the offload floor: secret scan against cat > file"),
          ("resume_floor", "resume_floor", "the resume floor: open and cold inspect of a realistic 10k session"))
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: 150 turns, a 32K window, 50 MB offload")
    parser.add_argument("--turns", type=int, default=None, metavar="N",
                        help="turns of workloads 1, 7 and 8 (default 500, 150 with --quick; at least 80, their "
                        "first checkpoint); tests/test_benchmarks.py runs fewer")
    parser.add_argument("--out", type=Path, help="where to write latest.json and the PNGs "
                        "(default benchmarks/results, benchmarks/results/quick with --quick)")
    parser.add_argument("--only", help="regex: run only the configurations whose name matches (workloads 1 and "
                        "7-8; 7-8 always run 'no management', their denominator)")
    parser.add_argument("--skip", action="append", default=[],
                        choices=["long", "sized", "repeated", "handles", "quality", "delegation", "startup", "scale",
                                 "peers", "plots", "mcp", "lessons", "batch", "floors"],
                        help="leave a part out (sized: workloads 7 and 8)")
    parser.add_argument("--cache-ratio", type=float, default=None, metavar="R",
                        help="cache-read price / input price for the cache-billed columns (default 0.1, issue 9's; "
                        "the model's own ratio from litellm's price map is reported beside it)")
    parser.add_argument("--readme", action="store_true", help="rewrite the results section of benchmarks/README.md")
    parser.add_argument("--live", action="store_true", help="also ask a real model (needs --model and its key)")
    parser.add_argument("--model", help="litellm model string for --live, e.g. openai/gpt-4o-mini")
    parser.add_argument("--api-base", help="base URL of an OpenAI-compatible server for --live")
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="run nothing: print the tables (and --readme, plots) from an earlier latest.json")
    return parser.parse_args(argv)


def handles_results(quick: bool) -> dict[str, Any]:
    """Workloads 2 and 3 from benchmarks/handles.py (the handles work), or a TODO when it is not there."""
    if importlib.util.find_spec("benchmarks.handles") is None:
        return {"todo": "TODO: benchmarks/handles.py (the handles work: grid pipeline, extraction) is not in the "
                        "repository yet; no numbers are reported for workloads 2 and 3"}
    module = importlib.import_module("benchmarks.handles")
    for name in ("run", "results", "measure", "bench"):
        fn = getattr(module, name, None)
        if callable(fn):
            try:
                data = fn(quick=quick)
            except TypeError:
                data = fn()
            return {"module": "benchmarks.handles", "source": name, **(data if isinstance(data, dict) else
                                                                       {"result": data})}
    return {"todo": "TODO: benchmarks/handles.py has no run(quick=...) returning a dict; workloads 2 and 3 not "
                    "reported"}


def floors(quick: bool, log: Any) -> dict[str, Any]:
    """Every floor module of :data:`FLOORS` that is in the repository: its ``run(quick)``; a failure is
    reported in its place (another branch's module must not stop the suite)."""
    out: dict[str, Any] = {}
    for key, module, what in FLOORS:
        if importlib.util.find_spec(f"benchmarks.{module}") is None:
            log(f"[yellow]{what}: benchmarks/{module}.py is not in the repository yet: not measured[/yellow]")
            continue
        log(f"[bold]issue 18: {what} (benchmarks/{module}.py)[/bold]")
        try:
            out[key] = importlib.import_module(f"benchmarks.{module}").run(quick)
        except Exception as error:
            out[f"{key}_error"] = f"benchmarks/{module}.py failed: {type(error).__name__}: {error}"
            log(f"[red]{out[f'{key}_error']}[/red]")
    return out


def floor_of(results: list[Any], rows: list[dict[str, Any]], window: int, reserved: int,
             ratio: float) -> dict[str, Any]:
    """The computed floor of a workload (benchmarks/cost_floor.py), with ``floor_ratio`` added to ``rows``."""
    from benchmarks import cost_floor

    base = cost_floor.base_series(results)
    found = cost_floor.floor(base.tokens, window, reserved, ratio) if base is not None else {}
    cost_floor.add(rows, found)
    return found


def sized_results(runs: list[tuple[str, Any, Any]], ratio: float, model_ratio: float | None) -> dict[str, Any]:
    """The JSON of workloads 7 and 8: per workload its sizes, checkpoints (80 and the last turn), rows
    and per-request series (input tokens, cached tokens), and the run directories removed."""
    import statistics

    from benchmarks import baselines, harness

    out: dict[str, Any] = {}
    for name, runner, base in runs:
        trace = runner.prep.trace
        baseline = next((r for r in runner.results if r.name == "no management"), None)
        marks = [min(80, len(trace.turns)), len(trace.turns)]
        sizes = trace.notes["output_tokens"]
        rows = [harness.summary(r, baseline, marks, ratio, model_ratio) for r in runner.results]
        compared = baselines.compare(runner.results, rows, ratio)
        out[name] = {
            "baselines": compared, "floor": floor_of(runner.results, rows, base.window, base.reserved, ratio),
            "turns": len(trace.turns), "window": base.window, "tool_schema_tokens": base.tool_tokens,
            "reserved": base.reserved, "marks": marks, "facts": len(trace.facts), "probes": len(trace.probes()),
            "output_tokens": {"target": trace.notes["size"], "min": min(sizes), "median": statistics.median(sizes),
                              "max": max(sizes), "outputs": len(sizes)},
            "seconds": runner.settle_seconds.get("_total_run_s"),
            "rows": rows,
            "series": {r.name: {"tokens": r.tokens, "cached": r.cached, "compaction_turns": r.compaction_turns}
                       for r in runner.results},
        }
        shutil.rmtree(runner.root, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    if args.turns is not None and args.turns < 80:
        raise SystemExit("--turns: at least 80 (the first checkpoint of workloads 7 and 8)")
    from rich.console import Console

    from benchmarks import harness, report, suite

    console = Console(width=max(Console().width, 220) if not sys.stdout.isatty() else None)
    err = Console(stderr=True)
    if args.render:
        return rerender(args, console)
    out = args.out or (HERE / "results" / ("quick" if args.quick else ""))
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict[str, Any] = {"mode": "quick" if args.quick else "full", "machine": report.machine(),
                               "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    live_problem = None
    if args.live:
        if not args.model:
            live_problem = "skipped: --live needs --model M"
        else:
            from benchmarks import live

            problem = None if args.api_base else live.key_problem(args.model)
            if problem:
                live_problem = f"skipped: no key for {args.model} ({problem})"
        if live_problem:
            err.print(f"live: {live_problem}", style="yellow", markup=False)
            results["live"] = {"skipped": live_problem}
    capture = args.live and live_problem is None
    ratio = harness.DEFAULT_CACHE_RATIO if args.cache_ratio is None else args.cache_ratio
    model_ratio = harness.model_cache_ratio(harness.MODEL)
    results.update(cache_ratio=ratio, model_cache_ratio=model_ratio, model=harness.MODEL)
    series: dict[str, dict[str, Any]] = {}
    runner = None
    if "long" not in args.skip:
        err.print("[bold]workloads 1 + 5: long coding session with planted facts[/bold]")
        runner, setups = suite.long_session(args.quick, peers_on="peers" not in args.skip, only=args.only,
                                            log=err.print, capture=capture, turns=args.turns)
        baseline = next((r for r in runner.results if r.name == "no management"), None)
        turns = len(runner.prep.trace.turns)
        marks = [turns * 2 // 3, turns] if args.quick else [turns // 2, turns]  # [100, 150], [250, 500]
        cache_marks = [80, len(runner.prep.trace.turns)]
        rows = [harness.summary(r, baseline, sorted({*marks, *cache_marks}), ratio, model_ratio)
                for r in runner.results]
        for r in runner.results:
            series[r.name] = {"tokens": r.tokens, "cached": r.cached, "compaction_turns": r.compaction_turns}
        base = setups["default"]
        from benchmarks import baselines

        compared = baselines.compare(runner.results, rows, ratio)
        results["long_session"] = {
            "baselines": compared, "floor": floor_of(runner.results, rows, base.window, base.reserved, ratio),
            "turns": len(runner.prep.trace.turns), "window": base.window, "tool_schema_tokens": base.tool_tokens,
            "reserved": base.reserved, "marks": marks, "cache_marks": cache_marks,
            "facts": len(runner.prep.trace.facts),
            "probes": len(runner.prep.trace.probes()), "settle_seconds": runner.settle_seconds,
            "peer_versions": __import__("benchmarks.peers").peers.available(),
            "rows": rows, "series": series,
        }
    if "sized" not in args.skip:
        err.print("[bold]workloads 7 + 8 (issue 9): shell-1500 and logs-2300 in a 32K window[/bold]")
        results["sized_sessions"] = sized_results(suite.sized_sessions(
            args.quick, peers_on="peers" not in args.skip, only=args.only, log=err.print, turns=args.turns),
            ratio, model_ratio)
    if "repeated" not in args.skip:
        err.print("[bold]workload 4: repeated calls[/bold]")
        results["repeated_calls"] = suite.repeated(args.quick, log=err.print)
    if "handles" not in args.skip:
        err.print("[bold]workloads 2 + 3: grid pipeline and extraction (benchmarks/handles.py)[/bold]")
        try:
            results["handles"] = handles_results(args.quick)
        except Exception as error:  # another engineer's module: report, do not die
            results["handles"] = {"todo": f"benchmarks/handles.py failed: {type(error).__name__}: {error}"}
    if "quality" not in args.skip:
        err.print("[bold]issue 11: cleaning, repeated reads, reachability (benchmarks/quality.py)[/bold]")
        from benchmarks import quality

        results["quality"] = quality.run(args.quick)
    if "delegation" not in args.skip:
        err.print("[bold]issue 12: delegation with and without message-size contracts (benchmarks/delegation.py)"
                  "[/bold]")
        from benchmarks import delegation

        results["delegation"] = delegation.run(args.quick)
    if "mcp" not in args.skip:
        err.print("[bold]issue 13: the handle workflows over MCP (benchmarks/mcp_workflows.py)[/bold]")
        from benchmarks import mcp_workflows

        try:
            results["mcp"] = mcp_workflows.run(args.quick)
        except (ImportError, RuntimeError) as error:  # the mcp extra missing, or a failed run
            results["mcp"] = {"todo": f"benchmarks/mcp_workflows.py failed: {type(error).__name__}: {error}"}
    if "lessons" not in args.skip:
        err.print("[bold]issue 15: ten related tasks with and without lessons (benchmarks/lessons.py)[/bold]")
        from benchmarks import lessons

        results["lessons"] = lessons.run(args.quick)
    if "batch" not in args.skip:
        err.print("[bold]issue 14: ctxagent batch with 1, 2 and 4 workers (benchmarks/batch.py)[/bold]")
        from benchmarks import batch

        results["batch"] = batch.run(args.quick, tasks=40)  # 200 (the count): python -m benchmarks.batch
    if "startup" not in args.skip:
        err.print("[bold]issue 16: a one-turn run on the real litellm path (benchmarks/startup.py)[/bold]")
        from benchmarks import startup

        results["startup"] = startup.run(args.quick)
    if "floors" not in args.skip:
        results.update(floors(args.quick, err.print))
    if "scale" not in args.skip:
        err.print("[bold]workload 6: scale (benchmarks/spine.py)[/bold]")
        from benchmarks import scale

        try:
            results["scale"] = scale.run_isolated(args.quick)
        except Exception as error:
            results["scale"] = {"error": f"{type(error).__name__}: {error}"}
    if capture and runner is not None:
        from benchmarks import live

        err.print(f"[bold]live: {args.model}[/bold]")
        results["live"] = live.run(args.model, runner.captured, api_base=args.api_base)
    if runner is not None:
        shutil.rmtree(runner.root, ignore_errors=True)  # the runs' output stores (copies of offloaded outputs)
    results["targets"] = report.targets(results)
    results["cache_targets"] = report.cache_targets(results)
    results["seconds"] = time.perf_counter() - started
    tables = render(results)
    for title, header, cells in tables:
        console.print(report.rich_table(title, header, cells))
        console.print()
    if args.live and live_problem:
        console.print(f"live: {live_problem}", markup=False)
    path = out / "latest.json"
    path.write_text(json.dumps(results, indent=1, default=str))
    written = [str(path)]
    if "plots" not in args.skip and "long_session" in results:
        if importlib.util.find_spec("matplotlib") is None:
            console.print("plots skipped: matplotlib is not installed (pip install -e '.[bench]')", markup=False)
        else:
            written += report.plots(results, series, out)
    if args.readme:
        update_readme(results, tables)
        written.append(str(HERE / "README.md"))
    console.print(f"wrote {', '.join(written)} in {results['seconds']:.0f} s")
    return results


def rerender(args: argparse.Namespace, console: Any) -> dict[str, Any]:
    """Tables, targets, plots and README from an earlier run's JSON (targets recomputed)."""
    from benchmarks import report

    results = json.loads(args.render.read_text())
    results["targets"] = report.targets(results)
    results["cache_targets"] = report.cache_targets(results)
    tables = render(results)
    for title, header, cells in tables:
        console.print(report.rich_table(title, header, cells))
        console.print()
    out = args.out or args.render.parent
    out.mkdir(parents=True, exist_ok=True)
    if "plots" not in args.skip and "long_session" in results and importlib.util.find_spec("matplotlib"):
        report.plots(results, results["long_session"]["series"], out)
    if args.readme:
        update_readme(results, tables)
    return results


def _workloads(results: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]], dict[str, Any]]]:
    """``(label, rows, data)`` of the coding session and the sized workloads that ran."""
    found = []
    if "long_session" in results:
        long = results["long_session"]
        found.append((f"coding session ({long['window'] // 1000}K)", long["rows"], long))
    found += [(f"{name} ({data['window'] // 1000}K)", data["rows"], data)
              for name, data in results.get("sized_sessions", {}).items()]
    return found


def render(results: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    from benchmarks import baselines, cost_floor, live, reach, report

    tables = []
    ratio, model_ratio = results.get("cache_ratio"), results.get("model_cache_ratio")
    billing = report.billing_note(ratio, model_ratio, results.get("model"))
    compared = [(f"coding session ({results['long_session']['window'] // 1000}K)", results["long_session"]["rows"],
                 results["long_session"]["baselines"])] if "baselines" in results.get("long_session", {}) else []
    compared += [(f"{name} ({data['window'] // 1000}K)", data["rows"], data["baselines"])
                 for name, data in results.get("sized_sessions", {}).items() if "baselines" in data]
    if compared:
        tables.append(baselines.table(compared, ratio if ratio is not None else 0.1))
    floors_ = [(label, rows, data.get("floor") or {}) for label, rows, data in _workloads(results)]
    if any(found for _, _, found in floors_):
        tables.append(cost_floor.table(floors_, ratio if ratio is not None else 0.1))
    if "long_session" in results:
        long = results["long_session"]
        title = (f"Workloads 1+5: long coding session, {long['turns']} turns, window {long['window']:,} tokens "
                 f"(tool schemas {long['tool_schema_tokens']:,}, reserve {long['reserved']:,}); {billing}")
        tables.append((title, *report.long_rows(long["rows"], long["marks"])))
        tables.append((f"Workload 5: fact retention, {long['facts']} facts planted to the end (one every 5 turns "
                       f"after the first 14), {long['probes']} probes (% retrievable: in view or in an output whose "
                       "handle the view names)", *report.retention_rows(long["rows"])))
        tables.append(("Workload 5: every fact at the last request: out of view, reached the way a model would have "
                       "to (benchmarks/reach.py)",
                       *reach.table_rows(long["rows"])))
    for name, data in results.get("sized_sessions", {}).items():
        size = data["output_tokens"]
        title = (f"Workload {report.SIZED_NUMBER.get(name, '?')} (issue 9): {name}, {data['turns']} turns, window "
                 f"{data['window']:,} tokens, {size['outputs']} tool outputs of {size['min']:,}-{size['max']:,} "
                 f"tokens (median {size['median']:,.0f}), {data['facts']} facts planted to the end, "
                 f"{data['probes']} probes; {billing}")
        tables.append((title, *report.sized_rows(data["rows"], data["marks"], model_ratio)))
        tables.append((f"Workload {report.SIZED_NUMBER.get(name, '?')}: fact retention by distance and across "
                       "compactions", *report.retention_rows(data["rows"])))
        tables.append((f"Workload {report.SIZED_NUMBER.get(name, '?')}: every fact at the last request: out of view, "
                       "reached the way a model would have to", *reach.table_rows(data["rows"])))
    if "repeated_calls" in results:
        rc = results["repeated_calls"]
        tables.append((f"Workload 4: repeated calls, {rc['turns']} turns ({rc['calls_repeating_earlier']} calls repeat "
                       f"an earlier one, {rc['repeats_with_changed_result']} of them with a changed result; identical "
                       f"loop at turns {rc['loop_turns'][0]}-{rc['loop_turns'][1]})", *report.dedupe_rows(rc)))
    if "handles" in results:
        tables.append(("Workloads 2+3: grid pipeline and extraction", *report.handles_rows(results["handles"])))
    for key, module in SELF_RENDERING:
        if key in results:
            tables += importlib.import_module(f"benchmarks.{module}").tables(results[key])
    if "scale" in results:
        tables.append(("Workload 6: scale", *report.scale_rows(results["scale"])))
    if results.get("live", {}).get("configs"):
        tables.append((f"Live: {results['live']['model']}", *live.rows(results["live"])))
    tables.append(("Targets (issue 5)", *report.targets_rows(results["targets"])))
    if results.get("cache_targets"):
        tables.append((f"Targets (issue 9): profiles default, batch and long-horizon (both paths), cache-billed at "
                       f"cache-read ratio {ratio}", *report.cache_targets_rows(results["cache_targets"])))
    return tables


def update_readme(results: dict[str, Any], tables: list[tuple[str, list[str], list[list[str]]]]) -> None:
    from benchmarks import baselines, report

    m = results["machine"]
    packages = ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v)
    missing = ", ".join(k for k, v in m["packages"].items() if not v)
    parts = [BEGIN, "",
             f"Run {results['started']} ({results['mode']} mode, {results['seconds']:.0f} s) on: {m['nproc']} cores "
             f"({m['cpu']}), {m['memory']} memory, {m['os']}, Python {m['python']}.", "",
             f"Packages: {packages}." + (f" Not installed: {missing}." if missing else ""), "",
             baselines.HOW_TO_READ]
    for title, header, cells in tables:
        parts += [f"**{title}**", "", report.markdown(header, cells), ""]
    parts.append(END)
    path = HERE / "README.md"
    text = path.read_text(encoding="utf-8") if path.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + "\n".join(parts) + text[text.index(END) + len(END):]
    else:
        text += "\n" + "\n".join(parts) + "\n"
    path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
