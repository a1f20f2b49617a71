"""``--output-format stream-json``: one JSON event per line on stdout as the run goes (docs/batch.md).

Shaped as Codex (``exec --json``) and Claude Code (``stream-json``) users parse; the schema of every
event is ``src/ctxagent/cli/events.schema.json``. A tool result event carries what the model saw (cut
to :data:`CONTENT_CHARS`), never an offloaded value; every string is redacted as the transcript is.
"""

from __future__ import annotations

import sys
from typing import Any

from ctxagent.agent.events import Compacted, Event, Finished, Replied, Requesting, ToolDone, ToolStarted, Warned
from ctxagent.cli.render import BatchRenderer
from ctxagent.sessions.redact import clip
from ctxagent.sessions.session import Session

CONTENT_CHARS = 2000  # characters of a message or tool result shown in an event at most


def _cut(text: str) -> dict[str, Any]:
    """``text`` redacted, then cut to :data:`CONTENT_CHARS` (a key cut first keeps its first characters)."""
    return {"text": clip(text, CONTENT_CHARS), "chars": len(text), "truncated": len(text) > CONTENT_CHARS}


def event_of(event: Event) -> list[dict[str, Any]]:
    """The stream events of one runner event (a reply gives its message and its turn's usage)."""
    if isinstance(event, Requesting):
        return [{"type": "turn.started", "turn": event.turn, "context_tokens": event.tokens,
                 "prompt_tokens": event.prompt, "reserved_tokens": event.reserved,
                 "context_window": event.window, "messages": event.messages, "same_prefix": event.same}]
    if isinstance(event, Replied):
        reply, usage = event.reply, event.reply.usage
        return [{"type": "item.completed", "item": {
            "type": "assistant_message", "turn": event.turn, **_cut(reply.content or ""),
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": clip(c.arguments, CONTENT_CHARS)}
                           for c in reply.tool_calls]}},
                {"type": "turn.completed", "turn": event.turn, "finish_reason": reply.finish_reason,
                 "usage": None if usage is None else {
                     "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                     "cached_tokens": usage.cached_tokens, "cost_usd": usage.cost_usd}}]
    if isinstance(event, ToolStarted):
        return [{"type": "item.started", "item": {"type": "tool_call", "id": event.call.id, "name": event.call.name}}]
    if isinstance(event, ToolDone):
        return [{"type": "item.completed", "item": {
            "type": "tool_result", "call_id": event.call.id, "name": event.call.name, "is_error": event.is_error,
            "denied": event.denied, "handle": event.handle, **_cut(event.content)}}]
    if isinstance(event, Compacted):
        c = event.compaction
        return [{"type": "compaction", "strategy": c.strategy, "start": c.start, "end": c.end,
                 "tokens_before": c.tokens_before, "tokens_after": c.tokens}]
    if isinstance(event, Warned):
        return [{"type": "warning", "source": event.source, "text": event.text}]
    if isinstance(event, Finished):
        return [{"type": "run.finished", "status": event.status, "turn": event.turns}]
    return []


class StreamRenderer(BatchRenderer):
    """Programs reading events: JSON lines on stdout, progress on stderr. ``interactive``: after each answer
    the next message is read from the terminal and emitted as a ``user_message`` item."""

    def __init__(self, interactive: bool = False, quiet: bool = False) -> None:
        super().__init__(json_out=True, quiet=quiet)
        self.interactive = interactive

    def ask(self) -> str | None:
        if not self.interactive:
            return None
        print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line.strip():
            return None
        text = line.rstrip("\n")
        self._emit({"type": "item.completed", "item": {"type": "user_message", **_cut(text)}})
        return text

    def start(self, session: Session, runner: Any) -> None:
        super().start(session, runner)
        settings = runner.state.settings
        self._emit({"type": "session.started", "session": session.name, "model": settings.model,
                    "profile": settings.profile, "path": settings.path, "context_window": settings.context_window,
                    "tools": list(runner.toolset.tools), "resumed": runner.replies_at_start > 0})

    def event(self, event: Event) -> None:
        super().event(event)
        for data in event_of(event):
            self._emit(data)

    def finish(self, result: dict[str, Any]) -> None:
        if result.get("error"):
            self._emit({"type": "error", "status": result["status"], "message": result["error"]})
        super().finish({"type": "result", **result})
