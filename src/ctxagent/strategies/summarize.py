"""``summarize``: the oldest units become one labelled summary written by an LLM.

Source of the rule (DESIGN.md, "Knowledge"; issue 3): LLM summarization belongs to interactive
paths (on batch paths it adds latency and cost per compression and can invent tool results), so
:mod:`~ctxagent.strategies.checks` refuses it on batch pipelines unless the profile allows it;
window sizing says under 4 turns the agent repeats itself (default: keep the last 6 units).

Everything between HEAD and the last ``keep_turns`` units becomes ``[ctxagent summary of messages
#a-#b]`` and its summary, recorded as a compaction (a later summary covers the earlier one, whose text
is part of its input), checked (:mod:`~ctxagent.strategies.summarizing`) and followed by the exact
values it lacks (:mod:`~ctxagent.strategies.facts`). A failed summary, or no summarizer, falls back to
truncation (a failure is reported in ``Outcome.warnings``). At or under the target: IDENTITY.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

from ctxagent.messages import Message, text_of
from ctxagent.strategies.base import Entry, Outcome, Scan, StrategyContext
from ctxagent.strategies.common import keep_pins, pins_in, replace_runs, runs_to_compact
from ctxagent.strategies.facts import with_facts
from ctxagent.strategies.rendering import label_range, render
from ctxagent.strategies.step import KeepTurns, LlmStep, SummaryStep
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
    return not ctx.budget.over(view, ctx.budget.target if target is None else target)


def summarize_run(run: Sequence[Entry], ctx: StrategyContext, p: SummaryStep) -> str:
    """The checked LLM summary of ``run`` (:func:`condensed`) followed by the exact values it lacks
    (:func:`~ctxagent.strategies.facts.with_facts`, ``p.facts_tokens``). Raises ``SummaryFailed`` (also
    when there is no summarizer, or its window cannot hold a request)."""
    return with_facts(condensed(run, ctx, p, SUMMARY_PROMPT), run, p.facts_tokens, ctx.model)


def condensed(entries: Sequence[Entry], ctx: StrategyContext, step: LlmStep, prompt: str,
              finish: Callable[[str], str] = lambda reply: reply) -> str:
    """The summarizer's checked text for ``entries`` (``prompt``, its ``{max_tokens}`` filled in with
    ``step.max_tokens``; read ``step.chunk_tokens`` at a time; ``finish`` makes the reply the text).
    Raises ``SummaryFailed`` (also when there is no summarizer)."""
    if ctx.summarizer is None:
        raise SummaryFailed("no summarizer on this path")
    return condense(render(entries), summarizer=ctx.summarizer,
                    final_prompt=prompt.replace("{max_tokens}", str(step.max_tokens)), max_tokens=step.max_tokens,
                    chunk_tokens=step.chunk_tokens, pins=pins_in((text_of(e.message) for e in entries), ctx.pins),
                    model=ctx.model, finish=finish, window=ctx.summarizer_window)


def llm_body(step: LlmStep, ctx: StrategyContext, entries: Sequence[Entry], prompt: str,
             finish: Callable[[str], str], what: str, instead: str) -> tuple[str | None, list[str]]:
    """:func:`condensed` and no warning; ``(None, [])`` when the step may not call the summarizer or there
    is none; ``(None, [warning])`` when it fails (``what`` failed, ``instead`` was done)."""
    if not step.needs_llm() or ctx.summarizer is None:
        return None, []
    try:
        return condensed(entries, ctx, step, prompt, finish), []
    except SummaryFailed as err:
        return None, [failure(step.strategy, what, entries, err, instead)]


def summarize_runs(view: Sequence[Entry], runs: list[list[int]], ctx: StrategyContext, p: SummaryStep, what: str,
                   instead: str) -> tuple[dict[int, str], list[str]]:
    """The summary of each run (:func:`summarize_run`) by its first seq; or none, and the warning
    (:func:`failure`: ``what`` failed, ``instead`` was done) when one fails."""
    summaries: dict[int, str] = {}
    for r in runs:
        run = [view[i] for i in r]
        try:
            summaries[run[0].start] = summarize_run(run, ctx, p)
        except SummaryFailed as err:
            return {}, [failure(p.strategy, what, run, err, instead)]
    return summaries, []


def failure(strategy: str, what: str, run: Sequence[Entry], err: SummaryFailed, instead: str) -> str:
    """The warning of a failed summarizer: strategy, what failed, for which messages, why, what was done instead."""
    return f"{strategy}: {what} of messages {label_range(run)} failed ({err}); {instead}"


def truncate_fallback(view: list[Entry], ctx: StrategyContext, target: float | None,
                      warnings: Sequence[str] = ()) -> Outcome:
    """A failed summarizer's fallback: truncation to ``target`` (None: the profile's), its notes given the
    pinned facts of what they replace, ``warnings`` (why) riding along."""
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
        runs = runs_to_compact(view, 0, self.keep_turns)
        if not runs:
            return Outcome(view)
        if ctx.summarizer is None:  # no LLM on this path: truncation is the plan, not a failure
            return truncate_fallback(view, ctx, self.target)
        summaries, warnings = summarize_runs(view, runs, ctx, self, "the summary", "fell back to truncation")
        if warnings:
            return truncate_fallback(view, ctx, self.target, warnings)
        return replace_runs(view, runs, lambda run: summary_message(run, summaries[run[0].start]), ctx, self.strategy)
