"""OpenTelemetry spans of a run (cli/tracing.py), exported to an in-memory exporter: the GenAI
semantic-convention names and attributes, parents, and message content only when asked, redacted."""

from __future__ import annotations

import pytest

from clihelp import result_of, run_cli

sdk = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@pytest.fixture
def spans(monkeypatch):
    from ctxagent.cli import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "make_provider", lambda: provider)
    monkeypatch.setenv("CTXAGENT_OTEL", "1")
    return exporter


def run(tmp_path, fake_openai):
    server = fake_openai([{"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": "seq 1 3"}}]},
                          {"content": f"done, the key was {SECRET}"}])
    profile = tmp_path / "p.yaml"
    profile.write_text("context_window: 50000\nretries: 0\npermissions: {kinds: {exec: allow}}\n", encoding="utf-8")
    out = run_cli("run", "--json", "--session", "tr", "--model", "openai/gpt-4o-mini", "--api-base",
                  server.base_url, "--profile", str(profile), "go")
    assert out.exit_code == 0, out.stdout
    return result_of(out)


def test_a_run_gives_an_agent_span_with_chat_and_tool_spans(tmp_path, fake_openai, spans):
    result = run(tmp_path, fake_openai)
    got = {s.name: s for s in spans.get_finished_spans()}
    agent, tool = got["invoke_agent ctxagent"], got["execute_tool shell"]
    chats = [s for s in spans.get_finished_spans() if s.name == "chat openai/gpt-4o-mini"]
    assert len(chats) == 2
    assert agent.attributes["gen_ai.conversation.id"] == "tr" and agent.attributes["ctxagent.status"] == "answered"
    assert agent.attributes["gen_ai.usage.input_tokens"] == result["usage"]["prompt_tokens"]
    assert all(s.parent.span_id == agent.context.span_id for s in [*chats, tool])
    assert chats[0].attributes["gen_ai.usage.input_tokens"] > 0
    assert chats[0].attributes["gen_ai.operation.name"] == "chat"
    assert tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert not any(e.name.startswith("gen_ai.") for s in spans.get_finished_spans() for e in s.events)  # no content


def test_content_only_when_asked_and_always_redacted(tmp_path, fake_openai, spans, monkeypatch):
    monkeypatch.setenv("CTXAGENT_OTEL_CONTENT", "1")
    run(tmp_path, fake_openai)
    texts = [str(e.attributes.get("content")) for s in spans.get_finished_spans() for e in s.events]
    assert any("done, the key was" in t for t in texts) and any("exit code: 0" in t for t in texts)
    assert not any(SECRET in t for t in texts)
