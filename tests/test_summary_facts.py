"""Issue 11, compaction that keeps what matters: exact values survive a loose LLM summary (a facts
block copied by code), every summarizer request fits the summarizer's own window, and a failed
summary is reported instead of falling back silently."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxagent.agent.context import ContextState
from ctxagent.messages import tool_call
from ctxagent.profile import StrategyConfig
from ctxagent.strategies.base import Budget, Entry
from ctxagent.strategies.checkpoint import CheckpointStep
from ctxagent.strategies.distill import DistillStep
from ctxagent.strategies.facts import (
    LABEL,
    LABEL_CHARS,
    LINE_CHARS,
    Group,
    LeftOut,
    call_label,
    choose,
    collect,
    facts_block,
    split_blocks,
    values_in,
    with_facts,
)
from ctxagent.strategies.pipeline import Engine, replay
from ctxagent.strategies.rendering import render
from ctxagent.strategies.role_selective import RoleSelectiveStep
from ctxagent.strategies.sliding_window import SlidingWindowStep
from ctxagent.strategies.summarize import SummarizeStep
from ctxagent.strategies.summarizing import MARGIN_TOKENS, SummaryFailed, condense
from ctxagent.tokens import count_text
from examplecount import examples
from test_strategies import _calls_view, _with, assert_laws, ctx_for, good, raises

PORT, CONFIG, COMMAND = "port 8443", "/etc/payments/config.yaml", "pytest -x tests/test_io.py -k slow"
COMMIT, LATENCY = "9f3c2ab41d7e", "412 ms"
LITERALS = (PORT, CONFIG, COMMAND, COMMIT, LATENCY)
FILLER = "\n".join(f"filler line {i}: nothing to see" for i in range(40))


def planted_view(filler_units: int = 12) -> list[Entry]:
    """Four units holding the five literals, then ``filler_units`` units of filler."""
    calls = [
        ("read_file", json.dumps({"path": CONFIG}), f"server:\n  listen: 0.0.0.0\n  tls: on {PORT}\n{FILLER}"),
        ("shell", json.dumps({"command": COMMAND}), f"FAILED tests/test_io.py::test_slow\n{FILLER}"),
        ("shell", json.dumps({"command": "git log -1 --oneline"}), f"{COMMIT} Retry the payment webhook\n{FILLER}"),
        ("shell", json.dumps({"command": "bench --p99"}), f"p99 latency {LATENCY} over 1000 requests\n{FILLER}"),
    ]
    calls += [("shell", json.dumps({"command": f"cat notes{n}.txt"}), FILLER) for n in range(filler_units)]
    return _calls_view(calls, task="Find why the payment service is slow.")


def carried(content: str) -> list[str]:
    """The values of the facts blocks in ``content``, in order, as a later summary reads them back."""
    groups, _, _ = collect([Entry({"role": "user", "content": content}, 1, 1, 1, 0)])
    return [value for group in groups for _, value in group.values]


def loose(text: str, max_tokens: int) -> str:
    """A summarizer that paraphrases loosely: every exact value gone."""
    if "checkpoint of an AI agent" in text:
        return json.dumps({"goal": "speed up the payment service",
                           "key_facts": ["the service listens on its usual TLS port", "latency is high"],
                           "pending": ["fix the slow test"]})
    return ("The agent read the payment service's configuration, ran the slow tests, looked at the "
            "latest commit and measured a high tail latency.")


# --- 1. summaries keep exact values -----------------------------------------------------------


@pytest.mark.parametrize("strategy", [SummarizeStep(), SlidingWindowStep(), CheckpointStep()], ids=lambda s: s.strategy)
def test_loose_paraphrase_keeps_planted_literals(strategy):
    view = planted_view()
    ctx = ctx_for(view, window=3_000, summarizer=loose, pins=())
    out = strategy.apply(view, ctx)
    assert out.warnings == [] and len(out.compactions) == 1
    comp = out.compactions[0]
    assert comp.strategy == strategy.strategy
    content = comp.message["content"]
    assert "[exact values from messages #" in content and ", copied by ctxagent]" in content
    block = content.split("[exact values from messages ", 1)[1]
    for literal in LITERALS:
        assert f"\n- {literal}" in block or any(literal in line for line in block.splitlines()), literal
    assert all(literal in content for literal in LITERALS)
    assert replay(list(view), out.compactions) == out.view  # recorded once, replayed as is
    assert_laws(view, out, ctx)


def test_values_already_in_the_summary_are_not_repeated():
    view = planted_view(filler_units=0)
    summary = f"Listens on {PORT}; config at {CONFIG}."
    block = facts_block(view[2:], summary)
    assert block.startswith(LABEL.format(range=f"#{view[2].start}-#{view[-1].end}"))
    lines = block.splitlines()[1:]
    assert f"  {PORT}" not in lines and f"  {CONFIG}" not in lines
    assert f"  {PORT}" in facts_block(view[2:], "").splitlines()
    # each value under what it belongs to: the command heads its group, the commit sits under git log
    assert lines[lines.index(f"- {COMMAND} (@c2)") + 1] == "  FAILED tests/test_io.py::test_slow"
    assert lines[lines.index("- git log -1 --oneline (@c3)") + 1] == f"  {COMMIT}"
    assert lines[lines.index("- bench --p99 (@c4)") + 1] == f"  {LATENCY}"
    assert with_facts(summary, view[2:]) == f"{summary}\n{block}"


def test_the_summary_checks_still_apply_to_the_llm_text():
    view = planted_view()
    overlong = lambda t, n: "word " * (3 * n)  # noqa: E731
    out = SummarizeStep().apply(view, ctx_for(view, window=3_000, summarizer=overlong, pins=()))
    assert {c.strategy for c in out.compactions} == {"truncate"}
    assert "over its limit" in out.warnings[0]


def test_a_rolling_summary_carries_the_values_of_the_one_it_supersedes():
    view = planted_view()
    ctx, step = ctx_for(view, window=3_000, summarizer=loose, pins=()), SlidingWindowStep(keep_turns=4)
    first = step.apply(view, ctx)
    grown = _with(first.view, [{"role": "assistant", "content": f"more {i} " * 200} for i in range(6)])
    second = step.apply(grown, ctx)
    content = second.compactions[0].message["content"]
    assert second.compactions[0].start <= first.compactions[0].start
    assert all(literal in content for literal in LITERALS)
    assert set(carried(first.compactions[0].message["content"])) <= set(carried(content))


def test_the_facts_cap_keeps_the_most_specific_values():
    view = planted_view(filler_units=0)
    block = facts_block(view[2:], "", max_tokens=60)
    assert count_text(block) <= 60
    assert COMMIT in block and LATENCY not in block  # an id outranks a latency figure
    assert block.endswith("- left out: 4 more values; the results named here by handle hold them")
    assert facts_block(view[2:], "", max_tokens=70).endswith(
        "- left out: 4 more values; full results: @c1 @c2 @c4 (read_output, grep_output)")  # the handles, with room
    assert facts_block(view[2:], "", max_tokens=0) == ""
    big = SummarizeStep(facts_tokens=0).apply(planted_view(), ctx_for(planted_view(), window=3_000, summarizer=loose,
                                                                      pins=()))
    assert "[exact values" not in big.compactions[0].message["content"]


def test_own_handles_name_their_groups_not_values():
    view = planted_view(filler_units=0)
    _, _, groups = collect(view[2:])
    assert [(g.label, g.handles) for g in groups][:2] == [(f"read_file(path={CONFIG})", ["@c1"]), (COMMAND, ["@c2"])]
    assert not any(v.startswith("@c") for g in groups for _, v in g.values)


TEXT_PARTS = st.one_of(
    st.sampled_from([*LITERALS, "https://pay.example.com/v2/charge?id=7", "db.internal:5432", "17%", "3.2s",
                     "64 MB", "@abc123", "123e4567-e89b-12d3-a456-426614174000", "ValueError: bad value\n",
                     "Traceback (most recent call last):\n", "src/app/main.py:42", "v1.2.3", "exit code 2",
                     " ", "\n", ", ", ".", "port=", "/", ":"]),
    st.text(max_size=30),
)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(TEXT_PARTS, max_size=30), cap=st.integers(0, 120), summary=st.text(max_size=40))
@example(parts=["port 8443", "\n", "%"], cap=31, summary="")  # a value across a line end split the block line
def test_extractor_properties(parts, cap, summary):
    text = "".join(parts)
    values = values_in(text)
    assert all(v and v in text for _, v in values)  # verbatim
    assert values == values_in(text)  # deterministic
    assert len({v for _, v in values}) == len(values)  # once each
    entries = [Entry({"role": "user", "content": "task"}, 3, 1, 1, 0),
               Entry({"role": "assistant", "content": text}, 10, 2, 2, 1)]
    block = facts_block(entries, summary, max_tokens=cap)
    assert block == facts_block(entries, summary, max_tokens=cap)
    assert count_text(block) <= cap
    if block:
        listed = [line[2:] for line in block.splitlines()[1:] if line.startswith("  ")]
        assert all(v in text and v not in summary for v in listed)
        assert carried(block) == listed


# --- 2. summarizer requests fit the summarizer's own window -----------------------------------


def big_view(units: int = 13, lines: int = 44) -> list[Entry]:
    calls = [("shell", json.dumps({"command": f"cat part{n}.log"}),
              "\n".join(f"part {n} line {i}: request {i * 13} served in {i % 97} ms" for i in range(lines)))
             for n in range(units)]
    return _calls_view(calls, task="Why are requests slow?")


def test_summarizer_request_fits_its_window():
    view = big_view()
    window, max_tokens = 8_000, 800
    material = render(view[2:-2])  # what summarize with keep_turns 1 compacts
    assert 8_400 < count_text(material) < 9_200  # ~8.7K tokens: over the window on its own
    seen: list[int] = []

    def summarizer(prompt: str, n: int) -> str:
        seen.append(count_text(prompt) + n + MARGIN_TOKENS)
        return "Requests were slow in every part; see the logs by handle."

    ctx = replace(ctx_for(view, window=16_000, summarizer=summarizer, pins=()), summarizer_window=window)
    out = SummarizeStep(keep_turns=1, max_tokens=max_tokens).apply(view, ctx)
    assert out.warnings == [] and [c.strategy for c in out.compactions] == ["summarize"]
    assert len(seen) > 1 and max(seen) <= window, seen


def test_condense_clamps_chunks_below_the_default():
    material = "\n".join(f"line {i}: value {i}" for i in range(3_000))
    seen: list[int] = []
    reply = lambda p, n: seen.append(count_text(p) + n + MARGIN_TOKENS) or "short"  # noqa: E731
    assert condense(material, summarizer=reply, final_prompt="Sum up.", max_tokens=300, chunk_tokens=50_000,
                    window=4_000) == "short"
    assert len(seen) > 2 and max(seen) <= 4_000


def test_a_window_too_small_for_any_request_is_a_failure_naming_the_sizes():
    with pytest.raises(SummaryFailed, match=r"1000-token window .*reply 800 \+ margin 256"):
        condense("some text", summarizer=good, final_prompt="Sum up.", max_tokens=800, chunk_tokens=8_000,
                 window=1_000)


# --- 3. a failed or rejected summary is reported ----------------------------------------------


@pytest.mark.parametrize(("strategy", "instead"), [
    (SummarizeStep(), "fell back to truncation"),
    (SlidingWindowStep(), "deterministic window note"),
    (CheckpointStep(), "deterministic checkpoint"),
    (DistillStep(), "deterministically"),
    (RoleSelectiveStep(llm=True), "head and tail"),
], ids=lambda v: getattr(v, "strategy", ""))
def test_failed_summary_is_reported(strategy, instead):
    view = planted_view()
    out = strategy.apply(view, ctx_for(view, window=3_000, summarizer=raises, pins=()))
    assert out.warnings, strategy.strategy
    warning = out.warnings[0]
    assert warning.startswith(f"{strategy.strategy}: ") and "provider down" in warning and instead in warning


def test_a_rejected_request_is_reported_with_the_window():
    view = planted_view()
    ctx = replace(ctx_for(view, window=3_000, summarizer=good, pins=()), summarizer_window=1_000)
    out = SummarizeStep(max_tokens=800).apply(view, ctx)
    assert {c.strategy for c in out.compactions} == {"truncate"}
    assert "1000-token window" in out.warnings[0] and "fell back to truncation" in out.warnings[0]


def test_no_summarizer_is_no_failure():
    view = planted_view()
    for strategy in (SummarizeStep(), SlidingWindowStep(), CheckpointStep(), DistillStep()):
        assert strategy.apply(view, ctx_for(view, window=3_000, pins=())).warnings == []


def test_pipeline_and_build_return_the_warnings():
    view = planted_view()
    steps = [StrategyConfig(strategy="summarize", trigger=0.5, keep_turns=2),
             StrategyConfig(strategy="prune", trigger=0.5)]
    ctx = ctx_for(view, window=3_000, summarizer=raises, pins=())
    assert "provider down" in Engine().run(view, steps, ctx).warnings[0]
    state = ContextState(view=list(view))
    budget = Budget(window=3_000, tools=100, reserved=500, target=0.5, trigger=0.8)
    built = state.build(steps, budget, turn=20, summarizer=raises)
    assert len(built.warnings) == 1 and built.warnings[0].startswith("summarize: the summary of messages #")
    seen: list[int] = []
    spy = lambda p, n: seen.append(count_text(p) + n + MARGIN_TOKENS) or good(p, n)  # noqa: E731
    built = ContextState(view=list(view)).build(steps, budget, turn=20, summarizer=spy, summarizer_window=2_500)
    assert built.warnings == [] and seen and max(seen) <= 2_500
    assert [c.strategy for c in built.compactions][:1] == ["summarize"]


def test_an_error_line_cut_at_its_length_never_cuts_a_handle_in_two():
    """Found by the law test: an error line cut at 200 characters ended in '(@call_' + '3', a
    handle naming another output than '@call_3_0'."""
    from ctxagent.strategies.facts import LINE_CHARS, values_in

    line = "ERROR: " + "x" * (LINE_CHARS - 12) + " (@call_3_0) more"
    cut = next(value for _, value in values_in(line) if value.startswith("ERROR"))
    assert len(cut) <= LINE_CHARS and "@call" not in cut


# --- 5. the extractor's edges, stated exactly (mutation testing, issue 17) ----------------------


def test_an_error_line_of_exactly_the_line_length_is_kept_whole_and_a_longer_one_is_cut_without_its_tail_spaces():
    whole = "error: " + "x" * 188 + " @abc"
    assert len(whole) == LINE_CHARS and (5, whole) in values_in(whole)
    cut = "error: " + "y" * 188 + " " * 5 + "z" * 20
    assert (5, "error: " + "y" * 188) in values_in(cut)


def test_a_calls_label_is_its_command_or_cmd_else_the_call_in_short_and_its_other_arguments_are_values():
    content = "x" * 100 + " see /etc/app.yaml"
    calls = [tool_call("a", "shell", '{"cmd": "make test"}'), {"id": "b", "function": "not a mapping"},
             {"id": "c", "function": {"name": "x"}}, tool_call("d", "x", '["a"]'),
             tool_call("e", "shell", json.dumps({"command": "c" * (LABEL_CHARS + 5) + "\nsecond line"})),
             tool_call("f", "write_file", json.dumps({"path": "src/app.py", "content": content}))]
    labels = [call_label(c) for c in calls]
    assert labels[:4] == ["make test", "?", "x()", 'x(["a"])'] and call_label(None) == "?"
    assert labels[4] == "c" * (LABEL_CHARS - 1) + "…"  # the first line, cut to the label's length
    assert labels[5].startswith("write_file(path=src/app.py, content=xxx") and len(labels[5]) <= LABEL_CHARS
    entry = Entry({"role": "assistant", "content": None, "tool_calls": calls}, 10, 2, 2, 1)
    # an argument's value that the label shows (the path) is not repeated; one it cut off is listed
    assert [(g.label, g.values) for g in collect([entry])[2]] == [(labels[5], [(3, "/etc/app.yaml")])]


def _cost(value: str, model: str = "") -> int:
    return count_text(f"\n- {value}", model) + 1


def _bare(*values: tuple[int, str]) -> list[Group]:
    """One group per value, as the lines of an old block (no label)."""
    return [Group("", [], [value]) for value in values]


def test_choose_takes_the_most_specific_then_the_newest_while_their_lines_fit_to_the_token():
    groups = _bare((3, "/a/one.py"), (3, "/b/two.py"), (0, "abc1234f"), (3, "abc1234f:9"))
    assert choose(groups[:3], "", 1000) == [(2, "abc1234f"), (1, "/b/two.py"), (0, "/a/one.py")]  # best first
    exact = _cost("abc1234f") + _cost("/b/two.py")
    assert choose(groups[:3], "", exact) == [(2, "abc1234f"), (1, "/b/two.py")]
    assert choose(groups[:3], "", exact - 1) == [(2, "abc1234f")]
    assert choose(groups[:3], "see /a/one.py", 1000) == [(2, "abc1234f"), (1, "/b/two.py")]  # already in the summary
    assert choose(groups, "", 1000) == [(3, "abc1234f:9"), (1, "/b/two.py"), (0, "/a/one.py")]  # one inside another
    assert choose(groups, "", 2) == []  # no room for any line


def test_choose_counts_a_groups_header_once():
    group = Group("svcctl describe svc17", ["@c17"], [(4, "port: 41017"), (0, "abc1234f")])
    header = count_text("\n- svcctl describe svc17 (@c17)") + 1
    one, two = (count_text(f"\n  {v}") + 1 for v in ("abc1234f", "port: 41017"))
    assert choose([group], "", header + one + two) == [(0, "abc1234f"), (0, "port: 41017")]
    assert choose([group], "", header + one + two - 1) == [(0, "abc1234f")]


def test_the_block_counts_in_the_models_tokens():
    value = "/srv/über/straße.py"
    assert (_cost(value), _cost(value, "gpt-4")) == (10, 11)
    entries = [Entry({"role": "tool", "tool_call_id": "c1", "content": f"see /srv/héllo/wörld.py and {value}"},
                     10, 3, 4, 1)]
    label = LABEL.format(range="#3-#4")
    full = f"{label}\n- tool result #3-#4 (@c1)\n  /srv/héllo/wörld.py\n  {value}"
    short = f"{label}\n- left out: 2 more values; the results named here by handle hold them"
    named = f"{label}\n- left out: 2 more values; full results: @c1 (read_output, grep_output)"
    assert [facts_block(entries, "", n) for n in (32, 33, 37, 38, 52, 53)] == ["", short, short, named, named, full]
    assert [facts_block(entries, "", n, "gpt-4") for n in (53, 54)] == [named, full]
    assert with_facts("s", entries, 53) == f"s\n{full}"
    assert with_facts("s", entries, 53, "gpt-4") == f"s\n{named}"


def test_no_entries_or_no_values_make_no_block():
    assert facts_block([], "", 400) == ""
    plain = [Entry({"role": "user", "content": "nothing exact here"}, 5, 1, 1, 1)]
    assert facts_block(plain, "", 400) == ""
    assert with_facts("s", plain) == "s"


def test_values_in_lists_values_by_first_position_counting_every_line_end():
    assert values_in("(/srv/a.py) failed") == [(5, "(/srv/a.py) failed"), (3, "/srv/a.py")]  # the line starts first
    assert values_in("x /srv/a.py\n" + " " * 20 + "failed") == [(3, "/srv/a.py"), (5, "failed")]
    assert values_in("aaaaaaaaaa\n/srv/a.py\nfailed") == [(3, "/srv/a.py"), (5, "failed")]
    assert values_in("a\nb\nc\nx @a\nfailed") == [(7, "@a"), (5, "failed")]
    assert values_in("12 ms failed") == [(6, "12 ms"), (5, "12 ms failed")]  # a tie keeps the patterns' order
    assert values_in("12 ms then /srv/a.py") == [(6, "12 ms"), (3, "/srv/a.py")]  # position, not rank
    assert values_in("f (/srv/a.py) failed") == [(5, "f (/srv/a.py) failed"), (3, "/srv/a.py")]


def test_values_in_trims_trailing_punctuation_keeps_two_characters_and_never_spans_lines():
    assert values_in("see /srv/a.py.") == [(3, "/srv/a.py")]
    assert values_in("see @a") == [(7, "@a")]
    assert values_in("port\n8443") == []
    assert values_in("https://x.io/error") == [(1, "https://x.io/error")]  # also an error line: the lowest rank


def test_split_blocks_takes_the_items_right_under_a_label_only():
    content = f"- a plain list item\n{LABEL.format(range='#1-#2')}\n- v1\n- v2\nafter\n- item"
    assert split_blocks(content) == ("- a plain list item\nafter\n- item", ["v1", "v2"])


def test_collect_leaves_out_the_handles_of_the_ranges_own_results_and_keeps_carried_values_in_their_groups():
    own = Entry({"role": "tool", "tool_call_id": "c1", "content": "saved as @h1, see @other"}, 5, 1, 1, 1, handle="@h1")
    assert collect([own]) == ([], LeftOut(), [Group("tool result #1", ["@h1"], [(7, "@other")])])
    block = f"{LABEL.format(range='#1-#1')}\n- svc1 (@c1)\n  /srv/a.py\n  port 8443\n- /srv/b.py\n" \
            "- left out: 3 more values; full results: @c2 (read_output, grep_output)"
    carried_too = Entry({"role": "user", "content": f"see /srv/a.py and /srv/c.py\n{block}"}, 5, 2, 2, 1)
    old, left, fresh = collect([carried_too])
    assert old == [Group("svc1", ["@c1"], [(3, "/srv/a.py"), (4, "port 8443")]), Group("", [], [(3, "/srv/b.py")])]
    assert left == LeftOut(3, ["@c2"])
    assert fresh == [Group("user #2", [], [(3, "/srv/c.py")])]  # /srv/a.py stays where the earlier block put it
