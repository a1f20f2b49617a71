"""Rendering the runner's events: plain stdout/stderr for scripts (batch: the answer or the ``--json``
object on stdout, progress on stderr, never rich), rich for people (cli/interactive.py).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from ctxagent.agent.events import Compacted, Event, Finished, Requesting, ToolDone, ToolStarted, Warned
from ctxagent.errors import CtxagentError
from ctxagent.messages import one_line
from ctxagent.sessions.redact import default
from ctxagent.sessions.session import Session
from ctxagent.sessions.store import SPOOL_PREFIX
from ctxagent.tools.base import ERROR_PREFIX


def describe(event: Event) -> str | None:
    """A one-line, plain-text description of a progress event (None: nothing to say)."""
    if isinstance(event, Compacted):
        c = event.compaction
        return f"compacted: {c.strategy} replaced messages {c.start}-{c.end} ({c.tokens_before} -> {c.tokens} tokens)"
    if isinstance(event, Requesting):
        same = f", {event.same} as last time" if event.same else ""
        return (f"turn {event.turn}: asking the model ({event.prompt:,} prompt tokens + {event.reserved:,} reserved "
                f"for the reply, of a {event.window:,}-token window; {event.messages} messages{same})")
    if isinstance(event, Warned):
        return f"warning: {event.source}: {event.text}"
    if isinstance(event, ToolDone):
        where = f" -> stored as {event.handle}" if event.handle else ""
        status = "denied" if event.denied else "error" if event.is_error else \
            "timed out" if event.content.startswith("timed out") else "ok"
        reason = one_line(default().text(reason_of(event)), REASON_CHARS) if event.is_error else ""
        why = f" {reason.removeprefix('denied ')}" if reason.startswith("denied ") else f": {reason}" if reason else ""
        return f"  tool {event.call.name}({one_line(default().text(event.call.arguments), 80)}) {status}{why}{where}"
    return None


REASON_CHARS = 200  # characters of a refused or failed call's reason in its progress line at most


def reason_of(event: ToolDone) -> str:
    """Why a call was refused or failed: its result without the ``ERROR:`` prefix the model reads."""
    return event.content.removeprefix(ERROR_PREFIX)


def denial_of(event: ToolDone) -> dict[str, Any]:
    """A refused call as ``--json`` lists it under ``permission_denials``: ``claude -p``'s keys (``tool_name``,
    ``tool_use_id``, ``tool_input``: the arguments, as text when not JSON) and the refusing policy's ``reason``."""
    try:
        arguments: Any = json.loads(event.call.arguments) if event.call.arguments.strip() else {}
    except ValueError:
        arguments = event.call.arguments
    return {"tool_name": event.call.name, "tool_use_id": event.call.id, "tool_input": default().value(arguments),
            "reason": default().text(reason_of(event))}


def heartbeat_s() -> float:
    """Seconds between two "still running" lines of a long tool call in batch mode (``CTXAGENT_HEARTBEAT_S``)."""
    try:
        return max(0.2, float(os.environ.get("CTXAGENT_HEARTBEAT_S", "15")))
    except ValueError:
        return 15.0


def spooled_bytes(folder: Path) -> int:
    """Bytes a running tool has streamed to its spool file so far (the newest in ``folder``; 0 if none)."""
    try:
        spools = [p.stat() for p in folder.iterdir() if p.name.startswith(SPOOL_PREFIX)]
    except OSError:
        return 0
    return max(spools, key=lambda st: st.st_mtime).st_size if spools else 0


class Ticker:
    """While a tool runs: ``tick(seconds elapsed, bytes of output so far)`` every ``every_s`` seconds, from a
    daemon thread, until :meth:`stop`. The bytes never go down (a tick after the spool was adopted finds none)."""

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
    from ctxagent.cli.console import decimal  # rich: only for people (a batch run never loads it)

    return decimal(n)


_DROPPED = dict.fromkeys((7, 8, 11, 12, 13))  # bell, backspace, vertical tab, form feed, carriage return


class PlainErr:
    """Lines on stderr for batch mode, as rich printed them there before (control codes dropped, tabs
    expanded), without rich's import or its emoji codes (``:smile:`` in an error stays as it is)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the heartbeat ticker prints from its own thread

    def print(self, text: str) -> None:
        line = text.translate(_DROPPED).expandtabs(8) + "\n"
        with self._lock:
            sys.stderr.write(line)
            sys.stderr.flush()


class Renderer(Protocol):
    """What ``run`` draws the session with (:class:`BatchRenderer`, cli/interactive.py, cli/stream.py)."""

    answer: str | None

    def start(self, session: Session, runner: Any) -> None: ...
    def event(self, event: Event) -> None: ...
    def ask(self) -> str | None: ...
    def note(self, text: str) -> None: ...  # progress, not an error
    def error(self, err: CtxagentError) -> None: ...
    def interrupted(self, session: Session) -> None: ...
    def finish(self, result: dict[str, Any]) -> None: ...
    def goes_on(self, err: BaseException) -> bool: ...  # after err (Ctrl-C, --max-turns) ended a turn
    def learning(self, asks_model: bool) -> AbstractContextManager[object]: ...  # shown while lessons are learned


class BatchRenderer:
    """Scripts: progress to stderr, the answer (or JSON) to stdout, never a prompt. ``quiet``: nothing on
    stderr but errors (warnings still in the JSON)."""

    def __init__(self, json_out: bool, quiet: bool = False):
        self.json_out = json_out
        self.quiet = quiet
        self.answer: str | None = None
        self.warnings: list[str] = []  # said on stderr as they come, and in the --json object
        self.denials: list[dict[str, Any]] = []  # calls the permission gate refused (--json: permission_denials)
        self.err = PlainErr()
        self.ticker: Ticker | None = None
        self.outputs = Path(".")

    def start(self, session: Session, runner: Any) -> None:
        self.outputs = session.root / "outputs"
        self.note(f"session {session.name} ({session.root})")

    def note(self, text: str) -> None:
        if not self.quiet:
            self.err.print(text)

    def goes_on(self, err: BaseException) -> bool:
        return False  # a script's run ends where its turn ends

    @contextmanager
    def learning(self, asks_model: bool) -> Iterator[None]:
        if asks_model:
            self.note("lessons: asking the model what this session teaches (after the answer; Ctrl-C skips)")
        yield

    def _stop_ticker(self) -> None:
        if self.ticker is not None:
            self.ticker.stop()
            self.ticker = None

    def event(self, event: Event) -> None:
        self._stop_ticker()
        if isinstance(event, ToolStarted) and not self.quiet:  # a heartbeat on stderr while a long tool runs
            name = event.call.name
            self.ticker = Ticker(heartbeat_s(), lambda s, n: self.err.print(
                f"  tool {name} still running: {s:.0f} s, {size_text(n)} of output so far"), self.outputs)
        if isinstance(event, Finished):
            self.answer = event.answer
        elif isinstance(event, ToolDone) and event.denied:
            self.denials.append(denial_of(event))
        elif isinstance(event, Warned):
            self.warnings.append(f"{event.source}: {event.text}")
        line = describe(event)
        if line:
            self.note(line)

    def ask(self) -> str | None:
        return None

    def error(self, err: CtxagentError) -> None:
        self._stop_ticker()
        self.err.print(f"ctxagent: error: {err}")

    def interrupted(self, session: Session) -> None:
        self._stop_ticker()
        self.err.print(f"interrupted; 'ctxagent resume --session {session.name}' continues")

    def finish(self, result: dict[str, Any]) -> None:
        """The answer (or the ``--json`` object) on stdout, redacted as the transcript is."""
        if self.json_out:
            self._emit({**result, "warnings": self.warnings, "permission_denials": self.denials})
        elif result.get("answer") is not None:
            print(default().text(result["answer"]), flush=True)

    @staticmethod
    def _emit(data: dict[str, Any]) -> None:
        """One JSON object on stdout, every string in it redacted as the transcript is."""
        print(json.dumps(default().value(data), ensure_ascii=False), flush=True)
