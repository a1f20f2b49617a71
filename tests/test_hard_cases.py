"""Issue 34, hard cases tried as a new user would, each pinned by a test named after its failure:
what summaries keep, parallel results that together overflow the window, and a calibration that
shrank the budget below the request itself. (The loop guard's polling case is in test_activity.py.)

The CLI runs in process against a local OpenAI-compatible server over real litellm HTTP where a
provider's usage report is the point; elsewhere with the scripted model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from clihelp import call, ctxagent, run_cli, script
from ctxagent.messages import tool_call
from ctxagent.profile import StrategyConfig
from ctxagent.sessions import records
from ctxagent.sessions.session import Session
from ctxagent.strategies.facts import values_in
from ctxagent.strategies.pipeline import Engine
from ctxagent.strategies.settle import SettleStep
from ctxagent.tokens import PER_REQUEST, calibration, count_messages, count_tools, reported_prompt
from test_strategies import _entries, assert_laws, ctx_for


def _profile(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- calibration --------------------------------------------------------------------------------


def test_a_server_reporting_only_uncached_prompt_tokens_cannot_shrink_the_budget(tmp_path, fake_openai):
    """A server that reported only the uncached part of the prompt as ``prompt_tokens`` drove the
    calibration to its 0.5 floor: a 25,032-token request was shown as 13,713/24,000, the compaction
    trigger never fired and the server rejected it. Now every request fits the window as we count it,
    and compaction fires."""
    window = 24_000
    turns = [{"content": None, "usage": {"prompt_tokens": "uncached"},
              "tool_calls": [{"id": f"c{i}", "name": "shell", "arguments": {"command": f"seq {i}00000 {i}01100"}}]}
             for i in range(1, 13)]
    server = fake_openai([*turns, {"content": "done", "usage": {"prompt_tokens": "uncached"}}])
    profile = _profile(tmp_path, f"context_window: {window}\nmax_output_tokens: 1000\nretries: 0\n"
                                 "max_turns: 40\npermissions: {kinds: {exec: allow}}\n"
                                 "pipelines:\n  batch:\n    - strategy: truncate\n")
    out = run_cli("run", "--batch", "--json", "--session", "uncached", "--model", "openai/fake", "--api-base",
                  server.base_url, "--profile", profile, "count")
    assert out.exit_code == 0, out.stdout + out.stderr
    reported = [r for r in Session.at("uncached").transcript.records() if isinstance(r, records.UsageRecord)]
    assert any(r.cached_tokens > r.prompt_tokens for r in reported)  # the server's reports: cached apart
    sizes = [PER_REQUEST + count_messages(body["messages"]) + count_tools(body.get("tools") or [])
             for body in server.requests]
    assert max(sizes) + 1000 <= window, sizes  # as we count it, with the reply's reserve
    kinds = [r for r in Session.at("uncached").transcript.records() if isinstance(r, records.CompactionRecord)]
    assert kinds, "the compaction trigger never fired"


def test_a_provider_count_never_lowers_the_estimate_and_cached_tokens_reported_apart_count():
    assert calibration(13_713, 25_032) == 1.0  # lower: our own count stands
    assert calibration(30_000, 25_000) == 1.2  # higher: the provider's tokenizer counts more
    assert calibration(90_000, 25_000) == 2.0 and calibration(0, 25_000) == 1.0
    assert reported_prompt(700, 24_332) == 25_032  # cached reported apart from prompt_tokens: added back
    assert reported_prompt(25_032, 24_332) == 25_032  # OpenAI: cached tokens are a part of prompt_tokens
    assert reported_prompt(300, 20_000, 4_732) == 25_032  # Anthropic's reads and writes apart


# --- parallel results of one reply ----------------------------------------------------------------

NUMBERS = ("python3 -c \"import random; random.seed({seed}); "
           "print(' '.join(str(random.randint(0, 99999)) for _ in range({n})))\"")


def _parallel(tmp_path: Path, name: str, counts: list[int], *extra: dict) -> object:
    """A reply with one shell call per count (``n`` random 5-digit numbers: ~3 tokens each), then
    ``extra`` replies and an answer; run on ``minimal`` in a 32K window."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    calls = [call(f"p{i}", "shell", command=NUMBERS.format(seed=i, n=n)) for i, n in enumerate(counts)]
    model = script(tmp_path / f"{name}.yaml", [{"tool_calls": calls}, *extra, {"content": "answered"}])
    out = ctxagent("run", "--batch", "--json", "--session", name, "--model", model, "--profile", "minimal",
                   "--context-window", "32000", "--allow", "shell", "go", cwd=work)
    return out


def _context(session: str) -> list[dict]:
    out = ctxagent("inspect", "context", "--session", session, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["messages"]


def test_four_results_under_the_offload_limit_that_overflow_together_are_settled_and_the_run_answers(tmp_path):
    """On ``minimal``, four results of ~6,900 tokens each in one reply (each under the 8,000-token
    offload limit, together over the window) ended the run with exit 5 and nothing offloaded. The
    results of one reply are settled together: the largest are cut to previews (their full output
    stored under their handles) until the rest fits, and the run answers."""
    read_back = {"tool_calls": [call("r", "read_output", handle="@p1", start_line=2, end_line=2)]}
    out = _parallel(tmp_path, "four", [2300, 2320, 2280, 2290], read_back)
    assert out.returncode == 0 and json.loads(out.stdout)["answer"] == "answered", out.stdout + out.stderr
    comps = [r for r in Session.at("four").transcript.records() if isinstance(r, records.CompactionRecord)]
    settled = [c for c in comps if c.strategy == "settle"]
    results = {r.message["tool_call_id"]: r for r in Session.at("four").transcript.records()
               if isinstance(r, records.MessageRecord) and r.message.get("role") == "tool"}
    full = {call_id: r.message["content"] for call_id, r in results.items()}
    assert sorted(c.start for c in settled) == [results["p0"].seq, results["p1"].seq]  # the two largest
    assert min(c.tokens_before for c in settled) > max(results[k].tokens for k in ("p2", "p3"))
    assert all(c.tokens < 600 < 6_000 < c.tokens_before for c in settled)
    assert (Session.at("four").store.root / "p1.out").read_text() == full["p1"]  # NO LOSS: stored whole
    assert full["p1"].splitlines()[1][:60] in full["r"]  # and the handle the preview names reads it
    view = _context("four")
    shown = {m["message"].get("tool_call_id"): m["message"]["content"] for m in view if m["message"]["role"] == "tool"}
    assert "saved as @p1" in shown["p1"] and "saved as @p0" in shown["p0"]
    assert shown["p2"] == full["p2"] and shown["p3"] == full["p3"]  # the rest stays verbatim


def test_results_that_fit_together_are_left_alone(tmp_path):
    out = _parallel(tmp_path, "fits", [2300, 2300])
    assert out.returncode == 0, out.stdout + out.stderr
    assert not any(isinstance(r, records.CompactionRecord) for r in Session.at("fits").transcript.records())


def test_parallel_sub_agent_results_that_overflow_together_are_settled(tmp_path, fake_openai):
    """A sub-agent's result is a tool result like any other: four children whose answers (~5,000
    tokens each) fit the result contract and the offload limit (6,000 tokens, a quarter of the
    window) one by one, but not the parent's 24K window together."""
    answer = "finding " + " ".join(f"row{i}=value{i}" for i in range(1200))
    markers = ["child-A", "child-B", "child-C", "child-D"]
    routes = {m: [{"content": f"{m} {answer}"}] for m in markers}
    server = fake_openai([
        {"tool_calls": [{"id": f"d{m[-1]}", "name": "delegate", "arguments": {"task": f"{m}: report"}}
                        for m in markers]},
        {"content": "all four reported"},
    ], routes=routes)
    profile = _profile(tmp_path, "context_window: 24000\nmax_output_tokens: 500\nretries: 0\n"
                                 "tools: [shell, read_output, grep_output, delegate]\n"
                                 "delegate: {result_max_tokens: 7000}\n"
                                 "pipelines:\n  batch:\n    - strategy: truncate\n")
    out = run_cli("run", "--batch", "--json", "--session", "kids", "--model", "openai/gpt-4o-mini", "--api-base",
                  server.base_url, "--profile", profile, "split the work")
    assert out.exit_code == 0 and json.loads(out.stdout)["answer"] == "all four reported", out.stdout
    settled = [r for r in Session.at("kids").transcript.records()
               if isinstance(r, records.CompactionRecord) and r.strategy == "settle"]
    assert settled and all(c.tokens < 600 for c in settled)
    last = server.requests[-1]["messages"]
    assert sum("saved as @d" in str(m.get("content")) for m in last if m["role"] == "tool") == len(settled)
    assert PER_REQUEST + count_messages(last) + count_tools(server.requests[-1]["tools"]) + 500 <= 24_000


def test_a_resumed_session_whose_model_repeats_call_ids_settles_the_renamed_results(tmp_path):
    """Some providers send ``call_1`` every turn: after a resume the repeated ids are renamed
    (``ctx<seq>_<n>``) and their results, overflowing together, are settled like any others."""
    work = tmp_path / "work"
    work.mkdir()
    small = [call(f"p{i}", "shell", command=f"echo {i}") for i in range(2)]
    big = [call(f"p{i}", "shell", command=NUMBERS.format(seed=i, n=2300)) for i in range(4)]  # p0, p1 again
    model = script(tmp_path / "again.yaml", [{"tool_calls": small}, {"content": "first"}, {"tool_calls": big},
                                             {"content": "answered again"}])
    args = ("--model", model, "--context-window", "32000", "--allow", "shell")
    out = ctxagent("run", "--batch", "--json", "--session", "again", "--profile", "minimal", *args, "go", cwd=work)
    assert out.returncode == 0, out.stdout + out.stderr
    out = ctxagent("resume", "--batch", "--json", "--session", "again", *args, "more", cwd=work)
    assert out.returncode == 0 and json.loads(out.stdout)["answer"] == "answered again", out.stdout + out.stderr
    transcript = list(Session.at("again").transcript.records())
    ids = [c["id"] for r in transcript if isinstance(r, records.MessageRecord) for c in r.message.get("tool_calls", [])]
    assert len(ids) == len(set(ids)) == 6 and sum(i.startswith("ctx") for i in ids) == 2
    settled = [r for r in transcript if isinstance(r, records.CompactionRecord) and r.strategy == "settle"]
    assert len(settled) == 2 and all(c.tokens < 600 for c in settled)


def _parallel_view(sizes: list[int], pinned: str = "") -> list:
    """system, task, one reply with a shell call per size, its results (``size`` lines each)."""
    calls = [tool_call(f"c{i}", "shell", json.dumps({"command": f"job {i}"})) for i in range(len(sizes))]
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"},
                {"role": "assistant", "content": None, "tool_calls": calls}]
    messages += [{"role": "tool", "tool_call_id": f"c{i}",
                  "content": "\n".join(f"job {i} line {n}: value {n * 7}" for n in range(size)) + pinned}
                 for i, size in enumerate(sizes)]
    return _entries(messages)


def test_settle_keeps_the_laws_and_edits_only_results_never_sent():
    view = _parallel_view([300, 500, 200, 400], pinned="\nPIN-ME")
    ctx = replace(ctx_for(view, window=12_000, pins=("PIN-ME",)), free_from=3)
    out = Engine().run(view, [SettleStep()], ctx)  # the compactions recorded, as the runner gets them
    cut = [i for i, (a, b) in enumerate(zip(view, out.view, strict=True)) if a is not b]
    assert cut and {view[i].tokens for i in cut} == set(sorted(e.tokens for e in view[3:])[-len(cut):])  # largest
    assert [c.strategy for c in out.compactions] == ["settle"] * len(cut)
    assert ctx.budget.total(out.view) <= 12_000 * 0.8
    assert all("PIN-ME" in out.view[i].message["content"] for i in cut)  # pinned facts stay verbatim
    assert [e.handle for e in out.offloads] == [view[i].handle for i in cut]
    assert_laws(view, out, ctx)
    assert SettleStep().apply(out.view, ctx).view is out.view  # IDENTITY
    assert SettleStep().apply(view, replace(ctx, free_from=4)).view is view  # results already sent: never edited


def test_settle_turns_previews_into_stubs_when_even_previews_do_not_fit():
    view = _parallel_view([100] * 24)
    ctx = replace(ctx_for(view, window=9_000, pins=()), free_from=3)
    out = SettleStep(preview_tokens=400).apply(view, ctx)
    kinds = [e.message["content"].startswith("[ctxagent: the result of shell(command=job") for e in out.view[3:]]
    assert any(kinds) and ctx.budget.total(out.view) <= 9_000 * 0.9


def test_a_preview_over_the_trigger_that_fits_the_window_is_not_made_a_stub():
    """Regression (the real-model benchmark, issue 32): in a 4,096-token window a 2 MB log's offloaded
    preview put the request over the trigger, not over the window, and settle made it a one-line stub:
    the 1.5B model saw neither the log's lines nor how to search it, and answered ``{"request_id":
    "ERROR"}``. Stubs are for results that would break the window itself."""
    view = _parallel_view([1_500])
    ctx = replace(ctx_for(view, window=1_200, pins=()), free_from=3)
    out = SettleStep(preview_tokens=400).apply(view, ctx)
    content = out.view[3].message["content"]
    assert content.startswith("job 0 line 0: value 0") and "cut to a preview" in content
    assert ctx.budget.window * ctx.budget.trigger < ctx.budget.total(out.view) <= ctx.budget.window * 0.9
    assert SettleStep(preview_tokens=400).apply(out.view, ctx).view is out.view  # IDENTITY: the preview stays


# --- what summaries keep ----------------------------------------------------------------------------


def _service(n: int) -> tuple[str, str, str, str]:
    """``(port line, config path, commit, output)`` of ``svcctl describe svcN``: the three values
    in the middle of 25 log lines."""
    port, path, commit = f"port: {41000 + n}", f"/etc/svc{n}/config.yaml", f"{(n * 2654435761) % 16**10:010x}a"
    logs = [f"  log line {i}: handled request {i * 31 + n} in {i % 17 + 3} ms" for i in range(25)]
    return port, path, commit, "\n".join([f"service: svc{n}", "status: running", port, f"config: {path}",
                                          f"deployed commit {commit}", *logs])


def loose(text: str, max_tokens: int) -> str:
    """A loose summarizer: every exact value paraphrased away."""
    return "The agent inspected several services; they are running normally. Earlier summaries said the same."


def _summarized_services(facts_tokens: int) -> tuple[list, int]:
    """28 ``svcctl describe`` results, a summary of all but the newest after every second one (14
    summaries, each of the previous summary and two new results); returns the final view and the
    number of summaries."""
    view = _entries([{"role": "system", "content": "sys"}, {"role": "user", "content": "Audit the services."}])
    summaries = 0
    for n in range(1, 29):
        call_ = tool_call(f"c{n}", "shell", json.dumps({"command": f"svcctl describe svc{n} --verbose"}))
        seq = view[-1].end + 1
        reply = {"role": "assistant", "content": None, "tool_calls": [call_]}
        result = {"role": "tool", "tool_call_id": f"c{n}", "content": _service(n)[3]}
        new = _entries([reply, result])
        view = [*view, *(replace(e, start=seq + i, end=seq + i, turn=n) for i, e in enumerate(new))]
        if n % 2 == 0:
            ctx = replace(ctx_for(view, window=4_000, summarizer=loose, pins=()), free_from=seq + 2)
            step = StrategyConfig(strategy="summarize", trigger=0, target=0.0, keep_turns=1, facts_tokens=facts_tokens)
            out = Engine().run(view, [step], ctx)
            summaries += sum(c.strategy == "summarize" for c in out.compactions)
            view = out.view
    return view, summaries


def test_fourteen_loose_summaries_keep_every_services_values_under_its_name():
    """14 summaries by a loose summarizer over 28 results left 1/28 ports, 0/28 config paths and
    19/28 commits in view, the commits as bare hashes with no service named, and the block spent its
    400-token cap on 18 repeated command lines. Each newly summarized range now has room for its own
    values, listed under the call they came from, a command once."""
    view, summaries = _summarized_services(400)
    assert summaries == 14
    summary = next(e for e in view if e.kind == "summarize")
    lines = summary.message["content"].splitlines()
    assert len([line for line in lines if line.startswith("- svcctl")]) == len({line for line in lines
                                                                                if line.startswith("- svcctl")})
    for n in range(1, 28):  # the 28th is the unit kept verbatim
        port, path, commit, _ = _service(n)
        at = lines.index(f"- svcctl describe svc{n} --verbose (@c{n})")
        group = lines[at + 1:next(i for i in range(at + 1, len(lines)) if not lines[i].startswith("  "))]
        assert {f"  {port}", f"  {path}", f"  {commit}"} <= set(group), n


def test_values_a_summary_has_no_room_for_are_counted_with_the_handles_that_hold_them():
    view, _ = _summarized_services(60)
    summary = next(e for e in view if e.kind == "summarize")
    content = summary.message["content"]
    left = next(line for line in content.splitlines() if line.startswith("- left out: "))
    count = int(left.split()[3])
    listed = sum(line.startswith("  ") for line in content.splitlines())
    values = {v for n in range(1, 28) for _, v in values_in(_service(n)[3])}
    assert count > 0 and listed + count >= len(values)  # none vanishes: listed or counted (per range it was in)
    named = [h for h in left.split("full results: ")[1].split(" (")[0].split() if h.startswith("@")]
    for handle in named:  # each handle named holds values the block left out
        n = int(handle[2:])
        assert not all(f"  {v}" in content for _, v in values_in(_service(n)[3])), handle


def test_a_profile_that_cuts_early_still_runs_in_a_small_window():
    """The bundled profiles cut at 55% of the window (issue 34); in a 9,000-token window the reply's
    reserve and the tool schemas alone took more than that, and every run stopped with exit 5. The
    trigger now rises until 15% of the window is left above them, the target with it, to at least 5%
    above them (a target under the fixed part compacted on every request: the thrash guard stopped a
    real model in a 4,096-token window)."""
    from ctxagent.agent.turns import make_budget
    from ctxagent.profile import load_profile

    profile = load_profile("default")
    big = make_budget(profile, 32_000, 900)
    assert (big.target, big.trigger) == (profile.target, profile.trigger) == (0.3, 0.55)
    small = make_budget(profile, 9_000, 900, output_tokens=4096)  # the fixed reserve before issue 32
    fixed = (4096 + profile.margin_tokens + 900) / 9_000
    assert small.trigger == round(fixed + 0.15, 4) and small.target == round(fixed + 0.05, 4)
    sized = make_budget(profile, 9_000, 900)  # the reserve sized to the window (1,125 tokens) leaves room enough
    assert (sized.target, sized.trigger) == (0.3, 0.55)
    tiny = make_budget(profile, 6_000, 900, output_tokens=4096)
    assert tiny.trigger == 0.9 and tiny.target == 0.8  # never past 90%, the target 10% below
    scaled = make_budget(profile, 4_096, 983, scale=1.24)  # llama.cpp counted the schemas as 1,219 tokens
    fixed = (scaled.reserved + 983 * 1.24) / 4_096
    assert scaled.trigger == round(fixed + 0.15, 4) and scaled.target == round(fixed + 0.05, 4)
    assert make_budget(load_profile("minimal"), 9_000, 900).trigger == 0.8  # room enough: unchanged


def test_the_floor_is_the_cheapest_grow_then_cut_policy_over_the_requests():
    """benchmarks/cost_floor.py: the floor's H beats every other H over the same requests, cuts when
    the view would pass H, and never exceeds what the window holds."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.cost_floor import floor as computed
    from benchmarks.cost_floor import simulate

    tokens = [1_000 + 1_500 * n for n in range(120)]  # 1,500 new tokens a request
    found = computed(tokens, window=32_000, reserved=4_352, ratio=0.1)
    news = [1_500] * 119
    best = min(simulate(news, 1_000, h, 0.1)[0] for h in range(2_500, 27_649, 25))  # a finer search of H
    assert best <= found["billed_input_tokens"] <= best * 1.005
    assert 2_500 <= found["high"] <= 32_000 - 4_352 and found["cuts"] > 0
    billed, cuts = simulate([1_500] * 4, 1_000, 4_000, 0.1)  # 2,500 4,000 | cut: 2,500 4,000
    assert cuts == 1 and billed == 1_000 + (100 + 1_500) + (250 + 1_500) + 2_500 + (250 + 1_500)
