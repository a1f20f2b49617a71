"""Where a run meets its lessons (docs/lessons.md): the block a new session is shown, and learning at
a checkpoint and when the session answers. The runner holds one :class:`Learner` when lessons are on
(profile ``lessons``, no ``--no-lessons``, not a sub-agent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxagent.errors import UsageError
from ctxagent.lessons import curate, extract, llm, rank
from ctxagent.lessons.model import REPLY_NOT_USED, USER_SCOPE, Lesson, Scope, scope_for
from ctxagent.lessons.store import LessonStore
from ctxagent.profile_schema import LessonsConfig
from ctxagent.sessions import records
from ctxagent.sessions.records import now
from ctxagent.sessions.session import Session


@dataclass
class Learner:
    """The lessons side of one session's runs (see the module docstring). ``workdir``: absolute;
    ``model``: the model name token counts use; ``store``: default ``<data dir>/lessons``;
    ``sessions_store``: the session store the sessions live in (None: local disk)."""

    session: str
    config: LessonsConfig
    workdir: Path
    model: str = ""
    store: LessonStore = field(default_factory=LessonStore)
    sessions_store: str | None = None

    def _exists(self, name: str) -> bool:
        """Whether a session of that name is on disk (a name no session could have counts as existing:
        it was written by hand, not by a session that was deleted)."""
        try:
            return Session.at(name, self.sessions_store).exists()
        except UsageError:
            return True

    @property
    def scope(self) -> Scope:
        return scope_for(self.workdir, self.config.scope)

    def scopes(self) -> list[Scope]:
        """The scopes whose lessons the session is shown: its own, then the user-wide one."""
        return [self.scope, *([Scope(USER_SCOPE)] if self.config.user_scope else [])]

    def candidates(self) -> list[Lesson]:
        """Every lesson the session may be shown (from sessions that still exist). Raises ``OSError``
        when the store cannot be read."""
        return curate.live([x for s in self.scopes() for x in self.store.load(s)], self._exists)

    def block(self, shown: records.LessonsRecord | None, task: str | None) -> list[records.LessonsRecord]:
        """What a run appends before its first request: for a new session (``task``: its first
        message) the block chosen for it (:meth:`opening`); else the block without the lessons
        forgotten since (:meth:`refresh`). Empty when nothing changes. The record is the block from
        then on: resume and ``inspect context`` show it as recorded, and the pins message (second in
        every request) stays byte-identical (PREFIX)."""
        return self.opening(task) if task is not None and shown is None else self.refresh(shown)

    def opening(self, task: str) -> list[records.LessonsRecord]:
        """The ``lessons`` record of a new session with task ``task`` (none when no lesson fits)."""
        query = rank.Query(task, str(self.workdir), self.scope.name)
        try:
            candidates = self.candidates()
        except OSError:  # the run goes on without; finish() says what failed when it tries to write
            return []
        chosen = rank.block(rank.rank(candidates, query, now(), self.config.min_confidence), self.config.max_tokens,
                            self.model, self.scope.name)
        return [chosen] if chosen.ids else []

    def refresh(self, shown: records.LessonsRecord | None) -> list[records.LessonsRecord]:
        """A ``lessons`` record without the shown lessons that were forgotten since (none: unchanged)."""
        if shown is None or not shown.ids:
            return []
        try:
            known = {lesson.id for lesson in self.candidates()}
        except OSError:  # unreadable now: the block stays as recorded
            return []
        kept = [(i, line) for i, line in zip(shown.ids, shown.lines, strict=False) if i in known]
        if len(kept) == len(shown.ids):
            return []
        ids, lines = [i for i, _ in kept], [line for _, line in kept]
        return [records.LessonsRecord(scope=shown.scope, ids=ids, lines=lines, text=rank.render(lines))]

    def finish(self, items: Iterable[Any], shown: records.LessonsRecord | None, ask: llm.Ask | None = None) -> str:
        """Learn from the answered session whose transcript records are ``items``; ``ask``: the
        summarizer where LLM calls may run (None: deterministic rules only). Returns "" or a warning
        (the store could not be written, the model's lessons were rejected): never fails a run.
        A model whose reply was not in the lessons JSON shape is warned of once per session: not
        again when ``items`` hold a ``lessons`` note saying so (:data:`REPLY_NOT_USED`)."""
        items = list(items)
        found = extract.extract(items, session=self.session, scope=self.scope.name, workdir=self.workdir)
        problems: list[str] = []
        if ask is not None and self.config.llm:
            proposed, problems = llm.propose(items, ask, session=self.session, scope=self.scope.name)
            found += proposed
            if any(isinstance(r, records.NoteRecord) and r.source == "lessons" and REPLY_NOT_USED in r.text
                   for r in items):
                problems = [p for p in problems if not p.startswith(REPLY_NOT_USED)]
        try:
            self._finish(items, found, set(shown.ids) if shown else set())
        except (OSError, ValueError, TimeoutError) as err:  # filelock.Timeout is a TimeoutError
            problems.append(f"lessons not updated: {err}")
        return "; ".join(problems)

    def checkpoint(self, items: Iterable[Any]) -> str:
        """Learn at a checkpoint (a ``checkpoint`` compaction, a budget stop's included): the
        deterministic lessons of the session so far merge into its scope (one evidence entry per
        session, so finding them again at the end counts once); no votes, since the session has not
        answered, and no LLM call. Returns "" or a warning; never fails a run."""
        found = extract.extract(list(items), session=self.session, scope=self.scope.name, workdir=self.workdir)
        if not found:
            return ""
        try:
            self._merge(self.store.path(self.scope), found)
        except (OSError, ValueError, TimeoutError) as err:  # filelock.Timeout is a TimeoutError
            return f"lessons not updated at the checkpoint: {err}"
        return ""

    def _finish(self, items: list[Any], found: list[Lesson], shown: set[str]) -> None:
        done = extract.attempts(items)
        for scope in self.scopes():
            path = self.store.path(scope)
            mine = [lesson for lesson in found if lesson.scope == scope.name]
            if scope == self.scope or mine or path.exists():
                self._merge(path, mine, lambda lesson: self._voted(lesson, done, shown))

    def _merge(self, path: Path, found: list[Lesson], vote: Callable[[Lesson], Lesson] = lambda x: x) -> None:
        """Merge ``found`` into the file ``path`` (less what deleted sessions gave), pass every lesson
        through ``vote``, evict the weakest."""
        with self.store.editing(path) as lessons:
            current = curate.live(lessons, self._exists)
            for lesson in found:
                current = curate.merge(current, lesson)
            lessons[:] = curate.evict([vote(lesson) for lesson in current], self.config.max_stored)

    def _voted(self, lesson: Lesson, done: list[extract.Attempt], shown: set[str]) -> Lesson:
        """``lesson`` with this session's vote when it was shown it (and did not find it itself)."""
        if lesson.id not in shown or self.session in lesson.sessions():
            return lesson
        verdict = extract.judge(lesson, done, session=self.session, workdir=self.workdir)
        return curate.vote(lesson, verdict) if verdict else lesson


def forget_session(name: str) -> None:
    """Remove everything session ``name`` (deleted) gave the lessons store: the lessons whose text
    it wrote, its evidence and votes elsewhere."""
    LessonStore().change(lambda lesson: curate.without_session(lesson, name))


def rename_session(old: str, new: str) -> None:
    """Name session ``old`` (renamed) ``new`` in every lesson."""
    LessonStore().change(lambda lesson: curate.renamed(lesson, old, new))
