"""Slash commands of an interactive run: ``/help``, ``/context``, ``/compact``, ``/pin FACT``,
``/cost``, ``/exit``. A line that starts with ``//`` is sent as a message starting with ``/``."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from ctxagent.cli.console import Console

HELP = {
    "/help": "this list",
    "/context": "the next request: its messages, tokens, budget and compactions (as 'inspect context')",
    "/compact": "run the interactive pipeline now, every step as if over its trigger",
    "/pin FACT": "keep FACT verbatim in every later request",
    "/cost": "tokens, cached tokens and cost of this run and of the session",
    "/exit": "end the run (the session stays resumable)",
}
EXIT = object()  # what :func:`handle` returns for /exit


def handle(line: str, runner: Any, renderer: Any) -> str | object | None:
    """Act on ``line``: the message to send (a plain line, or ``//x`` as ``/x``), :data:`EXIT`, or
    None when the line was a command done here (ask again)."""
    if not line.startswith("/"):
        return line
    if line.startswith("//"):
        return line[1:]
    command, _, rest = line.partition(" ")
    out = Console(highlight=False)
    if command == "/exit":
        return EXIT
    if command == "/help":
        for name, text in HELP.items():
            out.print(f"  [bold]{escape(name)}[/bold]  {escape(text)}")
    elif command == "/context":
        from ctxagent.cli.context_cmd import show

        show(runner.session, runner.path, json_out=False)
    elif command == "/compact":
        events = list(runner.compact())
        for event in events:
            renderer.event(event)
        if not events:
            out.print("nothing to compact: every step of the pipeline keeps the context as it is (under its target)")
    elif command == "/pin" and rest.strip():
        runner.pin(rest.strip())
        out.print(f"pinned: {escape(rest.strip())}")
    elif command == "/cost":
        for scope, spend in runner.spend().items():
            cost = "-" if spend["cost_usd"] is None else f"${spend['cost_usd']:.4f}"
            out.print(f"  {scope}: {spend['calls']} calls, {spend['prompt_tokens']:,} input tokens "
                      f"({spend['cached_tokens']:,} cached), {spend['completion_tokens']:,} output tokens, {cost}")
    else:
        out.print(f"unknown command {escape(line)!r}: /help lists them (start with // to send a message "
                  "that starts with /)")
    return None
