"""``ctxagent sessions list|show|delete|rename|fork|export``: manage the sessions on disk.

``delete`` and ``rename`` take the session's writer lock, so they refuse while a run holds it. Never
imports litellm.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from ctxagent.cli import sessions_export
from ctxagent.cli.options import keep_store, pick
from ctxagent.cli.sessions_export import usd, when
from ctxagent.dirs import data_dir
from ctxagent.errors import SessionBusyError, UsageError
from ctxagent.sessions import replica
from ctxagent.sessions.files import replace_whole
from ctxagent.sessions.session import ListFacts, Session, check_name, list_facts, list_sessions
from ctxagent.sessions.store import SPOOL_PREFIX

app = typer.Typer(help="List, show, delete, rename, fork and export sessions.", no_args_is_help=True,
                  rich_markup_mode=None)

NameArg = Annotated[str, typer.Argument(help="Session name.", metavar="NAME", show_default=False)]
OptNameArg = Annotated[str | None, typer.Argument(help="Session name (default: most recent).", metavar="NAME",
                                                  show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON object (per line for list).")]


app.callback()(keep_store)


class Format(StrEnum):
    """What ``sessions export`` writes."""

    jsonl = "jsonl"
    markdown = "markdown"
    openai = "openai"


def on_terminal() -> bool:
    """Whether stdin and stdout are both a terminal (someone can answer a question)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def _existing(name: str, store_url: str | None) -> Session:
    """The top-level session ``name`` whose folder exists (even with an empty transcript); ``UsageError``
    for a bad name, a sub-agent's session (``PARENT/CHILD``: it goes with its parent), or none."""
    if "/" in name:
        raise UsageError(f"{name!r} is a sub-agent's session, part of its parent's; delete or rename "
                         f"{name.split('/', 1)[0]!r} instead")
    session = Session.at(name, store_url)
    if store_url and not session.exists():  # a store's session this machine never opened: its cache first
        session.pull()
    if not session.root.is_dir():
        raise UsageError(f"no session named {name!r} under {session.root.parent}")
    return session


@app.command("list")
def list_(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """Sessions with their creation and last-used times, turns, tokens, cost and status (running
    while a process holds the session's lock; interrupted when a run stopped without an end record),
    most recently written first. Piped, names are never cut."""
    rows = [row for session in list_sessions(ctx.obj) for row in _rows(session)]
    if json_out:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
        return
    from ctxagent.cli.console import Console, Table

    table = Table("session", "created", "last used", "turns", "tokens", "cost", "status", "model")
    for row in rows:
        name = row["name"] if row["parent"] is None else "  " * row["name"].count("/") + "└ " + row["name"]
        table.add_row(name, when(row["created"]), when(row["last_used"]), str(row["turns"]),
                      str(row["tokens"]), usd(row["cost_usd"]), row["status"], row["model"] or "-")
    # not a terminal: a width no row reaches, so rich never cuts a name or a model string
    Console(highlight=False, width=None if sys.stdout.isatty() else 100_000).print(table)


class _Row(ListFacts):
    """One row of ``sessions list`` (and one JSON line of ``--json``)."""

    name: str
    parent: str | None


def _rows(session: Session, parent: str | None = None) -> list[_Row]:
    """The ``list`` rows of ``session`` then of its sub-agents' sessions."""
    facts = list_facts(session)  # header, tail and cached totals: never the whole transcript
    row: _Row = {"name": session.name, **facts, "parent": parent}
    return [row, *(r for child in session.children() for r in _rows(child, session.name))]


@app.command("show")
def show(ctx: typer.Context, name: OptNameArg = None, json_out: JsonOpt = False) -> None:
    """One session: the settings in force (model, profile, window, workdir, tools, limits), status,
    turns, messages, tokens, cost, created and last-used times, offloaded outputs, compactions."""
    session = pick(name, ctx.obj)
    facts = sessions_export.facts(session)
    if json_out:
        print(json.dumps(facts, ensure_ascii=False))
        return
    for line in sessions_export.show_lines(facts):
        print(line)


NamesArg = Annotated[list[str] | None, typer.Argument(help="Session names.", metavar="NAME...", show_default=False)]
OlderOpt = Annotated[str | None, typer.Option(
    "--older-than", metavar="AGE", help="Also every session last used more than AGE ago: a number and a unit, "
    "s, m, h, d or w (30d, 12h, 90m).")]
UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def age_s(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (or ``1.5d``) in seconds. Raises ``UsageError``."""
    number, unit = text.strip()[:-1], text.strip()[-1:].lower()
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in UNITS_S or not 0 <= value < math.inf:  # not nan ("nand"), not inf ("infd")
        raise UsageError(f"--older-than {text!r}: give a number and a unit, s, m, h, d or w (30d, 12h, 90m)")
    return value * UNITS_S[unit]


def _older_than(age: str, store_url: str | None) -> list[Session]:
    """The top-level sessions whose transcript was written more than ``age`` ago, none running."""
    cutoff = time.time() - age_s(age)
    return [s for s in list_sessions(store_url) if (s.root / "transcript.jsonl").stat().st_mtime < cutoff
            and not s.running()]


@app.command("delete")
def delete(
    ctx: typer.Context,
    names: NamesArg = None,
    older_than: OlderOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (needed when not on a terminal).")] = False,
) -> None:
    """Delete sessions' folders: their transcripts and offloaded outputs. Takes several names, and with
    --older-than AGE every session not used for that long. Asks first on a terminal; elsewhere
    needs --yes. A session another process holds is not deleted (said, exit 1); the others are."""
    chosen = [_existing(name, ctx.obj) for name in dict.fromkeys(names or [])]
    if older_than is not None:
        chosen += [s for s in _older_than(older_than, ctx.obj) if s.name not in {c.name for c in chosen}]
    if not chosen:
        if older_than is None:
            raise UsageError("give the names of the sessions to delete, or --older-than AGE")
        print(f"no session was last used more than {older_than} ago", file=sys.stderr)
        return
    if not yes:
        what = ", ".join(s.name for s in chosen)
        if not on_terminal():
            raise UsageError(f"not deleting {what} without --yes (no terminal to ask on)")
        roots = [s.root for s in chosen]
        question = f"Delete session {what!r}: {roots[0]} ({_size(*roots)})?" if len(chosen) == 1 else \
            f"Delete {len(chosen)} sessions: {what} ({_size(*roots)})?"
        if not typer.confirm(question, default=False):
            raise typer.Abort()
    busy = []
    for session in chosen:
        try:
            _delete(session)
        except SessionBusyError as err:
            print(f"ctxagent: error: {err}", file=sys.stderr)
            busy.append(session.name)
    if busy:
        raise typer.Exit(1)


def _delete(session: Session) -> None:
    """Delete one session under its writer lock: its store objects, its folder, its lessons."""
    name = session.name
    trash = data_dir() / f".deleting-{name}-{os.getpid()}"
    with session.writer():  # SessionBusyError (exit 1) while a run holds it (or a session store's lease)
        _remove_remote(session)
        try:
            os.rename(session.root, trash)  # one step: no half-deleted session is ever listed or resumed
        except OSError:
            trash = session.root  # another filesystem: delete in place
            (session.root / "transcript.jsonl").unlink(missing_ok=True)
    shutil.rmtree(trash, ignore_errors=True)
    from ctxagent.lessons.hooks import forget_session

    forget_session(name)  # nothing of a deleted session stays in the lessons store
    print(f"deleted session {name} ({session.root})", file=sys.stderr)


@app.command("fork")
def fork(
    ctx: typer.Context,
    name: NameArg,
    new: Annotated[str, typer.Argument(help="The new session's name.", metavar="NEW", show_default=False)],
) -> None:
    """Copy a session to branch from: NEW holds its transcript, offloaded outputs and sub-agents'
    sessions as they are now; resume --session NEW "..." goes another way, NAME stays as it is.
    Refuses when NEW is taken (exit 2). A session being written is copied up to its last whole line."""
    source, target = _existing(name, ctx.obj), _unused(new, ctx.obj)
    if (sync := source.remote()) is not None:  # a session store: its objects first (UsageError if NEW is there)
        with source.writer():
            replica.copy(sync, target.remote())
        target.pull()
    else:
        _copy(source.root, target)
    print(f"forked session {name} as {new} ({target.root})", file=sys.stderr)


SKIPPED = (".lock", f"{SPOOL_PREFIX}*", ".store.json", ".list-cache.json", "*.tmp")  # a writer's, or caches rebuilt


def _copy(source: Path, session: Session) -> None:
    """Copy a session folder to ``session``'s (claimed first, owner-only): every file but :data:`SKIPPED`,
    each transcript cut after its last newline (a line being appended is not copied half)."""
    target = session.root
    try:
        target.mkdir(mode=0o700)
    except FileExistsError:
        raise _taken(session) from None
    try:
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(*SKIPPED), dirs_exist_ok=True)
        for transcript in target.rglob("transcript.jsonl"):
            data = transcript.read_bytes()
            if not data.endswith(b"\n"):
                with open(transcript, "r+b") as fh:
                    fh.truncate(data.rfind(b"\n") + 1)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


@app.command("rename")
def rename(
    ctx: typer.Context,
    old: NameArg,
    new: Annotated[str, typer.Argument(help="The new name.", metavar="NEW", show_default=False)],
) -> None:
    """Rename a session: its folder moves, nothing in it is rewritten (the header keeps the name
    it was started with; resume --session NEW continues it). Refuses while another process
    holds the session (exit 1), and when NEW is taken (exit 2)."""
    source, target = _existing(old, ctx.obj), _unused(new, ctx.obj)
    with source.writer():
        if (sync := source.remote()) is not None:  # a session store: the objects too (UsageError if NEW is there)
            replica.copy(sync, target.remote())
        try:
            target.root.mkdir(mode=0o700)  # claims the name: a second rename to it fails here
            os.rename(source.root, target.root)  # onto the empty folder just made
        except FileExistsError:
            raise _taken(target) from None
        _remove_remote(source)
    from ctxagent.lessons.hooks import rename_session

    rename_session(old, new)  # lessons keep pointing at their evidence
    print(f"renamed session {old} to {new} ({target.root})", file=sys.stderr)


@app.command("export")
def export(
    ctx: typer.Context,
    name: OptNameArg = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="jsonl: the transcript's records as stored; "
                                        "markdown: a readable transcript; openai: the messages of the next "
                                        "request (the current view) as an OpenAI messages JSON array.")]
    = Format.jsonl,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.",
                                                dir_okay=False)] = None,
) -> None:
    """Export a session's transcript (jsonl, markdown) or its current view (openai)."""
    session = pick(name, ctx.obj)
    if fmt is Format.jsonl:
        chunks = sessions_export.jsonl(session)
    elif fmt is Format.markdown:
        chunks = sessions_export.markdown(session)
    else:
        chunks = iter([sessions_export.openai_messages(session)])
    if output is None:
        for chunk in chunks:
            sys.stdout.write(chunk)
        sys.stdout.flush()
        return
    replace_whole(output, chunks)
    print(f"exported session {session.name} as {fmt.value} to {output}", file=sys.stderr)


def _unused(name: str, store_url: str | None) -> Session:
    """The session ``name`` (a NEW argument); ``UsageError`` when it exists already."""
    target = Session.at(check_name(name), store_url)
    if target.root.exists():
        raise _taken(target)
    return target


def _taken(target: Session) -> UsageError:
    return UsageError(f"a session named {target.name!r} exists already ({target.root})")


def _remove_remote(session: Session) -> None:
    """With a session store: delete ``session``'s objects from it (its writer lock held)."""
    if (sync := session.remote()) is not None:
        replica.remove(sync)


def _size(*roots: Path) -> str:
    """``N files, M bytes`` under the folders ``roots``."""
    files = [p for root in roots for p in root.rglob("*") if p.is_file()]
    return f"{len(files)} files, {sum(p.stat().st_size for p in files):,} bytes"
