"""Optional OpenTelemetry export of a run, spans named after the GenAI semantic conventions (extra
``ctxagent[otel]``; docs/usage.md, "Tracing")."""

from __future__ import annotations

import os
from typing import Any

from ctxagent.agent.events import Compacted, Event, Finished, Replied, Requesting, ToolDone, ToolStarted, Warned
from ctxagent.errors import UsageError
from ctxagent.sessions.redact import clip

CONTENT_CHARS = 4000


def enabled() -> bool:
    """Whether the user asked for tracing (the SDK may still be missing: :func:`make_tracer` says)."""
    return os.environ.get("CTXAGENT_OTEL") == "1" or bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def make_provider() -> Any:
    """A ``TracerProvider`` exporting over OTLP/HTTP (with ``opentelemetry-exporter-otlp-proto-http``), else
    to stderr as JSON. Raises ``UsageError`` when the SDK is not installed."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError as err:
        raise UsageError("tracing is on (CTXAGENT_OTEL or OTEL_EXPORTER_OTLP_ENDPOINT) but the OpenTelemetry SDK "
                         "is not installed: pip install 'ctxagent[otel]'") from err
    provider = TracerProvider(resource=Resource.create({"service.name": "ctxagent"}))
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    except ImportError:
        import sys

        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    return provider


class Tracing:
    """Turns a run's events into spans of ``provider``'s tracer, flushed when the run ends; with no
    provider (tracing off), does nothing."""

    def __init__(self, provider: Any = None):
        self.provider = provider
        self.content = os.environ.get("CTXAGENT_OTEL_CONTENT") == "1"
        self.run: Any = None
        self.chat: Any = None
        self.tools: dict[str, Any] = {}

    def start(self, session: str, model: str) -> None:
        if self.provider is None:
            return
        self.tracer = self.provider.get_tracer("ctxagent")
        self.run = self.tracer.start_span("invoke_agent ctxagent", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "ctxagent",
            "gen_ai.conversation.id": session, "gen_ai.request.model": model, "gen_ai.provider.name": _provider(model)})
        self.model = model

    def _child(self, name: str, attributes: dict[str, Any]) -> Any:
        from opentelemetry import trace

        return self.tracer.start_span(name, context=trace.set_span_in_context(self.run), attributes=attributes)

    def event(self, event: Event) -> None:
        """Open, annotate or close the span ``event`` concerns."""
        if self.run is None:
            return
        if isinstance(event, Requesting):
            self.chat = self._child(f"chat {self.model}", {"gen_ai.operation.name": "chat", "gen_ai.request.model":
                                    self.model, "ctxagent.turn": event.turn, "ctxagent.context_tokens": event.tokens,
                                    "ctxagent.context_window": event.window})
        elif isinstance(event, Replied) and self.chat is not None:
            self._replied(event, self.chat)
            self.chat = None
        elif isinstance(event, ToolStarted):
            self.tools[event.call.id] = self._child(f"execute_tool {event.call.name}", {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.call.name,
                "gen_ai.tool.call.id": event.call.id})
        elif isinstance(event, ToolDone) and (span := self.tools.pop(event.call.id, None)) is not None:
            self._tool_done(event, span)
        elif isinstance(event, Compacted):  # compactions and warnings: events of the run span
            c = event.compaction
            self.run.add_event("ctxagent.compaction", {"strategy": c.strategy, "start": c.start, "end": c.end,
                                                       "tokens_before": c.tokens_before, "tokens_after": c.tokens})
        elif isinstance(event, Warned):
            self.run.add_event("ctxagent.warning", {"source": event.source, "text": clip(event.text, CONTENT_CHARS)})
        elif isinstance(event, Finished):
            self.run.set_attribute("ctxagent.status", event.status)

    def _replied(self, event: Replied, chat: Any) -> None:
        """The chat span of a request, given the reply's usage and finish reason, then ended."""
        usage = event.reply.usage
        if usage is not None:
            chat.set_attributes({"gen_ai.usage.input_tokens": usage.prompt_tokens,
                                 "gen_ai.usage.output_tokens": usage.completion_tokens,
                                 "gen_ai.usage.cached_input_tokens": usage.cached_tokens})
        chat.set_attribute("gen_ai.response.finish_reasons", [event.reply.finish_reason or "unknown"])
        if self.content and event.reply.content:
            chat.add_event("gen_ai.assistant.message", {"content": clip(event.reply.content, CONTENT_CHARS)})
        chat.end()

    def _tool_done(self, event: ToolDone, span: Any) -> None:
        """A tool call's span, given its result's size (and the result, with content on), then ended."""
        span.set_attributes({"ctxagent.tool.is_error": event.is_error, "ctxagent.tool.result_chars":
                             len(event.content), **({"ctxagent.handle": event.handle} if event.handle else {})})
        if self.content:
            span.add_event("gen_ai.tool.message", {"content": clip(event.content, CONTENT_CHARS)})
        span.end()

    def finish(self, result: dict[str, Any]) -> None:
        """End every open span; the run span gets the run's status and usage."""
        if self.run is None:
            return
        for span in [self.chat, *self.tools.values()]:
            if span is not None:
                span.end()
        usage = result.get("usage") or {}
        self.run.set_attributes({"ctxagent.status": result.get("status", "error"),
                                 "gen_ai.usage.input_tokens": usage.get("prompt_tokens", 0),
                                 "gen_ai.usage.output_tokens": usage.get("completion_tokens", 0)})
        if result.get("error"):
            from opentelemetry.trace import Status, StatusCode

            self.run.set_status(Status(StatusCode.ERROR, clip(str(result["error"]), 500)))
        self.run.end()
        self.provider.force_flush()


def _provider(model: str) -> str:
    return model.split("/", 1)[0] if "/" in model else "openai"
