"""Slash commands of an interactive run: ``/help``, ``/context``, ``/compact``, ``/pin FACT``,
``/cost``, ``/exit``. A line that starts with ``//`` is sent as a message starting with ``/``."""

from __future__ import annotations

from typing import Any

from ctxagent.cli.console import Console, escape
from ctxagent.cli.context_cmd import show
from ctxagent.cli.sessions_export import usd

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
    if line.partition(" ")[0] == "/exit":
        return EXIT
    _act(line, runner, renderer)
    return None


def _act(line: str, runner: Any, renderer: Any) -> None:
    """Carry out the command ``line`` (not /exit)."""
    command, _, rest = line.partition(" ")
    rest = rest.strip()
    out = Console(highlight=False)
    match command:
        case "/help":
            for name, text in HELP.items():
                out.print(f"  [bold]{escape(name)}[/bold]  {escape(text)}")
        case "/context":
            show(runner.session, runner.path, json_out=False)
        case "/compact":
            events = list(runner.compact())
            for event in events:
                renderer.event(event)
            if not events:
                out.print("nothing to compact: every step of the pipeline keeps the context as it is (under its "
                          "target)")
        case "/pin" if rest:
            runner.pin(rest)
            out.print(f"pinned: {escape(rest)}")
        case "/cost":
            for scope, spend in runner.spend().items():
                out.print(f"  {scope}: {spend['calls']} calls, {spend['prompt_tokens']:,} input tokens "
                          f"({spend['cached_tokens']:,} cached), {spend['completion_tokens']:,} output tokens, "
                          f"{usd(spend['cost_usd'])}")
        case _:
            out.print(f"unknown command {escape(line)!r}: /help lists them (start with // to send a message "
                      "that starts with /)")
