"""Truncation keeps PAIR, HEAD and IDENTITY on random views; its compactions replay to the same view."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxagent.messages import pair_violations, tool_call
from ctxagent.strategies.base import Budget, Compaction, Entry, StrategyContext, groups, protected
from ctxagent.strategies.common import replace_runs
from ctxagent.strategies.pipeline import replay
from ctxagent.strategies.truncate import TruncateStep, _users_kept, note_message
from ctxagent.tokens import PER_REQUEST, count_message
from examplecount import examples
from viewgen import views


def ctx_for(window: int) -> StrategyContext:
    return StrategyContext(budget=Budget(window=window, tools=100, reserved=500, target=0.5, trigger=0.8),
                           transcript_path="/data/sessions/x/transcript.jsonl")


@settings(max_examples=examples(200), deadline=None)
@given(views(), st.integers(2_000, 300_000))
def test_truncate_keeps_pair_head_and_replays(view, window):
    ctx = ctx_for(window)
    out = TruncateStep().apply(view, ctx)
    msgs = [e.message for e in out.view]
    assert pair_violations(msgs) == []
    assert out.view[0] == view[0]  # system first, byte-identical
    assert view[1] in out.view  # the task
    users = [e for e in view if e.role == "user"]
    assert users[-1] in out.view  # the user message of the current turn
    assert out.view[-1] == view[-1] or out.view[-1].message == view[-1].message
    assert replay(list(view), out.compactions) == out.view  # SAME CONTEXT ON RESUME
    assert all("transcript.jsonl" in c.message["content"] for c in out.compactions)
    if ctx.budget.over(view, 0.8) and ctx.budget.over(out.view, 0.5):
        # run over its trigger (as a pipeline runs it) and left over its target: nothing it may drop is worth a
        # note (just over the target, three tries of small units can stop short; the trigger leaves no such case)
        for run in droppable_runs(out.view, window):  # the note with the run's user messages and handles
            noted = replace_runs(run, [list(range(len(run)))], lambda r: note_message(r, ctx), ctx, "truncate")
            assert noted.view[0].tokens >= sum(e.tokens for e in run), run


def droppable_runs(view: list[Entry], window: int) -> list[list[Entry]]:
    """The runs of consecutive original messages truncation may drop: whole units but the last one,
    none holding what HEAD protects or a user message it keeps (``keep_user_tokens``, 0.1)."""
    keep = protected(view) | _users_kept(view, 0.1 * window)
    runs: list[list[int]] = []
    for unit in groups(view)[:-1]:
        if keep.intersection(unit) or view[unit[0]].kind != "message":
            continue
        if runs and runs[-1][-1] + 1 == unit[0]:
            runs[-1].extend(unit)
        else:
            runs.append(list(unit))
    return [[view[i] for i in run] for run in runs]


@settings(max_examples=examples(200), deadline=None)
@given(views())
def test_identity_under_target(view):
    window = 10 * sum(e.tokens for e in view) + 10_000
    out = TruncateStep().apply(view, ctx_for(window))
    assert out.view == view and out.compactions == []


@settings(max_examples=examples(100), deadline=None)
@given(views(), st.integers(2_000, 100_000))
def test_truncating_twice_is_stable(view, window):
    ctx = ctx_for(window)
    first = TruncateStep().apply(view, ctx).view
    again = TruncateStep().apply(first, ctx)
    if ctx.budget.total(first) <= window * 0.5:
        assert again.view == first and again.compactions == []


def test_a_truncation_note_of_thousands_of_results_stays_small():
    """Regression: the note named every dropped result's handle, so a 100,000-message session got a
    64,033-token note and could no longer fit its 128K window. The handles it names are capped
    (the newest kept) at a small share of the window."""
    from ctxagent.messages import tool_call
    from ctxagent.strategies.base import Entry

    entries = [Entry({"role": "system", "content": "sys"}, 3, 0, 0, 0),
               Entry({"role": "user", "content": "task"}, 3, 1, 1, 1)]
    for n in range(5_000):
        seq = 2 + 2 * n
        call = tool_call(f"c{n}", "shell", '{"command": "ls"}')
        entries.append(Entry({"role": "assistant", "content": None, "tool_calls": [call]}, 20, seq, seq, n + 1))
        entries.append(Entry({"role": "tool", "tool_call_id": f"c{n}", "content": "x" * 40}, 40, seq + 1, seq + 1,
                             n + 1, handle=f"@c{n}"))
    ctx = ctx_for(32_000)
    out = TruncateStep().apply(entries, ctx)
    note = next(e for e in out.view if e.kind == "truncate")
    assert note.tokens < 0.06 * 32_000 and len(note.refs) < 300
    dropped = [e.handle for e in entries if e.role == "tool" and e not in out.view]
    assert note.refs[-1] == dropped[-1] and dropped[0] not in note.refs  # the newest dropped are named


@settings(max_examples=examples(50), deadline=None)
@given(scale=st.floats(0.2, 3.0))
def test_truncation_reaches_its_target_in_the_calibrated_size(scale):
    """Failure pinned: with provider counts below our estimate (scale < 1) truncation subtracted raw
    tokens from a calibrated total, gave up with 24 droppable units left, and the run exited 5."""
    from dataclasses import replace

    from ctxagent.messages import tool_call
    from ctxagent.strategies.base import Entry

    view = [Entry({"role": "system", "content": "s"}, 5, 0, 0, 0), Entry({"role": "user", "content": "t"}, 5, 1, 1, 1)]
    for n in range(30):
        seq = 2 + 2 * n
        call = {"role": "assistant", "content": None, "tool_calls": [tool_call(f"c{n}", "shell", "{}")]}
        view += [Entry(call, 20, seq, seq, n + 1),
                 Entry({"role": "tool", "tool_call_id": f"c{n}", "content": "x" * 400}, 400, seq + 1, seq + 1, n + 1)]
    base = ctx_for(20_000)
    ctx = replace(base, budget=replace(base.budget, scale=scale))
    out = TruncateStep().apply(view, ctx)
    assert ctx.budget.total(out.view) <= ctx.budget.window * ctx.budget.target


def test_adaptive_does_not_thrash_on_kept_notes():
    """Issue 18: every truncation left its own "N earlier messages were dropped" note between two kept
    user messages, and no later truncation could merge or shrink those notes. In a long session they
    filled the room a truncation frees: `adaptive` truncated on every request and its thrash guard
    stopped the run (turn ~405 of shell-1500 in a 32K window). Here, the same shape made small: the
    adaptive batch pipeline over 260 turns of ~700-token outputs with a user message every 3 turns,
    driven through the session state as the runner does (compaction records, the thrash guard).
    Main stopped at turn 224 here with LimitReached; the merged notes also replay exactly on resume."""
    from ctxagent.agent.context import record_of
    from ctxagent.agent.state import SessionState, fold
    from ctxagent.agent.turns import thrash_plan
    from ctxagent.messages import tool_call
    from ctxagent.profile import load_profile
    from ctxagent.sessions.records import CompactionRecord, MessageRecord
    from ctxagent.tokens import count_message

    profile = load_profile("adaptive")
    budget = Budget(window=16_000, tools=400, reserved=1_200, target=profile.target, trigger=profile.trigger)
    state = SessionState()
    written: list[MessageRecord | CompactionRecord] = []
    seq = 0

    def append(record):
        written.append(record)
        state.apply(record)

    def add(message, turn, handle=None):
        nonlocal seq
        append(MessageRecord(seq=seq, turn=turn, tokens=count_message(message), message=message, handle=handle))
        seq += 1

    add({"role": "system", "content": "You are an agent."}, 0)
    add({"role": "user", "content": "Find why the nightly build fails."}, 1)
    truncations = 0
    for turn in range(1, 261):
        if turn % 3 == 0:
            add({"role": "user", "content": f"Correction: value #{turn} is now {turn * 7919 % 10007}."}, turn)
        plan, extra, _ = thrash_plan(profile, state.compaction_streak(), budget, "s")  # LimitReached: thrashing
        built = state.context.build([*profile.pipeline("batch"), *extra], plan, turn=turn)
        for comp in built.compactions:
            append(record_of(comp))
        truncations += any(c.strategy == "truncate" for c in built.compactions)
        call = tool_call(f"c{turn}", "shell", f'{{"command": "make test-{turn}"}}')
        add({"role": "assistant", "content": None, "tool_calls": [call]}, turn)
        output = "\n".join(f"tests/test_{turn}_{n}.py ....F.... {n * turn}" for n in range(60))
        add({"role": "tool", "tool_call_id": f"c{turn}", "content": output}, turn, handle=f"@c{turn}")
    assert truncations > 20  # the retrieval rule kept working, past the point where the notes had filled the room
    assert any(e.kind == "truncate" and e.quotes for e in state.context.view)  # kept user messages merged, quoted
    floor = [e for e in state.context.view if e.role in ("system", "user")]  # the notes and what truncation keeps
    assert budget.total(floor) <= 0.4 * budget.window  # under the retrieval rule's trigger (0.5), with room
    assert fold(written).context.view == state.context.view  # SAME CONTEXT ON RESUME


# Exact cases (issue 17: mutation testing found these behaviours run but never checked). The views are
# built by hand so that what is dropped, what the note says and what is kept can be stated exactly.

PATH = "/data/sessions/セッション/transcript.jsonl"  # counted differently by cl100k (gpt-4) and o200k
HANDLES = "\n[full tool results of these messages, by handle (read_output, grep_output): "


def _ctx(window: int, scale: float = 1.0, model: str = "gpt-4") -> StrategyContext:
    return StrategyContext(budget=Budget(window=window, tools=0, reserved=0, target=0.5, trigger=0.8, scale=scale),
                           transcript_path=PATH, model=model)  # gpt-4: cl100k, not the default


def _msg(role: str, content: str, tokens: int, seq: int, turn: int) -> Entry:
    return Entry({"role": role, "content": content}, tokens, seq, seq, turn)


def _unit(n: int, seq: int, turn: int, tokens: int) -> list[Entry]:
    """A tool call and its result, ``tokens`` between them; the result's handle is ``@c<n>``."""
    call = {"role": "assistant", "content": None, "tool_calls": [tool_call(f"c{n}", "shell", "{}")]}
    return [Entry(call, tokens // 2, seq, seq, turn),
            Entry({"role": "tool", "tool_call_id": f"c{n}", "content": "out"}, tokens // 2, seq + 1, seq + 1, turn,
                  handle=f"@c{n}")]


def _old_note(start: int, end: int, tokens: int) -> Entry:
    return Entry({"role": "user", "content": "[ctxagent] earlier messages were dropped"}, tokens, start, end, 1,
                 kind="truncate", refs=("@a0",), quotes=("old quote",))


HEAD = [_msg("system", "sys", 10, 0, 0), _msg("user", "task", 10, 1, 1)]


def test_the_note_says_what_was_dropped_and_where_and_the_oldest_units_only_go():
    """Four units of 2000 tokens over a 5000-token target: the three oldest go (not the fourth, not
    the last), replaced by one note whose text, tokens (counted for the model), compaction and
    offloads are exact; the user message kept between them stays (keep_user_tokens 0.1)."""
    c0, c1, c2 = (_unit(n, 2 + 2 * n, n + 1, 2000) for n in range(3))
    mid, c3 = _msg("user", "Use the staging database.", 10, 8, 3), _unit(3, 9, 4, 2000)
    last, c4 = _msg("user", "go on", 10, 11, 5), _unit(4, 12, 5, 2000)
    view = [*HEAD, *c0, *c1, *c2, mid, *c3, last, *c4]
    ctx = _ctx(10_000)
    out = TruncateStep().apply(view, ctx)
    content = ("[ctxagent] 6 earlier messages (#2-#7, up to turn 3, 6000 tokens) were dropped from this view to fit"
               f" the context window; the full transcript is at {PATH}" + HANDLES + "@c0 @c1 @c2]")
    note = {"role": "user", "content": content}
    tokens = count_message(note, "gpt-4")
    assert tokens != count_message(note)  # the model's tokenizer counts differently: it must be passed on
    assert out.view == [*HEAD, Entry(note, tokens, 2, 7, 3, kind="truncate", refs=("@c0", "@c1", "@c2")),
                        mid, *c3, last, *c4]
    assert out.compactions == [Compaction("truncate", 2, 7, note, tokens, 6000, ("@c0", "@c1", "@c2"), ())]
    assert out.offloads == [c0[1], c1[1], c2[1]]  # the originals the handles name go to the output store
    assert ctx.budget.total(out.view) <= 5_000


def test_user_messages_past_keep_user_tokens_are_dropped_and_quoted_verbatim():
    c0, mid = _unit(0, 2, 1, 2000), _msg("user", "Use the staging database.", 10, 4, 1)
    c1, c2 = _unit(1, 5, 2, 2000), _unit(2, 7, 3, 2000)
    last, c3 = _msg("user", "go on", 10, 9, 4), _unit(3, 10, 4, 2000)
    view = [*HEAD, *c0, mid, *c1, *c2, last, *c3]
    kept = TruncateStep().apply(view, _ctx(10_000))  # 10 tokens are within 0.1 of the window: kept
    assert mid in kept.view and all(mid.message["content"] not in str(c.message) for c in kept.compactions)
    out = TruncateStep(keep_user_tokens=0).apply(view, _ctx(10_000))
    assert mid not in out.view
    note = next(e for e in out.view if e.kind == "truncate")
    assert note.quotes == ("Use the staging database.",) == out.compactions[0].quotes
    assert note.message["content"].endswith(
        "\n[user messages of these turns, verbatim]\n> Use the staging database." + HANDLES + "@c0 @c1]")


def test_users_kept_are_the_newest_user_messages_within_the_budget():
    view = [*HEAD, _msg("assistant", "a", 50, 2, 1), _msg("user", "u3", 30, 3, 2), _old_note(4, 4, 40),
            _msg("assistant", "b", 50, 5, 3), _msg("user", "u6", 20, 6, 3)]
    assert _users_kept(view, 60) == {6, 3, 1}  # 20 + 30 + 10: exactly the budget still fits
    assert _users_kept(view, 59) == {6, 3}
    assert _users_kept(view, 45) == {6}  # the budget is for all of them together, newest first
    assert _users_kept(view, 10**6) == {6, 3, 1}  # only user messages, not the note, not the system or assistant
    assert _users_kept(view, 0) == set()


def test_a_truncation_that_leaves_room_keeps_the_earlier_note_and_the_user_messages():
    """After the cut the request is over the target (nothing else may go) but under the middle of the
    target and the trigger: the earlier note and the kept user message stay as they are (PREFIX);
    a single dropped message gets its own note."""
    note0, mid = _old_note(2, 9, 40), _msg("user", "Use the staging database.", 20, 10, 2)
    a0, last = _msg("assistant", "a long answer", 1000, 11, 2), _msg("user", "go on", 10, 12, 3)
    c1 = _unit(1, 13, 3, 5500)
    view = [*HEAD, note0, mid, a0, last, *c1]
    out = TruncateStep().apply(view, _ctx(10_000))
    assert out.view[:4] == [*HEAD, note0, mid] and out.view[5:] == [last, *c1]
    assert (out.view[4].kind, out.view[4].start, out.view[4].end) == ("truncate", 11, 11)
    assert [(c.start, c.end) for c in out.compactions] == [(11, 11)]


def test_a_truncation_that_would_leave_the_request_crowded_merges_earlier_notes_and_user_messages():
    """Over the middle of target and trigger after every droppable unit went: the earlier note and
    the user message kept between go into the one new note, which carries their handles and quotes."""
    note0, mid = _old_note(2, 9, 40), _msg("user", "Use the staging database.", 20, 10, 2)
    c0, last, c1 = _unit(0, 11, 2, 1000), _msg("user", "go on", 10, 13, 3), _unit(1, 14, 3, 8000)
    view = [*HEAD, note0, mid, *c0, last, *c1]
    out = TruncateStep().apply(view, _ctx(10_000))
    assert out.view[:2] == HEAD and out.view[3:] == [last, *c1]
    note = out.view[2]
    assert (note.kind, note.start, note.end) == ("truncate", 2, 12)
    assert note.refs == ("@a0", "@c0") and note.quotes == ("old quote", "Use the staging database.")
    assert [(c.start, c.end) for c in out.compactions] == [(2, 12)]
    # the same without an earlier note: the user message still goes into the note
    out = TruncateStep().apply([*HEAD, mid, *c0, last, *c1], _ctx(10_000))
    assert out.view[:2] == HEAD and out.view[3:] == [last, *c1]
    assert (out.view[2].start, out.view[2].end, out.view[2].quotes) == (10, 12, ("Use the staging database.",))


def test_a_dropped_note_and_the_message_after_it_become_one_note():
    note0, a0 = _old_note(2, 9, 40), _msg("assistant", "a long answer", 3000, 10, 2)
    last, c1 = _msg("user", "go on", 10, 11, 3), _unit(1, 12, 3, 4000)
    out = TruncateStep().apply([*HEAD, note0, a0, last, *c1], _ctx(10_000))
    assert out.view[:2] == HEAD and out.view[3:] == [last, *c1]
    assert (out.view[2].kind, out.view[2].start, out.view[2].end) == ("truncate", 2, 10)
    assert out.view[2].refs == ("@a0",) and out.view[2].quotes == ("old quote",)  # carried over


def test_the_unit_just_before_the_last_is_dropped_when_needed():
    last, c0, c1 = _msg("user", "go on", 10, 2, 2), _unit(0, 3, 2, 2000), _unit(1, 5, 2, 6000)
    out = TruncateStep().apply([*HEAD, last, *c0, *c1], _ctx(10_000))
    assert [(e.kind, e.start) for e in out.view] == [("message", 0), ("message", 1), ("message", 2),
                                                     ("truncate", 3), ("message", 5), ("message", 6)]


def test_freed_tokens_are_calibrated_like_the_total():
    """With scale 2 each dropped unit frees twice its tokens of the calibrated total: three of four
    units are enough (counting them uncalibrated would drop all four)."""
    units = [_unit(n, 2 + 2 * n, n + 1, 2000) for n in range(5)]
    view = [*HEAD, *[e for u in units[:4] for e in u], _msg("user", "go on", 10, 12, 5), *units[4]]
    out = TruncateStep().apply(view, _ctx(20_000, scale=2.0))
    assert [(c.start, c.end) for c in out.compactions] == [(2, 7)]
    assert out.view[3:5] == units[3]


def test_the_quotes_are_capped_in_the_model_s_tokens():
    """The quoted user messages are capped at 0.1 of the window in the model's tokens: this one is
    15 tokens with the quotes' framing for the default tokenizer (fits 16), 18 for gpt-4's (does not)."""
    text = "ステージングのデータベースを使ってください。"
    view = [_msg("system", "s", 5, 0, 0), _msg("user", "t", 5, 1, 1), _msg("user", text, 5, 2, 1),
            _msg("assistant", "a long answer", 100, 3, 1), _msg("user", "go on", 5, 4, 2),
            _msg("assistant", "ok", 5, 5, 2)]
    for model, quotes in (("", (text,)), ("gpt-4", ())):
        out = TruncateStep(keep_user_tokens=0).apply(view, _ctx(160, model=model))
        note = out.view[2]
        assert (note.kind, note.start, note.end) == ("truncate", 2, 3)
        assert note.quotes == quotes == out.compactions[0].quotes
        assert (text in note.message["content"]) == bool(quotes)


def test_a_note_as_long_as_what_it_replaces_is_not_made():
    """Only one message may go, and its note would cost exactly its tokens: the view stays as it is
    (a note would not shrink it), with no compaction; one token more and the note is made."""
    ctx = _ctx(400)
    a0 = _msg("assistant", "an answer", 60, 2, 1)
    tokens = count_message(note_message([a0], ctx), "gpt-4")
    for size, noted in ((tokens, False), (tokens + 1, True)):
        a0 = _msg("assistant", "an answer", size, 2, 1)
        assert count_message(note_message([a0], ctx), "gpt-4") == tokens  # the same length of number
        view = [*HEAD, a0, _msg("user", "go on", 10, 3, 2), _msg("assistant", "ok", 150, 4, 2)]
        out = TruncateStep().apply(view, ctx)
        assert (out.view == view and out.compactions == []) is not noted
        assert [c.tokens_before for c in out.compactions] == ([size] if noted else [])


def test_the_target_is_met_to_the_token_and_a_retry_aims_lower_by_the_excess():
    """The cut stops as soon as the total is at its aim (``<=``), and after a note the request may be
    exactly at the target. One token over, the next try aims lower by that token plus one, and stops
    on reaching that aim: here by dropping a 2-token message, not the next 1000-token one.
    ``last`` is sized so that with ``a0``'s note the request is ``limit + extra`` tokens."""
    ctx = _ctx(10_000)
    limit = 5_000
    a0, a1 = _msg("assistant", "a0", 1000, 2, 1), _msg("assistant", "a1", 2, 3, 1)
    a2 = _msg("assistant", "a2", 1000, 4, 1)
    user = _msg("user", "go on", 10, 5, 2)
    note1 = count_message(note_message([a0], ctx), "gpt-4")
    assert count_message(note_message([a0, a1], ctx), "gpt-4") == note1  # the same length for two
    for extra, gone in ((0, [a0]), (1, [a0, a1])):
        last = _msg("assistant", "z", limit + extra - PER_REQUEST - 20 - 2 - 1000 - 10 - note1, 6, 2)
        view = [*HEAD, a0, a1, a2, user, last]
        out = TruncateStep().apply(view, ctx)
        assert [e for e in view if e not in out.view] == gone
        assert ctx.budget.total(out.view) == limit + extra - 2 * (extra > 0)


def test_the_room_left_is_enough_to_the_token():
    """Every droppable unit gone, the request is exactly at the middle of target and trigger (6500
    of 10,000): the earlier note and the user message stay; one token more and they are merged."""
    note0, mid = _old_note(2, 9, 40), _msg("user", "Use the staging database.", 20, 10, 2)
    a0, user = _msg("assistant", "a long answer", 1000, 11, 2), _msg("user", "go on", 10, 12, 3)
    for extra, merged in ((0, False), (1, True)):
        last = _msg("assistant", "z", 6500 + extra - PER_REQUEST - 20 - 40 - 20 - 10, 13, 3)
        out = TruncateStep().apply([*HEAD, note0, mid, a0, user, last], _ctx(10_000))
        assert (note0 in out.view and mid in out.view) is not merged
        assert [(c.start, c.end) for c in out.compactions] == [(2, 11) if merged else (11, 11)]
