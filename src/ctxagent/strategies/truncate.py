"""``truncate``: drop the oldest whole units until the request is under the target.

Free, fast, deterministic, never hallucinates: the default wherever nobody is watching (batch
paths). Keeps HEAD and the newest unit, never splits a tool call from its results, and leaves a note
naming the transcript and the handle of every tool result it dropped (NO LOSS: the originals go to
the output store). User messages between the task and the current one are kept while they add up
to ``keep_user_tokens`` of the window (compaction by role keeps them: instructions, corrections).

Notes do not pile up (issue 18): each truncation used to leave its own note between two kept user
messages, and after 400 turns in a 32K window they filled the room a truncation is meant to free
(`adaptive` truncated on every request until the thrash guard stopped the run). So a truncation that
would still leave the request over the middle of its target and trigger also takes in the earlier
notes and user messages before its last dropped unit: one note quoting them and naming their handles
(capped, newest kept), riding on a truncation that rewrites the view anyway (PREFIX).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ctxagent.messages import Message
from ctxagent.strategies.base import Entry, Outcome, Scan, StrategyContext, groups, protected
from ctxagent.strategies.common import consecutive, newest_within, replace_runs
from ctxagent.strategies.step import Fraction, StrategyConfig, Target


def note_message(dropped: list[Entry], ctx: StrategyContext) -> Message:
    """The user-role note that stands where ``dropped`` entries were (oldest first): what was dropped and
    where the transcript is (:func:`~ctxagent.strategies.common.replace_runs` adds their user messages and handles)."""
    where = f"#{dropped[0].start}-#{dropped[-1].end}, up to turn {dropped[-1].turn}"
    return {"role": "user", "content": f"[ctxagent] {sum(e.end - e.start + 1 for e in dropped)} earlier messages "
            f"({where}, {sum(e.tokens for e in dropped)} tokens) were dropped from this view to fit the context "
            f"window; the full transcript is at {ctx.transcript_path}"}


def _users_kept(view: list[Entry], max_tokens: float) -> set[int]:
    """Indexes of the newest user messages (original ones) whose tokens add up to ``max_tokens``."""
    users = [i for i, e in enumerate(view) if e.role == "user" and e.kind == "message"]
    return set(newest_within(users, lambda index: view[index].tokens, max_tokens))


class TruncateStep(StrategyConfig):
    """``truncate``: drop the oldest whole units until the request is under the target."""

    strategy: Literal["truncate"] = "truncate"
    target: Target = None
    keep_user_tokens: Fraction = Field(0.1, description="fraction of the window the user messages between "
                                       "the task and the current one may take (0: dropped like the rest)")

    def apply(self, view: list[Entry], ctx: StrategyContext, scan: Scan | None = None) -> Outcome:
        target = self.target or ctx.budget.target
        limit = aim = ctx.budget.window * target
        trigger = max(target, ctx.budget.trigger if self.trigger is None else self.trigger)
        room = ctx.budget.window * (target + trigger) / 2  # over it after a cut, the next request cuts again
        out = Outcome(view)
        for _ in range(3):  # the notes cost tokens too: aim lower by what the last try was over
            dropped, estimate = self._choose(view, ctx, aim, room)
            if not dropped:
                return out
            out = self._rebuild(view, dropped, ctx)
            over = ctx.budget.total(out.view) - limit
            if over <= 0:
                return out
            aim = estimate - over - 1
        return out

    def _choose(self, view: list[Entry], ctx: StrategyContext, aim: float, room: float) -> tuple[set[int], float]:
        """Indexes of the oldest droppable units to drop so the calibrated total gets to ``aim`` tokens, and
        that total (notes not counted); earlier notes and user messages are merged in when the rest leaves
        the request over ``room`` tokens (module docstring)."""
        units = groups(view)
        head = protected(view)
        keep = head | _users_kept(view, self.keep_user_tokens * ctx.budget.window)
        total: float = ctx.budget.total(view)
        dropped: set[int] = set()
        for unit in (u for u in units[:-1] if not keep.intersection(u)):
            if total <= aim:
                break
            dropped.update(unit)
            freed = sum(view[i].tokens for i in unit if view[i].kind != self.strategy)  # a note's text is carried over
            total -= freed * ctx.budget.scale  # calibrated, like the total
        if total <= max(aim, room) or not any(view[i].kind == "message" for i in dropped):
            return dropped, total  # room enough, or nothing new dropped: earlier notes stay as they are (PREFIX)
        merged = {i for i in range(max(dropped)) if i not in head and i not in dropped and self._merges(view[i])}
        total -= sum(view[i].tokens for i in merged) * ctx.budget.scale
        return dropped | merged, total

    def _merges(self, entry: Entry) -> bool:
        """Whether ``entry``, before the last unit a truncation drops, goes into its note: an earlier
        truncation note (its quotes and handles carried over) or a user message (quoted verbatim)."""
        return entry.kind == self.strategy or (entry.role == "user" and entry.kind == "message")

    def _rebuild(self, view: list[Entry], dropped: set[int], ctx: StrategyContext) -> Outcome:
        """Each run of ``dropped`` replaced by its note, but a note alone (noting it again would only rewrite it)
        and a run whose note would not be smaller (it would only grow the view)."""
        runs = [r for r in consecutive(sorted(dropped)) if not (len(r) == 1 and view[r[0]].kind == self.strategy)]
        return replace_runs(view, runs, lambda run: note_message(run, ctx), ctx, self.strategy, only_smaller=True)
