"""The tasks of ``ctxagent batch`` (cli/batch.py; docs/batch.md): the tasks file's lines
(:class:`TaskLine`), each task's ``run`` or ``resume`` command (:func:`args_for`), and how its session
stands (:func:`standing`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ctxagent.errors import UsageError, first_error
from ctxagent.sessions.outcome import recorded_answer, recorded_task
from ctxagent.tools.clean import plain

LIMIT_EXIT = 3  # LimitReached: a budget, max_turns or the loop guard stopped the run (resumable)
STDERR_KEPT = 2000  # characters of a failed task's stderr kept in its result


class TaskLine(BaseModel):
    """One line of a tasks file. ``session``: default ``STEM-N`` (the file's name without suffix,
    the 1-based line number), so the same file names the same sessions every time. The other keys
    are ``ctxagent run``'s options for this task (over the command line's)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "3" is not a number, "yes" not a boolean
    task: str = Field(min_length=1, pattern=r"^[^\x00]*$")  # a NUL cannot be a command-line argument
    session: str | None = None
    workdir: str | None = None
    model: str | None = None
    profile: str | None = None
    api_base: str | None = None
    max_turns: int | None = Field(None, ge=1)
    allow: str | list[str] | None = None  # "shell,write_file" or ["shell", "write_file"]
    mcp_config: str | None = None
    no_lessons: bool | None = None
    context_window: int | None = Field(None, ge=256)
    timeout: float | None = Field(None, gt=0)
    max_input_tokens: int | None = Field(None, ge=1)
    max_output_tokens_total: int | None = Field(None, ge=1)
    max_cost_usd: float | None = Field(None, gt=0)
    max_wall_s: float | None = Field(None, gt=0)


SWITCHES = frozenset({"allow_all", "no_lessons"})  # options without a value


@dataclass
class Task:
    """A task to run: its line, session name and options (flags), or the error its line has."""

    line: int
    session: str
    options: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    error: str | None = None


def read_tasks(path: Path, defaults: dict[str, Any]) -> list[Task]:
    """The tasks of ``path``, one per non-blank line, ``defaults`` (the command line's options) under
    each line's own. A line that is not a valid task becomes a task with ``error`` set. Raises
    ``UsageError`` when the file cannot be read or two tasks name the same session."""
    from ctxagent.sessions.session import check_name

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read the tasks file {path}: {err}") from err
    tasks: list[Task] = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        name = _named(raw) or f"{path.stem}-{number}"
        try:
            item = TaskLine.model_validate_json(raw)
            name = check_name(item.session or name)
        except (ValidationError, UsageError) as err:
            tasks.append(Task(number, name, error=f"{path}:{number}: {_first_error(err)}"))
            continue
        given = item.model_dump(exclude={"task", "session"}, exclude_none=True)
        if isinstance(given.get("allow"), list):
            given["allow"] = ",".join(given["allow"])
        tasks.append(Task(number, name, {**defaults, **given}, item.task))
    seen: dict[str, int] = {}
    for task in tasks:
        if task.session in seen and task.error is None:
            raise UsageError(f"{path}:{task.line}: session {task.session!r} is also line {seen[task.session]}'s")
        seen.setdefault(task.session, task.line)
    return tasks


def _named(raw: str) -> str | None:
    """The ``session`` a line names, even when the line is not a valid task (its result says so)."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    name = value.get("session") if isinstance(value, dict) else None
    return name if isinstance(name, str) and name.strip() else None


def _first_error(err: Exception) -> str:
    if isinstance(err, ValidationError):
        where, what = first_error(err)
        return f"{where}: {what}" if where else what
    return str(err)


def command_for(task: Task, started: bool, output: str = "json") -> list[str]:
    """The ``python -m ctxagent`` command line of ``task`` (see :func:`args_for`)."""
    return [sys.executable, "-m", "ctxagent", *args_for(task, started, output)]


def args_for(task: Task, started: bool, output: str = "json") -> list[str]:
    """The ``ctxagent`` arguments of ``task`` (without the program): ``resume`` when its session
    holds the task (``started``, :class:`Standing`), else ``run`` with the task; ``--batch`` and
    ``--output-format OUTPUT`` always (``json``: one object; ``stream-json``: an event per line,
    the object last)."""
    flags: list[str] = []
    for key, value in task.options.items():
        flag = "--" + key.replace("_", "-")  # a TaskLine key names its `run` option: max_turns, --max-turns
        if key in SWITCHES:
            flags += [flag] if value else []
        elif value is not None:
            flags += [flag, str(value)]
    head = ["resume" if started else "run", "--session", task.session, "--batch", "--output-format", output, *flags]
    return head if started else [*head, "--", task.text]  # a task may start with "-"


@dataclass(frozen=True)
class Standing:
    """How a task's session stands (:func:`standing`). ``error``: it holds another task (the
    line's usage error). ``answer``: its final answer when it is answered (reported, never run
    again). ``started``: it holds this task, so it resumes; False: the task runs in it (no
    session yet, or one whose run was stopped between its header and its task)."""

    started: bool = False
    answer: str | None = None
    error: str | None = None


def standing(task: Task) -> Standing:
    """How ``task``'s session stands: its first user message and last records decide
    (sessions/outcome.py), not its status, which an ``interrupted`` end record written before the
    task was recorded would make look started. Raises ``UsageError`` for a bad session name."""
    from ctxagent.sessions.session import Session

    session = Session.at(task.session, task.options.get("store"))
    held = recorded_task(session.transcript)
    if held is None:
        return Standing()
    if held != plain(task.text):  # as `run` records it
        return Standing(error=f"line {task.line}: session {task.session!r} holds another task ({held[:80]!r}); "
                              "give this line its own \"session\", or delete that session")
    return Standing(started=True, answer=recorded_answer(session.transcript))


def reported(stand: Standing, base: dict[str, Any]) -> dict[str, Any] | None:
    """The result object of a task that is not run (``base``'s keys plus the outcome): its line's
    usage error, or its session's recorded answer; None when the task is to run."""
    if stand.error is not None:
        return {**base, "status": "usage_error", "error": stand.error, "exit_code": 2, "skipped": False,
                "is_error": True}
    if stand.answer is not None:  # with or without its end record (sessions/outcome.py)
        return {**base, "status": "answered", "answer": stand.answer, "exit_code": 0, "skipped": True,
                "is_error": False}
    return None
