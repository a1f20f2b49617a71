"""``ctxagent inspect ...``: read-only views of a session (never imports litellm)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from ctxagent.cli import outputs_cmd
from ctxagent.cli.options import SessionOpt, pick
from ctxagent.messages import one_line

app = typer.Typer(help="Look inside a session without changing it.", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON record per line, as stored.")]


def _line(rec: Any) -> str:
    from ctxagent.sessions import records

    if isinstance(rec, records.SessionHeader):
        return (f"[bold]session[/bold] {escape(rec.name)} · model {escape(rec.model)} · profile "
                f"{escape(rec.profile)} · window {rec.context_window} tokens · schema {rec.schema_version}")
    if isinstance(rec, records.MessageRecord):
        msg = rec.message
        text = msg.get("content") or ""
        calls = ", ".join(f"{c['function']['name']}({one_line(c['function']['arguments'], 60)})"
                          for c in msg.get("tool_calls") or [])
        body = one_line(str(text), 160) + (f" [calls: {calls}]" if calls else "")
        who = msg.get("role", "?") + (f" {msg['tool_call_id']}" if msg.get("tool_call_id") else "")
        return f"#{rec.seq:<4} t{rec.turn:<3} [cyan]{who}[/cyan] ({rec.tokens} tok) {escape(body)}"
    if isinstance(rec, records.OutputRecord):
        return (f"      [magenta]output[/magenta] {rec.handle} from {rec.tool}: {rec.bytes} bytes, "
                f"{rec.lines} lines, {rec.tokens} tokens -> {escape(rec.path)}")
    if isinstance(rec, records.CompactionRecord):
        return (f"      [yellow]compaction[/yellow] {rec.strategy}: messages #{rec.start}-#{rec.end} "
                f"({rec.tokens_before} -> {rec.tokens} tokens, view only; originals kept)")
    if isinstance(rec, records.UsageRecord):
        return (f"      [dim]usage t{rec.turn}: prompt {rec.prompt_tokens} (estimated "
                f"{rec.estimated_prompt_tokens}), completion {rec.completion_tokens}[/dim]")
    if isinstance(rec, records.EndRecord):
        return f"      [bold]end[/bold] {rec.reason} at turn {rec.turn} {escape(one_line(rec.detail, 120))}"
    if isinstance(rec, records.PermissionRecord):
        return (f"      [yellow]permission[/yellow] {escape(rec.tool)} {escape(rec.call_id)}: "
                f"{rec.decision} ({escape(rec.policy)}) {escape(one_line(rec.arguments, 80))}")
    return escape(repr(rec))


@app.command("transcript")
def transcript(session: SessionOpt = None, json_out: JsonOpt = False) -> None:
    """Every record of the transcript, oldest first; compactions are marked."""
    from ctxagent.sessions import records

    target = pick(session)
    items = target.transcript.load()
    if json_out:
        for rec in items:
            print(records.dumps(rec))
        return
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[dim]{target.transcript.path}[/dim]")
    for rec in items:
        console.print(_line(rec))



app.command("outputs")(outputs_cmd.outputs)
app.command("output")(outputs_cmd.output)
