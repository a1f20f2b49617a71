"""What a lesson is: a rule, the transcript records it came from (``evidence``), what later sessions
shown it did (``votes``), and where it applies (:class:`Scope`). :attr:`Lesson.confidence` is computed
from them, never stored, so the file a user edits has one source of truth.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ctxagent.sessions.records import now

Kind = Literal["flag", "error_fix", "read_first", "llm", "manual"]
Verdict = Literal["confirmed", "contradicted"]
CONFIRM_STEP = 0.1  # confidence a confirmation (or one more session showing the rule) adds
CONTRADICT_STEP = 0.25  # confidence a contradiction takes: one doubt outweighs two confirmations
USER_SCOPE = "user"
REPLY_NOT_USED = "the model's lessons were not used"  # starts the warning for a reply not in the lessons JSON shape
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{2,}")


class Evidence(BaseModel):
    """Records of one session that show a rule: ``seqs`` are message seq numbers (ascending)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    session: str = Field(min_length=1)
    seqs: list[int] = Field(min_length=1)
    note: str = ""  # what the records show, one line


class Vote(BaseModel):
    """What one later session that was shown the lesson did: its records ``seqs`` show it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    session: str = Field(min_length=1)
    verdict: Verdict
    seqs: list[int] = Field(min_length=1)
    ts: float = Field(default_factory=now)


class Lesson(BaseModel):
    """One rule of a scope (see the module docstring).

    ``key`` identifies the rule for merging (two lessons with one key are one lesson); ``program``,
    ``tokens`` and ``path`` are what the rule checks in a later session (a shell command's first
    words, the flags it needs, a file read first); ``terms`` are the words it is ranked by;
    ``source`` is the session whose records the rule's text was written from (deleting that session
    deletes the lesson); ``prior`` is the confidence the rule that found it gives (0..1).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    id: str = Field(pattern=r"^L[0-9a-f]{8}$")
    rule: str = Field(min_length=1, max_length=2000)
    kind: Kind
    key: str = Field(min_length=1)
    scope: str = Field(pattern=r"^(user|project:/.+|named:[A-Za-z0-9][A-Za-z0-9._-]{0,63})$")
    source: str = Field(min_length=1)
    evidence: list[Evidence] = Field(min_length=1)
    votes: list[Vote] = Field(default_factory=list)
    prior: float = Field(0.5, ge=0, le=1)
    program: str = ""
    tokens: list[str] = Field(default_factory=list)
    path: str = ""
    terms: list[str] = Field(default_factory=list)
    created: float = Field(default_factory=now)
    updated: float = Field(default_factory=now)

    @property
    def confirmations(self) -> int:
        """Sessions that confirmed it, counting every session but the first that showed it."""
        return sum(v.verdict == "confirmed" for v in self.votes) + len(self.sessions()) - 1

    @property
    def contradictions(self) -> int:
        return sum(v.verdict == "contradicted" for v in self.votes)

    @property
    def confidence(self) -> float:
        """``prior`` plus 0.1 per confirmation, minus 0.25 per contradiction, within 0..1."""
        value = self.prior + CONFIRM_STEP * self.confirmations - CONTRADICT_STEP * self.contradictions
        return round(min(1.0, max(0.0, value)), 4)

    def sessions(self) -> set[str]:
        """The sessions its evidence comes from."""
        return {e.session for e in self.evidence}


def lesson_id(scope: str, key: str) -> str:
    """The stable id of the rule ``key`` in ``scope``: ``L`` and 8 hex digits."""
    return "L" + hashlib.sha256(f"{scope}\x00{key}".encode()).hexdigest()[:8]


def new_lesson(kind: Kind, key: str, rule: str, seqs: Iterable[int], note: str, *, session: str, scope: str,
               prior: float, program: str = "", tokens: Sequence[str] = (), path: str = "") -> Lesson:
    """A lesson of ``scope`` that the messages ``seqs`` of ``session`` show (``note``: how), its id
    from ``scope`` and ``key``, its terms from ``rule``."""
    return Lesson(id=lesson_id(scope, key), rule=rule, kind=kind, key=key, scope=scope, source=session,
                  evidence=[Evidence(session=session, seqs=sorted(set(seqs)), note=note)], prior=prior,
                  program=program, tokens=list(tokens), path=path, terms=terms_of(rule))


def terms_of(*texts: str) -> list[str]:
    """The words (3+ characters, lowercased, sorted, unique) that ranking compares."""
    return sorted({w.lower().strip(".-") for t in texts for w in _WORD.findall(t)} - {""})


@dataclass(frozen=True)
class Scope:
    """Where lessons apply. ``name``: ``project:<absolute root>``, ``named:<name>`` or ``user``."""

    name: str

    def file_name(self) -> str:
        """The JSONL file of the scope in the lessons folder (a readable stem and a hash)."""
        if self.name == USER_SCOPE:
            return "user.jsonl"
        kind, _, rest = self.name.partition(":")
        stem = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(rest).name or rest)[:40] or "root"
        return f"{kind}-{stem}-{hashlib.sha256(self.name.encode()).hexdigest()[:8]}.jsonl"

    def describe(self) -> str:
        return self.name.replace("project:", "project ", 1).replace("named:", "scope ", 1)


def project_root(workdir: Path) -> Path:
    """The git repository root holding ``workdir`` (a folder with ``.git``), else ``workdir``."""
    start = workdir.resolve()
    return next((folder for folder in (start, *start.parents) if (folder / ".git").exists()), start)


def scope_for(workdir: Path, named: str | None = None) -> Scope:
    """The scope of a session working in ``workdir``: ``named:<named>`` when given, else its project."""
    return Scope(f"named:{named}") if named else Scope(f"project:{project_root(workdir)}")
