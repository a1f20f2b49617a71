"""``summarize``: the oldest units become one labelled summary written by an LLM.

Source of the rule (DESIGN.md, "Knowledge"; issue 3): LLM summarization belongs to interactive
paths (on batch paths it adds latency and cost per compression and can invent tool results), so
this strategy is refused on batch pipelines unless the profile allows it; batch summarization
compresses 4:1 to 6:1; window sizing says 5-8 turns for short follow-ups, 10-15 for multi-step
tasks, and under 4 the agent repeats itself (default: keep the last 6 units).

Everything between HEAD (system message, task, current user message) and the last ``keep_turns``
units is rendered as plain text (no tool schemas, no tool-role messages: a tool result is a line
``result of shell(command=ls): ...``), cut into chunks of ``chunk_tokens`` when longer (chunks
are summarized, then their summaries combined), and replaced by one user-role message
``[ctxagent summary of messages #a-#b]`` followed by the summary. The summary is recorded as a
compaction, so resume never recomputes it; a later summary whose range covers an earlier one
supersedes it, and the earlier summary's text is part of the later one's input (nothing is lost).

The output is checked: not empty, at most ``max_tokens`` tokens, and every pinned fact found in
the summarized messages present verbatim. Then the exact values of the range that the summary does
not hold verbatim (paths, ports, ids, hashes, URLs, commands, numbers with units, error lines) are
appended by code, as a labelled block of at most ``facts_tokens`` (:mod:`ctxagent.strategies.facts`).
A failed check, a summarizer that raises, or no summarizer at all falls back to
:class:`~ctxagent.strategies.truncate.TruncateStep` (deterministic); a failure (not a missing
summarizer) is reported in ``Outcome.warnings``. Every summarizer request fits the summarizer's
window when it is known (``ctx.summarizer_window``). A view at or under the target is returned
unchanged (IDENTITY).

Parameters:
    keep_turns: units (a call with its results, or one message) kept verbatim at the end; default 6,
        at least 1 (the turn in flight is always kept; checked at profile load).
    max_tokens: tokens the summary may have (the summarizer's reply cap); default 1000.
    chunk_tokens: tokens of rendered text per summarizer call; default 8000 (lowered to fit the
        summarizer's window).
    facts_tokens: tokens of the block of exact values appended to the summary; default 400
        (0: no block).
    target: fraction of the window under which nothing is done (and the truncation fallback's
        target); default the profile's ``target``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from ctxagent.messages import Message
from ctxagent.strategies.base import Entry, Outcome, Scan, StrategyContext
from ctxagent.strategies.common import keep_pins, nothing_new, pins_in, replace_runs, runs_to_compact, text
from ctxagent.strategies.facts import with_facts
from ctxagent.strategies.rendering import label_range, render
from ctxagent.strategies.step import KeepTurns, SummaryStep
from ctxagent.strategies.summarizing import SummaryFailed, condense
from ctxagent.strategies.truncate import TruncateStep

SUMMARY_PROMPT = (
    "You are compressing the older part of an AI agent's working session so the agent can continue "
    "without the original messages. Write a concise plain-text summary of the messages below: the "
    "goal, what was done, what was found, what failed and why, decisions taken, and what remains "
    "to do. Keep exact values verbatim: file paths, numbers, ids, handles (like @abc123), commands, "
    "URLs and error messages. Earlier summaries among the messages must be carried over, not "
    "dropped. Never invent a result the messages do not show. At most {max_tokens} tokens, no preamble."
)


def under_target(view: Sequence[Entry], ctx: StrategyContext, target: float | None) -> bool:
    """Whether the request is at or under ``target`` (a fraction of the window; None: the profile's)."""
    fraction = ctx.budget.target if target is None else target
    return ctx.budget.total(view) <= ctx.budget.window * fraction


def summarize_run(run: Sequence[Entry], ctx: StrategyContext, p: SummaryStep) -> str:
    """The checked LLM summary of ``run`` (at most ``p.max_tokens``, read ``p.chunk_tokens`` at a
    time) followed by the exact values of ``run`` it does not hold
    (:func:`~ctxagent.strategies.facts.with_facts`, at most ``p.facts_tokens`` more tokens). Raises
    ``SummaryFailed`` (also when there is no summarizer, or its window cannot hold a request)."""
    if ctx.summarizer is None:
        raise SummaryFailed("no summarizer on this path")
    pins = pins_in((text(e) for e in run), ctx.pins)
    summary = condense(render(run), summarizer=ctx.summarizer,
                       final_prompt=SUMMARY_PROMPT.format(max_tokens=p.max_tokens), max_tokens=p.max_tokens,
                       chunk_tokens=p.chunk_tokens, pins=pins, model=ctx.model, window=ctx.summarizer_window)
    return with_facts(summary, run, p.facts_tokens, ctx.model)


def failure(strategy: str, what: str, run: Sequence[Entry], err: SummaryFailed, instead: str) -> str:
    """The warning an LLM strategy reports when its summarizer failed: strategy, what failed, for
    which messages, why, and what was done instead."""
    return f"{strategy}: {what} of messages {label_range(run)} failed ({err}); {instead}"


def truncate_fallback(view: list[Entry], ctx: StrategyContext, target: float | None,
                      warnings: Sequence[str] = ()) -> Outcome:
    """What an LLM strategy does when its summarizer fails: plain truncation to ``target`` (None: the
    profile's), its notes given the pinned facts of what they replace; ``warnings`` (why) ride along."""
    outcome = TruncateStep(target=target).apply(view, ctx)
    return replace(keep_pins(view, outcome, ctx), warnings=list(warnings))


def summary_message(run: Sequence[Entry], summary: str) -> Message:
    """The user-role message that stands for ``run``: its label, then the summary."""
    return {"role": "user", "content": f"[ctxagent summary of messages {label_range(run)}]\n{summary}"}


class SummarizeStep(SummaryStep):
    """``summarize``: the oldest units replaced by one checked LLM summary (truncation without a summarizer)."""

    strategy: Literal["summarize"] = "summarize"
    keep_turns: KeepTurns = 6

    def apply(self, view: list[Entry], ctx: StrategyContext, scan: Scan | None = None) -> Outcome:
        if under_target(view, ctx, self.target):
            return Outcome(view)
        runs = [r for r in runs_to_compact(view, 0, self.keep_turns) if not nothing_new(view, r)]
        if not runs:
            return Outcome(view)
        if ctx.summarizer is None:  # no LLM on this path: truncation is the plan, not a failure
            return truncate_fallback(view, ctx, self.target)
        summaries: dict[int, str] = {}
        for r in runs:
            run = [view[i] for i in r]
            try:
                summaries[r[0]] = summarize_run(run, ctx, self)
            except SummaryFailed as err:
                return truncate_fallback(view, ctx, self.target, [failure(self.strategy, "the summary", run, err,
                                                                       "fell back to truncation")])
        by_start = {view[i].start: s for i, s in summaries.items()}
        return replace_runs(view, runs, lambda run: summary_message(run, by_start[run[0].start]),
                            ctx, self.strategy)
