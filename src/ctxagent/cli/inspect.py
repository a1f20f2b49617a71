"""``ctxagent inspect ...``: read-only views of a session (never imports litellm)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from ctxagent.cli import context_cmd, outputs_cmd
from ctxagent.cli.options import SessionOpt, keep_store, pick
from ctxagent.messages import one_line
from ctxagent.sessions import records
from ctxagent.sessions.outcome import Usage

app = typer.Typer(help="Look inside a session without changing it.", no_args_is_help=True)
app.callback()(keep_store)

JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON record per line, as stored.")]


def escape(text: str) -> str:
    """rich's markup escape, imported only when a transcript is shown."""
    from ctxagent.cli.console import escape as rich_escape

    return rich_escape(text)


def _line(rec: Any) -> str:
    """One transcript record as one line of rich markup (``inspect transcript``), by its ``kind``."""
    show = _LINES.get(getattr(rec, "kind", ""))
    return show(rec) if show is not None else escape(repr(rec))


def _header(rec: Any) -> str:
    return (f"[bold]session[/bold] {escape(rec.name)} · model {escape(rec.model)} · profile "
            f"{escape(rec.profile)} · window {rec.context_window} tokens · schema {rec.schema_version}")


def _message(rec: Any) -> str:
    msg = rec.message
    text = msg.get("content") or ""
    calls = ", ".join(f"{c['function']['name']}({one_line(c['function']['arguments'], 60)})"
                      for c in msg.get("tool_calls") or [])
    body = one_line(str(text), 160) + (f" [calls: {calls}]" if calls else "")
    who = msg.get("role", "?") + (f" {msg['tool_call_id']}" if msg.get("tool_call_id") else "")
    return f"#{rec.seq:<4} t{rec.turn:<3} [cyan]{who}[/cyan] ({rec.tokens} tok) {escape(body)}"


def _output(rec: Any) -> str:
    """An output record: a tool's offloaded output, or (no tool) a result a compaction cut, kept for its handle."""
    source = f"from {rec.tool}" if rec.tool else f"(result {rec.call_id}, kept when a compaction cut it)"
    return (f"      [magenta]output[/magenta] {rec.handle} {escape(source)}: {rec.bytes} bytes, "
            f"{rec.lines} lines, {rec.tokens} tokens -> {escape(rec.path)}")


def _compaction(rec: Any) -> str:
    return (f"      [yellow]compaction[/yellow] {rec.strategy}: messages #{rec.start}-#{rec.end} "
            f"({rec.tokens_before} -> {rec.tokens} tokens, view only; originals kept)")


def _usage(rec: Any) -> str:
    who = f" {escape(rec.model)}" if rec.model.startswith(("agent:", "summarizer:")) else ""
    return (f"      [dim]usage t{rec.turn}{who}: prompt {rec.prompt_tokens} ({rec.cached_tokens} cached, estimated "
            f"{rec.estimated_prompt_tokens}), completion {rec.completion_tokens}{_usd(rec.cost_usd)}[/dim]")


def _end(rec: Any) -> str:
    limit = f" ({rec.limit}: spent {rec.spent:.6g}, left {rec.left:.6g})" if rec.limit else ""
    wall = f" after {rec.wall_s:.1f} s" if rec.wall_s is not None else ""
    return f"      [bold]end[/bold] {rec.reason}{limit} at turn {rec.turn}{wall} {escape(one_line(rec.detail, 120))}"


def _permission(rec: Any) -> str:
    return (f"      [yellow]permission[/yellow] {escape(rec.tool)} {escape(rec.call_id)}: "
            f"{rec.decision} ({escape(rec.policy)}) {escape(one_line(rec.arguments, 80))}")


def _settings(rec: Any) -> str:
    changed = {k: v for k, v in rec.model_dump(exclude={"ts", "kind", "profile_text"}).items() if v is not None}
    return f"      [yellow]settings[/yellow] {escape(', '.join(f'{k}={v}' for k, v in changed.items()))}"


def _tools(rec: Any) -> str:
    if rec.loaded:
        return f"      [yellow]tools[/yellow] loaded by find_tools: {escape(', '.join(rec.loaded))}"
    names = ", ".join(str(t.get("name")) for t in rec.tools or [])
    return f"      [yellow]tools[/yellow] MCP server {escape(str(rec.server))}: {escape(one_line(names, 160))}"


_LINES: dict[str, Callable[[Any], str]] = {
    "session": _header, "message": _message, "output": _output, "compaction": _compaction, "usage": _usage,
    "end": _end, "permission": _permission, "settings": _settings, "tools": _tools,
    "note": lambda rec: f"      [yellow]note[/yellow] {escape(rec.source)}: {escape(one_line(rec.text, 160))}",
    "pin": lambda rec: f"      [yellow]pin[/yellow] {escape(rec.fact)}",
}
"""How ``inspect transcript`` shows each kind of record (sessions/records.py); any other kind as its repr."""


@app.command("transcript")
def transcript(ctx: typer.Context, session: SessionOpt = None, json_out: JsonOpt = False) -> None:
    """Every record of the transcript, oldest first; compactions are marked."""
    target = pick(session, ctx.obj)
    items = target.transcript.load()
    if json_out:
        for rec in items:
            print(records.dumps(rec))
        return
    from ctxagent.cli.console import Console

    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[dim]{target.transcript.path}[/dim]")
    for line in [*map(_line, items), *_spend_lines(items), *_tree(target)]:
        console.print(line)


def _usd(cost: float | None) -> str:
    return "" if cost is None else f", ${cost:.4f}"


def _spend_lines(items: list[Any]) -> list[str]:
    """Spend per run (the records up to each end record) and for the session."""
    runs: list[list[Any]] = [[]]
    for rec in items:
        if isinstance(rec, records.UsageRecord | records.EndRecord):
            runs[-1].append(rec)
        if isinstance(rec, records.EndRecord):
            runs.append([])
    runs = [r for r in runs if r]
    lines = [f"[bold]spend[/bold] run {n}: {_spent(run)}" for n, run in enumerate(runs, 1)]
    return [*lines, f"[bold]spend[/bold] session: {_spent(items)}"] if runs else []


def _spent(recs: list[Any]) -> str:
    usage = Usage()
    for rec in recs:
        if isinstance(rec, records.UsageRecord):
            usage.add(rec)
    ends = [r for r in recs if isinstance(r, records.EndRecord)]
    return (f"{usage.calls} calls, {usage.prompt_tokens:,} input tokens ({usage.cached_tokens:,} cached), "
            f"{usage.completion_tokens:,} output tokens{_usd(usage.cost_usd) if usage.priced else ''}, "
            f"{sum(e.wall_s or 0 for e in ends):.1f} s"
            + (f", ended {ends[-1].reason}" if ends else ", running or stopped without an end record"))


def _tree(session: Any, depth: int = 1) -> list[str]:
    """The sub-agent sessions under ``session``, indented by depth, each with its status and spend."""
    lines = []
    for child in session.children():
        lines.append(f"{'  ' * depth}[bold]sub-agent[/bold] {escape(child.name)}: {_spent(child.transcript.load())}")
        lines.extend(_tree(child, depth + 1))
    return lines


app.command("outputs")(outputs_cmd.outputs)
app.command("output")(outputs_cmd.output)
app.command("context")(context_cmd.context)
