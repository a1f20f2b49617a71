"""``distill``: the older history becomes a JSON state document, updated every few turns.

Source of the rule (DESIGN.md, "Knowledge"): distillation, a state document (goal, verified facts,
discarded hypotheses, pending actions) updated every few turns, beats a verbatim record of
failures; a token threshold (e.g. 15K) avoids paying the compression tax every turn. Run it with
``every_turns: 5`` (the default cadence) and raise ``min_tokens`` to skip small ranges.

The range between HEAD and the last ``keep_turns`` units (over ``min_tokens``, and more than the
previous document) becomes ``[ctxagent state of messages #a-#b]`` and a one-line JSON object made from
it, the previous document included: by the summarizer (``llm: true``; checked) or, without one or when
that fails (reported in ``Outcome.warnings``), by :func:`deterministic_state`, which copies fact-like
lines (observations, not checked truths) and discards dead-end calls (as ``prune`` judges them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

from pydantic import Field

from ctxagent.messages import content_of, text_of
from ctxagent.strategies.base import Entry, Outcome, Scan, StrategyContext
from ctxagent.strategies.checkpoint import parse_json_object, place
from ctxagent.strategies.common import (
    calls_of_results,
    cut_line,
    pins_in,
    runs_to_compact,
    short_call,
)
from ctxagent.strategies.prune import first_line, is_dead
from ctxagent.strategies.rendering import fact_lines, task_text
from ctxagent.strategies.step import Count, KeepTurns, LlmStep, UseLlm
from ctxagent.strategies.summarize import llm_body
from ctxagent.tokens import count_text

STATE_KEYS = ("goal", "verified_facts", "discarded_hypotheses", "pending_actions")

DISTILL_PROMPT = (
    "You maintain the state document of an AI agent's working session; the messages below will be "
    "replaced by it. Reply with one JSON object and nothing else, with the keys \"goal\" (a string), "
    "\"verified_facts\", \"discarded_hypotheses\" and \"pending_actions\" (lists of short strings). "
    "If the messages hold an earlier state document, update it: keep what is still true, move "
    "refuted ideas to discarded_hypotheses, drop finished actions. Keep exact values verbatim (file "
    "paths, numbers, ids, handles like @abc123, commands, error messages); a fact is verified only "
    "if a tool result shows it. Never invent results. At most {max_tokens} tokens."
)


def dumps(doc: dict[str, Any]) -> str:
    """The document as one line of JSON (non-ASCII kept)."""
    return json.dumps(doc, ensure_ascii=False)


def previous_state(entry: Entry) -> dict[str, Any] | None:
    """The JSON document of an earlier ``distill`` message, or None when it cannot be read."""
    if entry.kind != "distill":
        return None
    body = content_of(entry.message).partition("\n")[2].strip()
    try:
        doc, _ = json.JSONDecoder().raw_decode(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _strings(value: Any) -> list[str]:
    return [v if isinstance(v, str) else dumps(v) for v in value] if isinstance(value, list) else []


def deterministic_state(view: Sequence[Entry], entries: Sequence[Entry], pins: Sequence[str],
                        max_tokens: int, model: str = "") -> dict[str, Any]:
    """The state document distilled without an LLM (see the module docstring)."""
    docs = [d for d in (previous_state(e) for e in entries) if d is not None]
    fresh = [e for e in entries if e.kind != "distill"]
    calls = calls_of_results(entries)
    goal = next((d["goal"] for d in reversed(docs) if isinstance(d.get("goal"), str)), "")
    facts = [f for d in docs for f in _strings(d.get("verified_facts"))]
    discarded = [f for d in docs for f in _strings(d.get("discarded_hypotheses"))]
    pending = _strings(docs[-1].get("pending_actions")) if docs else []
    facts += fact_lines(fresh, max_tokens, model)
    discarded += [f"{short_call(calls[i], 60)} → {first_line(e)}" for i, e in enumerate(entries)
                  if i in calls and e.kind == "message" and is_dead(e)]
    doc: dict[str, Any] = {
        "goal": goal or cut_line(task_text(view), 300),
        "verified_facts": list(dict.fromkeys(facts)),
        "discarded_hypotheses": list(dict.fromkeys(discarded)),
        "pending_actions": pending,
    }
    pinned = [p for p in pins_in((text_of(e.message) for e in entries), pins) if p not in dumps(doc)]
    if pinned:
        doc["pinned"] = pinned
    while count_text(dumps(doc), model) > max_tokens and (doc["verified_facts"]
                                                           or doc["discarded_hypotheses"]):
        key = max(("verified_facts", "discarded_hypotheses"), key=lambda k: len(doc[k]))  # the facts on a tie
        doc[key] = doc[key][max(1, len(doc[key]) // 8) :]
    return doc


def _finish(reply: str) -> str:
    """An LLM reply as the document's JSON line (the four keys first). Raises ``ValueError``."""
    data = parse_json_object(reply)
    ordered = {k: data[k] for k in STATE_KEYS if k in data}
    if not ordered:
        raise ValueError(f"none of the keys {STATE_KEYS}")
    return dumps({**ordered, **data})


class DistillStep(LlmStep):
    """``distill``: a JSON state document (goal, verified facts, discarded hypotheses, pending actions)
    in place of the older history."""

    llm_switch = "llm"
    strategy: Literal["distill"] = "distill"
    keep_turns: KeepTurns = 4
    llm: UseLlm = True
    min_tokens: Count = Field(1000, description="tokens the range must exceed to be distilled")

    def apply(self, view: list[Entry], ctx: StrategyContext, scan: Scan | None = None) -> Outcome:
        runs = runs_to_compact(view, 0, self.keep_turns)
        entries = [view[i] for r in runs for i in r]
        if not runs or sum(e.tokens for e in entries) <= self.min_tokens:
            return Outcome(view)
        body, warnings = llm_body(self, ctx, entries, DISTILL_PROMPT, _finish, "the LLM state document",
                                  "distilled the state deterministically instead")
        if body is None:
            body = dumps(deterministic_state(view, entries, ctx.pins, self.max_tokens, ctx.model))
        return replace(place(view, runs, body, "state", ctx, self.strategy), warnings=warnings)
