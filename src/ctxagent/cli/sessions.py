"""``ctxagent sessions list``: every session, newest first."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ctxagent.sessions.session import list_facts, list_sessions

app = typer.Typer(help="List sessions.", no_args_is_help=True, rich_markup_mode=None)


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


@app.command("list")
def list_(json_out: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False) -> None:
    """Sessions with their creation time, turns, tokens and status (running while a process holds
    the session's lock; interrupted when a run stopped without an end record), newest first."""
    rows = []
    for session in list_sessions():
        facts = list_facts(session)  # header, tail and cached totals: never the whole transcript
        rows.append({"name": session.name, **facts})
    if json_out:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
        return
    table = Table("session", "created", "turns", "tokens", "status", "model")
    for row in rows:
        table.add_row(row["name"], _when(row["created"]), str(row["turns"]), str(row["tokens"]),
                      row["status"], row["model"] or "-")
    Console().print(table)
