"""``ctxagent lessons list|show|forget|edit|export``: the lessons sessions left for the next ones
(docs/lessons.md), read and changed under the store's lock. Never imports litellm.
"""

from __future__ import annotations

import json
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ctxagent.errors import UsageError, first_error
from ctxagent.messages import one_line
from ctxagent.sessions.files import replace_whole

if TYPE_CHECKING:
    from ctxagent.lessons.model import Lesson
    from ctxagent.lessons.store import LessonStore

app = typer.Typer(help="List, show, forget, edit and export the lessons sessions learned.", no_args_is_help=True,
                  rich_markup_mode=None)

IdArg = Annotated[str, typer.Argument(help="Lesson id (L and 8 hex digits; see 'ctxagent lessons list').",
                                      metavar="ID", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON: one object per lesson, one per line.")]


class Format(StrEnum):
    """What ``lessons export`` writes."""

    jsonl = "jsonl"
    markdown = "markdown"


def _store() -> LessonStore:
    from ctxagent.lessons.store import LessonStore

    return LessonStore()


def _as_json(lesson: Lesson) -> dict[str, object]:
    """The lesson as stored, with its computed confidence and counts."""
    return {**lesson.model_dump(mode="json"), "confidence": lesson.confidence,
            "confirmations": lesson.confirmations, "contradictions": lesson.contradictions}


def _find(lesson_id: str) -> tuple[LessonStore, Lesson]:
    store = _store()
    lesson = store.find(lesson_id)
    if lesson is None:
        raise UsageError(f"no lesson {lesson_id!r}; 'ctxagent lessons list' shows them")
    return store, lesson


@app.command("list")
def list_(json_out: JsonOpt = False) -> None:
    """Every lesson: id, scope, kind, confidence, confirmations/contradictions, rule (strongest first)."""
    store = _store()
    lessons = sorted(store.all(), key=lambda x: (x.scope, -x.confidence, x.id))
    for problem in store.problems():
        print(f"warning: not a lesson, left as is: {problem}", file=sys.stderr)
    if json_out:
        for lesson in lessons:
            print(json.dumps(_as_json(lesson), ensure_ascii=False))
        return
    if not lessons:
        print(f"no lessons yet ({store.root})", file=sys.stderr)
        return
    from ctxagent.lessons.model import Scope

    rows = [[x.id, Scope(x.scope).describe(), x.kind, f"{x.confidence:.2f}", f"+{x.confirmations}/-{x.contradictions}"]
            for x in lessons]
    if not sys.stdout.isatty():  # a pipe: tab-separated lines, every column whole (the id is what you need)
        for row, x in zip(rows, lessons, strict=True):
            print("\t".join([*row, one_line(x.rule, 200)]))
        return
    from ctxagent.cli.console import Console, Table, escape

    table = Table("id", "scope", "kind", "conf", "+/-")
    for column in table.columns:
        column.no_wrap, column.min_width = True, len(str(column.header))
    table.columns[0].min_width = max(len(x.id) for x in lessons)  # the id is what show/forget/edit take
    table.add_column("rule", no_wrap=True, overflow="ellipsis")
    for row, x in zip(rows, lessons, strict=True):
        table.add_row(*map(escape, row), escape(one_line(x.rule, 100)))
    Console(highlight=False, soft_wrap=True).print(table)


@app.command("show")
def show(lesson_id: IdArg, json_out: JsonOpt = False) -> None:
    """One lesson whole: its rule, scope, file, confidence, evidence records and votes."""
    store, lesson = _find(lesson_id)
    if json_out:
        print(json.dumps(_as_json(lesson), ensure_ascii=False))
        return
    print(_markdown(lesson, store))


def _markdown(lesson: Lesson, store: LessonStore) -> str:
    from ctxagent.lessons.model import Scope

    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(lesson.updated))
    lines = [f"## {lesson.id} ({lesson.kind}, {Scope(lesson.scope).describe()})", "", lesson.rule, "",
             f"- confidence {lesson.confidence:.2f} (prior {lesson.prior:.2f}, +{lesson.confirmations} "
             f"confirmed, -{lesson.contradictions} contradicted); updated {when}",
             f"- file: {store.path(Scope(lesson.scope))}"]
    lines += [f"- evidence: session {e.session}, records #{', #'.join(map(str, e.seqs))}"
              + (f" ({e.note})" if e.note else "") for e in lesson.evidence]
    lines += [f"- {v.verdict} by session {v.session}, records #{', #'.join(map(str, v.seqs))}" for v in lesson.votes]
    return "\n".join(lines)


@app.command("forget")
def forget(lesson_id: IdArg) -> None:
    """Delete a lesson: no later context shows it (a resumed session drops it from its block)."""
    store, lesson = _find(lesson_id)
    store.change(lambda x: None if x.id == lesson.id else x)
    print(f"forgot lesson {lesson.id}: {lesson.rule}", file=sys.stderr)


@app.command("edit")
def edit(
    lesson_id: IdArg,
    rule: Annotated[str | None, typer.Option("--rule", help="The new rule text (no editor opened).")] = None,
    scope: Annotated[str | None, typer.Option("--scope", help="Move it to this scope: user (every session of "
                                              "yours), named:NAME or project:/PATH (no editor opened).")] = None,
) -> None:
    """Edit a lesson: with --rule or --scope, set those; else open it as JSON in $VISUAL/$EDITOR.
    The result is validated (a lesson keeps its id and at least one evidence record); a new
    scope (user, named:NAME, project:/PATH) moves it to that scope's file."""
    from pydantic import ValidationError

    from ctxagent.lessons.model import Lesson

    store, lesson = _find(lesson_id)
    updates = {key: value for key, value in (("rule", rule), ("scope", scope)) if value is not None}
    if updates:
        text = json.dumps({**lesson.model_dump(mode="json"), **updates})
    else:
        import click  # typer (0.29) vendors click without edit(); click itself comes with litellm

        try:
            text = click.edit(json.dumps(lesson.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n",
                              extension=".json", require_save=True) or ""
        except click.ClickException as err:  # no editor, or it failed
            raise UsageError(f"lesson {lesson.id} not changed: {err.format_message()} (set $EDITOR, or use "
                             "--rule/--scope)") from None
        if not text.strip():
            print(f"lesson {lesson.id} not changed", file=sys.stderr)
            return
    try:
        new = Lesson.model_validate_json(text)
    except ValidationError as err:
        where, what = first_error(err)
        raise UsageError(f"lesson {lesson.id} not changed: {where or 'the JSON'}: {what}") from None
    if new.id != lesson.id:
        raise UsageError(f"lesson {lesson.id} not changed: its id cannot be edited")
    new = new.model_copy(update={"updated": time.time()})
    if new.scope == lesson.scope:
        store.change(lambda x: new if x.id == lesson.id else x)
    else:  # moved to another scope (say "user": shown to every session of this user)
        from ctxagent.lessons.model import Scope

        with store.editing(store.path(Scope(new.scope))) as moved:
            moved[:] = [*(x for x in moved if x.id != new.id), new]
        store.change(lambda x: None if x.id == lesson.id and x.scope == lesson.scope else x)
    print(f"edited lesson {lesson.id}", file=sys.stderr)


@app.command("export")
def export(
    fmt: Annotated[Format, typer.Option("--format", "-f", help="jsonl: the lessons as stored; markdown: readable.")]
    = Format.jsonl,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.",
                                                dir_okay=False)] = None,
) -> None:
    """Export every lesson of every scope (jsonl or markdown)."""
    store = _store()
    lessons = store.all()
    if fmt is Format.jsonl:
        text = "".join(x.model_dump_json() + "\n" for x in lessons)
    else:
        text = "# ctxagent lessons\n\n" + "\n\n".join(_markdown(x, store) for x in lessons) + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    replace_whole(output, text)  # owner-only, as the lessons store keeps them
    print(f"wrote {len(lessons)} lessons to {output}", file=sys.stderr)
