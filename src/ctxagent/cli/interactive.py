"""The interactive renderer (cli/render.py has the batch one): rich output, a spinner while the model
works, the answer rendered as Markdown, then a prompt for the next message."""

from __future__ import annotations

import select
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from ctxagent.agent.events import Event, Finished, Replied, Requesting, ToolStarted, Warned
from ctxagent.cli.render import Ticker, describe, size_text
from ctxagent.errors import CtxagentError
from ctxagent.messages import one_line
from ctxagent.sessions.session import Session


def _waiting(timeout_s: float = 0.03) -> bool:
    """Whether more input is already waiting on stdin (the rest of a paste), on a terminal only."""
    try:
        return sys.stdin.isatty() and bool(select.select([sys.stdin], [], [], timeout_s)[0])
    except (OSError, ValueError):
        return False


class InteractiveRenderer:
    """People: rich output, a spinner while the model works, a prompt after each answer."""

    def __init__(self) -> None:
        self.out = Console()
        self.answer: str | None = None
        self.status: Status | None = None
        self.session: Session | None = None
        self.ticker: Ticker | None = None

    def start(self, session: Session, runner: Any) -> None:
        self.session = session
        self.out.print(f"[dim]session {session.name} · {runner.model_name}[/dim]")

    def _stop_spinner(self) -> None:
        if self.ticker is not None:
            self.ticker.stop()
            self.ticker = None
        if self.status is not None:
            self.status.stop()
            self.status = None

    def event(self, event: Event) -> None:
        if isinstance(event, Requesting):
            self._stop_spinner()
            self.status = self.out.status(f"turn {event.turn} · {event.tokens}/{event.window} tokens")
            self.status.start()
            return
        self._stop_spinner()
        if isinstance(event, ToolStarted):  # a live status: elapsed time, output so far
            status = self.status = self.out.status(f"running {escape(event.call.name)}")
            status.start()
            name, folder = escape(event.call.name), self.session.root / "outputs" if self.session else Path(".")
            self.ticker = Ticker(1.0, lambda s, n: status.update(f"running {name} · {s:.0f} s · {size_text(n)}"),
                                 folder)
            return
        if isinstance(event, Replied) and event.reply.tool_calls and event.reply.content:
            self.out.print(f"[italic]{escape(one_line(event.reply.content, 200))}[/italic]")
        elif isinstance(event, Finished) and event.status == "answered":
            from rich.markdown import Markdown  # 25 ms of imports: only when an answer is rendered

            self.answer = event.answer
            self.out.print(Markdown(event.answer or ""))
        elif isinstance(event, Warned):  # warnings go to stderr, as in batch mode
            Console(stderr=True).print(f"[yellow]{escape(describe(event) or '')}[/yellow]", highlight=False)
        elif (line := describe(event)) is not None:
            self.out.print(f"[dim]{escape(line)}[/dim]", highlight=False)

    def ask(self) -> str | None:
        """The next message: one line; a paste keeps all its lines (lines already waiting on stdin
        join the first); a line of three double quotes starts a block that ends at the next one.
        None at end of input or on an empty line."""
        try:
            text = self.out.input("[bold]> [/bold]")
            if text.strip() == '"""':
                return self._block()
            while _waiting():
                text += "\n" + input()
        except EOFError:
            return None
        return text if text.strip() else None

    def _block(self) -> str | None:
        lines: list[str] = []
        while (line := self.out.input("[dim]. [/dim]")).strip() != '"""':
            lines.append(line)
        return "\n".join(lines) if any(line.strip() for line in lines) else None

    def error(self, err: CtxagentError) -> None:
        self._stop_spinner()
        self.out.print(f"[red]ctxagent: error:[/red] {escape(str(err))}", highlight=False)

    def interrupted(self, session: Session) -> None:
        self._stop_spinner()
        self.out.print(f"\n[yellow]interrupted[/yellow]; 'ctxagent resume --session {session.name}' continues")

    def finish(self, result: dict[str, Any]) -> None:
        self._stop_spinner()
