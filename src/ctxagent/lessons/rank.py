"""Which lessons a new session is shown: ranked by :func:`score`, then packed in that order into a block
of at most ``max_tokens`` tokens (:func:`block`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from ctxagent.lessons.model import Lesson, terms_of
from ctxagent.sessions.records import LessonsRecord
from ctxagent.tokens import count_text

HEADER = ("Lessons from earlier sessions here (each learned from their transcripts; "
          "`ctxagent lessons show ID` gives the evidence; if one proves wrong, do what works):")
HALF_LIFE_DAYS = 30.0
CANDIDATES = 50  # ranked lessons tried for the block at most


@dataclass(frozen=True)
class Query:
    """What a session is about: its task text, working directory, and its own scope's name."""

    task: str
    workdir: str
    scope: str

    @cached_property
    def terms(self) -> set[str]:
        return set(terms_of(self.task, self.workdir.replace("/", " ")))


def score(lesson: Lesson, query: Query, now: float) -> float:
    """The lesson's rank score for ``query`` at time ``now`` (seconds since the epoch); higher is better."""
    mine, theirs = set(lesson.terms), query.terms
    overlap = len(mine & theirs) / math.sqrt(len(mine) * len(theirs)) if mine and theirs else 0.0
    age_days = max(0.0, now - lesson.updated) / 86_400
    recency: float = 0.5 ** (age_days / HALF_LIFE_DAYS)  # float ** float is typed Any (could be complex)
    own = 0.3 if lesson.scope == query.scope else 0.0
    return 2 * overlap + lesson.confidence + min(0.5, 0.1 * lesson.confirmations) + 0.3 * recency + own


def rank(lessons: Sequence[Lesson], query: Query, now: float, min_confidence: float = 0.0) -> list[Lesson]:
    """``lessons`` at or over ``min_confidence``, best first (ties: lower id first)."""
    eligible = [lesson for lesson in lessons if lesson.confidence >= min_confidence]
    return sorted(eligible, key=lambda lesson: (-round(score(lesson, query, now), 9), lesson.id))


def line_of(lesson: Lesson) -> str:
    """The lesson as one line of the block: ``[ID] rule (confidence, confirmations)``."""
    seen = f", confirmed by {lesson.confirmations} later session(s)" if lesson.confirmations else ""
    return f"[{lesson.id}] {' '.join(lesson.rule.split())} (confidence {lesson.confidence:.2f}{seen})"


def render(lines: Sequence[str]) -> str:
    """The block as shown in the pins message ("" when there are no lines)."""
    return HEADER + "\n" + "\n".join(f"  {line}" for line in lines) if lines else ""


def block(ranked: Sequence[Lesson], max_tokens: int, model: str = "", scope: str = "") -> LessonsRecord:
    """The ``lessons`` record (of ``scope``) of the best lessons of ``ranked`` (in order) whose block
    is at most ``max_tokens`` tokens (one that does not fit is skipped and the next one tried)."""
    ids: list[str] = []
    lines: list[str] = []
    for lesson in ranked[:CANDIDATES]:
        line = line_of(lesson)
        if count_text(render([*lines, line]), model) <= max_tokens:
            ids.append(lesson.id)
            lines.append(line)
    return LessonsRecord(scope=scope, ids=ids, lines=lines, text=render(lines))
