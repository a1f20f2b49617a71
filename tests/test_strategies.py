"""The strategy family keeps the laws on random views: PAIR, HEAD, IDENTITY, NO LOSS, SAME CONTEXT
ON RESUME and pinned facts, alone and in every bundled pipeline; LLM strategies fall back when
the summarizer fails; batch pipelines naming an LLM strategy are refused at profile load."""

from __future__ import annotations

import json
import re
import typing
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ctxagent.errors import ProfileError
from ctxagent.handles import base_handle
from ctxagent.messages import pair_violations, text_of, tool_call
from ctxagent.profile import bundled_names, load_profile, parse_profile
from ctxagent.strategies import registry
from ctxagent.strategies.base import Budget, Entry, Outcome, StrategyContext
from ctxagent.strategies.checkpoint import CHECKPOINT_TOOL_SCHEMA, CheckpointStep
from ctxagent.strategies.checks import check_pipelines
from ctxagent.strategies.common import keep_pins
from ctxagent.strategies.dedupe import DedupeStep
from ctxagent.strategies.distill import DistillStep
from ctxagent.strategies.mask_observations import MaskObservationsStep
from ctxagent.strategies.pipeline import Engine, replay
from ctxagent.strategies.prune import PruneStep
from ctxagent.strategies.role_selective import RoleSelectiveStep
from ctxagent.strategies.sliding_window import SlidingWindowStep
from ctxagent.strategies.step import COMMON, StrategyConfig, kinds, known
from ctxagent.strategies.summarize import SummarizeStep
from ctxagent.strategies.truncate import TruncateStep
from ctxagent.tokens import count_message, count_text
from examplecount import examples
from viewgen import views
from viewgen2 import PINS, rich_views

HANDLE = re.compile(r"@[A-Za-z0-9_-]{1,32}(?:\.[0-9]+)?")
VIEW_ONLY = {"mask_observations", "prune", "dedupe", "role_selective"}
FAST = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.data_too_large])


# --- scripted summarizers ---------------------------------------------------------------------


def good(text: str, max_tokens: int) -> str:
    """A well-behaved summarizer: short, keeps every pin it was shown, JSON when asked for JSON."""
    pins = [p for p in PINS if p in text]
    if "checkpoint of an AI agent" in text:
        return json.dumps({"goal": "fix the test", "key_facts": ["port 8080", *pins], "pending": ["patch"]})
    if "state document" in text:
        return json.dumps({"goal": "fix the test", "verified_facts": ["port 8080", *pins],
                           "discarded_hypotheses": [], "pending_actions": ["patch"]})
    return f"summary of {len(text)} characters: port 8080 at /srv/app. " + " ".join(pins)


def empty(text: str, max_tokens: int) -> str:
    return "  "


def overlong(text: str, max_tokens: int) -> str:
    return "word " * (3 * max_tokens) + " ".join(PINS)


def drops_pin(text: str, max_tokens: int) -> str:
    if "JSON" in text:
        return json.dumps({"goal": "fix the test", "key_facts": ["port 8080"], "verified_facts": []})
    return "summary that forgot the pinned facts"


def raises(text: str, max_tokens: int) -> str:
    raise RuntimeError("provider down")


BAD = [empty, overlong, drops_pin, raises]


def ctx_for(view, window=None, summarizer=None, pins=PINS, factor=1.0) -> StrategyContext:
    total = sum(e.tokens for e in view)
    window = window or max(2_000, int(total * factor))
    return StrategyContext(budget=Budget(window=window, tools=100, reserved=500, target=0.5, trigger=0.8),
                           transcript_path="/data/sessions/x/transcript.jsonl", summarizer=summarizer, pins=pins)


# --- the laws -----------------------------------------------------------------------------------


def texts(view) -> list[str]:
    return [text_of(e.message) for e in view]


def assert_laws(view: list[Entry], out: Outcome, ctx: StrategyContext, rerun=None) -> None:
    """PAIR, HEAD, NO LOSS (with resolvable handles), SAME CONTEXT ON RESUME, pins."""
    got = out.view
    assert pair_violations([e.message for e in got]) == []
    # HEAD: system first and byte-identical, task, current user message, pinned-facts entry.
    assert got[0] == view[0]
    users = [e for e in view if e.role == "user" and e.kind == "message"]
    assert users[0] in got and users[-1] in got
    assert all(e in got for e in view if e.kind == "pins")
    # NO LOSS: every original is in the view, stands inside a replacement's or a compaction's
    # range (the transcript keeps it), or is offloaded; every new handle resolves to an offload.
    ranges = [(c.start, c.end) for c in out.compactions] + [(e.start, e.end) for e in got]
    for entry in view:
        assert entry in got or entry in out.offloads or any(
            s <= entry.start and entry.end <= e for s, e in ranges), entry
    offloaded = {base_handle(o.message["tool_call_id"]) for o in out.offloads}
    assert all(o.role == "tool" and o in view for o in out.offloads)
    before = set(HANDLE.findall("\n".join(texts(view))))
    for handle in set(HANDLE.findall("\n".join(texts(got)))) - before:
        assert handle in offloaded, handle
    # SAME CONTEXT ON RESUME: recorded compactions replayed on the originals, then the view-only
    # transforms run again, give the very same view.
    replayed = replay(list(view), out.compactions)
    assert (rerun(replayed) if rerun else replayed) == got
    # Pins: every pinned fact in the view before is in the view after, verbatim.
    before_text, after_text = texts(view), texts(got)
    for pin in ctx.pins:
        if any(pin in t for t in before_text):
            assert any(pin in t for t in after_text), pin


def view_only(strategy, ctx):
    return lambda v: strategy.apply(v, ctx).view


# --- view-only strategies -----------------------------------------------------------------------


@pytest.mark.parametrize("strategy", [MaskObservationsStep(), PruneStep(), DedupeStep(), RoleSelectiveStep()],
                         ids=lambda s: s.strategy)
@FAST
@given(view=rich_views())
def test_view_only_strategies_keep_the_laws_and_are_idempotent(strategy, view):
    ctx = ctx_for(view)
    out = strategy.apply(view, ctx)
    assert out.compactions == []
    assert_laws(view, out, ctx, view_only(strategy, ctx))
    again = strategy.apply(out.view, ctx)
    assert again.view == out.view  # idempotent
    assert all(e.kind == strategy.strategy for e in out.view if e not in view)


@pytest.mark.parametrize("strategy", [MaskObservationsStep(), PruneStep(), DedupeStep(), RoleSelectiveStep()],
                         ids=lambda s: s.strategy)
@FAST
@given(view=views())
def test_view_only_strategies_on_plain_views(strategy, view):
    ctx = ctx_for(view)
    out = strategy.apply(view, ctx)
    assert_laws(view, out, ctx, view_only(strategy, ctx))


@FAST
@given(view=rich_views())
def test_identity_when_nothing_qualifies(view):
    results = sum(e.role == "tool" for e in view)
    assert MaskObservationsStep(keep=results, keep_tokens=1.0).apply(view, ctx_for(view)).view is view
    assert PruneStep(min_age_turns=10_000).apply(view, ctx_for(view)).view is view
    assert RoleSelectiveStep(tool_tokens=10**9, assistant_tokens=10**9).apply(view, ctx_for(view)).view is view


def test_mask_stub_names_tool_args_size_and_handle():
    view = _calls_view([("shell", '{"command": "ls -la /srv"}', "x\n" * 300),
                        ("read_file", '{"path": "a.py"}', "y\n" * 300)])
    out = MaskObservationsStep(keep=1).apply(view, ctx_for(view))
    stub = out.view[3].message["content"]
    assert stub.startswith("[ctxagent masked an old tool result: shell(command=ls -la /srv), ")
    assert f"{view[3].tokens:,} tokens" in stub and base_handle("c1") in stub
    assert out.offloads == [view[3]]
    assert out.view[3].message["tool_call_id"] == "c1" and out.view[5] == view[5]


def test_mask_points_an_offloaded_preview_at_its_stored_handle():
    preview = "head\n[full output: 9 lines, 900 bytes, 7,777 tokens; saved as @c1.2 at /x/c1.2.out]"
    view = _calls_view([("shell", '{"command": "make"}', preview), ("shell", "{}", "ok")])
    out = MaskObservationsStep(keep=1).apply(view, ctx_for(view))
    assert "@c1.2" in out.view[3].message["content"] and "7,777 tokens" in out.view[3].message["content"]
    assert out.offloads == []


def test_prune_drops_superseded_dead_ends_only():
    view = _calls_view([("shell", '{"command": "cat /a"}', "cat: /a: No such file or directory"),
                        ("read_file", '{"path": "/b"}', "ERROR: read_file: no such file: /b"),
                        ("shell", '{"command": "cat /c"}', "exit code: 0\n" + "port=8080\n" * 30),
                        ("list_dir", '{"path": "."}', "a\nb")], spacing=5)
    out = PruneStep().apply(view, ctx_for(view))
    kinds = [e.kind for e in out.view]
    assert kinds.count("prune") == 1  # the shell dead end; read_file was never retried successfully
    note = next(e for e in out.view if e.kind == "prune").message["content"]
    assert "shell(command=cat /a)" in note and "No such file" in note and base_handle("c1") in note
    assert any("ERROR: read_file" in (e.message.get("content") or "") for e in out.view)
    young = PruneStep(min_age_turns=100).apply(view, ctx_for(view))
    assert young.view is view


def test_dedupe_references_the_earlier_handle_and_flags_repeated_calls():
    same = "exit code: 0\n" + "the same long output line\n" * 20
    view = _calls_view([("shell", '{"command": "ls"}', same), ("shell", '{"command":"ls" }', same),
                        ("shell", '{"command": "pwd"}', same.replace("\n", "  \n")),
                        ("shell", '{"command": "ls"}', "changed")])
    out = DedupeStep().apply(view, ctx_for(view))
    contents = [e.message.get("content") for e in out.view]
    h = base_handle("c1")
    assert contents[5] == f"[this call was already made at turn 1; its result is handle {h}] " \
                          f"[same result as turn 1, handle {h}]"
    assert contents[7] == f"[same result as turn 1, handle {h}]"
    assert contents[9].startswith(f"[this call was already made at turn 1; its result is handle {h}]\n")
    # the earlier result it names, and each replaced original (its own handle resolves when dropped later)
    assert sorted(e.start for e in out.offloads) == [3, 5, 7, 9]


@FAST
@given(view=rich_views())
def test_every_handle_a_later_compaction_names_resolves(view):
    """Regression: truncation dropped a result dedupe had replaced and named its handle, whose
    original had never been stored. Run the batch pipeline, then a truncation to a tiny target:
    every handle the final view names is one whose original some step stored (or was stored)."""
    ctx = ctx_for(view, window=10 * sum(e.tokens for e in view) + 10_000)
    first = Engine().run(view, BUNDLED["batch"].pipeline("batch"), ctx)
    second = TruncateStep(target=0.01).apply(first.view, ctx)
    stored = {e.handle or base_handle(e.message["tool_call_id"]) for e in [*first.offloads, *second.offloads]}
    stored |= {base_handle(e.message["tool_call_id"]) for e in view if e.role == "tool" and e.offloaded}
    before = set(HANDLE.findall("\n".join(texts(view))))
    for handle in set(HANDLE.findall("\n".join(texts(second.view)))) - before:
        assert handle in stored, handle


def test_role_selective_reduces_tool_results_and_reasoning_not_users():
    long_text = "\n\n".join(["reasoning " * 300, "Conclusion: the port is 8080."])
    view = _calls_view([("shell", '{"command": "cat log"}', "\n".join(f"l{i}" for i in range(400)))])
    view = _with(view, [{"role": "assistant", "content": long_text},
                        {"role": "user", "content": "u " * 2000}, {"role": "assistant", "content": "ok"},
                        {"role": "user", "content": "go"}])
    out = RoleSelectiveStep().apply(view, ctx_for(view))
    tool = out.view[3].message["content"]
    assert tool.startswith("l0\nl1") and tool.endswith("l399") and base_handle("c1") in tool
    assert out.view[4].message["content"].endswith("Conclusion: the port is 8080.")
    assert out.view[5] == view[5]
    assert out.offloads == [view[3]]


def test_role_selective_llm_findings_are_recorded_and_keep_pair():
    log = "\n".join(f"l{i}" for i in range(400)) + f"\n{PINS[1]}"
    view = _calls_view([("shell", '{"command": "cat log"}', log), ("shell", "{}", "ok"),
                        ("shell", "{}", "ok")])
    ctx, step = ctx_for(view, summarizer=good), RoleSelectiveStep(llm=True)
    out = step.apply(view, ctx)
    assert [(c.start, c.end) for c in out.compactions] == [(3, 3)]
    assert out.compactions[0].message["tool_call_id"] == "c1"
    assert_laws(view, out, ctx, view_only(step, replace(ctx, summarizer=None)))
    for bad in BAD:
        failed = step.apply(view, replace(ctx, summarizer=bad))
        assert failed.compactions == [] and failed.view == RoleSelectiveStep().apply(view, ctx_for(view)).view


@FAST
@given(view=rich_views())
def test_role_selective_with_llm_keeps_the_laws(view):
    ctx, step = ctx_for(view, summarizer=good), RoleSelectiveStep(llm=True, max_calls=2)
    out = step.apply(view, ctx)
    assert_laws(view, out, ctx, view_only(step, replace(ctx, summarizer=None)))


# --- recorded strategies ------------------------------------------------------------------------

RECORDED = [SummarizeStep(), SlidingWindowStep(), CheckpointStep(), DistillStep()]


@pytest.mark.parametrize("strategy", RECORDED, ids=lambda s: s.strategy)
@FAST
@given(view=rich_views(), factor=st.floats(0.2, 3.0), with_llm=st.booleans())
def test_recorded_strategies_keep_the_laws(strategy, view, factor, with_llm):
    ctx = ctx_for(view, factor=factor, summarizer=good if with_llm else None)
    strategy = DistillStep(min_tokens=0) if strategy.strategy == "distill" else strategy
    out = strategy.apply(view, ctx)
    assert_laws(view, out, ctx)
    again = strategy.apply(out.view, ctx)  # the same request built twice does not compact again
    if strategy.strategy != "distill" and not (strategy.strategy == "checkpoint" and out.compactions):
        assert again.view == out.view or again.compactions  # only compacts further when it must


@pytest.mark.parametrize("strategy", [SummarizeStep(), SlidingWindowStep(), CheckpointStep(), TruncateStep()],
                         ids=lambda s: s.strategy)
@FAST
@given(view=rich_views(checkpoint=False))
def test_identity_under_target(strategy, view):
    window = 10 * sum(e.tokens for e in view) + 10_000
    out = strategy.apply(view, ctx_for(view, window=window, summarizer=raises))
    assert out.view == view and out.compactions == [] and out.offloads == []


@FAST
@given(view=rich_views(checkpoint=False))
def test_distill_identity_for_small_ranges(view):
    out = DistillStep(min_tokens=10**9).apply(view, ctx_for(view, summarizer=raises))
    assert out.view is view


def test_summarize_replaces_the_oldest_units_with_a_labelled_summary():
    view = _long_view(units=12)
    seen = []
    ctx = ctx_for(view, window=3_000, summarizer=lambda t, n: seen.append(t) or good(t, n))
    out = SummarizeStep().apply(view, ctx)
    assert len(out.compactions) == 1
    comp = out.compactions[0]
    assert comp.message["role"] == "user"
    assert comp.message["content"].startswith(f"[ctxagent summary of messages #{comp.start}-#{comp.end}]\n")
    assert PINS[0] in comp.message["content"]
    assert "result of shell(command=cat f" in seen[0] and '"role"' not in seen[0]
    assert "exact values" in seen[0] and PINS[0] in seen[0]
    assert out.view[-6:] == view[-6:]
    assert replay(list(view), out.compactions) == out.view


def test_summarize_chunks_long_input_then_combines():
    view = _long_view(units=12, lines=400)
    prompts = []
    ctx = ctx_for(view, window=3_000, summarizer=lambda t, n: prompts.append(t) or good(t, n))
    out = SummarizeStep(chunk_tokens=2_000, max_tokens=200).apply(view, ctx)
    assert out.compactions[0].strategy == "summarize"
    assert len(prompts) > 2 and all("part" in p for p in prompts[:-1])
    assert all(count_text(p) < 2_000 + 400 for p in prompts)


@pytest.mark.parametrize("bad", BAD, ids=lambda f: f.__name__)
def test_summarize_falls_back_to_truncation(bad):
    view = _long_view(units=12)
    ctx = ctx_for(view, window=3_000, summarizer=bad)
    out = SummarizeStep().apply(view, ctx)
    expected = keep_pins(view, TruncateStep().apply(view, ctx), ctx)
    assert out == expected and {c.strategy for c in out.compactions} == {"truncate"}
    assert PINS[0] in out.compactions[0].message["content"]  # the note keeps the pinned fact
    assert SummarizeStep().apply(view, replace(ctx, summarizer=None)) == expected


@pytest.mark.parametrize("bad", [*BAD, None], ids=lambda f: getattr(f, "__name__", "none"))
def test_sliding_window_degrades_to_a_deterministic_note(bad):
    view = _long_view(units=14)
    ctx = ctx_for(view, window=3_000, summarizer=bad)
    out = SlidingWindowStep().apply(view, ctx)
    assert len(out.compactions) == 1
    content = out.compactions[0].message["content"]
    assert content.startswith("[ctxagent window: messages #") and "transcript.jsonl" in content
    assert PINS[0] in content
    assert out.view[-10:] == view[-10:]


def test_sliding_window_rolls_earlier_summaries_forward():
    view = _long_view(units=14)
    ctx, step = ctx_for(view, window=3_000, summarizer=good), SlidingWindowStep(keep_first=1)
    first = step.apply(view, ctx)
    assert first.view[3] == view[3]  # the first unit after the task: task setup, kept
    grown = _with(first.view, [{"role": "assistant", "content": f"more {i} " * 200} for i in range(6)])
    inputs = []
    spy = lambda t, n: inputs.append(t) or good(t, n)  # noqa: E731
    second = step.apply(grown, replace(ctx, summarizer=spy))
    old = first.compactions[0]
    new = second.compactions[0]
    assert new.start <= old.start and old.end <= new.end  # supersedes the earlier summary
    assert old.message["content"].split("\n", 1)[1] in inputs[0]  # ... which fed the new one
    # without a summarizer the earlier summary's text is carried verbatim
    plain = step.apply(grown, replace(ctx, summarizer=None))
    assert old.message["content"].split("\n", 1)[1] in plain.compactions[0].message["content"]


def test_agent_checkpoint_needs_no_llm_and_applies_once():
    view = _long_view(units=10)
    args = {"goal": "fix the test", "phase": "done diagnosing", "key_facts": ["port 8080 in /srv/app.conf"],
            "completed": ["read logs"], "pending": ["patch", "rerun"],
            "decisions": ["keep 8080 because clients pin it"], "files_touched": ["/srv/app.conf"]}
    view = _with(view, [{"role": "assistant", "content": None,
                         "tool_calls": [tool_call("cp1", "checkpoint", json.dumps(args))]},
                        {"role": "tool", "tool_call_id": "cp1", "content": "checkpoint saved"}])
    ctx = ctx_for(view, window=10**7, summarizer=raises)  # far under budget: the agent asked
    out = CheckpointStep().apply(view, ctx)
    assert len(out.compactions) == 1
    content = out.compactions[0].message["content"]
    assert content.startswith("[ctxagent checkpoint (written by the agent, call cp1) of messages #")
    for line in ("goal: fix the test", "phase: done diagnosing", "key facts:\n- port 8080 in /srv/app.conf",
                 "completed: read logs", "pending: patch; rerun", "files touched: /srv/app.conf"):
        assert line in content
    assert PINS[0] in content  # a pinned fact of the replaced range, added for the agent
    assert out.view[-4:] == view[-4:]
    assert CheckpointStep().apply(out.view, ctx).view == out.view  # applied once
    assert_laws(view, out, ctx)


@pytest.mark.parametrize("bad", [*BAD, None], ids=lambda f: getattr(f, "__name__", "none"))
def test_budget_checkpoint_falls_back_to_a_deterministic_one(bad):
    view = _long_view(units=12)
    ctx, step = ctx_for(view, window=3_000, summarizer=bad), CheckpointStep(at=0.75)
    out = step.apply(view, ctx)
    content = out.compactions[0].message["content"]
    assert content.startswith("[ctxagent checkpoint of messages #")
    assert "made without a summarizer" in content and "goal: Fix the failing test" in content
    assert PINS[0] in content
    llm = step.apply(view, replace(ctx, summarizer=good)).compactions[0].message["content"]
    assert "goal: fix the test" in llm and "pending: patch" in llm
    window = int(ctx.budget.total(view) / 0.7)  # over the target (0.5), under ``at`` (0.75)
    assert step.apply(view, ctx_for(view, window=window, summarizer=good)).view == view
    assert CheckpointStep().apply(view, ctx_for(view, window=window, summarizer=good)).compactions


def test_checkpoint_tool_schema():
    fn = CHECKPOINT_TOOL_SCHEMA["function"]
    assert CHECKPOINT_TOOL_SCHEMA["type"] == "function" and fn["name"] == "checkpoint"
    props = fn["parameters"]["properties"]
    assert {"goal", "phase", "key_facts", "completed", "pending", "decisions", "constraints",
            "files_touched"} <= set(props)
    assert set(fn["parameters"]["required"]) <= set(props)


@pytest.mark.parametrize("bad", [*BAD, None], ids=lambda f: getattr(f, "__name__", "none"))
def test_distill_state_document(bad):
    view = _long_view(units=12, dead=True)
    ctx = ctx_for(view, window=3_000, summarizer=bad)
    out = DistillStep().apply(view, ctx)
    header, _, body = out.compactions[0].message["content"].partition("\n")
    assert header.startswith("[ctxagent state of messages #")
    doc, _ = json.JSONDecoder().raw_decode(body)
    assert {"goal", "verified_facts", "discarded_hypotheses", "pending_actions"} <= set(doc)
    assert any("No such file" in d for d in doc["discarded_hypotheses"])
    assert PINS[0] in body
    # the next distillation updates the previous document
    grown = _with(out.view, [{"role": "assistant", "content": f"found /srv/new{i}.py"} for i in range(6)])
    again = DistillStep(min_tokens=0).apply(grown, ctx)
    doc2, _ = json.JSONDecoder().raw_decode(again.compactions[0].message["content"].partition("\n")[2])
    assert set(doc["discarded_hypotheses"]) <= set(doc2["discarded_hypotheses"])
    assert PINS[0] in again.compactions[0].message["content"]


def test_llm_distill_is_used_when_it_checks_out():
    view = _long_view(units=12)
    out = DistillStep().apply(view, ctx_for(view, window=3_000, summarizer=good))
    doc, _ = json.JSONDecoder().raw_decode(out.compactions[0].message["content"].partition("\n")[2])
    assert doc["goal"] == "fix the test" and PINS[0] in doc["verified_facts"]


# --- pipelines and profiles ---------------------------------------------------------------------


BUNDLED = {name: load_profile(name) for name in bundled_names()}
CASES = [(name, path) for name in BUNDLED for path in ("interactive", "batch")]


def test_bundled_profiles_pass_the_load_checks():
    assert {"default", "batch", "long-horizon", "minimal"} <= set(BUNDLED)
    for name, profile in BUNDLED.items():
        check_pipelines(profile, source=name)
        for step in profile.pipeline("batch"):
            assert not step.needs_llm()


@pytest.mark.parametrize(("name", "path"), CASES)
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(view=rich_views(pins_entry=True), factor=st.floats(0.2, 3.0))
def test_bundled_pipelines_keep_the_laws(name, path, view, factor):
    steps = BUNDLED[name].pipeline(path)
    ctx = ctx_for(view, factor=factor, summarizer=good if path == "interactive" else raises)
    out = Engine().run(view, steps, ctx)
    assert_laws(view, out, ctx)  # every change is a compaction: replaying them alone gives the view


@pytest.mark.parametrize(("name", "path"), CASES)
@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(view=rich_views(pins_entry=True, checkpoint=False))
def test_bundled_pipelines_under_target_only_batched_steps_change_anything(name, path, view):
    steps = BUNDLED[name].pipeline(path)
    ctx = ctx_for(view, window=10 * sum(e.tokens for e in view) + 10_000, summarizer=raises)
    out = Engine().run(view, steps, ctx)
    assert {c.strategy for c in out.compactions} <= VIEW_ONLY  # no range compaction under the target
    assert replay(list(view), out.compactions) == out.view  # each change recorded
    assert Engine().run(view, steps, ctx) == out  # deterministic


@pytest.mark.parametrize(("text", "key", "message"), [
    ("pipelines:\n  batch:\n    - strategy: summarize\n", "pipelines.batch.0.strategy", "calls an LLM"),
    ("pipelines:\n  batch:\n    - strategy: truncate\n    - strategy: nope\n", "pipelines.batch.1.strategy",
     "unknown strategy"),
    ("pipelines:\n  interactive:\n    - strategy: mask_observations\n      kept: 3\n",
     "pipelines.interactive.0.kept", "no parameter 'kept'"),
    ("pipelines:\n  interactive:\n    - strategy: mask_observations\n      keep: many\n",
     "pipelines.interactive.0.keep", "parameter 'keep' of 'mask_observations': input should be a valid integer, "
                                     "not 'many' \\(keep: tool results"),
    ("pipelines:\n  interactive:\n    - strategy: truncate\n      target: yes\n",
     "pipelines.interactive.0.target", "valid number, not True"),
    ("pipelines:\n  interactive:\n    - trigger: 0.5\n", "pipelines.interactive.0.strategy",
     "names its strategy"),
    ("pipelines:\n  interactive:\n    - strategy: prune\n      trigger: 2\n", "pipelines.interactive.0.trigger",
     "less than or equal to 1"),
    ("pipelines:\n  batch:\n    - strategy: role_selective\n      llm: true\n", "pipelines.batch.0.strategy",
     "calls an LLM"),
    ("pipelines:\n  batch:\n    - strategy: truncate\n      tgt: 0.4\n", "pipelines.batch.0.tgt",
     "no parameter"),
])
def test_check_pipelines_refuses_bad_steps(text, key, message):
    with pytest.raises(ProfileError, match=message) as info:  # loading the profile runs the checks
        parse_profile(text, source="p.yaml")
    assert info.value.key == key and info.value.path == "p.yaml" and info.value.line is not None


def test_llm_in_batch_only_when_allowed_or_turned_off():
    allowed = parse_profile("allow_llm_in_batch: true\npipelines:\n  batch:\n    - strategy: summarize\n",
                            source="p.yaml")
    check_pipelines(allowed)
    off = parse_profile("pipelines:\n  batch:\n    - strategy: checkpoint\n      llm: false\n"
                        "    - strategy: sliding_window\n      rolling: false\n"
                        "    - strategy: role_selective\n", source="p.yaml")
    check_pipelines(off)


def test_every_strategy_is_a_step_class_that_declares_its_parameters_and_its_apply():
    assert known() == ["checkpoint", "dedupe", "distill", "mask_observations", "prune", "role_selective",
                                "settle", "sliding_window", "summarize", "truncate"]
    assert set(typing.get_args(typing.get_args(registry.Step)[0])) == set(kinds().values())
    for name, step in kinds().items():
        assert step.model_fields["strategy"].default == name and set(step.model_fields) > COMMON
        assert StrategyConfig(strategy=name) == step() and type(StrategyConfig(strategy=name)) is step
        assert step.model_config.get("extra") == "forbid"  # an accepted key is a declared one
        assert step.apply is not StrategyConfig.apply  # the class is the strategy, not only its parameters


def test_a_step_built_from_a_name_is_validated_and_typed():
    step = StrategyConfig(strategy="checkpoint", trigger=0, llm=False, keep_turns=1)
    assert isinstance(step, CheckpointStep)
    assert step.model_dump(exclude_unset=True, exclude=COMMON) == {"keep_turns": 1, "llm": False}  # parameters set
    assert not step.needs_llm() and CheckpointStep().needs_llm() and not RoleSelectiveStep().needs_llm()
    with pytest.raises(ValidationError):
        StrategyConfig(strategy="truncate", target_scale=0.5)  # accepted but unused keys are impossible
    with pytest.raises(ValidationError):
        TruncateStep(keep_user_tokens=-1)
    with pytest.raises(ValidationError, match="frozen"):
        step.keep_turns = 2  # a step is a frozen configuration: the same step always does the same thing


# --- small hand-made views ----------------------------------------------------------------------


def _entries(messages, turns=None) -> list[Entry]:
    return [Entry(m, count_message(m), i, i, turns[i] if turns else i) for i, m in enumerate(messages)]


def _with(view: list[Entry], messages) -> list[Entry]:
    seq = max(e.end for e in view) + 1
    turn = max(e.turn for e in view) + 1
    return [*view, *(Entry(m, count_message(m), seq + i, seq + i, turn + i) for i, m in enumerate(messages))]


def _calls_view(calls, spacing: int = 1, task: str = "task") -> list[Entry]:
    """system, task, then one unit (assistant + result) per ``(tool, args, result)``, call ids c1.."""
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": task}]
    turns = [0, 0]
    for n, (name, args, result) in enumerate(calls, 1):
        call = tool_call(f"c{n}", name, args)
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": result})
        turns += [n * spacing - spacing + 1] * 2
    return _entries(messages, turns)


def _long_view(units: int, lines: int = 40, dead: bool = False) -> list[Entry]:
    calls = []
    for n in range(units):
        result = "cat: /srv/gone.txt: No such file or directory" if dead and n == 1 else \
            "\n".join(f"f{n} line {i}: port=8080" for i in range(lines))
        if n == 2:
            result += f"\n{PINS[0]}"
        calls.append(("shell", json.dumps({"command": f"cat f{n}.txt"}), result))
    return _calls_view(calls, task="Fix the failing test in /srv/app.")


def test_a_labelled_step_without_a_trigger_of_its_own_is_in_force_past_the_profiles():
    """Mutation testing (docs/mutation.md): every labelled step of the bundled profiles sets its own
    trigger, so nothing checked that ``rule_in_force`` falls back to the profile's."""
    from ctxagent.strategies.pipeline import rule_in_force

    budget = Budget(window=1_000, tools=0, reserved=0, target=0.5, trigger=0.8)
    steps = [TruncateStep(rule="cut")]

    def view(tokens: int) -> list[Entry]:
        return [Entry({"role": "system", "content": "s"}, 10, 0, 0, 0),
                Entry({"role": "user", "content": "t"}, tokens, 1, 1, 1)]

    assert rule_in_force(steps, view(700), budget, 3) == "no management"
    assert rule_in_force(steps, view(850), budget, 3) == "cut"
