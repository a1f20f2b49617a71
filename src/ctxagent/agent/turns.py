"""Pure helpers of one turn, shared by the runner and the benchmarks: the budget of a request, the
overflow-recovery steps, unique tool call ids, prefix comparison and usage records.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ctxagent.agent.model import Reply, Usage
from ctxagent.errors import LimitReached
from ctxagent.profile import Path_, Profile, StrategyConfig
from ctxagent.sessions import records
from ctxagent.strategies.base import Budget, Compaction, Entry, groups
from ctxagent.strategies.mask_observations import MaskObservationsStep
from ctxagent.strategies.truncate import TruncateStep


@dataclass(frozen=True)
class NextRequest:
    """What the next request of a session would hold (:meth:`Runner.peek`): its view, budget and the
    compactions it would record; ``recorded``: compaction records the session holds, to show; ``same``:
    its leading messages identical to ``last``, the last request sent (a prompt cache serves them)."""

    view: list[Entry]
    budget: Budget
    compactions: list[Compaction]
    recorded: list[records.CompactionRecord]
    path: Path_
    profile: Profile
    same: int = 0
    last: list[Entry] = field(default_factory=list)
    turn: int = 1  # the turn the request would be for
    lessons: records.LessonsRecord | None = None  # the lessons block the session was shown (lessons/)
    counts: dict[str, int] = field(default_factory=dict)  # strategy -> compactions the session recorded


def usage_record(usage: Usage, turn: int, model: str, estimate: int) -> records.UsageRecord:
    """The transcript record of one call's provider-reported usage (``estimate``: our own prompt
    token estimate, 0 for calls that are not agent requests)."""
    return records.UsageRecord(turn=turn, model=model, estimated_prompt_tokens=estimate, **asdict(usage))


def with_call_ids(reply: Reply, seq: int, used: Container[str] = ()) -> Reply:
    """``reply`` with an id on every tool call unique in the session: an id empty, repeated or already
    ``used`` (some providers send ``call_1`` every turn; Anthropic rejects repeated tool-use ids) becomes
    ``ctx<seq>_<n>`` (deterministic: the reply's seq number)."""
    ids = [c.id for c in reply.tool_calls]
    if all(ids) and len(set(ids)) == len(ids) and not any(i in used for i in ids):
        return reply
    seen: set[str] = set()
    calls = []
    for n, call in enumerate(reply.tool_calls):
        if not call.id or call.id in seen or call.id in used:
            call = replace(call, id=f"ctx{seq}_{n}")
        seen.add(call.id)
        calls.append(call)
    return replace(reply, tool_calls=tuple(calls))


def same_prefix(before: Sequence[Entry], view: Sequence[Entry]) -> int:
    """How many leading messages of ``view`` are identical to ``before``'s (0 when ``before`` is empty)."""
    n = 0
    for old, new in zip(before, view, strict=False):
        if old is not new and old.message != new.message:
            break
        n += 1
    return n


def value_of(gen: Iterator[Any]) -> Any:
    """Run a generator to its end, dropping what it yields; returns what it returns."""
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        return stop.value


SMALL_WINDOW_ROOM = 0.15
"""Fraction of the window a request keeps above the reply's reserve and the tool schemas before its
trigger: the least ``trigger - target`` the profile guard accepts (strategies/checks.py)."""
KEPT_ROOM = 0.05
"""Fraction of the window a compaction keeps above the reply's reserve and the tool schemas (the
least a small window's target is lifted to): the system message, the task and the newest turn."""
HIGHEST_TRIGGER = 0.9


def make_budget(profile: Profile, window: int, tool_tokens: int, scale: float = 1.0,
                output_tokens: int | None = None) -> Budget:
    """The budget of a request: ``window`` and ``tool_tokens`` in tokens, the reply reserve
    (``output_tokens``, else :meth:`Profile.reply_tokens`) and margin, the profile's target and trigger,
    and the calibration ``scale``.

    In a small window, where the reserve and the tool schemas (times ``scale``) come within
    :data:`SMALL_WINDOW_ROOM` of the trigger, the trigger rises to leave that room (at most to
    :data:`HIGHEST_TRIGGER`) and the target with it, to at least :data:`KEPT_ROOM` above that fixed part:
    a profile that cuts early in a 32K window (issue 34) still runs in a local 4-16K one. Without the
    scale and the floor, a 4,096-token window with 983 tokens of schemas (1,219 as llama.cpp counted
    them) compacted on every request and the thrash guard stopped a real model reading three files."""
    reserved = (output_tokens or profile.reply_tokens(window)) + profile.margin_tokens
    target, trigger = profile.target, profile.trigger
    fixed = (reserved + tool_tokens * scale) / window if window > 0 else 0.0
    if fixed + SMALL_WINDOW_ROOM > trigger:
        lifted = min(fixed + SMALL_WINDOW_ROOM, max(HIGHEST_TRIGGER, trigger))
        target = min(max(target + lifted - trigger, fixed + KEPT_ROOM), lifted - 0.1)
        target, trigger = round(target, 4), round(lifted, 4)
    return Budget(window=window, tools=tool_tokens, reserved=reserved, target=target, trigger=trigger, scale=scale)


def emergency_steps(view: list[Any], budget: Budget, attempt: int) -> list[StrategyConfig]:
    """Overflow recovery: mask every tool result but the last unit's, then truncate to half the
    current size (a quarter on the second attempt), or to the target if that is lower. Both steps
    run whatever the triggers say: the provider has just told us our estimate was wrong."""
    last = groups(view)[-1] if view else []
    keep = sum(1 for i in last if view[i].role == "tool")
    target = min(budget.target, (0.5 if attempt == 0 else 0.25) * budget.total(view) / budget.window)
    return [MaskObservationsStep(trigger=0, keep=keep, min_tokens=0, batch=1),
            TruncateStep(trigger=0, target=round(target, 4))]


def summarizer_window(profile: Profile, agent_window: int) -> int | None:
    """The summarizer's context window in tokens: ``agent_window`` when it is the agent's model,
    litellm's model info for another model, None when unknown (strategies then do not clamp)."""
    name = profile.summarizer.model
    if name is None:
        return agent_window
    if name.startswith("scripted:"):
        return None
    from ctxagent.agent.litellm_backend import model_window  # only when a summary may be made

    return model_window(name)


def thrash_plan(profile: Profile, streak: int, budget: Budget, session: str) -> tuple[Budget, list[StrategyConfig],
                                                                                    str | None]:
    """The thrash guard: after ``thrash_turns`` compacting requests in a row (``streak``), half the
    target and a truncation to it (room whatever the pipeline keeps), with a warning the first time;
    ``LimitReached`` (exit 3) after twice as many. Returns ``(budget, extra steps, warning)``."""
    k = profile.thrash_turns
    if not k or streak < k:
        return budget, [], None
    if streak >= 2 * k:
        raise LimitReached(f"thrash guard: the context was compacted on {streak} requests in a row, even at "
                           f"half the target: the window is too small for this work or the profile's target "
                           f"({profile.target}) too close to its trigger ({profile.trigger}); "
                           f"'ctxagent resume --session {session} --profile P' continues with "
                           "another profile", bound="thrash")
    target = round(budget.target / 2, 4)
    warning = None if streak != k else (f"the context was compacted on {k} requests in a row; over {budget.target:.0%} "
                                        f"of the window it is now cut to {target:.0%}, to make room")
    cut = TruncateStep(trigger=budget.target, target=target)
    return replace(budget, target=target), [cut], warning
