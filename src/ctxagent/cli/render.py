"""Rendering the runner's events: rich for people, plain stdout/stderr for scripts.

Batch: the answer alone on stdout (or one JSON object with ``--json``); progress on stderr.
Interactive: the answer rendered as Markdown, tool calls shown compactly, a spinner while the model
works, then a prompt for the next message.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from ctxagent.agent.events import Compacted, Event, Finished, Replied, Requesting, ToolDone, Warned
from ctxagent.errors import CtxagentError
from ctxagent.messages import one_line
from ctxagent.sessions.session import Session


def describe(event: Event) -> str | None:
    """A one-line, plain-text description of a progress event (None: nothing to say)."""
    if isinstance(event, Compacted):
        c = event.compaction
        return f"compacted: {c.strategy} replaced messages {c.start}-{c.end} ({c.tokens_before} -> {c.tokens} tokens)"
    if isinstance(event, Requesting):
        same = f", {event.same} as last time" if event.same else ""
        return (f"turn {event.turn}: asking the model ({event.tokens}/{event.window} tokens, "
                f"{event.messages} messages{same})")
    if isinstance(event, Warned):
        return f"warning: {event.source}: {event.text}"
    if isinstance(event, ToolDone):
        where = f" -> stored as {event.handle}" if event.handle else ""
        status = "error" if event.is_error else "timed out" if event.content.startswith("timed out") else "ok"
        from ctxagent.sessions.redact import default as redactor  # progress ends up in CI logs

        return f"  tool {event.call.name}({one_line(redactor().text(event.call.arguments), 80)}) {status}{where}"
    return None


class Renderer(Protocol):
    answer: str | None

    def start(self, session: Session, runner: Any) -> None: ...
    def event(self, event: Event) -> None: ...
    def ask(self) -> str | None: ...
    def error(self, err: CtxagentError) -> None: ...
    def interrupted(self, session: Session) -> None: ...
    def finish(self, result: dict[str, Any]) -> None: ...


class BatchRenderer:
    """Scripts: progress to stderr, the answer (or JSON) to stdout, never a prompt."""

    def __init__(self, json_out: bool):
        self.json_out = json_out
        self.answer: str | None = None
        self.warnings: list[str] = []  # said on stderr as they come, and in the --json object
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)

    def start(self, session: Session, runner: Any) -> None:
        self.err.print(f"session {session.name} ({session.root})", markup=False)

    def event(self, event: Event) -> None:
        if isinstance(event, Finished):
            self.answer = event.answer
        elif isinstance(event, Warned):
            self.warnings.append(f"{event.source}: {event.text}")
        line = describe(event)
        if line:
            self.err.print(line, markup=False)

    def ask(self) -> str | None:
        return None

    def error(self, err: CtxagentError) -> None:
        self.err.print(f"ctxagent: error: {err}", markup=False)

    def interrupted(self, session: Session) -> None:
        self.err.print(f"interrupted; 'ctxagent resume --session {session.name}' continues", markup=False)

    def finish(self, result: dict[str, Any]) -> None:
        if self.json_out:
            print(json.dumps({**result, "warnings": self.warnings}, ensure_ascii=False), flush=True)
        elif result.get("answer") is not None:
            print(result["answer"], flush=True)


class InteractiveRenderer:
    """People: rich output, a spinner while the model works, a prompt after each answer."""

    def __init__(self) -> None:
        self.out = Console()
        self.answer: str | None = None
        self.status: Status | None = None
        self.session: Session | None = None

    def start(self, session: Session, runner: Any) -> None:
        self.session = session
        self.out.print(f"[dim]session {session.name} · {runner.model_name}[/dim]")

    def _stop_spinner(self) -> None:
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
        try:
            text = self.out.input("[bold]> [/bold]")
        except EOFError:
            return None
        return text if text.strip() else None

    def error(self, err: CtxagentError) -> None:
        self._stop_spinner()
        self.out.print(f"[red]ctxagent: error:[/red] {escape(str(err))}", highlight=False)

    def interrupted(self, session: Session) -> None:
        self._stop_spinner()
        self.out.print(f"\n[yellow]interrupted[/yellow]; 'ctxagent resume --session {session.name}' continues")

    def finish(self, result: dict[str, Any]) -> None:
        self._stop_spinner()
