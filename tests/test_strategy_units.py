"""Small pieces of the strategy family in milliseconds: the registry's checks, the tool-call
helpers strategies name calls with, the checkpoint's rendering and parsing of odd values, and each
rule of the pipeline (``changes``, ``replay``, ``fires``, the second and third passes), of
``dedupe``, ``mask_observations``, ``prune``, ``sliding_window``, ``summarize`` and the summarizer calls
(``summarizing``), ``role_selective``, ``distill`` and its rendering helpers stated exactly on hand-built
views (issue 17, docs/mutation-strategies-a.md to -d.md). The laws on random views are in test_strategies.py."""

from __future__ import annotations

import json
import weakref
from dataclasses import replace
from typing import Literal

import pytest

from ctxagent.errors import ProfileError, UsageError
from ctxagent.handles import base_handle
from ctxagent.messages import content_of, one_line, tool_call
from ctxagent.profile import parse_profile
from ctxagent.profile_schema import Profile, thrash_problem
from ctxagent.strategies.base import (
    Budget,
    Compaction,
    Entry,
    EntryMemo,
    Outcome,
    Scan,
    StrategyContext,
    groups,
    protected,
)
from ctxagent.strategies.checkpoint import (
    CheckpointStep,
    agent_call,
    deterministic_checkpoint,
    files_touched,
    parse_json_object,
    place,
    render_checkpoint,
)
from ctxagent.strategies.checks import check_gaps, check_pipelines
from ctxagent.strategies.common import (
    call_arguments,
    call_name,
    calls_of_results,
    canonical_call,
    handles_line,
    keep_pins,
    nothing_new,
    quotes_block,
    quotes_of,
    refs_of,
    replace_runs,
    replaced,
    runs_to_compact,
    short_args,
    short_call,
    size_of,
)
from ctxagent.strategies.dedupe import DedupeStep
from ctxagent.strategies.distill import DISTILL_PROMPT, DistillStep, _finish, deterministic_state, dumps, previous_state
from ctxagent.strategies.mask_observations import MaskObservationsStep, _kept
from ctxagent.strategies.pipeline import Engine, changes, fires, replay
from ctxagent.strategies.prune import PruneStep, is_dead
from ctxagent.strategies.rendering import FACT_LINE_CHARS, clip, fact_lines, render, task_text
from ctxagent.strategies.role_selective import FINDINGS_PROMPT, RoleSelectiveStep, conclusion, head_tail
from ctxagent.strategies.sliding_window import SlidingWindowStep
from ctxagent.strategies.step import StrategyConfig, kinds, known
from ctxagent.strategies.summarize import (
    SUMMARY_PROMPT,
    SummarizeStep,
    failure,
    summarize_run,
    summary_message,
    under_target,
)
from ctxagent.strategies.summarizing import (
    CHUNK_PROMPT,
    MARGIN_TOKENS,
    MAX_COMBINE_ROUNDS,
    SummaryFailed,
    call,
    check,
    chunks,
    condense,
    fits,
    pins_block,
    room,
)
from ctxagent.strategies.truncate import TruncateStep
from ctxagent.tokens import PER_REQUEST, count_message, count_text
from test_strategies import _calls_view, _entries, _long_view, ctx_for, good, raises


def test_a_strategy_declared_twice_is_refused_and_an_unknown_name_is_named_with_the_known_ones():
    before = kinds()
    with pytest.raises(TypeError, match=r"'truncate' is declared twice: TruncateStep and .*Impostor"):
        class Impostor(StrategyConfig):
            strategy: Literal["truncate"] = "truncate"

    class Variant(TruncateStep):  # keeps its parent's name: a variant of truncate, not a second one
        keep_user_tokens: float = 0.0

    assert kinds() == before and Variant().strategy == "truncate"  # the registry is unchanged
    with pytest.raises(UsageError) as info:
        StrategyConfig(strategy="nope")
    assert str(info.value) == ("unknown strategy 'nope'; known: checkpoint, dedupe, distill, mask_observations, "
                               "prune, role_selective, settle, sliding_window, summarize, truncate")


def test_content_of_joins_text_parts_and_reads_none_as_empty():
    parts = [{"type": "text", "text": "a"}, "junk", {"type": "image_url"}, {"type": "text", "text": "b"}]
    assert content_of({"role": "user", "content": parts}) == "ab"
    assert content_of({"role": "assistant", "content": None}) == ""


def test_calls_are_named_in_short_whatever_their_arguments():
    assert (call_name(None), short_call(None)) == ("?", "?()")
    shell = tool_call("c", "shell", '{"command": "ls -la", "timeout": 5}')
    assert short_call(shell) == "shell(command=ls -la, timeout=5)"
    assert short_args("not json {") == "not json {"
    assert short_args("[1, 2]") == "[1, 2]"
    assert short_args("   ") == ""
    assert short_args(json.dumps({"text": "x" * 200}), limit=20).startswith("text=xxx")
    assert len(short_args(json.dumps({"text": "x" * 200}), limit=20)) <= 20
    assert canonical_call(tool_call("c", "read", '{"b": 1,  "a": 2}')) == ("read", '{"a":2,"b":1}')
    assert canonical_call(tool_call("c", "read", " {broken ")) == ("read", "{broken")


def test_render_checkpoint_writes_known_fields_in_order_then_others():
    text = render_checkpoint({"extra_notes": [{"file": "a.py", "line": 3}, 7, ""], "goal": "  fix\n the  test ",
                              "key_facts": ["port 8080"], "phase": None, "constraints": ""})
    lines = text.splitlines()
    assert lines[:3] == ["goal: fix the test", "key facts:", "- port 8080"]
    assert lines[-1] == "extra notes: file: a.py; line: 3; 7"
    assert "phase" not in text and "constraints" not in text
    assert render_checkpoint({"decisions": [["é", 1]]}) == 'decisions:\n- ["é", 1]'  # JSON, not escaped


@pytest.mark.parametrize("reply", ['```json\n{"goal": "g"}\n```', '{"goal": "g"}'])
def test_parse_json_object_takes_a_fenced_or_bare_object(reply):
    assert parse_json_object(reply) == {"goal": "g"}


@pytest.mark.parametrize("reply", ["[1]", "{}", "not json"])
def test_parse_json_object_refuses_anything_else(reply):
    with pytest.raises(ValueError):
        parse_json_object(reply)


def _entry(message: dict, seq: int = 0) -> Entry:
    return Entry(message, 10, seq, seq, 1)


def test_agent_call_is_the_newest_assistants_checkpoint_call_with_an_object():
    user = _entry({"role": "user", "content": "go"})
    assert agent_call([user]) is None
    calls = [tool_call("c1", "checkpoint", "not json"), tool_call("c2", "checkpoint", "[]"),
             tool_call("c3", "shell", '{"goal": "x"}'), tool_call("c4", "checkpoint", '{"goal": "g"}')]
    asks = _entry({"role": "assistant", "content": None, "tool_calls": calls}, 1)
    assert agent_call([user, asks]) == ("c4", {"goal": "g"})
    assert agent_call([user, asks, _entry({"role": "assistant", "content": "done"}, 2)]) is None


def test_files_touched_reads_path_arguments_of_valid_calls_only():
    calls = [tool_call("a", "read", '{"path": "src/a.py"}'), tool_call("b", "edit", "broken"),
             tool_call("c", "edit", '["src/b.py"]'), tool_call("d", "copy", '{"files": ["x.py", "y.py"], "n": 1}')]
    entry = _entry({"role": "assistant", "content": None, "tool_calls": calls})
    assert files_touched([entry]) == ["src/a.py", "x.py", "y.py"]


# --- pipeline: changes, replay, fires, the passes of run ---------------------------------------


def _e(message, seq, turn=None, **kw) -> Entry:
    return Entry(message, count_message(message), seq, seq, seq if turn is None else turn, **kw)


def _old() -> list[Entry]:
    pins = Entry({"role": "user", "content": "[pinned facts] port 8080"}, 9, -1, -1, 0, kind="pins")
    call1 = tool_call("c1", "shell", '{"command": "ls"}')
    call2 = tool_call("c2", "shell", '{"command": "pwd"}')
    return [pins, _e({"role": "system", "content": "sys"}, 0), _e({"role": "user", "content": "task"}, 1),
            _e({"role": "assistant", "content": None, "tool_calls": [call1]}, 2),
            _e({"role": "tool", "tool_call_id": "c1", "content": "a\n" * 50}, 3, handle="@c1"),
            _e({"role": "assistant", "content": "a"}, 4), _e({"role": "assistant", "content": "b"}, 5),
            _e({"role": "user", "content": "u"}, 6),
            _e({"role": "assistant", "content": None, "tool_calls": [call2]}, 7),
            _e({"role": "tool", "tool_call_id": "c2", "content": "b\n" * 50}, 8, handle="@c2.1", offloaded=True),
            _e({"role": "assistant", "content": "c"}, 9), _e({"role": "user", "content": "go"}, 10)]


def test_changes_name_each_replacement_and_each_removed_run_and_replay_rebuilds_the_new_view():
    old = _old()
    note_message = {"role": "user", "content": "[note of #2-#3]"}
    note = Entry(note_message, 7, 2, 3, 3, kind="truncate", refs=("@c1",), quotes=("q",))
    stub_message = {"role": "tool", "tool_call_id": "c2", "content": "[stub]"}
    stub = Entry(stub_message, 5, 8, 8, 8, kind="mask_observations", handle="@c2.1", offloaded=True)
    copy = Entry(dict(old[7].message), old[7].tokens, 6, 6, 6)  # equal, not the same object: unchanged
    new = [old[0], old[1], old[2], note, copy, old[8], stub, old[11]]
    found = changes(old, new, "prune")
    assert found == [
        Compaction("truncate", 2, 3, note_message, 7, old[3].tokens + old[4].tokens, ("@c1",), ("q",)),
        Compaction("prune", 4, 5, None, 0, old[5].tokens + old[6].tokens),
        Compaction("mask_observations", 8, 8, stub_message, 5, old[9].tokens),
        Compaction("prune", 9, 9, None, 0, old[10].tokens),
    ]
    assert replay(old, found) == new
    assert changes(old, list(old), "prune") == [] and changes(old, old[:1] + old[1:], "x") == []


def test_replay_keeps_the_handle_of_one_replaced_tool_result_only():
    old = _old()
    tool = {"role": "tool", "tool_call_id": "c2", "content": "[short]"}
    one = replay(old, [Compaction("role_selective", 8, 8, tool, 3, 50)])
    assert (one[9].handle, one[9].offloaded, one[9].kind, one[9].turn) == ("@c2.1", True, "role_selective", 8)
    two = replay(old, [Compaction("x", 8, 9, tool, 3, 50)])  # a call and its result: no single handle
    assert (two[9].handle, two[9].offloaded, two[9].end) == (None, False, 9)
    user = replay(old, [Compaction("x", 3, 3, {"role": "user", "content": "n"}, 3, 50)])
    assert (user[4].handle, user[4].offloaded) == (None, False)


def test_replay_skips_a_range_with_no_whole_entry_and_applies_the_next_compactions():
    old = _old()
    note = Compaction("summarize", 2, 3, {"role": "user", "content": "s"}, 1, 60)
    view = replay(old, [note])
    assert [e.start for e in view] == [-1, 0, 1, 2, 4, 5, 6, 7, 8, 9, 10]
    assert replay(view, [Compaction("x", 3, 5, None, 0, 0)]) == [*view[:4], *view[6:]]  # the note is not split
    later = Compaction("x", 10, 10, None, 0, 2)
    assert replay(view, [Compaction("x", 20, 30, None, 0, 0), later]) == view[:-1]
    assert replay(view, [Compaction("x", 2, 2, None, 0, 0), later]) == view[:-1]
    whole = replay(view, [Compaction("summarize", 2, 10, {"role": "user", "content": "all"}, 1, 99)])
    assert [(e.start, e.end, e.turn) for e in whole] == [(-1, -1, 0), (0, 0, 0), (1, 1, 1), (2, 10, 10)]


def _step(**kw) -> StrategyConfig:
    return StrategyConfig(strategy="truncate", **kw)


def test_a_step_fires_from_its_min_turns_on_and_on_its_turn_count():
    view = _calls_view([("shell", "{}", "x")])
    ctx = ctx_for(view)

    def at(step, turn):
        return fires(step, view, replace(ctx, turn=turn), 0.0)

    assert [at(_step(min_turns=3), t) for t in (2, 3)] == [False, True]
    assert [at(_step(every_turns=3), t) for t in (0, 1, 2, 3, 4, 6)] == [False, False, False, True, False, True]
    assert [at(_step(every_turns=1), t) for t in (0, 1, 2)] == [False, True, True]


def test_changes_name_runs_removed_at_the_end_and_between_kept_entries():
    old = _old()
    t = [e.tokens for e in old]
    assert changes(old, old[:-2], "x") == [Compaction("x", 9, 10, None, 0, t[10] + t[11])]
    assert changes(old, [*old[:6], *old[7:10], old[11]], "x") == [Compaction("x", 5, 5, None, 0, t[6]),
                                                                 Compaction("x", 9, 9, None, 0, t[10])]
    stub_message = {"role": "tool", "tool_call_id": "c2", "content": "[stub]"}
    stub = Entry(stub_message, 5, 8, 8, 8, kind="mask_observations")
    assert changes(old, [*old[:8], stub, *old[10:]], "x") == [
        Compaction("x", 7, 7, None, 0, t[8]), Compaction("mask_observations", 8, 8, stub_message, 5, t[9])]
    note = Entry({"role": "user", "content": "n"}, 2, 9, 10, 10, kind="summarize")
    assert changes(old, [*old[:10], note], "x") == [Compaction("summarize", 9, 10, note.message, 2, t[10] + t[11])]
    same_text = replace(old[11], kind="role_selective")
    assert changes(old, [*old[:11], same_text], "x") == [
        Compaction("role_selective", 10, 10, old[11].message, old[11].tokens, t[11])]
    extra = _e({"role": "user", "content": "new"}, 11)
    assert changes(old, [*old, extra], "x") == [Compaction("message", 11, 11, extra.message, extra.tokens, 0)]


def _units(n: int, lines: int = 40):
    return _calls_view([("shell", f'{{"command": "cat f{k}"}}', "\n".join(f"f{k} line {i}: port=8080"
                                                                        for i in range(lines)))
                        for k in range(n)])


def _window_for(view, fraction: float) -> int:
    ctx = ctx_for(view)
    return int(ctx.budget.total(view) / fraction)


def test_a_build_that_breaks_the_cached_prefix_runs_the_batched_steps_again_from_that_point():
    """The summary fails (a warning, truncation instead) and breaks the prefix; masking, held back
    for results already sent, then masks the older results after the truncation note too."""
    view = _units(8)
    steps = [StrategyConfig(strategy="summarize", keep_turns=2),
             StrategyConfig(strategy="mask_observations", trigger=0, keep=1, batch=100)]
    ctx = replace(ctx_for(view, window=_window_for(view, 0.9), summarizer=raises, pins=()),
                  free_from=view[-1].end + 1)
    out = Engine().run(view, steps, ctx)
    kinds = [c.strategy for c in out.compactions]
    assert kinds[0] == "truncate" and set(kinds[1:]) == {"mask_observations"} and len(kinds) > 1
    assert len(out.warnings) == 1 and out.warnings[0].startswith("summarize: the summary of messages #")
    assert out.view == replay(view, out.compactions)
    results = [e.start for e in view if e.role == "tool"]
    assert sorted(e.start for e in out.offloads) == results[:-1]  # dropped by truncation or masked


def test_a_step_that_grows_the_view_past_an_earlier_trigger_makes_the_pipeline_run_again():
    """dedupe flags a repeated call (the view grows) over the trigger truncation checked before it."""
    view = _units(6)
    view = _calls_view([*[("shell", f'{{"command": "cat f{k}"}}', view[2 * k + 3].message["content"])
                          for k in range(6)], ("shell", '{"command": "cat f0"}', "changed")])
    ctx = ctx_for(view)
    window = int(ctx.budget.total(view) / 0.8) + 1
    ctx = ctx_for(view, window=window)
    assert not ctx.budget.over(view, 0.8)
    steps = [StrategyConfig(strategy="truncate"), StrategyConfig(strategy="dedupe", trigger=0.1)]
    out = Engine().run(view, steps, ctx)
    kinds = [c.strategy for c in out.compactions]
    assert kinds[0] == "dedupe" and "truncate" in kinds[1:]
    assert not ctx.budget.over(out.view, 0.8)
    assert out.view == replay(view, out.compactions)


def test_a_step_that_changes_nothing_does_not_stop_the_steps_after_it():
    view = _calls_view([("shell", '{"command": "ls"}', "x " * 80), ("read_file", '{"path": "a"}', "x " * 80)])
    steps = [StrategyConfig(strategy="mask_observations", trigger=0),
             StrategyConfig(strategy="dedupe", trigger=0)]
    out = Engine().run(view, steps, ctx_for(view))
    assert [(c.strategy, c.start) for c in out.compactions] == [("dedupe", 5)]


# --- dedupe ------------------------------------------------------------------------------------


LONG = "exit code: 0\n" + "the same long output line\n" * 20


def test_dedupe_returns_the_view_itself_when_no_result_repeats():
    view = _calls_view([("shell", '{"command": "ls"}', LONG), ("shell", '{"command": "pwd"}', LONG + "x")])
    out = DedupeStep().apply(view, ctx_for(view))
    assert out.view is view and (out.compactions, out.offloads) == ([], [])


def test_dedupe_replaces_a_repeat_from_free_from_on_and_leaves_one_already_sent():
    view = _calls_view([("shell", '{"command": "ls"}', LONG), ("read_file", '{"path": "a"}', LONG)])
    at = DedupeStep().apply(view, replace(ctx_for(view), free_from=view[5].start))
    assert at.view[5].message["content"] == f"[same result as turn 1, handle {base_handle('c1')}]"
    assert at.view[5].kind == "dedupe" and at.view[:5] == view[:5]
    assert at.compactions == []  # the pipeline records the change (changes()), not the strategy
    after = DedupeStep().apply(view, replace(ctx_for(view), free_from=view[5].start + 1))
    assert after.view is view


def test_dedupe_references_only_results_over_min_tokens():
    view = _calls_view([("shell", '{"command": "ls"}', LONG), ("read_file", '{"path": "a"}', LONG)])
    size = view[5].tokens
    assert DedupeStep(min_tokens=size).apply(view, ctx_for(view)).view is view
    out = DedupeStep(min_tokens=size - 1).apply(view, ctx_for(view))
    assert out.view[5].kind == "dedupe"


def test_dedupe_of_the_same_view_follows_a_change_of_min_tokens():
    view = _calls_view([("shell", '{"command": "ls"}', LONG), ("read_file", '{"path": "a"}', LONG)])
    scan = Scan()  # one session's scan: its fold starts over for other parameters
    assert DedupeStep().apply(view, ctx_for(view), scan).view[5].kind == "dedupe"
    assert DedupeStep(min_tokens=10**6).apply(view, ctx_for(view), scan).view is view


def test_dedupe_compares_original_tool_results_only():
    user = {"role": "user", "content": LONG}
    view = _entries([{"role": "system", "content": "sys"}, user,
                     {"role": "assistant", "content": LONG}])
    view += _calls_view([("shell", '{"command": "ls"}', LONG)])[2:]
    view = [replace(e, start=i, end=i) for i, e in enumerate(view)]
    assert DedupeStep().apply(view, ctx_for(view)).view is view  # same text as the task and a reply: not a repeat
    masked = _calls_view([("shell", '{"command": "ls"}', LONG), ("read_file", '{"path": "a"}', LONG)])
    masked[3] = replace(masked[3], kind="mask_observations")
    assert DedupeStep().apply(masked, ctx_for(masked)).view is masked  # a replacement is not referenced


def test_results_whose_call_is_not_in_the_view_are_never_flagged_as_repeated_calls():
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"},
                {"role": "tool", "tool_call_id": "x1", "content": "one"}, {"role": "user", "content": "go"},
                {"role": "tool", "tool_call_id": "x2", "content": "two"}, {"role": "user", "content": "go on"}]
    view = _entries(messages)
    assert DedupeStep().apply(view, ctx_for(view)).view is view


def test_dedupe_offloads_every_earlier_result_its_reference_names():
    view = _calls_view([("shell", '{"command": "ls"}', LONG), ("shell", '{"command": "pwd"}', "/srv"),
                        ("shell", '{"command": "pwd"}', LONG)])
    out = DedupeStep().apply(view, ctx_for(view))
    assert out.view[7].message["content"] == (
        f"[this call was already made at turn 2; its result is handle {base_handle('c2')}] "
        f"[same result as turn 1, handle {base_handle('c1')}]")
    assert sorted(e.start for e in out.offloads) == [3, 5, 7]


def test_a_repeated_call_too_short_to_reference_is_flagged_and_names_only_its_call():
    view = _calls_view([("shell", '{"command": "ls"}', "ok"), ("shell", '{"command": "pwd"}', "ok"),
                        ("shell", '{"command": "pwd"}', "ok")])
    out = DedupeStep(min_tokens=0).apply(view, ctx_for(view))
    flag = f"[this call was already made at turn 2; its result is handle {base_handle('c2')}]"
    assert [e.message["content"] for e in out.view[3::2]] == ["ok", "ok", f"{flag}\nok"]
    assert out.view[7].kind == "dedupe"
    assert sorted(e.start for e in out.offloads) == [5, 7]  # not c1: the flag does not name it


def test_a_reference_as_long_as_the_result_is_not_made():
    reference = f"[same result as turn 1, handle {base_handle('c1')}]"
    view = _calls_view([("shell", '{"command": "ls"}', reference), ("read_file", '{"path": "a"}', reference)])
    assert DedupeStep(min_tokens=0).apply(view, ctx_for(view)).view is view


def test_dedupe_reference_keeps_the_pinned_facts_of_the_result():
    pinned = LONG + "deploy key id-7f3a\n"
    view = _calls_view([("shell", '{"command": "ls"}', pinned), ("read_file", '{"path": "a"}', pinned)])
    out = DedupeStep().apply(view, ctx_for(view, pins=("id-7f3a",)))
    assert out.view[5].message["content"] == (f"[same result as turn 1, handle {base_handle('c1')}]\n"
                                              "[pinned] id-7f3a")


def test_dedupe_answers_for_the_view_it_is_given_whatever_it_saw_before():
    """The same result entries in two views: each reference names the earlier result of its own view
    (the per-entry memo of the session's scan is keyed by what the reference names)."""
    units = _calls_view([("shell", '{"command": "ls"}', LONG), ("shell", '{"command": "pwd"}', "/srv"),
                         ("shell", '{"command": "pwd"}', "/srv/app"), ("shell", '{"command": "pwd"}', LONG)])
    scan = Scan()
    first = DedupeStep().apply([*units[:6], *units[8:]], ctx_for(units), scan)  # without c3
    second = DedupeStep().apply([*units[:4], *units[6:]], ctx_for(units), scan)  # without c2
    h = base_handle
    assert first.view[-1].message["content"] == (
        f"[this call was already made at turn 2; its result is handle {h('c2')}] "
        f"[same result as turn 1, handle {h('c1')}]")
    assert second.view[-1].message["content"] == (
        f"[this call was already made at turn 3; its result is handle {h('c3')}] "
        f"[same result as turn 1, handle {h('c1')}]")
    without_c1 = DedupeStep().apply([*units[:2], *units[4:]], ctx_for(units), scan)
    assert without_c1.view[-1].message["content"].startswith(
        f"[this call was already made at turn 2; its result is handle {h('c2')}]\n")


# --- mask_observations ---------------------------------------------------------------------------


BIG = "x\n" * 300


def _results(n: int, content: str = BIG):
    return _calls_view([("shell", f'{{"command": "cat f{k}"}}', content) for k in range(n)])


def test_kept_counts_the_newest_results_while_their_tokens_fit():
    view = _calls_view([("shell", "{}", "a " * 10), ("shell", "{}", "b " * 20), ("shell", "{}", "c " * 30)])
    recent = [3, 5, 7]
    b, c = view[5].tokens, view[7].tokens
    assert [_kept(view, recent, m) for m in (b + c, b + c - 1, 0, 10**9)] == [2, 1, 1, 3]
    assert _kept(view, [], 10**9) == 0


def test_mask_stub_is_exactly_the_call_the_size_and_the_handle():
    args = '{"command": "' + "a" * 200 + '"}'
    view = _calls_view([("shell", args, BIG), ("shell", "{}", "ok")])
    out = MaskObservationsStep(keep=1).apply(view, ctx_for(view))
    call = tool_call("c1", "shell", args)
    assert out.view[3].message["content"] == (
        f"[ctxagent masked an old tool result: {short_call(call, 80)}, {view[3].tokens:,} tokens; "
        f"full result: {base_handle('c1')} (read_output or grep_output)]")
    assert out.view[3].kind == "mask_observations" and out.compactions == []


def test_mask_stub_keeps_the_pinned_facts_of_each_request():
    view = _results(2, BIG + "deploy key id-7f3a\n")
    scan = Scan()  # the same session, its pins changed: the fold starts over
    plain = MaskObservationsStep(keep=1).apply(view, ctx_for(view, pins=()), scan)
    assert "[pinned]" not in plain.view[3].message["content"]
    pinned = MaskObservationsStep(keep=1).apply(view, ctx_for(view, pins=("id-7f3a",)), scan)
    assert pinned.view[3].message["content"].endswith("\n[pinned] id-7f3a")


def test_mask_of_the_same_view_follows_a_change_of_min_tokens():
    view = _results(2)
    scan = Scan()
    assert MaskObservationsStep(keep=1).apply(view, ctx_for(view), scan).view[3].kind == "mask_observations"
    assert MaskObservationsStep(keep=1, min_tokens=10**6).apply(view, ctx_for(view), scan).view is view


def test_mask_leaves_results_of_at_most_min_tokens_and_results_a_stub_would_not_shrink():
    view = _results(2)
    assert MaskObservationsStep(keep=1, min_tokens=view[3].tokens).apply(view, ctx_for(view)).view \
        is view
    tiny = _results(2, "ok")
    assert MaskObservationsStep(keep=1, min_tokens=0).apply(tiny, ctx_for(tiny)).view is tiny


def test_an_offloaded_result_is_masked_whatever_its_size_and_not_offloaded_again():
    view = _results(2, "y " * 45)
    assert view[3].tokens <= 50
    view[3] = replace(view[3], handle="@c1.2", offloaded=True)
    out = MaskObservationsStep(keep=1).apply(view, ctx_for(view))
    assert "@c1.2" in out.view[3].message["content"] and out.offloads == []


def test_mask_keeps_every_result_when_keep_and_keep_tokens_cover_them():
    view = _results(3)
    assert MaskObservationsStep(keep=10, keep_tokens=1.0).apply(view, ctx_for(view)).view is view


def test_already_sent_results_are_masked_only_once_batch_of_them_qualify():
    view = _results(3)
    sent = {"free_from": view[-1].end + 1}

    def masked(params, **ctx):
        out = MaskObservationsStep(**params).apply(view, replace(ctx_for(view, window=100_000), **ctx))
        return [e.start for e in out.view if e.kind == "mask_observations"]

    assert masked({"keep": 1, "batch": 1}, **sent) == [3, 5]
    assert masked({"keep": 1, "batch": 2}, **sent) == [3, 5]
    assert masked({"keep": 2, "batch": 1}, **sent) == [3]
    assert masked({"keep": 1, "batch": 3}, **sent) == []
    assert masked({"keep": 2}, **sent) == []  # batch defaults to keep: one result qualifies, two needed
    assert masked({"keep": 0}, **sent) == [3, 5, 7]  # keep 0: batch 1
    one = _results(1)
    alone = MaskObservationsStep(keep=0).apply(one, replace(ctx_for(one, window=100_000), **sent))
    assert alone.view[3].kind == "mask_observations"
    assert masked({"keep": 1, "batch": 3}, free_from=5) == [5]  # from free_from on, even under the batch
    over = MaskObservationsStep(keep=1, batch=3).apply(view, replace(ctx_for(view, window=2_000), **sent))
    assert over.view[3].kind == over.view[5].kind == "mask_observations"  # over the trigger: whatever the batch


# --- prune -------------------------------------------------------------------------------------


GONE = "exit code: 1\n" + "cat: /a: No such file or directory\n" * 30


def _dead_ends_view():
    """Two wholly dead units, a unit with one dead and one good result, a success, the current turn."""
    a, b = tool_call("c1", "shell", '{"command": "cat /a"}'), tool_call("c2", "shell", '{"command": "cat /b"}')
    c, r = tool_call("c3", "shell", '{"command": "cat /c"}'), tool_call("c4", "read_file", '{"path": "x"}')
    d = tool_call("c5", "shell", '{"command": "cat /d"}')
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"},
                {"role": "assistant", "content": None, "tool_calls": [a]},
                {"role": "tool", "tool_call_id": "c1", "content": GONE},
                {"role": "assistant", "content": None, "tool_calls": [b]},
                {"role": "tool", "tool_call_id": "c2", "content": "exit code: 2\nboom"},
                {"role": "assistant", "content": None, "tool_calls": [c, r]},
                {"role": "tool", "tool_call_id": "c3", "content": GONE.replace("/a", "/c")},
                {"role": "tool", "tool_call_id": "c4", "content": "x = 1"},
                {"role": "assistant", "content": None, "tool_calls": [d]},
                {"role": "tool", "tool_call_id": "c5", "content": "exit code: 0\nok"},
                {"role": "user", "content": "go on"}]
    return _entries(messages, [0, 0, 1, 1, 2, 2, 3, 3, 3, 9, 9, 10])


def test_consecutive_dead_units_become_one_note_and_a_dead_result_among_good_ones_a_stub():
    view = _dead_ends_view()
    ctx = ctx_for(view)
    out = PruneStep().apply(view, ctx)
    note = out.view[2]
    assert note.message == {"role": "user", "content": (
        "[ctxagent pruned dead ends (later attempts succeeded): "
        f"shell(command=cat /a) → exit code: 1 | cat: /a: No such file or directory ({base_handle('c1')}); "
        f"shell(command=cat /b) → exit code: 2 | boom ({base_handle('c2')})]")}
    assert (note.kind, note.start, note.end, note.turn) == ("prune", 2, 5, 2)
    assert note.tokens == count_message(note.message) and note.refs == (base_handle("c1"), base_handle("c2"))
    assert out.view[3] == view[6] and out.view[5:] == view[8:]  # the call of the stubbed result, the rest
    stub = out.view[4]
    assert stub.message["content"] == (
        "[ctxagent pruned dead end: shell(command=cat /c) → exit code: 1 | cat: /c: No such file or directory; "
        f"superseded by a later shell call; full result: {base_handle('c3')}]")
    assert (stub.kind, stub.start, stub.message["tool_call_id"]) == ("prune", 7, "c3")
    assert [e.start for e in out.offloads] == [3, 5, 7] and out.compactions == []


def test_pruned_notes_and_stubs_keep_the_pinned_facts_of_what_they_replace():
    view = _dead_ends_view()
    out = PruneStep().apply(view, ctx_for(view, pins=("No such file or directory",)))
    assert out.view[2].message["content"].count("No such file or directory") == 1  # already in the note
    pins = ("boom",)
    out = PruneStep().apply(view, ctx_for(view, pins=pins))
    assert "[pinned]" not in out.view[2].message["content"]
    gone_pin = ("/a: No such file or directory\ncat",)  # spans two lines: only in the result itself
    out = PruneStep().apply(view, ctx_for(view, pins=gone_pin))
    assert out.view[2].message["content"].endswith("\n[pinned] " + gone_pin[0])


def test_a_dead_end_is_pruned_from_min_age_turns_on():
    view = _dead_ends_view()  # the dead end among good results is of turn 3, the session at turn 10
    old_enough = PruneStep(min_age_turns=7).apply(view, ctx_for(view))
    assert [e.kind for e in old_enough.view[2:5]] == ["prune", "message", "prune"]
    too_young = PruneStep(min_age_turns=8).apply(view, ctx_for(view))
    assert [e.kind for e in too_young.view[2:5]] == ["prune", "message", "message"]


def test_already_sent_dead_ends_are_pruned_only_once_batch_of_them_qualify():
    view = _dead_ends_view()

    def pruned(batch, free_from):
        ctx = replace(ctx_for(view, window=100_000), free_from=free_from)
        return [e.start for e in PruneStep(batch=batch).apply(view, ctx).view if e.kind == "prune"]

    sent = view[-1].end + 1
    assert pruned(3, sent) == [2, 7]  # three dead results qualify: the note and the stub
    assert pruned(4, sent) == []
    assert pruned(4, 6) == [7]  # the unit from free_from on (not sent yet), even under the batch


def test_a_stub_is_made_only_when_smaller_and_keeps_the_pinned_facts():
    view = _dead_ends_view()
    small = [*view[:7], replace(view[7], message={**view[7].message, "content": "exit code: 1"}), *view[8:]]
    small = [replace(e, tokens=count_message(e.message)) for e in small]
    part = small[6:]  # no wholly dead unit, and the stub would be larger than the dead result
    out = PruneStep().apply(part, ctx_for(part))
    assert out.view is part and out.offloads == []
    pinned = PruneStep().apply(view, ctx_for(view, pins=("/c: No such file or directory\ncat",)))
    assert pinned.view[4].message["content"].endswith("\n[pinned] /c: No such file or directory\ncat")


def test_prune_names_each_call_cut_to_60_characters():
    view = _dead_ends_view()
    long_a = tool_call("c1", "shell", '{"command": "cat ' + "a" * 200 + '"}')
    long_c = tool_call("c3", "shell", '{"command": "cat ' + "c" * 200 + '"}')
    view[2] = Entry({**view[2].message, "tool_calls": [long_a]}, view[2].tokens, 2, 2, 1)
    view[6] = Entry({**view[6].message, "tool_calls": [long_c, view[6].message["tool_calls"][1]]},
                    view[6].tokens, 6, 6, 3)
    out = PruneStep().apply(view, ctx_for(view))
    assert out.view[2].message["content"].startswith(
        f"[ctxagent pruned dead ends (later attempts succeeded): {short_call(long_a, 60)} → exit code: 1")
    assert out.view[4].message["content"].startswith(f"[ctxagent pruned dead end: {short_call(long_c, 60)} → ")


def test_not_found_wordings_make_a_result_dead_up_to_max_tokens_only():
    def result(text):
        message = {"role": "tool", "tool_call_id": "c1", "content": text}
        return Entry(message, count_message(message), 3, 3, 1)

    gone = result("grep: pattern not found")
    assert [is_dead(gone, gone.tokens), is_dead(gone, gone.tokens - 1)] == [True, False]
    assert not is_dead(result("all good"), 200)


# --- sliding_window ----------------------------------------------------------------------------


def _spaced():
    return _calls_view([("shell", f'{{"command": "cat f{k}"}}', f"f{k} " * 300) for k in range(4)], spacing=3)


def test_window_note_states_the_messages_turns_tokens_and_transcript():
    view = _spaced()
    out = SlidingWindowStep(keep_turns=1).apply(view, ctx_for(view, window=3_000))
    tokens = sum(e.tokens for e in view[2:8])
    assert out.view[2].message == {"role": "user", "content": (
        f"[ctxagent window: messages #2-#7 (turns 1-7, {tokens} tokens) are not shown; "
        "the full transcript is at /data/sessions/x/transcript.jsonl]\n[full tool results of these messages, "
        f"by handle (read_output, grep_output): {base_handle('c1')} {base_handle('c2')} {base_handle('c3')}]")}
    assert out.view[3:] == view[8:] and out.warnings == []


def test_a_failed_rolling_summary_is_reported_and_the_note_written_instead():
    view = _spaced()
    out = SlidingWindowStep(keep_turns=1).apply(view, ctx_for(view, window=3_000, summarizer=raises))
    assert out.warnings == ["sliding_window: the rolling summary of messages #2-#7 failed (the summarizer raised "
                            "RuntimeError: provider down); wrote a deterministic window note instead"]
    assert out.view[2].message["content"].startswith("[ctxagent window: messages #2-#7 ")


def test_sliding_window_returns_the_view_itself_under_its_target_or_with_nothing_to_compact():
    view = _spaced()
    window = int(ctx_for(view).budget.total(view) / 0.7)  # over the profile's target (0.5), under 0.9
    assert SlidingWindowStep(target=0.9, keep_turns=1).apply(view, ctx_for(view, window=window)).view is view
    assert SlidingWindowStep(keep_turns=1).apply(view, ctx_for(view, window=window)).view is not view
    assert SlidingWindowStep(keep_turns=10).apply(view, ctx_for(view, window=3_000)).view is view


# --- common.py: the helpers every range strategy builds its replacements with ------------------

UNICODE = "héllo wörld — ünïcode"  # 9 tokens for the default tokenizer (o200k), 11 for gpt-4's (cl100k)


def _ctx(window: int = 1000, model: str = "gpt-4", pins: tuple[str, ...] = ()) -> StrategyContext:
    return StrategyContext(budget=Budget(window=window, tools=0, reserved=0, target=0.5, trigger=0.8),
                           model=model, pins=pins)


def _msg(role: str, content: str, seq: int, turn: int = 1, kind: str = "message", **fields) -> Entry:
    return Entry({"role": role, "content": content}, 10, seq, seq, turn, kind, **fields)


def test_the_unicode_sample_is_counted_differently_by_the_two_tokenizers():
    assert (count_text(UNICODE), count_text(UNICODE, "gpt-4")) == (9, 11)  # what the tests below rely on


def test_keep_pins_adds_the_pins_a_compaction_removed_to_its_note_in_the_compaction_and_the_view():
    view = [_msg("system", "rules", 0), _msg("user", "task: keep TASK-PIN", 1),
            _msg("assistant", "the key is K-1", 2), _msg("assistant", "and the port is K-2", 3),
            _msg("user", "go on", 4, turn=2)]
    note = {"role": "user", "content": f"[truncated 2 messages] {UNICODE}"}
    skipped = Compaction("other", 9, 9, None, 0, 5)  # no message: nothing to add pins to, and not the last one
    comp = Compaction("truncate", 2, 3, note, 7, 20, ("@a",), ("q",))
    replacement = Entry(note, 7, 2, 3, 2, "truncate", "@h", True, ("@a",), ("q",))
    offloads = [view[2]]
    outcome = Outcome([view[0], view[1], replacement, view[4]], [skipped, comp], offloads)

    got = keep_pins(view, outcome, _ctx(pins=("K-2", "TASK-PIN", "K-1", "absent")))

    fixed = {"role": "user", "content": note["content"] + "\n[pinned] K-2\n[pinned] K-1"}  # pins order; range only
    tokens = count_message(fixed, "gpt-4")
    assert tokens != count_message(fixed)  # counted for the context's model
    assert got.compactions == [skipped, Compaction("truncate", 2, 3, fixed, tokens, 20, ("@a",), ("q",))]
    assert got.view == [view[0], view[1], Entry(fixed, tokens, 2, 3, 2, "truncate", "@h", True, ("@a",), ("q",)),
                        view[4]]
    assert got.offloads == offloads


def test_keep_pins_returns_the_outcome_itself_when_no_pin_was_removed():
    view = [_msg("system", "rules", 0), _msg("user", "task", 1), _msg("assistant", "K-1 is here", 2),
            _msg("assistant", "nothing", 3), _msg("user", "go on", 4)]
    note = {"role": "user", "content": "[truncated]"}
    outcome = Outcome([view[0], view[1], view[2], Entry(note, 5, 3, 3, 1, "truncate"), view[4]],
                      [Compaction("truncate", 3, 3, note, 5, 10)], warnings=["kept"])
    assert keep_pins(view, outcome, _ctx(pins=("K-1",))) is outcome  # K-1 was not in the range
    assert keep_pins(view, outcome, _ctx()) is outcome
    assert keep_pins(view, Outcome(view), _ctx(pins=("K-1",))) == Outcome(view)


def test_canonical_call_keeps_non_ascii_arguments_as_they_are():
    assert canonical_call(tool_call("c", "write", '{"text": "héllo"}')) == ("write", '{"text":"héllo"}')


def test_refs_of_names_each_result_once_oldest_first_and_keeps_the_newest_that_fit_the_window():
    results = [Entry({"role": "tool", "tool_call_id": "c9", "content": "x"}, 10, 1, 1, 1),
               _msg("tool", "y", 2, handle="@a"), _msg("assistant", "z", 3, handle="@not-a-result"),
               _msg("assistant", "note", 4, kind="summarize", refs=("@a", "@r"))]
    assert refs_of(results, 1000) == (base_handle("c9"), "@a", "@r")
    many = [_msg("tool", "x", i, handle=f"@h{i}") for i in range(30)]
    assert refs_of(many, 1000) == tuple(f"@h{i}" for i in range(10, 30))  # at least 20
    assert refs_of(many, 3000) == tuple(f"@h{i}" for i in range(5, 30))  # 5% of the window, 6 tokens each


def test_quotes_of_keeps_user_messages_and_earlier_quotes_once_newest_first_within_the_budget():
    entries = [_msg("user", "alpha", 1), _msg("assistant", "note", 2, kind="summarize", quotes=("beta",)),
               _msg("user", "NOTE", 3, kind="truncate", quotes=("alpha",)), _msg("assistant", "gamma", 4)]
    each = {q: count_text(q) + 2 for q in ("alpha", "beta")}
    both = each["alpha"] + each["beta"]
    assert quotes_of(entries, 1000) == ("alpha", "beta")
    assert quotes_of(entries, both) == ("alpha", "beta")  # exactly the budget still fits
    assert quotes_of(entries, both - 1) == ("beta",)  # the newest first
    assert quotes_of(entries, each["beta"] - 1) == ()
    # the newest that does not fit stops the walk, even when an older one would
    assert quotes_of([_msg("user", "a", 1), _msg("user", "word " * 50, 2)], 10) == ()


def test_quotes_of_counts_in_the_models_tokens():
    entries = [_msg("user", UNICODE, 1)]
    assert quotes_of(entries, 11) == (UNICODE,)  # 9 + 2
    assert quotes_of(entries, 12, "gpt-4") == ()  # 11 + 2
    assert quotes_of(entries, 13, "gpt-4") == (UNICODE,)


def test_the_quotes_block_and_the_handles_line_word_what_a_replacement_ends_with():
    assert quotes_block(()) == ""
    assert quotes_block(("a", "b")) == "\n[user messages of these turns, verbatim]\n> a\n> b"
    assert handles_line(()) == ""
    assert handles_line(("@a", "@b")) == (
        "\n[full tool results of these messages, by handle (read_output, grep_output): @a @b]")


def test_size_of_reads_an_offloaded_previews_own_size_else_the_entrys_tokens():
    preview = _msg("tool", "head...\n[full output: 80 lines, ~1,234 tokens; saved as @abc]", 1)
    assert size_of(preview) == "~1,234"
    assert size_of(Entry({"role": "tool", "content": "plain"}, 12345, 1, 1, 1)) == "12,345"


def test_replaced_keeps_range_turn_and_handle_and_counts_the_new_message_for_the_model():
    entry = Entry({"role": "tool", "tool_call_id": "c1", "content": "long"}, 500, 3, 4, 2, "message", "@h", True)
    message = {"role": "tool", "tool_call_id": "c1", "content": UNICODE}
    assert replaced(entry, UNICODE, _ctx(), "mask") == Entry(message, count_message(message, "gpt-4"), 3, 4, 2,
                                                             "mask", "@h", True)
    assert count_message(message, "gpt-4") != count_message(message)


def _unit_view() -> list[Entry]:
    """system, task, a call with its result, a message, the pinned facts, two messages, the current
    user message, a reply: units 0, 1, [2, 3], 4, 5 (pins), 6, 7, 8 (last user), 9."""
    calls = {"role": "assistant", "content": None, "tool_calls": [tool_call("c1", "read", "{}")]}
    return [_msg("system", "rules", 0), _msg("user", "task", 1), Entry(calls, 10, 2, 2, 1),
            Entry({"role": "tool", "tool_call_id": "c1", "content": "r"}, 10, 3, 3, 1), _msg("assistant", "a", 4),
            _msg("system", "pins", 5, kind="pins"), _msg("assistant", "b", 6), _msg("assistant", "c", 7),
            _msg("user", "now", 8, turn=2), _msg("assistant", "d", 9, turn=2)]


def test_runs_to_compact_skips_head_and_protected_units_and_joins_neighbours():
    view = _unit_view()
    assert runs_to_compact(view, 0, 1) == [[2, 3, 4], [6, 7]]  # the pins split the runs; the last user stays
    assert runs_to_compact(view, 1, 1) == [[4], [6, 7]]  # the call after the task is kept as setup
    assert runs_to_compact(view, 0, 0) == [[2, 3, 4], [6, 7], [9]]  # keep_last 0: the last unit goes too
    assert runs_to_compact(view, -3, -3) == [[2, 3, 4], [6, 7], [9]]  # negative counts are 0


def test_runs_to_compact_without_a_task_or_a_system_message():
    assert runs_to_compact([], 0, 0) == []
    assert runs_to_compact([_msg("system", "rules", 0)], 0, 1) == []
    talk = [_msg("assistant", f"a{i}", i) for i in range(4)]
    assert runs_to_compact(talk, 0, 1) == [[0, 1, 2]]  # nothing anchors a head: from the first unit
    assert runs_to_compact([_msg("system", "rules", 0), *talk[1:]], 0, 1) == [[1, 2]]


def test_replace_runs_records_each_run_as_one_message_with_its_quotes_and_handles():
    view = [_msg("system", "rules", 0), _msg("user", "task", 1), _msg("assistant", "a", 2),
            _msg("user", UNICODE, 3, turn=2), Entry({"role": "tool", "tool_call_id": "c1", "content": "r"}, 30, 4, 4,
                                                    2, handle="@r"),
            _msg("assistant", "b", 5, turn=3), _msg("user", "now", 6, turn=4), _msg("assistant", "c", 7, turn=5),
            _msg("assistant", "d", 8, turn=6)]
    runs = [[2, 3, 4, 5], [7]]

    def make(run: list[Entry]) -> dict:
        return {"role": "assistant", "content": f"summary of {len(run)}"}

    out = replace_runs(view, runs, make, _ctx(window=130), "summarize")  # quotes: 10% of 130 = 13 = 11 + 2
    first = {"role": "assistant", "content": "summary of 4\n[user messages of these turns, verbatim]\n> " + UNICODE
             + "\n[full tool results of these messages, by handle (read_output, grep_output): @r]"}
    second = {"role": "assistant", "content": "summary of 1"}
    t1, t2 = count_message(first, "gpt-4"), count_message(second, "gpt-4")
    assert t1 != count_message(first)
    assert out.compactions == [Compaction("summarize", 2, 5, first, t1, 60, ("@r",), (UNICODE,)),
                               Compaction("summarize", 7, 7, second, t2, 10)]
    assert out.view == [view[0], view[1], Entry(first, t1, 2, 5, 3, "summarize", refs=("@r",), quotes=(UNICODE,)),
                        view[6], Entry(second, t2, 7, 7, 5, "summarize"), view[8]]
    assert out.offloads == [view[4]]
    # 10% of a window of 120 is 12 tokens: too few for the quote in gpt-4's tokens
    assert replace_runs(view, runs, make, _ctx(window=120), "summarize").compactions[0].quotes == ()


def test_nothing_new_is_a_run_of_one_earlier_replacement():
    view = [_msg("assistant", "a", 1), _msg("assistant", "s", 2, kind="summarize"),
            _msg("assistant", "t", 3, kind="checkpoint")]
    assert nothing_new(view, [1]) is True
    assert nothing_new(view, [0]) is False
    assert nothing_new(view, [1, 2]) is False


# --- base.py: the memo, the scan, the budget, units and HEAD ---------------------------------------


def test_an_entry_memo_computes_once_per_entry_and_key_and_forgets_all_at_its_limit():
    memo, calls = EntryMemo(limit=2), []

    def compute(value: str):
        return lambda: calls.append(value) or value

    a, b, c = _msg("user", "a", 1), _msg("user", "a", 1), _msg("user", "c", 2)  # a == b, not the same object
    assert [memo.get(a, "k", compute("a1")), memo.get(a, "k", compute("a2"))] == ["a1", "a1"]
    assert memo.get(a, "other", compute("a3")) == "a3"
    assert memo.get(b, "k", compute("b1")) == "b1"  # full: cleared first, then b remembered
    assert memo.get(a, "k", compute("a4")) == "a4"
    assert memo.get(c, "k", compute("c1")) == "c1"
    assert calls == ["a1", "a3", "b1", "a4", "c1"]
    assert EntryMemo().get(a, "k", lambda: 5) == 5  # the default limit: a fresh memo works


def test_an_entry_memo_never_serves_a_freed_calls_value_to_a_new_call_at_the_same_address():
    """Regression: strategies put ``id(call)`` in the memo's key without holding the call; once the
    call was freed, a new call dict (another tool call) could take its address, and the entry got
    the old call's stub. The objects a computation depends on are now ``deps``: held, told apart by
    identity. Without holding them, CPython's free list hands the address straight back."""
    memo, entry = EntryMemo(), _msg("tool", "result", 1)
    call = {"id": "c1", "function": {"name": "first"}}
    gone = weakref.ref(first_key := _Key())
    memo.get(entry, "stub", lambda: "of the first call", (call, first_key))
    del call, first_key
    assert gone() is not None  # held by the memo: its address cannot be reused while remembered
    for n in range(50):  # new calls, some at the freed addresses if they were free
        new_call = {"id": f"c{n + 2}", "function": {"name": "other"}}
        assert memo.get(entry, "stub", lambda: "fresh", (new_call, _Key())) == "fresh"


class _Key:
    """A weak-referenceable object (a dict is not)."""


def test_a_scan_folds_only_the_new_entries_of_a_view_that_extends_the_last_one():
    folded: list[tuple[int, str]] = []

    def step(state: list, index: int, entry: Entry) -> None:
        folded.append((index, content_of(entry.message)))
        state.append(index)

    scan = Scan()

    def fold(view: list[Entry], key: str | None = None) -> list:
        return scan.fold(view, key, lambda: [key], step)

    assert fold([]) == [None]  # a fresh fold starts with init(), even for an empty view
    a, b, c = _msg("user", "a", 1), _msg("user", "b", 2), _msg("user", "c", 3)
    assert fold([a, b]) == [None, 0, 1]
    assert fold([a, b, c]) == [None, 0, 1, 2]  # only c folded
    assert folded == [(0, "a"), (1, "b"), (2, "c")]
    folded.clear()
    assert fold([a, b, c], key="k") == ["k", 0, 1, 2]  # another key: from the start
    assert fold([a, b]) == [None, 0, 1]  # shorter (and another key)
    assert fold([a, c]) == [None, 0, 1]  # not an extension: from the start
    assert folded == [(0, "a"), (1, "b"), (2, "c"), (0, "a"), (1, "b"), (0, "a"), (1, "c")]


def test_the_budget_counts_the_view_the_tools_the_scale_and_the_reserve():
    view = [_msg("user", "a", 1), Entry({"role": "assistant", "content": "b"}, 25, 2, 2, 1)]
    estimate = PER_REQUEST + 35 + 50
    budget = Budget(window=1000, tools=50, reserved=100, target=0.5, trigger=0.8, scale=1.5)
    assert budget.estimate(view) == estimate
    assert budget.total(view) == int(estimate * 1.5 + 0.5) + 100  # rounded to the nearest token
    total = budget.total(view)
    exact = Budget(window=total, tools=50, reserved=100, target=0.5, trigger=0.8, scale=1.5)
    assert exact.fits(view) and not replace(exact, window=total - 1).fits(view)
    assert not exact.over(view, 1.0) and replace(exact, window=total - 1).over(view, 1.0)
    assert exact.over(view, 0.5) and not replace(exact, window=2 * total).over(view, 0.5)


def test_groups_keeps_a_call_with_its_results_and_every_other_message_alone():
    calls = {"role": "assistant", "content": None, "tool_calls": [tool_call("c1", "read", "{}")]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "r"}
    view = [Entry(result, 1, 0, 0, 1), _msg("user", "u", 1), Entry(calls, 1, 2, 2, 1), Entry(result, 1, 3, 3, 1),
            Entry(result, 1, 4, 4, 1), _msg("assistant", "no calls", 5), Entry(result, 1, 6, 6, 1)]
    assert groups(view) == [[0], [1], [2, 3, 4], [5], [6]]


def test_protected_is_the_system_message_the_pins_the_task_and_the_current_user_message():
    view = [_msg("system", "rules", 0), _msg("user", "task", 1), _msg("user", "note", 2, kind="truncate"),
            _msg("system", "pins", 3, kind="pins"), _msg("user", "more", 4), _msg("user", "now", 5),
            _msg("user", "a later note", 6, kind="truncate")]
    assert protected(view) == {0, 1, 3, 5}
    assert protected(view[1:2]) == {0}
    assert protected([_msg("assistant", "a", 0), _msg("system", "late", 1)]) == set()
    assert protected([]) == set()


# --- step.py: step classes by name, and the words of a bad step -------------------------------


def test_declaring_a_step_class_registers_its_strategy_by_name():
    try:
        class ProbeStep(StrategyConfig):
            strategy: Literal["probe"] = "probe"
            depth: int = 1

            def apply(self, view: list[Entry], ctx: StrategyContext, scan: Scan | None = None) -> Outcome:
                return Outcome(view[: self.depth])

        assert "probe" in known() and type(StrategyConfig(strategy="probe", depth=2)) is ProbeStep
        view = [_msg("system", "s", 0), _msg("user", "t", 1)]
        assert StrategyConfig(strategy="probe").apply(view, _ctx()).view == view[:1]
    finally:
        StrategyConfig._kinds.pop("probe", None)
    assert "probe" not in known()


def _step_error(text: str) -> tuple[str | None, str]:
    with pytest.raises(ProfileError) as info:
        parse_profile(text, source="p.yaml")
    return info.value.key, str(info.value).split(": ", 1)[1]


KNOWN = ", ".join(known())


def test_a_bad_step_is_refused_in_words_that_name_the_key_and_what_is_accepted():
    assert _step_error("pipelines:\n  batch:\n    - strategy: nope\n") == (
        "pipelines.batch.0.strategy", f"unknown strategy 'nope'; known: {KNOWN}")
    assert _step_error("pipelines:\n  batch:\n    - trigger: 0.5\n") == (
        "pipelines.batch.0.strategy", f"a step names its strategy (strategy: NAME); known: {KNOWN}")
    assert _step_error("pipelines:\n  batch: [5]\n") == (
        "pipelines.batch.0", "Input should be a valid dictionary or object to extract fields from")
    assert _step_error("pipelines:\n  batch:\n    - strategy: prune\n      trigger: 2\n") == (
        "pipelines.batch.0.trigger", "Input should be less than or equal to 1")  # a common key: pydantic's words
    assert _step_error("pipelines:\n  batch:\n    - strategy: truncate\n      tgt: 0.4\n") == (
        "pipelines.batch.0.tgt", "strategy 'truncate' has no parameter 'tgt' (it accepts: keep_user_tokens, target)")


# --- checkpoint.py: the deterministic checkpoint, applied once, the LLM's request ---------------


def test_a_deterministic_checkpoint_lists_the_calls_done_and_failed_the_task_and_the_last_turn():
    task = "Fix:" + "x" * 400  # over the 300 characters of a goal
    long_command, path = "x" * 100, "src/" + "a" * 100 + ".py"
    view = _calls_view([("read", json.dumps({"path": path}), "exit code: 0\nport 8080 open"),
                        ("shell", json.dumps({"command": long_command}), "exit code: 1\nboom"),
                        ("read", json.dumps({"path": path}), "exit code: 0\nagain")], task=task)
    run = [*view[2:], Entry({"role": "assistant", "content": "done at /srv/app"}, 5, 8, 8, 9)]
    assert deterministic_checkpoint(view, run, 1200) == {
        "goal": one_line(task, 300),
        "phase": "checkpoint after turn 9 (made without a summarizer: lines copied verbatim)",
        "key_facts": fact_lines(run, 600),
        "completed": [f"read({one_line('path=' + path, 80)})"],  # once
        "failed attempts": [f"shell({one_line('command=' + long_command, 80)})"],
        "files_touched": [path],
    }


def test_an_agent_checkpoint_counts_as_applied_by_its_own_call_id_only():
    done = _msg("user", "[ctxagent checkpoint (written by the agent, call c4) of messages #2-#5]", 6,
                kind="checkpoint")
    assert CheckpointStep._applied([done], "c4")
    assert not CheckpointStep._applied([done], "c5")
    assert not CheckpointStep._applied([replace(done, kind="message")], "c4")  # a message quoting it is not it
    assert not CheckpointStep._applied([_msg("user", "other", 6, kind="checkpoint")], "c4")


def test_the_llm_checkpoint_request_names_the_task_and_the_size_and_holds_the_messages():
    view = _long_view(units=12)
    prompts: list[str] = []

    def summarizer(text: str, max_tokens: int) -> str:
        prompts.append(text)
        return json.dumps({"goal": "fix the test", "key_facts": ["port 8080"], "pending": ["patch"]})

    out = CheckpointStep(max_tokens=700).apply(view, ctx_for(view, window=3_000, summarizer=summarizer, pins=()))
    assert out.warnings == [] and "goal: fix the test" in out.compactions[0].message["content"]
    assert len(prompts) == 1
    assert "The task: Fix the failing test in /srv/app.. At most 700 tokens." in prompts[0]
    assert "{task}" not in prompts[0] and "{max_tokens}" not in prompts[0]
    assert "f3 line 39: port=8080" in prompts[0]  # the rendered messages of the range


def test_the_llm_checkpoint_respects_the_summarizers_window():
    view = _long_view(units=12)
    ctx = replace(ctx_for(view, window=3_000, summarizer=good), summarizer_window=1_000)
    out = CheckpointStep(max_tokens=800).apply(view, ctx)
    assert out.warnings[0].startswith("checkpoint: the LLM checkpoint of messages #2-#")
    assert "1000-token window" in out.warnings[0]
    assert out.warnings[0].endswith("; made a deterministic checkpoint instead")
    assert "made without a summarizer" in out.compactions[0].message["content"]


def test_call_helpers_read_a_call_without_a_function_and_values_that_are_not_strings_as_json():
    assert (call_name({"id": "x"}), call_arguments({"id": "x"})) == ("?", "")
    assert (call_name({"id": "x", "function": {}}), call_arguments({"id": "x", "function": {}})) == ("?", "")
    assert short_args('{"flag": true, "x": null, "l": ["é"], "n": 5}') == 'flag=true, x=null, l=["é"], n=5'
    assert short_args('["é", 1]') == '["é", 1]'
    long = json.dumps({"text": "y" * 200})
    assert len(short_args(long)) == 80 and len(short_call(tool_call("c", "f", long))) == len("f()") + 80
    assert len(short_call(tool_call("c", "f", long), 20)) == len("f()") + 20


def test_calls_of_results_finds_each_results_call_and_skips_a_result_before_any_call():
    call = tool_call("c1", "read", "{}")
    view = [Entry({"role": "tool", "tool_call_id": "c0", "content": "orphan"}, 1, 0, 0, 1),
            Entry({"role": "assistant", "content": None, "tool_calls": [call]}, 1, 1, 1, 1),
            Entry({"role": "tool", "tool_call_id": "c1", "content": "r"}, 1, 2, 2, 1)]
    assert calls_of_results(view) == {2: call}


def test_a_result_without_a_handle_or_a_call_id_is_named_by_the_handle_of_the_empty_id():
    assert refs_of([Entry({"role": "tool", "content": "r"}, 1, 0, 0, 1)], 1000) == (base_handle(""),)


# --- checks.py: the thrash guard and no LLM on batch paths, called on profile objects -----------


def _refused(profile: Profile, source: str | None = None, check=check_gaps) -> tuple[str, str | None, str]:
    with pytest.raises(ProfileError) as info:
        check(profile, source)
    return info.value.path, info.value.key, str(info.value).split(": ", 1)[1]


def test_the_thrash_guard_names_the_key_that_set_the_gap():
    assert _refused(Profile(name="p", target=0.75, trigger=0.8)) == (
        "<profile:p>", "target", thrash_problem(0.75, 0.8))
    assert _refused(Profile(name="p", trigger=0.6), "f.yaml") == ("f.yaml", "trigger", thrash_problem(0.5, 0.6))
    assert _refused(Profile(name="p", target=0.5, trigger=0.6)) == ("<profile:p>", "target", thrash_problem(0.5, 0.6))


def test_the_thrash_guard_names_the_step_key_that_set_the_gap():
    for step, key, target, trigger in [(TruncateStep(target=0.7), "target", 0.7, 0.8),
                                       (TruncateStep(trigger=0.6), "trigger", 0.5, 0.6),
                                       (CheckpointStep(trigger=0, at=0.6, llm=False), "at", 0.5, 0.6),
                                       (CheckpointStep(trigger=0.6, llm=False), "trigger", 0.5, 0.6)]:
        profile = Profile(name="p", pipelines={"interactive": [MaskObservationsStep(), step]})
        assert _refused(profile, "f.yaml") == ("f.yaml", f"pipelines.interactive.1.{key}",
                                               f"{step.strategy!r}: {thrash_problem(target, trigger)}")


def test_steps_without_a_trigger_to_keep_a_gap_from_pass_the_thrash_guard():
    steps = [TruncateStep(trigger=0), TruncateStep(every_turns=5, target=0.7), MaskObservationsStep(trigger=0.55),
             TruncateStep(trigger=0.9, target=0.6), TruncateStep(), CheckpointStep(trigger=0.6, at=0.9, llm=False)]
    assert check_gaps(Profile(name="p", pipelines={"batch": steps})) is None


def test_a_batch_step_that_calls_an_llm_is_refused_with_its_index_and_the_ways_out():
    profile = Profile(name="p", pipelines={"batch": [MaskObservationsStep(), SummarizeStep()]})
    assert _refused(profile, check=check_pipelines) == (
        "<profile:p>", "pipelines.batch.1.strategy",
        "the batch pipeline names 'summarize', which calls an LLM; batch paths never pay for compression calls. "
        "Use a deterministic strategy (truncate, mask_observations, prune, ...), turn its LLM off (llm: false / "
        "rolling: false where it has one) or set allow_llm_in_batch: true")
    assert _refused(profile, "f.yaml", check=check_pipelines)[0] == "f.yaml"
    assert check_pipelines(profile.model_copy(update={"allow_llm_in_batch": True})) is None


def test_the_memo_remembers_each_entry_apart():
    a, b = _msg("user", "a", 1), _msg("user", "b", 2)
    memo, calls = EntryMemo(), []
    for entry in (a, b, a, b):
        memo.get(entry, "k", lambda e=entry: calls.append(e) or e)
    assert calls == [a, b]  # one slot per entry, not one per key


def test_a_scan_run_again_on_the_same_view_folds_nothing():
    folded: list[int] = []
    scan = Scan()
    view = [_msg("user", "a", 1), _msg("user", "b", 2)]
    for again in (view, list(view)):
        scan.fold(again, None, list, lambda state, index, entry: folded.append(index))
    assert folded == [0, 1]


def test_a_checkpoint_split_by_head_points_the_older_run_at_the_newer_one():
    view = _unit_view()
    out = place(view, [[2, 3, 4], [6, 7]], "BODY", "checkpoint", _ctx(), "checkpoint")
    older = "[ctxagent: messages #2-#4 are covered by the checkpoint further down]" + handles_line((base_handle("c1"),))
    assert out.view[2].message == {"role": "user", "content": older}
    assert out.view[4].message == {"role": "user", "content": "[ctxagent checkpoint of messages #2-#4, #6-#7]\nBODY"}
    assert [c.strategy for c in out.compactions] == ["checkpoint", "checkpoint"]


def test_checkpoint_call_parsing_skips_calls_without_a_function_and_non_object_arguments():
    with pytest.raises(ValueError, match=r"^not a non-empty JSON object$"):
        parse_json_object("[1]")
    calls = [{"id": "x"}, tool_call("c1", "checkpoint", ""), tool_call("c2", "checkpoint", "[1]")]
    assert agent_call([_entry({"role": "assistant", "content": None, "tool_calls": calls})]) is None
    paths = [tool_call(f"p{i}", "read", json.dumps({"path": f"f{i}.py"})) for i in range(21)]
    long = "src/" + "b" * 130 + ".py"
    entry = _entry({"role": "assistant", "content": None,
                    "tool_calls": [{"id": "x"}, *paths, tool_call("l", "read", json.dumps({"path": long}))]})
    assert files_touched([entry]) == [*(f"f{i}.py" for i in range(2, 21)), one_line(long, 120)]  # the newest 20


def test_a_checkpoint_step_with_its_own_target_waits_for_it():
    view = _long_view(units=12)
    window = int(ctx_for(view).budget.total(view) / 0.7)  # over the profile's target (0.5), under 0.9
    assert CheckpointStep(target=0.9).apply(view, ctx_for(view, window=window)).view == view
    assert CheckpointStep(target=0.6).apply(view, ctx_for(view, window=window)).compactions


# --- summarizing.py: chunks, prompts, checks and the window (docs/mutation-strategies-c.md) -----


def test_chunks_cut_at_line_ends_and_a_long_line_by_characters():
    assert chunks("one\ntwo\nthree", 6) == ["one\ntwo\nthree"]  # fits: returned whole
    assert chunks("one\ntwo\nthree\nfour", 4) == ["one\ntwo", "three\nfour"]  # 2 tokens a line with its end
    assert chunks("one\ntwo\nthree\nfour", 5) == ["one\ntwo", "three\nfour"]
    assert chunks("one\ntwo\nthree\nfour", 6) == ["one\ntwo\nthree", "four"]
    line = "x" * 400  # 50 tokens: cut into steps of int(400 * 20 / 51 * 0.9) = 141 characters
    assert chunks(line, 20) == [line[:141], line[141:282], line[282:]]
    assert chunks(f"ab\n{line}\ncd", 20) == ["ab", line[:141], line[141:282], line[282:] + "\ncd"]
    assert chunks("x" * 9, 0) == ["x"] * 9  # never a step of 0


def test_pins_block_asks_for_each_pin_verbatim_or_is_empty():
    assert pins_block([]) == ""
    assert pins_block(["port 8080", "@abc"]) == (
        "\nCopy each of these pinned facts verbatim into your answer:\n- port 8080\n- @abc")


def test_call_strips_the_reply_and_names_an_exception_or_a_reply_that_is_not_text():
    assert call(lambda p, n: f"  {p} {n}\n", "go", 7) == "go 7"
    with pytest.raises(SummaryFailed, match=r"^the summarizer raised RuntimeError: provider down$"):
        call(raises, "go", 7)
    with pytest.raises(SummaryFailed, match=r"^the summarizer returned int, not text$"):
        call(lambda p, n: 5, "go", 7)


def test_check_refuses_an_empty_or_overlong_summary_or_one_without_its_pins():
    assert check("a b c", 3, ["b"]) == "a b c"  # exactly max_tokens fits
    with pytest.raises(SummaryFailed, match=r"^the summary has 3 tokens, over its limit of 2$"):
        check("a b c", 2, [])
    with pytest.raises(SummaryFailed, match=r"^the summary is empty$"):
        check(" \n ", 3, [])
    with pytest.raises(SummaryFailed, match=r"^the summary dropped pinned facts: \['d', 'e'\]$"):
        check("a b c", 3, ["a", "d", "e"])
    assert check(UNICODE, 9, [], model="") == UNICODE
    with pytest.raises(SummaryFailed, match="11 tokens, over its limit of 9"):
        check(UNICODE, 9, [], model="gpt-4")


def test_fits_to_the_token_with_the_margin():
    fits("x" * 10_000, 10**6, None)  # unknown window: anything fits
    tokens = count_text(UNICODE, "gpt-4")
    fits(UNICODE, 100, tokens + 100 + MARGIN_TOKENS, "gpt-4")
    with pytest.raises(SummaryFailed, match=(
            rf"^a summarizer request of {tokens} prompt tokens \+ 100 reply tokens \+ {MARGIN_TOKENS} margin "
            rf"does not fit the summarizer's {tokens + 99 + MARGIN_TOKENS}-token window$")):
        fits(UNICODE, 100, tokens + 99 + MARGIN_TOKENS, "gpt-4")


def test_room_is_what_the_longest_prompt_reply_and_margin_leave_of_the_window():
    assert room(None, 100, ["Sum up."], 8_000) == 8_000
    # the longest prompt (4 tokens) + 2 for the blank line, 100 of reply, the margin, then 2% slack
    assert room(2_000, 100, ["Sum up.", "a b c d"], 8_000) == int((2_000 - 6 - 100 - MARGIN_TOKENS) * 0.98)
    assert room(2_000, 100, ["a b c d"], 1_000) == 1_000
    assert room(2_000, 100, [UNICODE], 8_000, "gpt-4") == int((2_000 - 13 - 100 - MARGIN_TOKENS) * 0.98)
    assert room(6 + 100 + MARGIN_TOKENS + 2, 100, ["a b c d"], 8_000) == 1  # int(2 * 0.98)
    with pytest.raises(SummaryFailed, match=(
            r"^the summarizer's 362-token window cannot hold a request: prompt 6 \+ reply 100 \+ margin 256 "
            r"tokens leave 0 for the material$")):
        room(6 + 100 + MARGIN_TOKENS, 100, ["a b c d"], 8_000)


def _recording(final: str = "port 800 805"):
    seen: list[tuple[str, int]] = []

    def summarizer(prompt: str, max_tokens: int) -> str:
        seen.append((prompt, max_tokens))
        return final if prompt.startswith("F") else "s"
    return seen, summarizer


def test_condense_summarizes_each_chunk_with_its_own_pins_then_the_parts_with_all_of_them():
    material = "\n".join(f"line {i} at port 80{i}" for i in range(6))  # 47 tokens: 3 chunks of 20
    seen, summarizer = _recording()
    pins = ["port 800", "805"]
    out = condense(material, summarizer=summarizer, final_prompt="F", max_tokens=5, chunk_tokens=20, pins=pins)
    assert out == "port 800 805"
    pieces = chunks(material, 20)
    assert seen == [
        (CHUNK_PROMPT.format(part=1, parts=3, max_tokens=5) + pins_block(["port 800"]) + "\n\n" + pieces[0], 5),
        (CHUNK_PROMPT.format(part=2, parts=3, max_tokens=5) + "\n\n" + pieces[1], 5),
        (CHUNK_PROMPT.format(part=3, parts=3, max_tokens=5) + pins_block(["805"]) + "\n\n" + pieces[2], 5),
        ("F" + pins_block(pins) + "\n\n[part 1] s\n\n[part 2] s\n\n[part 3] s", 5),
    ]


def test_condense_reads_at_least_four_replies_worth_of_material_at_a_time():
    material = "\n".join(f"line {i} at port 80{i}" for i in range(6))  # 47 tokens
    seen, summarizer = _recording("ok")
    assert condense(material, summarizer=summarizer, final_prompt="F", max_tokens=12, chunk_tokens=20) == "ok"
    assert seen == [(f"F\n\n{material}", 12)]  # 4 * 12 = 48 tokens: one request
    seen, summarizer = _recording("ok")
    condense(material, summarizer=summarizer, final_prompt="F", max_tokens=11, chunk_tokens=20)
    assert len(seen) == 3  # 4 * 11 = 44 tokens: two chunks, then the final request


def test_condense_gives_up_after_the_last_round_of_summaries_of_summaries():
    """Replies of 1 token become parts of 4 (``[part n] s``) in chunks of 4: they never get shorter."""
    seen: list[str] = []
    with pytest.raises(SummaryFailed, match=rf"^still over 4 tokens after {MAX_COMBINE_ROUNDS} rounds of summaries$"):
        condense("a\nb\nc\nd\ne\nf", summarizer=lambda p, n: seen.append(p) or "s", final_prompt="F",
                 max_tokens=1, chunk_tokens=1)
    assert MAX_COMBINE_ROUNDS == 4 and len(seen) == 48 and not any(p.startswith("F") for p in seen)
    assert [p.split(" of an AI")[0][-8:] for p in seen[:4]] == ["t 1 of 3", "t 2 of 3", "t 3 of 3", "t 1 of 6"]


def test_condense_refuses_chunks_a_reply_would_not_shrink():
    material = "\n".join(f"line {i} at port 80{i}" for i in range(60))
    with pytest.raises(SummaryFailed, match=r"^chunks of (\d+) tokens \(the most the summarizer's 1000-token window "
                                            r"leaves\) cannot be condensed into replies of 400 tokens$"):
        condense(material, summarizer=good, final_prompt="F", max_tokens=400, chunk_tokens=8_000, window=1_000)


def test_condense_reports_a_reply_finish_cannot_use_and_checks_what_finish_returns():
    def finish(reply: str) -> str:
        if reply == "bad":
            raise ValueError("not JSON")
        return reply + " port 8080"
    with pytest.raises(SummaryFailed, match=r"^the summarizer's reply is not usable: not JSON$"):
        condense("text", summarizer=lambda p, n: "bad", final_prompt="F", max_tokens=9, chunk_tokens=10, finish=finish)
    assert condense("text", summarizer=lambda p, n: " ok ", final_prompt="F", max_tokens=9, chunk_tokens=10,
                    pins=["port 8080"], finish=finish) == "ok port 8080"
    with pytest.raises(SummaryFailed, match="dropped pinned facts"):
        condense("text", summarizer=lambda p, n: "ok", final_prompt="F", max_tokens=9, chunk_tokens=10, pins=["x y"])


# --- summarize.py ------------------------------------------------------------------------------


def _summarize_ctx(view, summarizer, window: int = 100) -> StrategyContext:
    budget = Budget(window=window, tools=0, reserved=0, target=0.5, trigger=0.8)
    return StrategyContext(budget=budget, summarizer=summarizer, transcript_path="/data/sessions/x/transcript.jsonl")


ONE = SummarizeStep(keep_turns=1)


def test_under_target_is_at_or_under_the_fraction_of_the_window_to_the_token():
    view = _unit_view()
    total = _summarize_ctx(view, None).budget.total(view)
    assert under_target(view, _summarize_ctx(view, None, window=2 * total), None)  # the profile's 0.5
    assert not under_target(view, _summarize_ctx(view, None, window=2 * total - 1), None)
    assert under_target(view, _summarize_ctx(view, None, window=4 * total), 0.25)  # its own target
    assert not under_target(view, _summarize_ctx(view, None, window=4 * total - 1), 0.25)


def test_summary_message_and_failure_say_which_messages():
    run = _unit_view()[2:5]
    assert summary_message(run, "S") == {"role": "user", "content": "[ctxagent summary of messages #2-#4]\nS"}
    assert failure("summarize", "the summary", run, SummaryFailed("why"), "did this") == (
        "summarize: the summary of messages #2-#4 failed (why); did this")


def test_summarize_replaces_each_run_with_its_own_summary_and_skips_earlier_summaries():
    view = _unit_view()
    seen: list[tuple[str, int]] = []

    def summarizer(prompt: str, max_tokens: int) -> str:
        seen.append((prompt, max_tokens))
        return f"S{len(seen)}"
    out = SummarizeStep(keep_turns=1, max_tokens=7).apply(view, _summarize_ctx(view, summarizer))
    assert [(c.start, c.end) for c in out.compactions] == [(2, 4), (6, 7)]
    assert [e.message["content"] for e in out.view] == [
        "rules", "task", "[ctxagent summary of messages #2-#4]\nS1\n[full tool results of these messages, by handle "
        "(read_output, grep_output): @c1]", "pins",
        "[ctxagent summary of messages #6-#7]\nS2", "now", "d"]
    prompt = SUMMARY_PROMPT.format(max_tokens=7)
    assert seen == [(f"{prompt}\n\n{render(view[2:5])}", 7), (f"{prompt}\n\n{render(view[6:8])}", 7)]
    assert out.warnings == [] and out.view == replay(view, out.compactions)
    # a run that is one earlier summary gains nothing: not sent again, the other run is
    again = [*view[:6], replace(view[6], kind="summarize"), *view[8:]]
    seen.clear()
    out = ONE.apply(again, _summarize_ctx(again, summarizer))
    assert [(c.start, c.end) for c in out.compactions] == [(2, 4)] and len(seen) == 1
    # nothing but earlier summaries: the view itself, even without a summarizer (no truncation)
    done = [*again[:2], replace(again[2], kind="summarize"), *again[5:]]
    assert ONE.apply(done, _summarize_ctx(done, None)).view is done


def test_summarize_asks_for_the_pins_of_the_run_and_appends_the_exact_values_the_summary_lacks():
    view = [_msg("system", "rules", 0), _msg("user", "task", 1),
            _msg("assistant", "edited /srv/app/main.py on port 8080", 2), _msg("assistant", "ok", 3),
            _msg("user", "now", 4, turn=2), _msg("assistant", "d", 5, turn=2)]
    seen: list[str] = []
    ctx = replace(_summarize_ctx(view, lambda p, n: seen.append(p) or "fixed it on port 8080"),
                  pins=("port 8080", "not in the run"))
    out = ONE.apply(view, ctx)
    assert seen[0].startswith(SUMMARY_PROMPT.format(max_tokens=1000) + pins_block(["port 8080"]) + "\n\n")
    content = out.compactions[0].message["content"]
    assert content.startswith("[ctxagent summary of messages #2-#3]\nfixed it on port 8080\n")
    assert "/srv/app/main.py" in content.split("\n", 2)[2]
    out = SummarizeStep(keep_turns=1, facts_tokens=0).apply(view, ctx)
    assert out.compactions[0].message["content"] == "[ctxagent summary of messages #2-#3]\nfixed it on port 8080"


def test_chunks_count_in_the_models_tokens_and_cut_only_lines_over_the_chunk():
    assert chunks(UNICODE, 10) == [UNICODE]  # 9 tokens for the default tokenizer
    assert chunks(UNICODE, 10, "gpt-4") == ["héllo wörld — ü", "nïcode"]  # 11 for gpt-4's
    assert chunks("one\ntwo\nthree\nfour", 2) == ["one", "two", "three", "four"]  # a line of exactly 2 stays whole


def test_condense_checks_every_reply_in_the_models_tokens():
    def summarizer(prompt: str, max_tokens: int) -> str:
        return "ok" if prompt.startswith("F") else UNICODE  # 9 tokens, 11 for gpt-4
    material = "\n".join(f"line {i} at port 80{i}" for i in range(12))
    assert condense(material, summarizer=summarizer, final_prompt="F", max_tokens=10, chunk_tokens=40) == "ok"
    with pytest.raises(SummaryFailed, match=r"^the summary has 11 tokens, over its limit of 10$"):
        condense(material, summarizer=summarizer, final_prompt="F", max_tokens=10, chunk_tokens=40, model="gpt-4")
    with pytest.raises(SummaryFailed, match=r"^the summary has 11 tokens, over its limit of 10$"):
        condense("text", summarizer=lambda p, n: UNICODE, final_prompt="F", max_tokens=10, chunk_tokens=40,
                 model="gpt-4")


def test_condense_refuses_chunks_no_larger_than_a_reply():
    prompts = [CHUNK_PROMPT.format(part=999, parts=999, max_tokens=50), "F"]
    window = next(w for w in range(420, 2_000) if room(w, 50, prompts, 8_000) == 50)
    material = "\n".join(f"line {i} at port 80{i}" for i in range(30))
    with pytest.raises(SummaryFailed, match=rf"^chunks of 50 tokens \(the most the summarizer's {window}-token "
                                            r"window leaves\) cannot be condensed into replies of 50 tokens$"):
        condense(material, summarizer=good, final_prompt="F", max_tokens=50, chunk_tokens=8_000, window=window)


def test_summarize_run_without_a_summarizer_fails_saying_so():
    view = _unit_view()
    with pytest.raises(SummaryFailed, match=r"^no summarizer on this path$"):
        summarize_run(view[2:5], _summarize_ctx(view, None), SummarizeStep())


def test_summarize_checks_the_summary_in_the_models_tokens():
    view = _unit_view()
    ctx, step = _summarize_ctx(view, lambda p, n: UNICODE), SummarizeStep(keep_turns=1, max_tokens=10)
    assert step.apply(view, ctx).warnings == []
    out = step.apply(view, replace(ctx, model="gpt-4"))
    assert out.warnings == ["summarize: the summary of messages #2-#4 failed (the summary has 11 tokens, over its "
                            "limit of 10); fell back to truncation"]


def test_summarize_uses_its_own_target_to_do_nothing_and_to_truncate_to():
    view = _units(8)
    total = ctx_for(view).budget.total(view)
    window = int(total / 0.7)  # over the profile's target (0.5), under 0.9
    out = SummarizeStep(keep_turns=1, target=0.9).apply(view, ctx_for(view, window=window, summarizer=raises, pins=()))
    assert out.view is view and out.warnings == []
    for summarizer in (raises, None):
        ctx = ctx_for(view, window=window, summarizer=summarizer, pins=())
        out = SummarizeStep(keep_turns=1, target=0.3).apply(view, ctx)
        expected = TruncateStep(target=0.3).apply(view, ctx)
        assert out.view == expected.view and out.view != TruncateStep().apply(view, ctx).view


def test_condense_leaves_room_for_the_pins_each_chunk_request_asks_for():
    pins = ["alpha-" + "-".join(str(i * 7919) for i in range(20)),
            "beta-" + "-".join(str(i * 104729) for i in range(20))]
    material = "\n".join(f"line {i}: {pins[0]} {pins[1]}" for i in range(40))  # every line holds both pins
    sizes: list[int] = []

    def summarizer(prompt: str, max_tokens: int) -> str:
        sizes.append(count_text(prompt) + max_tokens + MARGIN_TOKENS)
        return " ".join(pins)
    assert condense(material, summarizer=summarizer, final_prompt="F", max_tokens=200, chunk_tokens=8_000, pins=pins,
                    window=2_000) == " ".join(pins)
    assert len(sizes) > 2 and max(sizes) <= 2_000


def test_condense_measures_the_window_in_the_models_tokens():
    prompts = [CHUNK_PROMPT.format(part=999, parts=999, max_tokens=50), "F"]  # 101 tokens, 100 for gpt-4
    window = next(w for w in range(420, 2_000) if room(w, 50, prompts, 8_000, "gpt-4") == 50)
    assert room(window, 50, prompts, 8_000) == 49
    material = "\n".join(f"line {i} at port 80{i}" for i in range(30))
    with pytest.raises(SummaryFailed, match=r"^chunks of 50 tokens "):
        condense(material, summarizer=good, final_prompt="F", max_tokens=50, chunk_tokens=8_000, window=window,
                 model="gpt-4")


# --- role_selective.py: the deterministic cuts (docs/mutation-strategies-c.md) -------------------


def test_head_tail_keeps_the_first_and_last_lines_around_the_marker_each_cut_to_200_characters():
    lines = [f"l{i}" for i in range(6)]
    text = "\n".join(lines)
    assert head_tail(text, 2, 1, "[cut]") == "l0\nl1\n[cut]\nl5"
    assert head_tail(text, 2, 0, "[cut]") == "l0\nl1\n[cut]"
    assert head_tail(text, 3, 3, "[cut]") == text + "\n[cut]"  # exactly head + tail lines: all kept
    assert head_tail(text, 5, 3, "[cut]") == text + "\n[cut]"
    long = "y" * 200
    assert head_tail(f"{long}\n{'x' * 201}\nm\n{'z' * 201}", 2, 1, "M") == f"{long}\n{'x' * 200}…\nM\n{'z' * 200}…"
    assert head_tail(f"a\nb\n{long}", 1, 1, "M") == f"a\nM\n{long}"


def test_conclusion_is_the_last_paragraph_cut_middle_out_to_max_tokens():
    assert conclusion("a\n\nb b\n  \nlast para\nline2\n\n  \n", 100) == "last para\nline2"
    assert conclusion(" \n\n ", 100) == ""
    words = " ".join(f"w{i}" for i in range(200))
    assert conclusion(words, 20) == "w0 w1 w2 w3 w4 w5 w6\n[... 380 tokens cut ...]\n w196 w197 w198 w199"
    assert conclusion(UNICODE * 3, 27) == UNICODE * 3  # 27 tokens for the default tokenizer
    assert conclusion(UNICODE * 3, 26) != UNICODE * 3
    assert conclusion(UNICODE * 3, 27, "gpt-4") != UNICODE * 3  # 33 for gpt-4's


# --- rendering.py: what summarizers and state documents are made of (docs/mutation-strategies-d.md) ---


def test_render_labels_each_message_with_its_seq_or_range_and_names_each_call_in_200_characters():
    long_call = tool_call("c1", "shell", json.dumps({"command": "cat " + "x" * 300}))
    entries = [_msg("user", "the task", 1),
               Entry({"role": "assistant", "content": "let me look", "tool_calls": [long_call]}, 10, 2, 2, 1),
               Entry({"role": "tool", "tool_call_id": "c1", "content": "found it"}, 10, 3, 3, 1),
               Entry({"role": "assistant", "content": None, "tool_calls": [tool_call("c2", "ls", "{}")]}, 10, 4, 4, 2),
               Entry({"role": "tool", "tool_call_id": "c2", "content": "a.py"}, 10, 5, 5, 2),
               Entry({"role": "user", "content": "[ctxagent summary] earlier work"}, 10, 6, 9, 3, "summarize"),
               _msg("assistant", "done", 10, 4)]
    call = short_call(long_call, 200)
    assert len(call) == 207 and call != short_call(long_call, 201)  # the command is cut
    assert render(entries) == "\n".join([
        "#1 user: the task", "#2 assistant: let me look", f"#2 assistant called {call}",
        f"#3 result of {call}: found it", "#4 assistant called ls()", "#5 result of ls(): a.py",
        "#6-9 [ctxagent summary] earlier work", "#10 assistant: done"])


def test_clip_to_nothing_keeps_only_the_marker():
    value = "word " * 50  # 51 tokens
    assert clip(value, 0) == "\n[... 51 tokens cut ...]\n"
    assert clip(value, 1) == "wo\n[... 50 tokens cut ...]\nd "
    assert clip(value, 51) == value


def test_fact_lines_are_lines_of_four_characters_or_more_naming_a_fact_once_each_cut_to_160():
    long = "port " + "9" * 300
    body = f"intro\n  1234  \n123\nabcd\n/srv/a.py\n1234\n{long}"
    expected = ["#7 user: intro", "1234", "/srv/a.py", one_line(long, FACT_LINE_CHARS)]
    assert fact_lines([_msg("user", body, 7)], 1000) == expected


def test_fact_lines_keep_the_newest_lines_in_order_while_their_tokens_and_one_each_fit():
    lines = ["#7 user: intro", "1234", "/srv/a.py"]  # 5, 2 and 4 tokens: 6, 3 and 5 with their one
    entries = [_msg("user", "intro\n1234\n/srv/a.py", 7)]
    assert fact_lines(entries, 14) == lines
    assert fact_lines(entries, 13) == lines[1:]
    assert fact_lines(entries, 8) == lines[1:]
    assert fact_lines(entries, 7) == lines[2:]
    assert fact_lines(entries, 5) == lines[2:]
    assert fact_lines(entries, 4) == []


def test_fact_lines_count_in_the_models_tokens():
    entries = [_msg("user", f"x\n1 {UNICODE}\n2 {UNICODE}", 7)]  # 10 tokens each for the default, 12 for gpt-4
    assert fact_lines(entries, 22) == [f"1 {UNICODE}", f"2 {UNICODE}"]
    assert fact_lines(entries, 22, "gpt-4") == [f"2 {UNICODE}"]


def test_the_task_is_the_first_user_message_or_nothing():
    pins = Entry({"role": "user", "content": "[pinned facts] x"}, 5, -1, -1, 0, kind="pins")
    view = [pins, _msg("system", "rules", 0), _msg("user", "the task", 1), _msg("user", "more", 2)]
    assert task_text(view) == "the task"
    assert task_text(view[:2]) == ""


# --- distill.py: the state document, deterministic and by the LLM (docs/mutation-strategies-d.md) ---


def _state_entry(doc, seq: int, extra: str = "") -> Entry:
    return _e({"role": "user", "content": f"[ctxagent state of messages #{seq}-#{seq}]\n{dumps(doc)}{extra}"}, seq, 1,
              kind="distill")


def test_dumps_keeps_non_ascii_and_previous_state_reads_only_a_json_object_of_a_distill_message():
    assert dumps({"a": "é"}) == '{"a": "é"}'
    assert previous_state(_state_entry({"goal": "g"}, 2)) == {"goal": "g"}
    assert previous_state(replace(_state_entry({"goal": "g"}, 2), kind="summarize")) is None
    listed = _e({"role": "user", "content": "[ctxagent state of messages #2-#2]\n[1, 2]"}, 2, kind="distill")
    broken = _e({"role": "user", "content": "[ctxagent state of messages #2-#2]\n{nope"}, 2, kind="distill")
    assert previous_state(listed) is None and previous_state(broken) is None


def test_a_deterministic_state_updates_the_previous_documents_with_the_new_facts_and_dead_ends():
    older = {"goal": "older goal", "verified_facts": "not a list", "discarded_hypotheses": ["d0"],
             "pending_actions": ["p0"]}
    newer = {"goal": "newer goal", "verified_facts": ["f1", 2, {"k": "é"}], "discarded_hypotheses": ["d1"],
             "pending_actions": ["p1", "p2"]}
    cat = tool_call("c1", "shell", json.dumps({"command": "cat /srv/" + "x" * 100}))
    view = [_e({"role": "system", "content": "sys"}, 0, 0), _e({"role": "user", "content": "Fix it.\nnow"}, 1, 0),
            _state_entry(older, 2), _state_entry(newer, 3, "\n[pinned] P-1"),
            _e({"role": "assistant", "content": None, "tool_calls": [cat]}, 4, 2),
            _e({"role": "tool", "tool_call_id": "c1", "content": "cat: /srv/x: No such file or directory"}, 5, 2),
            _e({"role": "assistant", "content": "port is 8080, key PIN-2"}, 6, 3),
            _e({"role": "user", "content": "go"}, 7, 4)]
    call, gone = short_call(cat, 60), "cat: /srv/x: No such file or directory"
    assert call.endswith("x…)") and call != short_call(cat, 61)
    assert deterministic_state(view, view[2:7], ("P-1", "PIN-2", "absent"), 1000) == {
        "goal": "newer goal",  # the newest document's; the older one's facts are not a list: none read
        "verified_facts": ["f1", "2", '{"k": "é"}', f"#4 assistant called {short_call(cat, 200)}",
                           one_line(f"#5 result of {short_call(cat, 200)}: {gone}", 160),
                           "#6 assistant: port is 8080, key PIN-2"],
        "discarded_hypotheses": ["d0", "d1", f"{call} → {gone}"],
        "pending_actions": ["p1", "p2"],  # the newest document's only
        "pinned": ["P-1"],  # PIN-2 is in the document already, "absent" not in the messages
    }


def test_without_a_previous_document_the_goal_is_the_task_cut_to_300_characters_and_nothing_is_pending():
    task = "Fix  the\ntest " + "y" * 400
    view = [_e({"role": "system", "content": "sys"}, 0, 0), _e({"role": "user", "content": task}, 1, 0),
            _e({"role": "assistant", "content": "ok"}, 2), _e({"role": "user", "content": "go"}, 3)]
    doc = deterministic_state(view, view[2:3], (), 1000)
    assert doc == {"goal": one_line(task, 300), "verified_facts": ["#2 assistant: ok"], "discarded_hypotheses": [],
                   "pending_actions": []}
    assert len(doc["goal"]) == 300 and doc["goal"].startswith("Fix the test yyy")


def _long_state_view():
    prev = {"goal": "g", "verified_facts": [f"F{i:02} {UNICODE}" for i in range(20)],
            "discarded_hypotheses": [f"D{i:02}" for i in range(10)], "pending_actions": []}
    return [_e({"role": "system", "content": "sys"}, 0, 0), _e({"role": "user", "content": "task"}, 1, 0),
            _state_entry(prev, 2, "\n[pinned] PIN-9"), _e({"role": "assistant", "content": "noted"}, 3, 2),
            _e({"role": "user", "content": "go"}, 4, 3)]


# 21 facts (20 earlier, "#3 assistant: noted") and 10 discarded, trimmed from the longer list (facts on a
# tie), oldest first, an eighth (at least one) at a time: 2, 2, 2, then 1 fact each time down to 10, then
# one fact (10 and 10) and one discarded (9 and 10): 194 tokens for gpt-4 (180 for the default tokenizer).
TRIMMED = {"goal": "g", "verified_facts": [*(f"F{i:02} {UNICODE}" for i in range(12, 20)), "#3 assistant: noted"],
           "discarded_hypotheses": [f"D{i:02}" for i in range(1, 10)], "pending_actions": [], "pinned": ["PIN-9"]}


def test_a_deterministic_state_over_max_tokens_drops_the_oldest_of_the_longer_list_in_the_models_tokens():
    view = _long_state_view()
    assert count_text(dumps(TRIMMED), "gpt-4") == 194 and count_text(dumps(TRIMMED)) == 180
    assert deterministic_state(view, view[2:4], ("PIN-9",), 194, "gpt-4") == TRIMMED  # exactly max_tokens
    one_less = deterministic_state(view, view[2:4], ("PIN-9",), 193, "gpt-4")  # then a fact again (9 and 9)
    assert one_less == {**TRIMMED, "verified_facts": TRIMMED["verified_facts"][1:]}
    facts = [*(f"F{i:02} {UNICODE}" for i in range(20)), "#3 assistant: noted"]
    sixteen = count_text(dumps({**TRIMMED, "verified_facts": facts[5:], "discarded_hypotheses": [
        f"D{i:02}" for i in range(10)]}), "gpt-4")  # the document with 16 facts fits, but 17 - 2 are 15
    assert deterministic_state(view, view[2:4], ("PIN-9",), sixteen, "gpt-4")["verified_facts"] == facts[6:]


def test_the_new_fact_lines_of_a_deterministic_state_are_picked_in_the_models_tokens():
    lines = [f"{k} {UNICODE}" for k in range(30)]
    view = [_e({"role": "system", "content": "sys"}, 0, 0), _e({"role": "user", "content": "task"}, 1, 0),
            _e({"role": "assistant", "content": "\n".join(lines)}, 2), _e({"role": "user", "content": "go"}, 3, 2)]
    assert deterministic_state(view, view[2:3], (), 235, "gpt-4")["verified_facts"] == lines[16:]


def test_a_deterministic_state_trims_discarded_hypotheses_alone_and_stops_when_both_lists_are_empty():
    prev = {"goal": "g", "verified_facts": [], "discarded_hypotheses": [f"D{i:02}" for i in range(20)],
            "pending_actions": ["p"]}
    entries = [_state_entry(prev, 2)]
    view = [_e({"role": "system", "content": "sys"}, 0, 0), _e({"role": "user", "content": "task"}, 1, 0),
            *entries, _e({"role": "user", "content": "go"}, 3, 2)]
    full = deterministic_state(view, entries, (), 1000)
    assert full == {**prev, "verified_facts": []}
    tokens = count_text(dumps({**prev, "discarded_hypotheses": prev["discarded_hypotheses"][2:]}))
    assert deterministic_state(view, entries, (), tokens)["discarded_hypotheses"] == prev["discarded_hypotheses"][2:]
    assert deterministic_state(view, entries, (), 1) == {**prev, "discarded_hypotheses": []}


def test_distill_writes_the_deterministic_state_of_the_range_after_the_task_with_the_pins_in_the_models_tokens():
    view = _long_state_view()
    out = DistillStep(keep_turns=1, min_tokens=0, max_tokens=194).apply(view, _ctx(pins=("PIN-9",)))
    assert out.compactions[0].message == {"role": "user",
                                          "content": f"[ctxagent state of messages #2-#3]\n{dumps(TRIMMED)}"}
    assert out.view[2].message == out.compactions[0].message and out.view[3:] == view[4:] and out.warnings == []


def test_distill_leaves_a_range_of_at_most_min_tokens_or_of_only_the_previous_document():
    view = [_e({"role": "system", "content": "sys"}, 0, 0), _e({"role": "user", "content": "task"}, 1, 0),
            _e({"role": "assistant", "content": "a 1"}, 2), _e({"role": "assistant", "content": "b 2"}, 3),
            _e({"role": "user", "content": "go"}, 4)]
    tokens = view[2].tokens + view[3].tokens

    def distilled(min_tokens, on=view):
        return DistillStep(keep_turns=1, min_tokens=min_tokens).apply(on, _ctx())

    assert distilled(tokens).view is view
    assert distilled(tokens - 1).view[2].kind == "distill"
    only_state = [*view[:2], _state_entry({"goal": "g"}, 2), view[4]]
    assert distilled(0, only_state).view is only_state


def _recording_summarizer(reply: str, seen: list):
    def summarizer(prompt: str, max_tokens: int) -> str:
        seen.append((prompt, max_tokens))
        return reply
    return summarizer


def _llm_view():
    return [_e({"role": "system", "content": "sys"}, 0, 0), _e({"role": "user", "content": "task"}, 1, 0),
            _e({"role": "assistant", "content": "port 8080 at /srv/a.py"}, 2),
            _e({"role": "assistant", "content": "PIN-1 noted"}, 3), _e({"role": "user", "content": "go"}, 4)]


def test_the_llm_state_document_is_asked_for_with_the_rendered_range_and_its_pins_and_put_in_key_order():
    view, seen = _llm_view(), []
    ctx = replace(_ctx(model="", pins=("PIN-1",)),
                  summarizer=_recording_summarizer('{"extra": 1, "pending_actions": ["p"], "goal": "g PIN-1"}', seen))
    out = DistillStep(keep_turns=1, min_tokens=0, max_tokens=321).apply(view, ctx)
    assert out.compactions[0].message["content"] == (
        '[ctxagent state of messages #2-#3]\n{"goal": "g PIN-1", "pending_actions": ["p"], "extra": 1}')
    prompt = DISTILL_PROMPT.replace("{max_tokens}", "321")
    assert prompt.endswith("At most 321 tokens.") and out.warnings == []
    assert seen == [(f"{prompt}{pins_block(['PIN-1'])}\n\n{render(view[2:4])}", 321)]
    assert _finish('{"x": 1, "pending_actions": [], "goal": "g"}') == '{"goal": "g", "pending_actions": [], "x": 1}'


def test_a_failed_llm_state_document_is_reported_and_distilled_deterministically_instead():
    view = _llm_view()

    def warnings(reply: str, model: str = "", max_tokens: int = 321, **fields) -> list[str]:
        ctx = replace(_ctx(model=model), summarizer=_recording_summarizer(reply, []), **fields)
        out = DistillStep(keep_turns=1, min_tokens=0, max_tokens=max_tokens).apply(view, ctx)
        assert out.compactions[0].message["content"].endswith(dumps(deterministic_state(view, view[2:4], (),
                                                                                        max_tokens, model)))
        return out.warnings

    def failed(why: str) -> list[str]:
        return [f"distill: the LLM state document of messages #2-#3 failed ({why}); distilled the state "
                "deterministically instead"]

    assert warnings('{"x": 1}') == failed("the summarizer's reply is not usable: none of the keys ('goal', "
                                          "'verified_facts', 'discarded_hypotheses', 'pending_actions')")
    assert warnings('{"goal": "g"}', summarizer_window=300) == failed(
        "the summarizer's 300-token window cannot hold a request: prompt 146 + reply 321 + margin 256 tokens "
        "leave 0 for the material")
    reply = dumps({"goal": UNICODE * 3})
    limit = count_text(reply)
    assert warnings(reply, "gpt-4", limit) == failed(f"the summary has {count_text(reply, 'gpt-4')} tokens, over "
                                                     f"its limit of {limit}")


# --- role_selective.py: which entries are reduced, how, and the LLM findings (docs/mutation-strategies-d.md) ---

LONG_CALL = tool_call("c1", "shell", json.dumps({"command": "cat " + "z" * 300}))


def _role_view(content: str, call=LONG_CALL, *more: dict) -> list[Entry]:
    """pins, system, task, one call and its result (``content``), ``more`` messages, the current user message."""
    pins = Entry({"role": "user", "content": "[pinned facts] x"}, 5, -1, -1, 0, kind="pins")
    messages = [{"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call["id"], "content": content}, *more]
    return [pins, _e({"role": "system", "content": "sys"}, 0, 0), _e({"role": "user", "content": "task"}, 1, 0),
            *(_e(m, 2 + i, 1) for i, m in enumerate(messages)), _e({"role": "user", "content": "go"}, 9, 2)]


def _role(model: str = "", pins: tuple[str, ...] = (), summarizer=None, **params
          ) -> tuple[RoleSelectiveStep, StrategyContext]:
    """A ``role_selective`` step (``keep_turns`` 1 unless given) and its context."""
    step = RoleSelectiveStep(**{"keep_turns": 1, **params})
    return step, replace(_ctx(model=model, pins=pins), summarizer=summarizer)


def _role_apply(view: list[Entry], **arguments) -> Outcome:
    step, ctx = _role(**arguments)
    return step.apply(view, ctx)


LINES = "\n".join(f"line {i}" for i in range(40))  # 164 tokens as a tool message


def test_role_selective_cuts_an_old_tool_result_to_head_and_tail_naming_the_call_in_80_characters():
    view = _role_view(LINES + "\nK-7 here")
    out = _role_apply(view, pins=("K-7",), tool_tokens=view[4].tokens - 1, head_lines=1, tail_lines=1)
    marker = (f"[... ctxagent cut this {view[4].tokens}-token result of {short_call(LONG_CALL, 80)} to its head and "
              f"tail; full result: {base_handle('c1')} (read_output or grep_output) ...]")
    assert short_call(LONG_CALL, 80) != short_call(LONG_CALL, 81)
    new = out.view[4]
    assert new.message == {**view[4].message, "content": f"line 0\n{marker}\nK-7 here"}  # the pin is in the tail
    assert (new.kind, new.start, new.turn, new.tokens) == ("role_selective", 3, 1, count_message(new.message))
    assert out.offloads == [view[4]] and out.compactions == [] and out.view[:4] == view[:4]
    pinned = _role_apply(view, pins=("line 7",), tool_tokens=1, head_lines=1, tail_lines=1)
    assert pinned.view[4].message["content"].endswith("\nK-7 here\n[pinned] line 7")
    assert _role_apply(view, tool_tokens=view[4].tokens).view is view  # not over tool_tokens


def test_role_selective_leaves_the_newest_units_other_kinds_and_a_cut_that_would_not_shrink():
    view = _role_view(LINES)
    assert _role_apply(view, tool_tokens=1, keep_turns=2).view is view
    stub = [*view[:4], replace(view[4], kind="dedupe"), view[5]]
    assert _role_apply(stub, tool_tokens=1).view is stub
    lines = [f"line {i}" for i in range(19)]
    lines[5] += " w w w"  # its head and tail (1 line each and the marker) are exactly as long: 83 tokens
    even = _role_view("\n".join(lines))
    cut = RoleSelectiveStep(head_lines=1, tail_lines=1)._head_tail(even[4], LONG_CALL, _ctx(model=""))
    assert cut.tokens == even[4].tokens == 83
    assert _role_apply(even, tool_tokens=1, head_lines=1, tail_lines=1).view is even


def test_role_selective_cuts_long_reasoning_to_its_conclusion_in_the_models_tokens_and_keeps_its_calls():
    last = " ".join(f"w{i}" for i in range(40)) + f" {UNICODE}"
    content = f"first thoughts K-7\n\n{last}"
    call = tool_call("c2", "ls", "{}")
    view = _role_view("ok", LONG_CALL, {"role": "assistant", "content": content, "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "c2", "content": "a.py"})
    gpt4, default = count_text(content, "gpt-4"), count_text(content)
    assert gpt4 > default

    def reduced(limit: int, model: str = "gpt-4"):
        return _role_apply(view, model=model, pins=("K-7",), assistant_tokens=limit, keep_turns=1)

    assert reduced(gpt4).view is view  # the text has exactly assistant_tokens
    out = reduced(default)  # over it in gpt-4's tokens only
    kept = conclusion(content, default // 2, "gpt-4")
    assert kept not in (conclusion(content, default // 2), conclusion(content, default // 3, "gpt-4"))
    new = out.view[5]
    assert new.message == {"role": "assistant", "tool_calls": [call], "content": (
        f"[ctxagent cut {gpt4} tokens of reasoning to the conclusion]\n{kept}\n[pinned] K-7")}
    assert (new.kind, new.start, new.turn, new.tokens) == ("role_selective", 4, 1, count_message(new.message, "gpt-4"))
    assert out.offloads == [] and out.view[6:] == view[6:]
    assert reduced(default, model="").view is view  # the default tokenizer counts it at the limit


def _findings_summarizer(reply: str, seen: list):
    def summarizer(prompt: str, max_tokens: int) -> str:
        seen.append((prompt, max_tokens))
        if isinstance(reply, Exception):
            raise reply
        return reply
    return summarizer


def test_llm_findings_are_asked_for_each_result_up_to_max_calls_and_recorded_with_their_label():
    results = [LINES.replace("line", f"r{n}") for n in range(3)]
    calls = [LONG_CALL, tool_call("c2", "grep", "{}"), tool_call("c3", "grep", "{}")]
    more = [m for n in (1, 2) for m in ({"role": "assistant", "content": None, "tool_calls": [calls[n]]},
                                         {"role": "tool", "tool_call_id": f"c{n + 1}", "content": results[n]})]
    view = _role_view(results[0], LONG_CALL, *more)
    seen: list = []
    step, ctx = _role(summarizer=_findings_summarizer("found 8080", seen), tool_tokens=1, llm=True, max_calls=2,
                      findings_tokens=321)
    out = step.apply(view, ctx)
    prompt = FINDINGS_PROMPT.format(max_tokens=321)
    assert seen == [(f"{prompt}\n\nresult of {short_call(LONG_CALL, 200)}:\n{results[0]}", 321),
                    (f"{prompt}\n\nresult of grep():\n{results[1]}", 321)]
    assert short_call(LONG_CALL, 200) != short_call(LONG_CALL, 201)
    label = (f"[ctxagent findings of {short_call(LONG_CALL, 80)}, a {view[4].tokens}-token result; full result: "
             f"{base_handle('c1')} (read_output or grep_output)]")
    assert out.view[4].message == {**view[4].message, "content": f"{label}\nfound 8080"}
    assert [(c.strategy, c.start, c.end, c.message, c.tokens, c.tokens_before) for c in out.compactions] == [
        ("role_selective", e.start, e.end, e.message, e.tokens, view[i].tokens)
        for i, e in ((4, out.view[4]), (6, out.view[6]))]
    assert out.view[8].message["content"].startswith("r2 0\nr2 1\n")  # the third: head and tail
    assert out.offloads == [view[4], view[6], view[8]]
    assert step.model_copy(update={"llm": False}).apply(view, ctx).compactions == []


def test_llm_findings_as_long_as_the_result_are_not_used_and_the_head_and_tail_is():
    view = _role_view(LINES, tool_call("c1", "shell", json.dumps({"command": "cat log"})))
    reply = " ".join(f"f{i}" for i in range(64)) + "!"
    step, ctx = _role(summarizer=_findings_summarizer(reply, []), tool_tokens=1, llm=True)
    assert step._findings(view[4], view[3].message["tool_calls"][0], ctx, []).tokens == 164
    out = step.apply(view, ctx)
    assert out.compactions == [] and out.view[4].kind == "role_selective"
    assert out.view[4].message["content"].startswith("line 0\nline 1\n") and "ctxagent cut this" in out.view[4].message[
        "content"]


def test_failed_llm_findings_are_reported_even_when_nothing_else_changes():
    view = _role_view("\n".join(["x " * 100] * 3))  # three lines: the head and tail would be longer

    def warnings(summarizer_reply, model: str = "", **fields) -> tuple:
        step, ctx = _role(model=model, summarizer=_findings_summarizer(summarizer_reply, []), tool_tokens=1,
                          llm=True, findings_tokens=50)
        out = step.apply(view, replace(ctx, **fields))
        return out.view is view, out.warnings

    def failed(why: str) -> list[str]:
        return [f"role_selective: the LLM findings of {short_call(LONG_CALL, 60)} (message #3) failed ({why}); "
                "cut it to its head and tail instead"]

    assert short_call(LONG_CALL, 60) != short_call(LONG_CALL, 61)
    assert warnings(RuntimeError("down")) == (True, failed("the summarizer raised RuntimeError: down"))
    tiny = warnings("ok", summarizer_window=200)
    assert tiny[0] and tiny[1][0].startswith(f"role_selective: the LLM findings of {short_call(LONG_CALL, 60)} "
                                             "(message #3) failed (the summarizer's 200-token window cannot hold")
    reply = UNICODE * 5
    limit = count_text(reply)  # gpt-4 counts more
    out = _role_apply(view, model="gpt-4", summarizer=_findings_summarizer(reply, []), tool_tokens=1, llm=True,
                      findings_tokens=limit)
    assert out.warnings == failed(
        f"the summary has {count_text(reply, 'gpt-4')} tokens, over its limit of {limit}")


def test_llm_findings_read_a_result_in_chunks_of_8000_tokens():
    call = tool_call("c1", "shell", "{}")
    content = "x\n" * 3998 + "x"
    assert count_text(f"result of shell():\n{content}") == 8001
    seen: list = []
    view = _role_view(content, call)
    _role_apply(view, summarizer=_findings_summarizer("found", seen), tool_tokens=1, llm=True)
    assert len(seen) == 3  # two chunks, then the parts


# --- prune.py: units, tools, max_tokens, batch 1, notes and stubs (docs/mutation-strategies-d.md) ---


def _dead_then(*units, turns=None) -> list[Entry]:
    """system, task, one unit per ``(calls, results)``, the current user message; calls are
    ``(id, tool, command)``."""
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    for calls, results in units:
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [tool_call(i, t, json.dumps({"command": c})) for i, t, c in calls]})
        messages += [{"role": "tool", "tool_call_id": i, "content": r} for (i, _, _), r in zip(calls, results,
                                                                                                 strict=True)]
    messages.append({"role": "user", "content": "go"})
    return _entries(messages, turns or [0, 0, *([1] * (len(messages) - 4)), 9, 9])


OK = "exit code: 0\nok"


def test_a_success_in_the_same_unit_or_of_another_tool_does_not_supersede_a_dead_end():
    same_unit = _dead_then(([("c1", "shell", "cat /a"), ("c2", "shell", "cat /b")], [GONE, OK]),
                           ([("c3", "read", "x")], [OK]))
    assert PruneStep().apply(same_unit, ctx_for(same_unit)).view is same_unit
    other_tool = _dead_then(([("c1", "shell", "cat /a")], [GONE]), ([("c2", "read", "x")], [OK]),
                            ([("c3", "read", "y")], [OK]))
    assert PruneStep().apply(other_tool, ctx_for(other_tool)).view is other_tool


def test_prune_judges_not_found_wordings_up_to_its_max_tokens_and_prunes_from_a_batch_of_one():
    view = _dead_then(([("c1", "shell", "grep x")], ["grep: pattern not found"]), ([("c2", "shell", "ls")], [OK]),
                      ([("c3", "read", "y")], [OK]))
    tokens = view[3].tokens

    def kinds(**params):
        ctx = replace(ctx_for(view, window=100_000), free_from=view[-1].end + 1)  # all sent
        return [e.kind for e in PruneStep(**params).apply(view, ctx).view]

    assert kinds(max_tokens=tokens, batch=1) == ["message", "message", "prune", *["message"] * 5]
    assert kinds(max_tokens=tokens - 1, batch=1) == ["message"] * 9
    assert kinds(max_tokens=tokens, batch=2) == ["message"] * 9


def test_one_note_names_consecutive_dead_units_with_empty_and_long_first_lines_counted_in_the_models_tokens():
    error = "ERROR: " + "e" * 150
    view = _dead_then(([("c1", "shell", f"cat {UNICODE}"), ("c2", "shell", "cat /b")], ["", error]),
                      ([("c3", "shell", "cat /c")], [error.replace("e", "f")]), ([("c4", "shell", "ls")], [OK]))
    out = PruneStep().apply(view, replace(ctx_for(view), model="gpt-4"))
    note = out.view[2]
    calls = [view[2].message["tool_calls"][0], view[2].message["tool_calls"][1], view[5].message["tool_calls"][0]]
    assert note.message["content"] == (
        "[ctxagent pruned dead ends (later attempts succeeded): "
        f"{short_call(calls[0], 60)} → (empty) ({base_handle('c1')}); "
        f"{short_call(calls[1], 60)} → {error[:99]}… ({base_handle('c2')}); "
        f"{short_call(calls[2], 60)} → {error.replace('e', 'f')[:99]}… ({base_handle('c3')})]")
    assert (note.start, note.end, note.turn) == (2, 6, 1) and out.view[3:] == view[7:]
    assert note.tokens == count_message(note.message, "gpt-4") != count_message(note.message)


def test_a_stub_as_long_as_the_dead_result_is_not_made_and_each_stub_has_the_pins_of_its_request():
    view = _dead_ends_view()
    even = replace(view[7], message={**view[7].message, "content": "exit code: 1\nboom\n" + "pad " * 31})
    even = replace(even, tokens=count_message(even.message))
    assert even.tokens == 44  # and so is its stub
    view_even = [*view[:7], even, *view[8:]]
    assert PruneStep().apply(view_even, ctx_for(view_even)).view[4] is even
    view = _dead_ends_view()
    assert "[pinned]" not in PruneStep().apply(view, ctx_for(view, pins=())).view[4].message["content"]
    pinned = PruneStep().apply(view, ctx_for(view, pins=("/c: No such file or directory\ncat",))).view[4]
    assert pinned.message["content"].endswith("\n[pinned] /c: No such file or directory\ncat")


def test_a_dead_result_another_strategy_replaced_is_not_pruned():
    view = _dead_ends_view()
    view[7] = replace(view[7], kind="role_selective")  # still starts with "exit code: 1"
    assert is_dead(view[7])
    out = PruneStep().apply(view, ctx_for(view))
    assert out.view[4] is view[7] and [e.start for e in out.offloads] == [3, 5]


def test_distill_discards_a_not_found_result_of_at_most_200_tokens():
    def discarded(pad: int) -> list[str]:
        view = _dead_then(([("c1", "shell", "cat /a")], ["cat: /a: No such file or directory\n" + "x " * pad]))
        assert view[3].tokens == pad + 16
        return deterministic_state(view, view[2:4], (), 1000)["discarded_hypotheses"]

    assert discarded(184) == ["shell(command=cat /a) → cat: /a: No such file or directory"]
    assert discarded(185) == []


def test_the_pipeline_runs_again_on_its_result_until_a_pass_changes_nothing_and_at_most_max_passes():
    """ONE STATE: a later step's change can move an earlier step's decision, so ``run`` passes over
    its own result again until nothing changes (then a fresh fold, which starts from that result,
    builds the same request); a pipeline that never settles stops after MAX_PASSES passes."""
    from ctxagent.strategies import pipeline

    class ShrinkStep(StrategyConfig):
        """Drops the last character of the user message while it is longer than ``floor`` characters."""

        strategy: Literal["shrink_probe"] = "shrink_probe"
        floor: int = 0

        def apply(self, view: list[Entry], ctx: StrategyContext, scan: Scan | None = None) -> Outcome:
            user = next(e for e in view if e.role == "user")
            if len(user.message["content"]) <= self.floor:
                return Outcome(view)
            new = replace(user, message={**user.message, "content": user.message["content"][:-1]},
                          kind="shrink_probe")
            return Outcome([new if e is user else e for e in view])

    try:
        view = [_msg("system", "s", 0), _msg("user", "abcdefgh", 1)]
        settles = Engine().run(view, [ShrinkStep(trigger=0, floor=6)], _ctx())  # two changes, then a pass with none
        assert [e.message["content"] for e in settles.view][1] == "abcdef" and len(settles.compactions) == 2
        assert Engine().run(settles.view, [ShrinkStep(trigger=0, floor=6)], _ctx()).compactions == []  # a fixed point
        never = Engine().run(view, [ShrinkStep(trigger=0, floor=0)], _ctx())  # would shrink 8 times: stops at the bound
        assert len(never.compactions) == pipeline.MAX_PASSES and never.view[1].message["content"] == "abcd"
        assert replay(view, never.compactions) == never.view
    finally:
        StrategyConfig._kinds.pop("shrink_probe", None)
