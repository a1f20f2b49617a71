"""``truncate``: drop the oldest whole units until the request is under the target.

Free, fast, deterministic, never hallucinates: the default wherever nobody is watching (batch
paths). Target: half the context window by default, leaving room for the current turn's input and
output. Keeps HEAD (system message, task, the user message of the current turn), never splits a
tool call from its results (units from :func:`~ctxagent.strategies.base.groups`), always keeps the
most recent unit, and leaves a note naming the transcript where messages were dropped and the
handle of every tool result they held (NO LOSS: the originals go to the output store, so each
handle resolves; a later truncation that drops the note carries its handles over).
The drop is recorded as a compaction so the next views start from it (and resume sees the same).

Parameters: ``target`` (fraction of the window; default the profile's ``target``).
"""

from __future__ import annotations

from ctxagent.messages import Message
from ctxagent.strategies.base import Compaction, Entry, Outcome, StrategyContext, groups, protected
from ctxagent.strategies.common import handles_line, refs_of, unstored
from ctxagent.tokens import count_message


def note_message(dropped: list[Entry], ctx: StrategyContext) -> Message:
    """The user-role note that stands where ``dropped`` entries were (oldest first): what was
    dropped, where the transcript is, and the handles of the tool results it held."""
    tokens = sum(e.tokens for e in dropped)
    turns = f"turns {dropped[0].turn}-{dropped[-1].turn}"
    return {
        "role": "user",
        "content": (
            f"[ctxagent] {sum(e.end - e.start + 1 for e in dropped)} earlier messages ({turns}, "
            f"{tokens} tokens) were dropped from this view to fit the context window; "
            f"the full transcript is at {ctx.transcript_path}" + handles_line(refs_of(dropped))
        ),
    }


class Truncate:
    """Drop oldest units to the target; see the module docstring."""

    name = "truncate"
    uses_llm = False

    def apply(self, view: list[Entry], ctx: StrategyContext) -> Outcome:
        target = float(ctx.params.get("target", ctx.budget.target))
        limit = ctx.budget.window * target
        units = groups(view)
        keep = protected(view)
        droppable = [u for u in units[:-1] if not keep.intersection(u)]
        total = ctx.budget.total(view)
        dropped: set[int] = set()
        for unit in droppable:
            if total <= limit:
                break
            dropped.update(unit)
            total -= sum(view[i].tokens for i in unit)
        if not dropped:
            return Outcome(view)
        return self._rebuild(view, dropped, ctx)

    def _rebuild(self, view: list[Entry], dropped: set[int], ctx: StrategyContext) -> Outcome:
        out: list[Entry] = []
        compactions: list[Compaction] = []
        offloads: list[Entry] = []
        run: list[Entry] = []
        for index, entry in enumerate([*view, None]):
            if entry is not None and index in dropped:
                run.append(entry)
                continue
            if run:
                note = note_message(run, ctx)
                tokens, before = count_message(note, ctx.model), sum(e.tokens for e in run)
                if tokens >= before:  # a note as long as what it replaces would only grow the view
                    out.extend(run)
                else:
                    start, end, refs = run[0].start, run[-1].end, refs_of(run)
                    compactions.append(Compaction(self.name, start, end, note, tokens, before, refs))
                    out.append(Entry(note, tokens, start, end, run[-1].turn, kind=self.name, refs=refs))
                    offloads.extend(unstored(run))
                run = []
            if entry is not None:
                out.append(entry)
        return Outcome(out, compactions, offloads) if compactions else Outcome(view)
