"""``sliding_window``: the last N units verbatim plus one rolling summary of everything older.

Source of the rule (DESIGN.md, "Knowledge"): window sizing, 5-8 turns for short Q&A follow-ups and
10-15 for multi-step tasks with back-references (under 4 the agent repeats itself, over 20 there
is little gain), so the default keeps 10 units; asymmetric windows (keep the task setup and the
recent work, compress the middle) match how agents refer back, hence ``keep_first``; the session
shape table puts the sliding window at 70-85% of the budget (set the step's trigger there).

HEAD, the first ``keep_first`` units after the task and the last ``keep_turns`` units stay
verbatim; everything between becomes one user-role message, recorded as a compaction. With a
summarizer (and ``rolling: true``), that message is an LLM summary
``[ctxagent summary of messages #a-#b]`` whose input includes the previous rolling summary (the
new range covers it, so it supersedes it and nothing is lost), checked like ``summarize``'s and
followed, like it, by the exact values of the range it does not hold (a block copied by code). With
no summarizer, ``rolling: false``, or a failed summary (empty, too long, a pinned fact dropped,
an exception, a request the summarizer's window cannot hold; reported in ``Outcome.warnings``),
it degrades to a deterministic note like truncation's,
``[ctxagent window: messages #a-#b (...) are not shown; the full transcript is at ...]``, that
carries the text of earlier summaries in the range verbatim (cut middle-out to ``max_tokens``)
and every pinned fact of the range. A view at or under the target is returned unchanged.

Parameters:
    keep_turns: units kept verbatim at the end; default 10, at least 1 (the turn in flight).
    keep_first: units after the task kept verbatim (task setup); default 0.
    rolling: make an LLM rolling summary when a summarizer is given; default true (false: the
        deterministic note only, allowed on batch paths).
    max_tokens: tokens of the summary, or of the carried text of the note; default 1000.
    chunk_tokens: tokens of rendered text per summarizer call; default 8000 (lowered to fit the
        summarizer's window).
    facts_tokens: tokens of the block of exact values appended to the summary; default 400.
    target: fraction of the window at or under which nothing is done; default the profile's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from pydantic import Field

from ctxagent.messages import Message
from ctxagent.strategies.base import Entry, Outcome, Scan, StrategyContext
from ctxagent.strategies.common import content_of, nothing_new, replace_runs, runs_to_compact, text, with_pins
from ctxagent.strategies.rendering import clip, label_range
from ctxagent.strategies.step import Count, KeepTurns, SummaryStep, UseLlm
from ctxagent.strategies.summarize import failure, summarize_run, summary_message, under_target
from ctxagent.strategies.summarizing import SummaryFailed

CARRIED_KINDS = ("summarize", "sliding_window", "checkpoint", "distill")
"""Replacements whose text a deterministic note carries forward (their first line is a label)."""


def carried_text(run: Sequence[Entry], max_tokens: int, model: str = "") -> str:
    """The bodies (label line removed) of the earlier summaries in ``run``, cut to ``max_tokens``."""
    bodies = []
    for entry in run:
        if entry.kind in CARRIED_KINDS:
            body = content_of(entry.message).partition("\n")[2].strip()
            if body:
                bodies.append(body)
    return clip("\n".join(bodies), max_tokens, model)


def window_note(run: Sequence[Entry], ctx: StrategyContext, max_tokens: int) -> Message:
    """The deterministic user-role note that stands for ``run``."""
    tokens = sum(e.tokens for e in run)
    header = (
        f"[ctxagent window: messages {label_range(run)} (turns {run[0].turn}-{run[-1].turn}, "
        f"{tokens} tokens) are not shown; the full transcript is at {ctx.transcript_path}]"
    )
    body = carried_text(run, max_tokens, ctx.model)
    content = f"{header}\n{body}" if body else header
    return {"role": "user", "content": with_pins(content, (text(e) for e in run), ctx.pins)}


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
        runs = [r for r in runs_to_compact(view, self.keep_first, self.keep_turns) if not nothing_new(view, r)]
        if not runs:
            return Outcome(view)
        summaries: dict[int, str] = {}
        warnings: list[str] = []
        if self.needs_llm() and ctx.summarizer is not None:
            summaries, warnings = self._summaries(view, runs, ctx)

        def make(run: list[Entry]) -> Message:
            if run[0].start in summaries:
                return summary_message(run, summaries[run[0].start])
            return window_note(run, ctx, self.max_tokens)

        return replace(replace_runs(view, runs, make, ctx, self.strategy), warnings=warnings)

    def _summaries(self, view: list[Entry], runs: list[list[int]], ctx: StrategyContext
                   ) -> tuple[dict[int, str], list[str]]:
        """The rolling summary of each run by its first seq, or none and the warning of the failure."""
        summaries: dict[int, str] = {}
        for r in runs:
            run = [view[i] for i in r]
            try:
                summaries[run[0].start] = summarize_run(run, ctx, self)
            except SummaryFailed as err:
                return {}, [failure(self.strategy, "the rolling summary", run, err,
                                    "wrote a deterministic window note instead")]
        return summaries, []
