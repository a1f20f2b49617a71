"""The interactive renderer (cli/render.py has the batch one): rich output, a spinner while the model
works, the answer rendered as Markdown, then a prompt for the next message."""

from __future__ import annotations

import select
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from ctxagent.agent.events import Event, Finished, Replied, Requesting, ToolStarted, Warned
from ctxagent.cli.console import Console, Status, escape, markdown
from ctxagent.cli.process import Interrupted
from ctxagent.cli.render import Ticker, describe, size_text
from ctxagent.errors import CtxagentError, LimitReached
from ctxagent.messages import one_line
from ctxagent.sessions.session import Session


def _waiting(timeout_s: float = 0.03) -> bool:
    """Whether more input is already waiting on stdin (the rest of a paste), on a terminal only."""
    try:
        return sys.stdin.isatty() and bool(select.select([sys.stdin], [], [], timeout_s)[0])
    except (OSError, ValueError):
        return False


QUIT_WINDOW_S = 2.0  # seconds: a second Ctrl-C within them quits the session (the first cancels the turn)


class InteractiveRenderer:
    """People: rich output, a spinner while the model works, a prompt after each answer. ``quiet``: the
    answers alone (errors and warnings still said)."""

    def __init__(self, quiet: bool = False) -> None:
        self.out = Console()
        self.quiet = quiet
        self.answer: str | None = None
        self.status: Status | None = None
        self.outputs = Path(".")  # the session's outputs folder, where a running tool spools its output
        self.ticker: Ticker | None = None
        self._interrupted_at: float | None = None  # when the last Ctrl-C came (monotonic seconds)

    def start(self, session: Session, runner: Any) -> None:
        self.outputs = session.root / "outputs"
        self.note(f"session {session.name} · {runner.model_name}")

    def note(self, text: str) -> None:
        if not self.quiet:
            self.out.print(f"[dim]{escape(text)}[/dim]", highlight=False)

    def _stop_spinner(self) -> None:
        for live in (self.ticker, self.status):
            if live is not None:
                live.stop()
        self.ticker = self.status = None

    def event(self, event: Event) -> None:
        self._stop_spinner()
        if isinstance(event, Requesting):
            self.status = self.out.status(f"turn {event.turn} · {event.prompt:,} prompt tokens + {event.reserved:,} "
                                          f"reserved for the reply · window {event.window:,}")
            self.status.start()
            return
        if isinstance(event, ToolStarted):  # a live status: elapsed time, output so far
            name = escape(event.call.name)
            status = self.status = self.out.status(f"running {name}")
            status.start()
            self.ticker = Ticker(1.0, lambda s, n: status.update(f"running {name} · {s:.0f} s · {size_text(n)}"),
                                 self.outputs)
            return
        if isinstance(event, Replied) and event.reply.tool_calls and event.reply.content:
            if not self.quiet:
                self.out.print(f"[italic]{escape(one_line(event.reply.content, 200))}[/italic]")
        elif isinstance(event, Finished) and event.status == "answered":
            self.answer = event.answer
            self.out.print(markdown(event.answer or ""))
        elif isinstance(event, Warned):  # warnings go to stderr, as in batch mode
            Console(stderr=True).print(f"[yellow]{escape(describe(event) or '')}[/yellow]", highlight=False)
        elif (line := describe(event)) is not None:
            self.note(line)

    def goes_on(self, err: BaseException) -> bool:
        """The first Ctrl-C cancels the turn and the session goes on; a second one within
        :data:`QUIT_WINDOW_S` (or SIGTERM, SIGHUP) ends it. ``--max-turns`` ends the turn only."""
        self._stop_spinner()
        if isinstance(err, LimitReached):
            self.out.print(f"[yellow]{escape(str(err).split(';')[0])}[/yellow]; send a message to go on, or /exit",
                           highlight=False)
            return True
        if not isinstance(err, KeyboardInterrupt) or isinstance(err, Interrupted) or self._second_interrupt():
            return False
        self.out.print(f"\n[yellow]cancelled[/yellow]: this turn stopped, its tools were killed (Ctrl-C again "
                       f"within {QUIT_WINDOW_S:g} s quits; /exit or Ctrl-D ends the session)", highlight=False)
        return True

    def _second_interrupt(self) -> bool:
        """Whether this Ctrl-C follows the last one within :data:`QUIT_WINDOW_S` (it is remembered either way)."""
        now, last = time.monotonic(), self._interrupted_at
        self._interrupted_at = now
        return last is not None and now - last < QUIT_WINDOW_S

    def learning(self, asks_model: bool) -> AbstractContextManager[object]:
        return self.out.status("learning lessons from this session (Ctrl-C skips)") if asks_model else nullcontext()

    def ask(self) -> str | None:
        """The next message: one line; a paste keeps all its lines (lines already waiting on stdin
        join the first); a line of three double quotes starts a block that ends at the next one.
        An empty line asks again; None at end of input (Ctrl-D). Ctrl-C at the prompt asks again,
        a second one within :data:`QUIT_WINDOW_S` raises ``KeyboardInterrupt`` (the session ends)."""
        while True:
            try:
                text = self.out.input("[bold]> [/bold]")
                if text.strip() == '"""':
                    text = self._block()
                while _waiting():
                    text += "\n" + input()
            except EOFError:
                self.out.print()
                return None
            except KeyboardInterrupt as err:
                if isinstance(err, Interrupted) or self._second_interrupt():
                    raise
                self.out.print(f"\n[dim](Ctrl-C again within {QUIT_WINDOW_S:g} s quits; /exit or Ctrl-D ends the "
                               "session)[/dim]", highlight=False)
                continue
            if text.strip():
                return text

    def _block(self) -> str:
        lines: list[str] = []
        while (line := self.out.input("[dim]. [/dim]")).strip() != '"""':
            lines.append(line)
        return "\n".join(lines)

    def error(self, err: CtxagentError) -> None:
        self._stop_spinner()
        self.out.print(f"[red]ctxagent: error:[/red] {escape(str(err))}", highlight=False)

    def interrupted(self, session: Session) -> None:
        self._stop_spinner()
        self.out.print(f"\n[yellow]interrupted[/yellow]; 'ctxagent resume --session {session.name}' continues")

    def finish(self, result: dict[str, Any]) -> None:
        self._stop_spinner()
