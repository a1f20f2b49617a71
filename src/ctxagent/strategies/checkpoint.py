"""``checkpoint``: at a milestone, the older history becomes one structured checkpoint message.

Source of the rule (DESIGN.md, "Knowledge"): checkpoint triggers are a phase change, a sub-task
done, the budget at 75%, or an explicit instruction; checkpoint content is a summary, key facts
with exact values, completed and pending work, decisions with rationale, constraints, and the
state of stateful tools (here: files touched); the session shape table puts checkpoints at over
15 turns and 85% of the budget; window sizing says under 4 turns the agent repeats itself.

When the newest assistant message calls the ``checkpoint`` tool (:data:`CHECKPOINT_TOOL_SCHEMA`),
its JSON arguments are the checkpoint, applied once per call (to catch it at the next request, give
the step ``trigger: 0`` and ``at: 0.75``). Otherwise, over ``at`` and the target, the summarizer
writes it as JSON, checked like a summary and followed by the exact values it lacks; without one,
with ``llm: false`` or when that fails (reported in ``Outcome.warnings``), a deterministic checkpoint
copies the task, fact-like lines, the calls made and the files they name. The units between HEAD and
the last ``keep_turns`` become ``[ctxagent checkpoint of messages #a-#b ...]`` (an older checkpoint
among them is part of its input; an older part HEAD splits off becomes a pointer to it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

from pydantic import Field

from ctxagent.messages import Message, content_of, loads_json, text_of
from ctxagent.strategies.base import Entry, Outcome, Scan, StrategyContext
from ctxagent.strategies.common import (
    call_args,
    call_name,
    calls_of_results,
    cut_line,
    replace_runs,
    runs_to_compact,
    short_call,
    with_pins,
)
from ctxagent.strategies.facts import with_facts
from ctxagent.strategies.prune import is_dead
from ctxagent.strategies.rendering import fact_lines, label_range, task_text
from ctxagent.strategies.step import Count, Fraction, KeepTurns, SummaryStep, UseLlm
from ctxagent.strategies.summarize import llm_body, under_target

FIELDS: dict[str, str] = {
    "goal": "the overall goal, in one or two sentences",
    "phase": "the phase just finished and the one starting now",
    "key_facts": "facts learned so far, with exact values (paths, numbers, ids, handles, commands, errors)",
    "completed": "subtasks done",
    "pending": "subtasks left, in order",
    "decisions": "decisions taken, each with its rationale",
    "constraints": "constraints the rest of the work must respect",
    "files_touched": "files read, created or changed",
}
LISTED = ("key_facts", "decisions")  # rendered one item a line; other lists on one line

CHECKPOINT_TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "checkpoint",
        "description": (
            "Save a checkpoint of your progress at a milestone (a phase or sub-task done). The older "
            "messages of this session are then replaced in your context by this checkpoint, so put "
            "in it everything you still need, with exact values (paths, numbers, ids, handles, "
            "commands, errors). The full transcript is kept."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                key: ({"type": "string", "description": doc} if key in ("goal", "phase")
                      else {"type": "array", "items": {"type": "string"}, "description": doc})
                for key, doc in FIELDS.items()
            },
            "required": ["goal", "key_facts", "pending"],
        },
    },
}

CHECKPOINT_PROMPT = (
    "You are writing a checkpoint of an AI agent's working session: the messages below will be "
    "replaced by it, and the agent will continue from it. Reply with one JSON object and nothing "
    "else, with these keys: "
    + "; ".join(f'"{k}": {d}' for k, d in FIELDS.items())
    + ". Every value but goal and phase is a list of short strings. Keep exact values verbatim "
    "(file paths, numbers, ids, handles like @abc123, commands, URLs, error messages). Never invent "
    "a result the messages do not show. The task: {task}. At most {max_tokens} tokens."
)
_FENCE = re.compile(r"\A```(?:json)?\s*|\s*```\Z")
_PATH_KEYS = ("path", "file", "filename", "files", "paths", "target", "dest", "destination", "src", "source")


def _item(value: Any) -> str:
    """One value of a checkpoint as a line of text."""
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_item(v)}" for k, v in value.items())
    return json.dumps(value, ensure_ascii=False)


def render_checkpoint(data: dict[str, Any]) -> str:
    """The body of a checkpoint message: known fields in order, then any other keys."""
    lines: list[str] = []
    for key in [*FIELDS, *(k for k in data if k not in FIELDS)]:
        value = data.get(key)
        if value in (None, "", [], {}):
            continue
        title = key.replace("_", " ")
        if isinstance(value, list):
            items = [i for i in (_item(v) for v in value) if i]
            if key in LISTED:
                lines.append(f"{title}:")
                lines.extend(f"- {i}" for i in items)
            else:
                lines.append(f"{title}: " + "; ".join(items))
        else:
            lines.append(f"{title}: {_item(value)}")
    return "\n".join(lines)


def parse_json_object(reply: str) -> dict[str, Any]:
    """The JSON object of an LLM reply (code fences allowed). Raises ``ValueError`` otherwise."""
    data = loads_json(_FENCE.sub("", reply.strip()))
    if not isinstance(data, dict) or not data:
        raise ValueError("not a non-empty JSON object")
    return data


def agent_call(view: Sequence[Entry]) -> tuple[str, dict[str, Any]] | None:
    """``(call id, arguments)`` when the newest assistant message calls ``checkpoint`` with a JSON object."""
    last = next((e for e in reversed(view) if e.role == "assistant"), None)
    for call in (last.message.get("tool_calls") or []) if last else []:
        if call_name(call) == "checkpoint" and (data := call_args(call)):
            return str(call.get("id")), data
    return None


def files_touched(entries: Sequence[Entry]) -> list[str]:
    """Paths named in the arguments of the calls of ``entries`` (the newest 20, once each)."""
    found: dict[str, None] = {}
    for entry in entries:
        for call in entry.message.get("tool_calls") or []:
            args = call_args(call)
            for key in _PATH_KEYS:
                value = args.get(key)
                for item in value if isinstance(value, list) else [value]:
                    if isinstance(item, str) and item.strip():
                        found.setdefault(cut_line(item, 120), None)
    return list(found)[-20:]


def deterministic_checkpoint(view: Sequence[Entry], run: Sequence[Entry], max_tokens: int,
                             model: str = "") -> dict[str, Any]:
    """A checkpoint made without an LLM from the messages of ``run`` (verbatim lines only)."""
    calls = calls_of_results(run)
    done = [short_call(calls[i], 80) for i, e in enumerate(run) if i in calls and not is_dead(e)]
    failed = [short_call(calls[i], 80) for i, e in enumerate(run) if i in calls and is_dead(e)]
    return {
        "goal": cut_line(task_text(view), 300),
        "phase": f"checkpoint after turn {run[-1].turn} (made without a summarizer: lines copied verbatim)",
        "key_facts": fact_lines(run, max(50, max_tokens // 2), model),
        "completed": list(dict.fromkeys(done))[-15:],
        "failed attempts": list(dict.fromkeys(failed))[-10:],
        "files_touched": files_touched(run),
    }


def place(view: list[Entry], runs: list[list[int]], body: str, label: str, ctx: StrategyContext,
          name: str) -> Outcome:
    """Replace the newest run by ``label`` + ``body`` and each older run by a pointer to it."""
    covered = ", ".join(label_range([view[r[0]], view[r[-1]]]) for r in runs)
    removed = [text_of(view[i].message) for r in runs for i in r]
    newest = view[runs[-1][0]].start

    def make(run: list[Entry]) -> Message:
        if run[0].start == newest:
            content = f"[ctxagent {label} of messages {covered}]\n{body}"
            return {"role": "user", "content": with_pins(content, removed, ctx.pins)}
        return {"role": "user", "content": f"[ctxagent: messages {label_range(run)} are covered by the "
                                           f"{label} further down]"}

    return replace_runs(view, runs, make, ctx, name)


class CheckpointStep(SummaryStep):
    """``checkpoint``: a structured checkpoint (the agent's, or written at a milestone) in place of
    the older history."""

    llm_switch = "llm"
    strategy: Literal["checkpoint"] = "checkpoint"
    keep_turns: KeepTurns = 4
    at: Fraction | None = Field(None, description="fraction of the window the request must be over for a "
                                "non-agent checkpoint; null: the step's trigger decides")
    llm: UseLlm = True
    max_tokens: Count = Field(1200, description="tokens of an LLM checkpoint, and about the size of a "
                              "deterministic one")

    def apply(self, view: list[Entry], ctx: StrategyContext, scan: Scan | None = None) -> Outcome:
        runs = runs_to_compact(view, 0, self.keep_turns)
        if not runs:
            return Outcome(view)
        agent = agent_call(view)
        if agent is not None and not self._applied(view, agent[0]):
            call_id, data = agent
            label = f"checkpoint (written by the agent, call {call_id})"
            return place(view, runs, render_checkpoint(data), label, ctx, self.strategy)
        if (self.at is not None and not ctx.budget.over(view, self.at)) or under_target(view, ctx, self.target):
            return Outcome(view)
        entries = [view[i] for r in runs for i in r]
        prompt = CHECKPOINT_PROMPT.replace("{task}", cut_line(task_text(view), 500))
        body, warnings = llm_body(self, ctx, entries, prompt, lambda reply: render_checkpoint(parse_json_object(reply)),
                                  "the LLM checkpoint", "made a deterministic checkpoint instead")
        if body is not None:  # the exact values of the range the checkpoint does not hold follow it
            body = with_facts(body, entries, self.facts_tokens, ctx.model)
        else:
            body = render_checkpoint(deterministic_checkpoint(view, entries, self.max_tokens, ctx.model))
        return replace(place(view, runs, body, "checkpoint", ctx, self.strategy), warnings=warnings)

    @staticmethod
    def _applied(view: Sequence[Entry], call_id: str) -> bool:
        """Whether the agent's checkpoint of call ``call_id`` is already in the view."""
        mark = f"call {call_id})"
        return any(e.kind == "checkpoint" and mark in content_of(e.message) for e in view)
