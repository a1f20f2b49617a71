"""Rendering the runner's events: rich for people, plain stdout/stderr for scripts.

Batch: the answer alone on stdout (or one JSON object with ``--json``); progress on stderr.
Interactive: the answer rendered as Markdown, tool calls shown compactly, a spinner while the model
works, then a prompt for the next message.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from ctxagent.agent.events import Compacted, Event, Finished, Replied, Requesting, ToolDone, ToolStarted, Warned
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


def heartbeat_s() -> float:
    """Seconds between two "still running" lines of a long tool call in batch mode (15;
    ``CTXAGENT_HEARTBEAT_S`` changes it)."""
    try:
        return max(0.2, float(os.environ.get("CTXAGENT_HEARTBEAT_S", "15")))
    except ValueError:
        return 15.0


def spooled_bytes(folder: Path) -> int:
    """Bytes a running tool has streamed to its spool file so far (the newest in ``folder``; 0 if none)."""
    try:
        spools = [p.stat() for p in folder.iterdir() if p.name.startswith(".spool-")]
    except OSError:
        return 0
    return max(spools, key=lambda st: st.st_mtime).st_size if spools else 0


class Ticker:
    """While a tool runs: ``tick(seconds elapsed, bytes of output so far)`` every ``every_s`` seconds,
    from a daemon thread, until :meth:`stop`. The bytes never go down: once the tool ends, its spool
    file is adopted (renamed) before the ticker is stopped, and a tick in between finds no spool."""

    def __init__(self, every_s: float, tick: Callable[[float, int], None], spool_folder: Path):
        self.every_s, self.tick, self.folder = every_s, tick, spool_folder
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="ctxagent-ticker")
        self._started = time.monotonic()
        self._thread.start()

    def _run(self) -> None:
        most = 0
        while not self._stop.wait(self.every_s):
            most = max(most, spooled_bytes(self.folder))
            self.tick(time.monotonic() - self._started, most)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1.0)


def size_text(n: int) -> str:
    """``n`` bytes as ``12.3 MB`` (decimal units, rich's)."""
    from rich.filesize import decimal

    return decimal(n)


def _waiting(timeout_s: float = 0.03) -> bool:
    """Whether more input is already waiting on stdin (the rest of a paste), on a terminal only."""
    import select
    import sys

    try:
        return sys.stdin.isatty() and bool(select.select([sys.stdin], [], [], timeout_s)[0])
    except (OSError, ValueError):
        return False


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
        self.ticker: Ticker | None = None
        self.outputs = Path(".")

    def start(self, session: Session, runner: Any) -> None:
        self.outputs = session.root / "outputs"
        self.err.print(f"session {session.name} ({session.root})", markup=False)

    def event(self, event: Event) -> None:
        if self.ticker is not None:
            self.ticker.stop()
            self.ticker = None
        if isinstance(event, ToolStarted):  # a heartbeat on stderr while a long tool runs
            name = event.call.name
            self.ticker = Ticker(heartbeat_s(), lambda s, n: self.err.print(
                f"  tool {name} still running: {s:.0f} s, {size_text(n)} of output so far", markup=False), self.outputs)
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
        if self.ticker is not None:
            self.ticker.stop()
        self.err.print(f"ctxagent: error: {err}", markup=False)

    def interrupted(self, session: Session) -> None:
        if self.ticker is not None:
            self.ticker.stop()
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
