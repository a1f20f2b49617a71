"""The lessons store: one JSONL file per scope under ``<data dir>/lessons/`` (docs/lessons.md), 0600
in a 0700 folder. Every write takes the file's lock, replaces the file whole (``os.replace``: a reader
sees the old or the new file, never half of one) and scrubs every lesson first (:func:`scrubbed`). A
line that is not a lesson (a bad hand edit) is kept as it is and reported by :meth:`LessonStore.problems`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from ctxagent.dirs import data_dir
from ctxagent.errors import first_error
from ctxagent.lessons.model import Lesson, Scope
from ctxagent.sessions import redact
from ctxagent.sessions.files import private_dir, replace_whole

FOLDER = "lessons"
LOCK_TIMEOUT_S = 10.0
_OTHER_HOME = re.compile(r"(?<![\w/.~-])/(?:home|Users)/[A-Za-z0-9._-]+")
_SECRET_FLAG = re.compile(r"--?[A-Za-z0-9_-]*(?:pass|token|secret|apikey|api-key|api_key|auth)[A-Za-z0-9_-]*",
                          re.IGNORECASE)
_SECRET_OPTION = re.compile(  # --password=x, --api-key x, --auth-token 'x': a value a lesson must not repeat
    rf"(?<![\w-])({_SECRET_FLAG.pattern})(=|\s+)(?!\[REDACTED)('[^']*'|\"[^\"]*\"|[^\s`'\"]+)", re.IGNORECASE)
OPTION_MARKER = "[REDACTED:option]"


def scrub(text: str) -> str:
    """``text`` with secrets redacted (known shapes, the environment's secrets, and the values of
    options named like ``--password``, ``--api-key``, ``--token``), this user's home as ``~`` and
    other users' homes as ``/home/<user>`` (a lesson never names another user's files)."""
    text = redact.default().text(text)
    text = _SECRET_OPTION.sub(lambda m: f"{m.group(1)}{m.group(2)}{OPTION_MARKER}", text)
    home = str(Path.home())
    if len(home) > 1:
        text = re.sub(re.escape(home) + r"(?=/|\b|$)", "~", text)
    return _OTHER_HOME.sub("/home/<user>", text)


def scrubbed_words(words: list[str], said: str) -> list[str]:
    """The words of a command (a lesson's ``tokens`` or ``terms``) scrubbed one by one, and also as
    the command they come from: a word after an option named like ``--password`` is its value, and a
    word that :func:`scrub` removes from ``said`` (the text they were taken from) is a secret there
    (a word alone has no context: ``hunter2`` is a password only after ``--password``)."""
    said, clean = said.lower(), scrub(said).lower()  # terms are lower-cased words of the rule
    out = []
    for i, word in enumerate(words):
        value = i > 0 and _SECRET_FLAG.fullmatch(words[i - 1]) is not None and not word.startswith("-")
        gone = len(word) >= 3 and word.lower() in said and word.lower() not in clean
        out.append(OPTION_MARKER if value or gone else scrub(word))
    return out


def scrubbed(lesson: Lesson) -> Lesson:
    """``lesson`` with every free-text field passed through :func:`scrub`, the words of its command
    through :func:`scrubbed_words` (the scope is kept: it is this user's own working directory, the
    key the store files lessons under)."""
    said = " ".join([lesson.rule, lesson.key.replace("\x00", " "), *lesson.tokens])
    return lesson.model_copy(update={
        "rule": scrub(lesson.rule), "key": scrub(lesson.key), "program": scrub(lesson.program),
        "tokens": scrubbed_words(list(lesson.tokens), said), "path": scrub(lesson.path),
        "terms": scrubbed_words(list(lesson.terms), said),
        "evidence": [e.model_copy(update={"note": scrub(e.note)}) for e in lesson.evidence]})


class LessonStore:
    """The lessons of every scope, in ``root`` (default ``<data dir>/lessons``)."""

    def __init__(self, root: Path | None = None):
        self.root = root or data_dir() / FOLDER

    def path(self, scope: Scope) -> Path:
        return self.root / scope.file_name()

    def files(self) -> list[Path]:
        """Every scope file, sorted by name (none when the folder does not exist)."""
        return sorted(self.root.glob("*.jsonl")) if self.root.is_dir() else []

    def load(self, scope: Scope) -> list[Lesson]:
        """The lessons of ``scope``, in file order (unreadable lines left out)."""
        return _read(self.path(scope))[0]

    def all(self) -> list[Lesson]:
        """The lessons of every scope, file by file."""
        return [lesson for path in self.files() for lesson in _read(path)[0]]

    def problems(self) -> list[str]:
        """One sentence per line of a scope file that is not a valid lesson (kept, never used)."""
        return [f"{path}: {problem}" for path in self.files() for problem in _read(path)[2]]

    def find(self, lesson_id: str) -> Lesson | None:
        return next((lesson for lesson in self.all() if lesson.id == lesson_id), None)

    @contextmanager
    def editing(self, path: Path) -> Iterator[list[Lesson]]:
        """Lock ``path``, yield its lessons as a list to change in place, then write it back (when
        the block raises, nothing is written). Raises ``filelock.Timeout`` after 10 s of waiting."""
        from ctxagent.sessions.lease import waiting_lock

        private_dir(self.root)
        with waiting_lock(Path(str(path) + ".lock"), LOCK_TIMEOUT_S):
            lessons, bad, _ = _read(path)
            before = [lesson.model_dump() for lesson in lessons]
            yield lessons
            if [lesson.model_dump() for lesson in lessons] != before:
                _write(path, [scrubbed(lesson) for lesson in lessons], bad)

    def change(self, edit: Callable[[Lesson], Lesson | None]) -> None:
        """Apply ``edit`` to every lesson of every scope (it returns the lesson, changed or not, or
        None to delete it)."""
        for path in self.files():
            with self.editing(path) as lessons:
                lessons[:] = [new for lesson in lessons if (new := edit(lesson)) is not None]


def _read(path: Path) -> tuple[list[Lesson], list[str], list[str]]:
    """``(lessons, bad lines, problems)`` of a scope file (empty when it does not exist)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], [], []
    lessons, bad, problems = [], [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            lessons.append(Lesson.model_validate_json(line))
        except ValidationError as err:
            bad.append(line)
            where, what = first_error(err)
            problems.append(f"line {number}: {where or 'line'}: {what}")
    return lessons, bad, problems


def _write(path: Path, lessons: list[Lesson], bad: list[str]) -> None:
    """Write the file whole (0600) through a temporary file in the same folder."""
    lines = [lesson.model_dump_json() for lesson in lessons] + bad
    replace_whole(path, (line + "\n" for line in lines))
