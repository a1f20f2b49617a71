"""Running a pipeline: stored compactions first, then each strategy whose trigger fires.

Pure: no I/O. ``replay`` rebuilds the view the transcript's recorded compactions describe, so a
resumed session sees what it saw before (SAME CONTEXT ON RESUME); ``run`` applies the profile's
strategies for one path and returns the new compactions to record.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from ctxagent.profile import StrategyConfig
from ctxagent.strategies import registry
from ctxagent.strategies.base import Compaction, Entry, Outcome, StrategyContext


def replay(view: list[Entry], compactions: Iterable[Compaction]) -> list[Entry]:
    """Apply recorded compactions in order: each replaces the entries inside its seq range.

    A compaction whose range covers an earlier one's replacement supersedes it. Entries are
    replaced only when wholly inside the range, so a call is never split from its results.
    """
    for comp in compactions:
        inside = [i for i, e in enumerate(view) if comp.start <= e.start and e.end <= comp.end]
        if not inside:
            continue
        turn = view[inside[-1]].turn
        drop = set(inside)
        kept = [e for i, e in enumerate(view) if i not in drop]
        if comp.message is not None:
            note = Entry(comp.message, comp.tokens, comp.start, comp.end, turn, kind=comp.strategy)
            kept.insert(inside[0], note)
        view = kept
    return view


def fires(step: StrategyConfig, view: Sequence[Entry], ctx: StrategyContext, default_trigger: float) -> bool:
    """Whether a pipeline step runs: every N turns, or when the request is over its trigger
    (a fraction of the window; ``0`` runs it on every request)."""
    if step.every_turns:
        return ctx.turn > 0 and ctx.turn % step.every_turns == 0
    return ctx.budget.over(view, default_trigger if step.trigger is None else step.trigger)


def run(view: list[Entry], steps: Sequence[StrategyConfig], ctx: StrategyContext) -> Outcome:
    """Run ``steps`` in order over ``view``; returns the final view and every new compaction.

    Raises ``UsageError`` for an unknown strategy name.
    """
    compactions: list[Compaction] = []
    offloads: list[Entry] = []
    for step in steps:
        step_ctx = replace(ctx, params=step.params())
        if not fires(step, view, step_ctx, ctx.budget.trigger):
            continue
        outcome = registry.get(step.strategy).apply(view, step_ctx)
        view = outcome.view
        compactions.extend(outcome.compactions)
        offloads.extend(outcome.offloads)
    return Outcome(view, compactions, offloads)
