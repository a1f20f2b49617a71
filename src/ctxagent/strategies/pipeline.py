"""Running a pipeline: each strategy whose trigger fires, every change it makes recorded.

Pure: no I/O. :func:`replay` rebuilds the view the recorded compactions describe (SAME CONTEXT ON
RESUME); :meth:`Engine.run` returns every change as compactions (:func:`~ctxagent.strategies.base.changes`),
so replaying them, live or on resume, gives the same view, and only a recorded step changes an earlier message (PREFIX).
An :class:`Engine` belongs to one session and holds each step's :class:`~ctxagent.strategies.base.Scan`,
so two sessions (two sub-agents on two threads) never share one. Batched steps (:meth:`Engine._pass`):
docs/context.md, "Prompt caching".
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from ctxagent.strategies.base import Budget, Compaction, Entry, Outcome, Scan, StrategyContext, changes
from ctxagent.strategies.step import StrategyConfig


def replay(view: list[Entry], compactions: Iterable[Compaction]) -> list[Entry]:
    """Apply recorded compactions in order: each replaces the entries wholly inside its seq range (a
    call is never split from its results; an earlier replacement inside is superseded); a replacement
    of one tool result keeps its handle. ``view``: ordered by seq, disjoint ranges, pins (seq -1) first."""
    for comp in compactions:
        lo = bisect_left(view, comp.start, key=lambda e: e.start)
        hi = lo
        while hi < len(view) and view[hi].end <= comp.end:
            hi += 1
        if hi == lo:
            continue
        inside = view[lo:hi]
        new: list[Entry] = []
        if comp.message is not None:
            one = inside[0] if len(inside) == 1 and comp.message.get("role") == "tool" else None
            new = [Entry(comp.message, comp.tokens, comp.start, comp.end, inside[-1].turn, comp.strategy,
                         one.handle if one else None, one.offloaded if one else False, tuple(comp.refs),
                         tuple(comp.quotes))]
        view = [*view[:lo], *new, *view[hi:]]
    return view


def fires(step: StrategyConfig, view: Sequence[Entry], ctx: StrategyContext, default_trigger: float,
          total: int | None = None) -> bool:
    """Whether a pipeline step runs: every N turns, or when the request (``total`` tokens, when the caller
    has them) is over its trigger (``0``: every request); never before turn ``min_turns``."""
    if step.min_turns and ctx.turn < step.min_turns:
        return False
    if step.every_turns:
        return ctx.turn > 0 and ctx.turn % step.every_turns == 0
    total = ctx.budget.total(view) if total is None else total
    return total > ctx.budget.window * (default_trigger if step.trigger is None else step.trigger)


def rule_in_force(steps: Sequence[StrategyConfig], view: Sequence[Entry], budget: Budget, turn: int) -> str:
    """The ``rule`` label of the last step that fires for ``view`` at ``turn`` (the selection rule in force,
    e.g. ``adaptive``'s); "no management" when no labelled step fires (only an unlabelled safety net may)."""
    ctx = StrategyContext(budget=budget, turn=turn)
    fired = [s.rule for s in steps if s.rule and fires(s, view, ctx, budget.trigger)]
    return fired[-1] if fired else "no management"


MAX_PASSES = 4
"""Passes of the whole pipeline a build makes at most, while a pass still changes the view (:meth:`Engine.run`)."""


class Engine:
    """The context engine of one session: runs pipelines with one :class:`~ctxagent.strategies.base.Scan`
    per strategy, kept from one request to the next. Not thread-safe, and never needs to be: a
    session is built by one thread at a time (its writer lock), and each session has its own."""

    def __init__(self) -> None:
        self._scans: dict[str, Scan] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (Engine, ())  # a cache, not state: a snapshot of the session state holds a fresh one

    def scan(self, step: StrategyConfig) -> Scan:
        """The scan of ``step``'s strategy in this session (made on first use)."""
        return self._scans.setdefault(step.strategy, Scan())

    def run(self, view: list[Entry], steps: Sequence[StrategyConfig], ctx: StrategyContext) -> Outcome:
        """Run ``steps`` in order over ``view``: the final view, the compactions that turn ``view`` into it
        (replayed on ``view``, they give it) and the warnings of every step that ran, in order.

        The result is a fixed point (IDENTITY, ONE STATE), so a state folded afresh from the transcript
        builds the very request the live run sends. A later step's change can move an earlier one's
        decision (``dedupe``'s repeated-call flag grows a result, which leaves ``mask_observations``
        fewer verbatim results to keep), so the pipeline runs again on its result, :data:`MAX_PASSES` at most.
        """
        result = self._pass(view, steps, ctx)
        for _ in range(MAX_PASSES - 1):
            if not result.compactions:
                break
            again = self._pass(result.view, steps, ctx)
            if not again.compactions:
                break
            result = _joined(result, again)
        return result

    def _pass(self, view: list[Entry], steps: Sequence[StrategyConfig], ctx: StrategyContext) -> Outcome:
        """One pass of ``steps``; when it broke the cached prefix before ``ctx.free_from``, the batched
        steps run again with ``free_from`` moved back to that point (their pending edits are then free)."""
        first = self._run_steps(view, steps, ctx)
        if not first.compactions:
            return first
        batched = [s for s in steps if s.batched]
        broken_from = min(c.start for c in first.compactions)
        if batched and broken_from < ctx.free_from:
            return _joined(first, self._run_steps(first.view, batched, replace(ctx, free_from=broken_from)))
        return first

    def _run_steps(self, view: list[Entry], steps: Sequence[StrategyConfig], ctx: StrategyContext) -> Outcome:
        compactions: list[Compaction] = []
        offloads: list[Entry] = []
        warnings: list[str] = []
        total = ctx.budget.total(view)  # summed again only when a step changed the view
        for step in steps:
            if not fires(step, view, ctx, ctx.budget.trigger, total):
                continue
            outcome = step.apply(view, ctx, self.scan(step))
            warnings.extend(outcome.warnings)
            if outcome.view is view:
                continue
            compactions.extend(changes(view, outcome.view, step.strategy))
            offloads.extend(outcome.offloads)
            view, total = outcome.view, ctx.budget.total(outcome.view)
        return Outcome(view, compactions, offloads, warnings)


def _joined(first: Outcome, second: Outcome) -> Outcome:
    """The outcome of ``first`` then ``second`` (run on ``first.view``)."""
    return Outcome(second.view, [*first.compactions, *second.compactions], [*first.offloads, *second.offloads],
                   [*first.warnings, *second.warnings])
