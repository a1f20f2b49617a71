"""Keeping a scope's lessons few and honest: merge near-duplicates, record votes, evict the weakest,
and drop what came from sessions that no longer exist. Pure functions over lists of lessons; the
store (:mod:`ctxagent.lessons.store`) does the locking and writing.
"""

from __future__ import annotations

from collections.abc import Callable

from ctxagent.lessons.model import Lesson, Vote
from ctxagent.sessions.records import now

NEAR_DUPLICATE = 0.8  # Jaccard similarity of the terms of two lessons of one kind and program


def similarity(a: Lesson, b: Lesson) -> float:
    """Jaccard similarity (0..1) of the two lessons' terms."""
    x, y = set(a.terms), set(b.terms)
    return len(x & y) / len(x | y) if x | y else 0.0


def same_rule(a: Lesson, b: Lesson) -> bool:
    """One rule twice: the same id or key, or the same kind and program with near-equal terms."""
    if a.id == b.id or a.key == b.key:
        return True
    return a.kind == b.kind and a.program == b.program and similarity(a, b) >= NEAR_DUPLICATE


def merge(lessons: list[Lesson], new: Lesson) -> list[Lesson]:
    """``lessons`` with ``new`` added, or folded into the lesson it repeats (its evidence joins
    that lesson's, one entry per session: the newest wins; the text stays the older lesson's)."""
    at = next((i for i, old in enumerate(lessons) if same_rule(old, new)), None)
    if at is None:
        return [*lessons, new]
    old = lessons[at]
    by_session = {e.session: e for e in [*old.evidence, *new.evidence]}  # first-seen order, last entry
    merged = old.model_copy(update={"evidence": list(by_session.values()), "updated": max(old.updated, new.updated),
                                    "terms": sorted(set(old.terms) | set(new.terms))})
    return [*lessons[:at], merged, *lessons[at + 1:]]


def vote(lesson: Lesson, new: Vote) -> Lesson:
    """``lesson`` with ``new`` as its session's vote (a session votes once: a later vote of the
    same session replaces its earlier one, so a run answered twice is not counted twice)."""
    votes = [v for v in lesson.votes if v.session != new.session] + [new]
    return lesson.model_copy(update={"votes": votes, "updated": now()})


def strength(lesson: Lesson) -> tuple[float, float, str]:
    """Sort key, weakest first: confidence, then last update (older is weaker), then id."""
    return (lesson.confidence, lesson.updated, lesson.id)


def evict(lessons: list[Lesson], max_stored: int) -> list[Lesson]:
    """``lessons`` without the weakest ones beyond ``max_stored`` (file order kept)."""
    if len(lessons) <= max_stored:
        return lessons
    keep = {lesson.id for lesson in sorted(lessons, key=strength)[len(lessons) - max_stored:]}
    return [lesson for lesson in lessons if lesson.id in keep]


def without_session(lesson: Lesson, session: str) -> Lesson | None:
    """``lesson`` with nothing left from ``session`` (a deleted session): None when its text came
    from that session or no evidence is left, else without that session's evidence and vote."""
    if lesson.source == session or lesson.sessions() == {session}:
        return None
    return lesson.model_copy(update={"evidence": [e for e in lesson.evidence if e.session != session],
                                     "votes": [v for v in lesson.votes if v.session != session]})


def renamed(lesson: Lesson, old: str, new: str) -> Lesson:
    """``lesson`` with session ``old`` called ``new`` everywhere it is named."""
    return lesson.model_copy(update={
        "source": new if lesson.source == old else lesson.source,
        "evidence": [e.model_copy(update={"session": new}) if e.session == old else e for e in lesson.evidence],
        "votes": [v.model_copy(update={"session": new}) if v.session == old else v for v in lesson.votes]})


def live(lessons: list[Lesson], exists: Callable[[str], bool]) -> list[Lesson]:
    """``lessons`` without anything from sessions for which ``exists`` is false (deleted)."""
    gone = {s for lesson in lessons for s in (*lesson.sessions(), lesson.source, *(v.session for v in lesson.votes))
            if not exists(s)}
    for session in sorted(gone):
        lessons = [kept for lesson in lessons if (kept := without_session(lesson, session)) is not None]
    return lessons
