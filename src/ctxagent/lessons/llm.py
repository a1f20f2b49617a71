"""Lessons an LLM proposes from an answered session, under a strict output schema (:class:`Proposals`),
where LLM calls may run (the runner's summarizer; None on a plain batch run). Each proposal must cite
messages of the session, and starts at a prior of at most 0.5: a rule the model made up must earn its
place by being confirmed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ctxagent.errors import CtxagentError, first_error
from ctxagent.lessons.model import REPLY_NOT_USED, USER_SCOPE, Lesson, new_lesson, terms_of
from ctxagent.sessions import records

Ask = Callable[[str, int], str]
"""The summarizer the runner passes: ``ask(prompt, max_tokens) -> reply text``."""
MAX_DIGEST_CHARS = 12_000  # the newest part of the session the model reads
MAX_LINE_CHARS = 300
MAX_PRIOR = 0.5
REPLY_TOKENS = 600
INSTRUCTIONS = """Below is an agent session, one message per line, each headed by its record number (#N).
Find at most 3 lessons that would help a later session in the same project do its work in fewer
steps: a command that needs a flag, a file to read first, an error and its known fix. A lesson must
be a general rule, not a fact of this one task, and must be shown by the records you cite.
Reply with JSON only, no prose, exactly this shape:
{"lessons": [{"rule": "<one sentence>", "evidence": [<record numbers>], "scope": "project" or "user",
"confidence": <0..1>}]}
Use "user" only for a rule true in any project. Reply {"lessons": []} when there is nothing reusable.
"""


class Proposal(BaseModel):
    """One lesson as the model must write it (extra keys are an error)."""

    model_config = ConfigDict(extra="forbid")
    rule: str = Field(min_length=10, max_length=400)
    evidence: list[int] = Field(min_length=1, max_length=20)
    scope: Literal["project", "user"] = "project"
    confidence: float = Field(ge=0, le=1)


class Proposals(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lessons: list[Proposal] = Field(max_length=5)


def digest(items: Iterable[Any]) -> tuple[str, set[int]]:
    """The session's messages as ``#seq role: text`` lines (the newest ``MAX_DIGEST_CHARS``), and
    every message seq of the session."""
    lines, seqs = [], set()
    for record in items:
        if not isinstance(record, records.MessageRecord) or record.message.get("role") == "system":
            continue
        seqs.add(record.seq)
        msg = record.message
        calls = [f"{c['function']['name']}({c['function']['arguments']})" for c in msg.get("tool_calls") or []]
        text = " ".join([str(msg.get("content") or ""), *calls]).strip()
        lines.append(f"#{record.seq} {msg.get('role')}: {' '.join(text.split())[:MAX_LINE_CHARS]}")
    text = "\n".join(lines)
    return text[-MAX_DIGEST_CHARS:], seqs


def parse(reply: str) -> Proposals:
    """The proposals of a reply (a JSON object, maybe in a fenced block). Raises ``ValueError``."""
    match = re.search(r"\{.*\}", reply, re.DOTALL)
    if match is None:
        raise ValueError("the reply holds no JSON object")
    try:
        return Proposals.model_validate_json(match.group(0))
    except ValidationError as err:
        raise ValueError("{}: {}".format(*first_error(err))) from None


def propose(items: Iterable[Any], ask: Ask, *, session: str, scope: str) -> tuple[list[Lesson], list[str]]:
    """Ask the model for lessons; returns ``(lessons, problems)``: one sentence per reply or
    proposal that was rejected."""
    text, seqs = digest(items)
    if not text:
        return [], []
    try:
        proposals = parse(ask(INSTRUCTIONS + "\n" + text, REPLY_TOKENS))
    except (ValueError, CtxagentError) as err:  # a bad reply, or the provider failed: the run stays answered
        return [], [f"{REPLY_NOT_USED}: {err}"]
    out, problems = [], []
    for p in proposals.lessons:
        unknown = sorted(set(p.evidence) - seqs)
        if unknown:
            problems.append(f"lesson {p.rule[:60]!r} rejected: no message #{unknown[0]} in the session")
            continue
        key = "llm\x00" + " ".join(terms_of(p.rule))
        out.append(new_lesson("llm", key, p.rule, p.evidence, "proposed by the model", session=session,
                              scope=USER_SCOPE if p.scope == "user" else scope, prior=min(MAX_PRIOR, p.confidence)))
    return out, problems

