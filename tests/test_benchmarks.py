"""The benchmark suite's quick mode: the laws hold in every request of every ctxagent strategy and
bundled profile (PAIR, BUDGET, HEAD), dedupe never stands in for a changed result, and the JSON and
PNG files are written. Target numbers (ratios, milliseconds) are reported, not asserted here."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import sys
from pathlib import Path

import pytest

from ctxagent.profile import load_profile
from ctxagent.tokens import PER_REQUEST

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `benchmarks` is a top-level folder of the repository, not installed
    sys.path.insert(0, str(ROOT))
bench = importlib.import_module("benchmarks.__main__")
# the quick run below drives ~70 real sessions (fsync per transcript append): on a loaded 2-core machine
# it can take over the default 120 s without anything being wrong
# one xdist worker runs this module (`make test` uses --dist loadfile), so the quick run below is made once:
# with --dist load both workers made it (2 x ~1 min of CPU, measured)
pytestmark = pytest.mark.timeout(600)  # under coverage (CI) on a busy machine too
harness = importlib.import_module("benchmarks.harness")
workloads = importlib.import_module("benchmarks.workloads")


# Turns of workloads 1, 7 and 8 here (150 in `python -m benchmarks --quick`; 80, their first checkpoint, is the
# least `--turns` takes): in a 32K window every bundled profile compacts from turn 8-18 on and no management is
# over the window by turn 19, so 80 turns check the same laws through many compactions; the quick fixture
# took 175 s of CPU at 150 turns, ~56 s at 100 and ~45 s at 80 (workloads 1 + 7 + 8, measured)
TURNS = 80


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """One quick run of the pure workloads (1, 4, 5, and 2+3 when benchmarks/handles.py exists)."""
    out = tmp_path_factory.mktemp("bench")
    results = bench.main(["--quick", "--turns", str(TURNS), "--out", str(out), "--skip", "scale", "--skip", "startup",
                          "--skip", "delegation", "--skip", "mcp", "--skip", "batch",
                          "--skip", "floors"])  # tests/test_mcp.py, test_batch.py
    return results, out


def ours(results: dict) -> list[dict]:
    return [r for r in results["long_session"]["rows"] if r["group"] in ("strategy", "profile")]


def test_quick_mode_runs_every_ctxagent_strategy_and_profile(quick: tuple[dict, Path]) -> None:
    from ctxagent.strategies import registry  # noqa: F401 (declares every strategy)
    from ctxagent.strategies.step import known

    results, _ = quick
    assert results["long_session"]["turns"] == TURNS and results["long_session"]["marks"] == [TURNS * 2 // 3, TURNS]
    names = {r["name"] for r in ours(results)}
    assert {f"{s} alone" for s in known()} <= names
    assert any(n.startswith("profile default") for n in names)
    assert any(n.startswith("profile batch") for n in names)


def test_no_pair_violation_in_any_request_of_a_ctxagent_strategy(quick: tuple[dict, Path]) -> None:
    results, _ = quick
    bad = {r["name"]: r["pair_examples"] for r in ours(results) if r["pair_violation_requests"]}
    bad.update({c["name"]: "workload 4" for c in results["repeated_calls"]["configs"] if c["pair_violation_requests"]})
    assert not bad


def test_no_ctxagent_strategy_crashes(quick: tuple[dict, Path]) -> None:
    results, _ = quick
    crashed = {r["name"]: r["error"] for r in ours(results) if (r["error"] or "").startswith("crash")}
    crashed.update({c["name"]: c["error"] for c in results["repeated_calls"]["configs"]
                    if (c["error"] or "").startswith("crash")})
    assert not crashed


def test_never_over_budget_and_head_kept(quick: tuple[dict, Path]) -> None:
    """No ctxagent request is ever over the window; the bundled pipelines never stop the session.
    (A strategy alone that cannot bound the context stops with a clear overflow, never sends.)"""
    results, _ = quick
    rows = ours(results)
    assert not [r["name"] for r in rows if r["over_budget_requests"]]
    assert not [r["name"] for r in rows if r["head_violation_requests"]]
    assert not [(r["name"], r["error"]) for r in rows if r["group"] == "profile" and r["stopped_at"] is not None]
    for r in rows:
        if r["stopped_at"] is not None:
            assert r["error"].startswith("context overflow"), r


def test_dedupe_never_replaces_a_changed_result(quick: tuple[dict, Path]) -> None:
    results, _ = quick
    configs = results["repeated_calls"]["configs"]
    assert configs and results["repeated_calls"]["repeats_with_changed_result"] > 0
    for c in configs:
        assert c["wrong_references"] == 0 and c["changed_results_deduped"] == 0 and c["unresolved_handles"] == 0, c
    assert any(c["results_replaced_by_reference"] > 0 for c in configs)


def test_issue11_quality_numbers_hold(quick: tuple[dict, Path]) -> None:
    """Terminal output costs what its plain text costs; repeat reads are answered by notes; every
    planted fact is reachable (in view, by a named handle, or one recall) under the quick profiles."""
    quality = quick[0]["quality"]
    for row in quality["cleaning"].values():
        assert row["context_tokens"] == row["plain_tokens"] < row["raw_tokens"] and row["last_line_visible"]
    reads = quality["repeated_reads"]
    notes, plain = reads["with ledger notes"], reads["without (repeat_notes: false)"]
    assert notes["answered_by_note"] > 0 == plain["answered_by_note"]
    assert notes["prompt_tokens"] < plain["prompt_tokens"]
    reach = quality["reachability"]
    assert reach["rows"] and all(r["reachable"] == reach["facts"] for r in reach["rows"].values())
    assert all(r["recall_cost_pct"] <= 2.0 for r in reach["rows"].values())


def test_every_configuration_reports_cache_billed_input(quick: tuple[dict, Path]) -> None:
    """Issue 9: raw and cache-billed input for every configuration, peers included, on the long session
    and on both sized workloads, checked against the prefix model on the no-management baseline."""
    results, _ = quick
    assert results["cache_ratio"] == harness.DEFAULT_CACHE_RATIO
    sized = results["sized_sessions"]
    assert set(sized) == {*workloads.SIZED, *workloads.FITS}
    for rows in [results["long_session"]["rows"], *(d["rows"] for d in sized.values())]:
        for r in rows:
            assert r["cached_input_tokens"] <= r["total_input_tokens"], r["name"]
            expected = r["total_input_tokens"] - (1 - r["cache_ratio"]) * r["cached_input_tokens"]
            assert r["billed_input_tokens"] == pytest.approx(expected), r["name"]
    for name, data in sized.items():
        if name in workloads.FITS:  # issue 34's short session: its own test below
            continue
        assert data["turns"] == TURNS and data["marks"] == [80, TURNS] and data["facts"] >= TURNS // 8
        low, high = (workloads.SIZED[name][1] * f for f in (0.9, 1.1))
        assert low <= data["output_tokens"]["min"] and data["output_tokens"]["max"] <= high
        none = next(r for r in data["rows"] if r["name"] == "no management")
        assert none["billed_ratio_at_80"] == 1.0 and none["prefix_breaks"] == 0
        series = data["series"]["no management"]
        # append-only: request n caches all of request n-1 but its PER_REQUEST priming tokens
        assert series["cached"][0] == 0
        assert all(c == t - PER_REQUEST for c, t in zip(series["cached"][1:], series["tokens"], strict=False))
        profiles = [r for r in data["rows"] if r["group"] == "profile"]
        assert profiles
        assert not [r["name"] for r in profiles if r["over_budget_requests"] or r["pair_violation_requests"]]
        if importlib.util.find_spec("langchain_core") is not None:
            assert any(r["group"] == "peer" for r in data["rows"])
    kinds = {(t["target"], t["workload"]) for t in results["cache_targets"]}
    assert len(kinds) == 5 * 3 and all(set(t["met_at"]) == {"80", str(TURNS)} for t in results["cache_targets"])


def test_facts_are_probed_across_compactions_at_every_distance(quick: tuple[dict, Path]) -> None:
    """Issue 18: facts planted to the end, probed from 1 turn on; the profiles' probes cross compactions,
    and facts planted just before a compaction are probed after it (retention measured, not asserted)."""
    long = quick[0]["long_session"]
    profiles = [r for r in long["rows"] if r["group"] == "profile"]
    assert profiles and all({"1", "2", "5"} <= set(r["retention_by_distance"]) for r in profiles)
    assert all(r["probes_across_compaction"] > 0 for r in profiles if r["compactions"])
    assert any(r["probes_planted_before_compaction"] > 0 for r in profiles)


def test_reach_counts_the_calls_a_model_would_need(quick: tuple[dict, Path]) -> None:
    """Issue 18: for every fact out of view at the last request, the handles named, the stubs of the same
    call, one grep_output and one recall; the calls needed are reported for profiles and peers."""
    rows = quick[0]["long_session"]["rows"]
    checked = [r for r in rows if "reach_one_call_pct" in r]
    assert {r["group"] for r in checked} >= {"baseline", "profile"}
    assert not [r for r in rows if r["group"] == "strategy" and "reach_one_call_pct" in r]
    for r in checked:
        assert r["reach_facts"] > 0 and r["reach_one_call_pct"] <= r["reach_any_pct"] <= 100
        assert r["reach_one_call_pct"] <= 100 and r["reach_turns"] == [quick[0]["long_session"]["turns"]]
    minimal = next(r for r in checked if r["name"] == "profile minimal (both paths)")
    assert minimal["reach_probes_out_of_view"] > 0 and minimal["reach_named_median"] is not None


def test_baselines_a_user_could_run(quick: tuple[dict, Path]) -> None:
    """Issue 18: savings stated against truncation (the minimal profile) and the best runnable peer; the
    unmanaged bound's requests over the window are counted; peers also run with ctxagent's offloading."""
    results, _ = quick
    for data in [results["long_session"], *results["sized_sessions"].values()]:
        info = data["baselines"]
        fits = data["turns"] == workloads.FITS["fits-20"][2]  # a session that never comes near the window
        assert info["minimal"] == "profile minimal (both paths)" and (info["unmanaged_over_window"] > 0) != fits
        minimal = next(r for r in data["rows"] if r["name"] == info["minimal"])
        assert minimal["ratio_vs_minimal"] == pytest.approx(1.0)
        if importlib.util.find_spec("langchain") is not None:
            assert info["best_peer"] and any("+ offload" in r["name"] for r in data["rows"])
            best = next(r for r in data["rows"] if r["name"] == info["best_peer"])
            assert best["over_budget_requests"] == 0 and best["stopped_at"] is None
        if importlib.util.find_spec("deepagents") is not None:
            assert any(r["name"].startswith("deepagents (eviction at") for r in data["rows"])


def test_readme_gets_a_how_to_read_note(quick: tuple[dict, Path], tmp_path: Path, monkeypatch) -> None:
    results, _ = quick
    monkeypatch.setattr(bench, "HERE", tmp_path)
    bench.update_readme(results, bench.render(results))
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "**How to read this.**" in text and "Savings against what a user could run" in text
    assert text.index("Savings against") < text.index("Workloads 1+5")  # the baselines first


def test_floor_modules_are_optional() -> None:
    """The floors (benchmarks/offload_floor.py, resume_floor.py) run when present; absent, nothing fails."""
    absent = [m for _, m, _ in bench.FLOORS if importlib.util.find_spec(f"benchmarks.{m}") is None]
    if not absent:
        pytest.skip("every floor module is in the repository (they run in their own tests)")
    logged: list[str] = []
    out = bench.floors(True, logged.append) if len(absent) == len(bench.FLOORS) else {}
    assert out == {} and len(logged) == len(absent)
    assert all("not in the repository yet" in line for line in logged)


def test_coding_session_plants_facts_to_the_end() -> None:
    trace = workloads.coding_session(150)
    turns = sorted(f.turn for f in trace.facts)
    assert turns[0] == 3 and turns[-1] > 140 and len(trace.facts) > 30
    assert all(b - a <= 5 for a, b in itertools.pairwise(turns))
    for fact in trace.facts:
        text = "\n".join([*(t.user or "" for t in trace.turns if t.number == fact.turn),
                          *(c.output for t in trace.turns if t.number == fact.turn for c in t.calls)])
        assert fact.value in text, fact
    distances = {d for _, _, d in trace.probes()}
    assert {1, 2, 5, 100} <= distances


def test_json_and_plots_are_written(quick: tuple[dict, Path]) -> None:
    _, out = quick
    data = json.loads((out / "latest.json").read_text())
    assert data["mode"] == "quick" and data["targets"] and data["machine"]["python"]
    assert "todo" in data["handles"] or len(data["handles"]) > 1  # numbers, or an explicit TODO: never faked
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not installed (the `bench` extra): no PNG plots")
    for name in ("tokens_per_turn.png", "retention.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_live_without_a_key_is_skipped_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = bench.main(["--quick", "--out", str(tmp_path), "--live", "--model", "openai/gpt-4o-mini",
                          "--skip", "long", "--skip", "sized", "--skip", "repeated", "--skip", "handles",
                          "--skip", "scale", "--skip", "quality", "--skip", "startup", "--skip", "delegation",
                          "--skip", "mcp", "--skip", "lessons", "--skip", "batch", "--skip", "floors",
                          "--skip", "peers", "--skip", "plots"])
    assert results["live"]["skipped"].startswith("skipped: no key for openai/gpt-4o-mini (missing OPENAI_API_KEY")
    assert "skipped: no key for openai/gpt-4o-mini" in capsys.readouterr().out


def test_live_asks_the_model_and_lets_it_read_a_handle(fake_openai, tmp_path: Path) -> None:
    """The live path end to end against the local fake server: the question, a grep_output call on a
    handle of the run's real output store, the answer checked, the provider's usage counted."""
    from ctxagent.sessions.store import OutputStore
    from ctxagent.tools.offload import OffloadPolicy

    live = importlib.import_module("benchmarks.live")
    store = OutputStore(tmp_path / "outputs")
    store.put_bytes("@port1", b"HOST=a\nSERVICE_PORT = 8443\n")
    fact = workloads.Fact("service port", "number", "8443", 3, "tool:read")
    view = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"},
            {"role": "user", "content": "[ctxagent masked an old tool result: read_file(path=settings.py), 9 tokens; "
                                        "full result: @port1 (read_output or grep_output)]"}]
    server = fake_openai([{"tool_calls": [{"id": "g1", "name": "grep_output",
                                           "arguments": {"handle": "@port1", "pattern": "PORT"}}]},
                          {"content": "8443"}])
    captured = {"cfg": {"store": store, "policy": OffloadPolicy(limit_tokens=20_000), "probes": [(9, fact, view)]}}
    data = live.run("openai/fake", captured, api_base=server.base_url)
    row = data["configs"][0]
    assert (row["asked"], row["correct"]) == (1, 1) and row["prompt_tokens"] > 0
    assert "SERVICE_PORT = 8443" in json.dumps(server.requests[1]["messages"][-1])


# --- the harness itself ---------------------------------------------------------------------------


def test_workloads_are_deterministic() -> None:
    a, b = workloads.coding_session(40, seed=3), workloads.coding_session(40, seed=3)
    assert [[c.output for c in t.calls] for t in a.turns] == [[c.output for c in t.calls] for t in b.turns]
    assert workloads.repeated_calls(60).notes == workloads.repeated_calls(60).notes


def test_no_management_baseline_sees_every_message_and_every_fact() -> None:
    prep = harness.prepare(workloads.coding_session(60), load_profile("default").system_prompt)
    result = harness.drive(prep, harness.PlainManager("none", prep.raw), group="baseline", window=10**9,
                           tool_tokens=0, reserved=0)
    assert result.turns == 60 and result.pair_violation_requests == 0 and result.head_violation_requests == 0
    assert result.tokens == sorted(result.tokens)  # nothing is ever removed
    assert {p["status"] for p in result.probes} == {"in_view"}


def test_fake_summarizer_counts_and_keeps_pins_and_json() -> None:
    fake = harness.FakeSummarizer()
    prompt = ("Summarize.\nCopy each of these pinned facts verbatim into your answer:\n- PIN-1\n\n"
              "#3 result of shell(command=ls): path /srv/a.toml\n#4 assistant: ok")
    reply = fake(prompt, 200)
    assert "PIN-1" in reply and "/srv/a.toml" in reply and fake.calls == 1 and fake.tokens_in > fake.tokens_out > 0
    assert json.loads(fake("Reply with one JSON object and nothing else; state document\n\nx 1", 100))


def _msgs(*texts: str) -> list[dict]:
    return [{"role": "system", "content": "sys"}, *({"role": "user", "content": t} for t in texts)]


def test_cached_prefix_first_request_caches_nothing() -> None:
    assert harness.cached_prefix(None, _msgs("a"), [5, 7], 100) == (0, 0)


def test_cached_prefix_identical_request_caches_everything_with_the_schemas() -> None:
    assert harness.cached_prefix(_msgs("a", "b"), _msgs("a", "b"), [5, 7, 11], 100) == (3, 123)


def test_cached_prefix_append_only_caches_the_previous_request() -> None:
    assert harness.cached_prefix(_msgs("a"), _msgs("a", "b", "c"), [5, 7, 11, 13], 100) == (2, 112)


def test_cached_prefix_stops_at_an_early_change() -> None:
    """A rewritten early message (a masked tool result) ends the cached prefix there for the rest."""
    assert harness.cached_prefix(_msgs("a", "b", "c"), _msgs("A", "b", "c", "d"), [5, 7, 11, 13, 17], 100) == (1, 105)
    changed_system = [{"role": "system", "content": "other"}, {"role": "user", "content": "a"}]
    assert harness.cached_prefix(_msgs("a"), changed_system, [5, 7], 100) == (0, 0)  # no prefix: no schemas


def test_billed_counts_cached_tokens_at_the_ratio() -> None:
    assert harness.billed([1000, 2000], [0, 1000], 0.1) == pytest.approx(1000 + 1000 + 100)
    assert harness.model_cache_ratio("openai/gpt-4o-mini") in (None, pytest.approx(0.5))


def test_ctxagent_is_driven_through_the_real_runner(tmp_path: Path) -> None:
    """ctxagent's rows come from the real Runner on a real session: the transcript holds every request's
    reply and every compaction the harness counted, the runner's own account of each request (tokens,
    cached prefix) agrees with the harness's, and offloaded outputs resolve in the session's store."""
    from ctxagent.sessions import records

    suite = importlib.import_module("benchmarks.suite")
    profile = load_profile("default")
    prep = harness.prepare(workloads.sized_session("logs-2300", 60), profile.system_prompt)
    runner = suite.Runner(prep, True, tmp_path)
    s = suite.setup("default", profile, True, tmp_path, window=suite.SIZED_WINDOW)
    run = runner.ctxagent_run("profile default (batch)", s, "batch")
    result = run.drive(group="profile")
    assert result.turns == 60 and len(result.tokens) == 60 and result.stopped_at is None
    assert result.extra["runner_disagreements"] == 0 and result.compaction_turns
    assert result.over_budget_requests == 0 and result.pair_violation_requests == 0
    items = run.session.transcript.load()
    replies = [r for r in items if isinstance(r, records.MessageRecord) and r.message["role"] == "assistant"]
    assert len(replies) == 60
    assert sum(isinstance(r, records.CompactionRecord) for r in items) == result.extra["compaction_records"] > 0
    outputs = [r for r in items if isinstance(r, records.OutputRecord)]
    assert outputs and all(run.store.path_of(r.handle).is_file() for r in outputs)
    assert any(p["status"] == "handle" for p in result.probes)  # a fact reached through the real store
    from ctxagent.agent.peek import next_request

    with harness.data_dir(run.data):  # a real session: ctxagent itself reads back the last request sent
        last = next_request(run.session).last
    assert run.model.sent is not None and [e.message for e in last] == run.model.sent[1]


def test_a_strategy_that_cannot_bound_the_context_stops_with_the_runners_overflow(tmp_path: Path) -> None:
    suite = importlib.import_module("benchmarks.suite")
    profile = load_profile("default")
    prep = harness.prepare(workloads.sized_session("logs-2300", 40), profile.system_prompt)
    runner = suite.Runner(prep, True, tmp_path)
    s = suite.setup("default", profile, True, tmp_path, window=suite.SIZED_WINDOW)
    result = runner.ctxagent("dedupe alone", "strategy", s, "interactive", suite.steps_of("dedupe"))
    assert result.stopped_at is not None and result.error.startswith("context overflow")
    assert result.turns == result.stopped_at - 1 and result.over_budget_requests == 0


def test_delegation_benchmark_contracts_keep_the_orchestrator_small():
    """Issue 12's workload: with contracts the orchestrator answers, small, every fact reachable;
    inline results (five 55K-token results at once) could not even be sent in a 128K window until the
    results of one reply were settled together (issue 34): now cut to previews, at 15x the contracts' cost."""
    from benchmarks import delegation

    data = delegation.run()
    rows = {r["config"]: r for r in data["rows"]}
    assert data["rows"][0]["raw_result_tokens_total"] > 1_000_000
    contracts, inline = rows["contracts"], rows["inline, one at a time"]
    assert contracts["status"] == "answered" and contracts["facts_reachable"] == 20
    assert contracts["peak_context_tokens"] * 5 < inline["peak_context_tokens"]
    assert contracts["total_input_tokens"] * 10 < inline["total_input_tokens"]
    assert rows["inline"]["status"] == "answered" and rows["inline"]["peak_context_tokens"] < 128_000
    assert contracts["total_input_tokens"] * 10 < rows["inline"]["total_input_tokens"]


def test_issue34_every_bundled_profile_bills_at_most_truncation_and_is_reported_beside_the_floor(
        quick: tuple[dict, Path]) -> None:
    """Issue 34: per workload, the computed floor, and every bundled profile's billed input as % of
    truncation and of the floor; no bundled profile bills more than plain truncation, and none
    rewrites a session that never comes near the window (fits-20)."""
    results, _ = quick
    workloads = {"coding": results["long_session"], **results["sized_sessions"]}
    assert set(workloads) == {"coding", "shell-1500", "logs-2300", "fits-20"}
    for name, data in workloads.items():
        floor = data["floor"]
        assert floor["billed_input_tokens"] > 0 and floor["requests"] == data["rows"][0]["turns"], name
        for row in data["rows"]:
            if row["group"] != "profile":
                continue
            assert row["floor_ratio"] is not None and row["billed_ratio_vs_minimal"] is not None, (name, row["name"])
            if name == "fits-20":  # nothing rewritten: it differs from unmanaged by the tool schemas alone
                assert row["prefix_breaks"] == 0, row["name"]
            else:
                assert row["billed_ratio_vs_minimal"] <= 1.0, (name, row["name"], row["billed_ratio_vs_minimal"])
