"""``sliding_window``: the last N units verbatim plus one rolling summary of everything older.

Source of the rule (DESIGN.md, "Knowledge"): window sizing, 5-8 turns for short Q&A follow-ups and
10-15 for multi-step tasks with back-references (under 4 the agent repeats itself, over 20 there
is little gain), so the default keeps 10 units; asymmetric windows (keep the task setup and the
recent work, compress the middle) match how agents refer back, hence ``keep_first``; the session
shape table puts the sliding window at 70-85% of the budget (set the step's trigger there).

Between HEAD with the ``keep_first`` units after the task and the last ``keep_turns`` units, all
becomes one message: a summary as ``summarize`` writes it (its input holds the previous rolling
summary), or, without a summarizer, with ``rolling: false`` or when it fails (reported in
``Outcome.warnings``), a note ``[ctxagent window: messages #a-#b (...) are not shown; ...]`` carrying
the earlier summaries' text (cut to ``max_tokens``) and the range's pins. At or under the target: IDENTITY.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from pydantic import Field

from ctxagent.messages import Message, content_of, text_of
from ctxagent.strategies.base import Entry, Outcome, Scan, StrategyContext
from ctxagent.strategies.common import replace_runs, runs_to_compact, with_pins
from ctxagent.strategies.rendering import clip, label_range
from ctxagent.strategies.step import Count, KeepTurns, SummaryStep, UseLlm
from ctxagent.strategies.summarize import summarize_runs, summary_message, under_target

CARRIED_KINDS = ("summarize", "sliding_window", "checkpoint", "distill")
"""Replacements whose text a deterministic note carries forward (their first line is a label)."""


def window_note(run: Sequence[Entry], ctx: StrategyContext, max_tokens: int) -> Message:
    """The deterministic user-role note that stands for ``run``: its header, then the bodies (label line
    removed) of the earlier summaries in ``run``, cut to ``max_tokens``."""
    header = (f"[ctxagent window: messages {label_range(run)} (turns {run[0].turn}-{run[-1].turn}, "
              f"{sum(e.tokens for e in run)} tokens) are not shown; the full transcript is at {ctx.transcript_path}]")
    bodies = [content_of(e.message).partition("\n")[2].strip() for e in run if e.kind in CARRIED_KINDS]
    body = clip("\n".join(body for body in bodies if body), max_tokens, ctx.model)
    content = f"{header}\n{body}" if body else header
    return {"role": "user", "content": with_pins(content, (text_of(e.message) for e in run), ctx.pins)}


class SlidingWindowStep(SummaryStep):
    """``sliding_window``: the last units verbatim plus one rolling summary (or note) of everything older."""

    llm_switch = "rolling"
    strategy: Literal["sliding_window"] = "sliding_window"
    keep_turns: KeepTurns = 10
    keep_first: Count = Field(0, description="units after the task kept verbatim (task setup)")
    rolling: UseLlm = Field(True, description="make an LLM rolling summary when a summarizer is given "
                            "(false: the deterministic note only, allowed on batch paths)")

    def apply(self, view: list[Entry], ctx: StrategyContext, scan: Scan | None = None) -> Outcome:
        if under_target(view, ctx, self.target):
            return Outcome(view)
        runs = runs_to_compact(view, self.keep_first, self.keep_turns)
        if not runs:
            return Outcome(view)
        llm = self.needs_llm() and ctx.summarizer is not None
        summaries, warnings = (summarize_runs(view, runs, ctx, self, "the rolling summary",
                                              "wrote a deterministic window note instead") if llm else ({}, []))

        def make(run: list[Entry]) -> Message:
            if run[0].start in summaries:
                return summary_message(run, summaries[run[0].start])
            return window_note(run, ctx, self.max_tokens)

        return replace(replace_runs(view, runs, make, ctx, self.strategy), warnings=warnings)
