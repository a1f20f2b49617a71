"""OpenAI-format chat messages, litellm's lingua franca, and the PAIR law over lists of them.

A *message* is a plain ``dict``: ``{"role": "system"|"user"|"assistant"|"tool", "content": str|None,
"tool_calls": [...]?, "tool_call_id": str?}``. A tool call inside an assistant message is
``{"id": str, "type": "function", "function": {"name": str, "arguments": str}}`` where
``arguments`` is the raw JSON text the model produced (it may be invalid JSON).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a reply. ``arguments`` is the raw JSON text (it may be invalid)."""

    id: str
    name: str
    arguments: str


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """Build one OpenAI-format tool call; ``arguments`` is JSON text, kept byte for byte."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def loads_json(text: str | bytes) -> Any:
    """``json.loads(text)`` for text a model or a tool wrote (tool-call arguments, a reply that should
    be JSON): nesting deeper than the parser goes (``RecursionError``: ``[`` 100,000 times) is raised
    as the ``ValueError`` of any text that is no usable JSON, which every caller handles, instead of
    a traceback on every resume of the session that recorded it."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested deeper than the parser goes") from None


def call_ids(message: Message) -> list[str]:
    """The ids of the tool calls of an assistant message, in call order (empty for other roles)."""
    return [c["id"] for c in message.get("tool_calls") or []]


def pair_violations(messages: Sequence[Message]) -> list[str]:
    """Every way ``messages`` breaks the PAIR law, as readable sentences; empty when it holds.

    PAIR (DESIGN.md): each tool message answers a call of the nearest preceding assistant message
    with only tool messages between; every call has exactly one result. Strict providers (OpenAI,
    Anthropic) reject requests that break it with an HTTP 400.
    """
    problems: list[str] = []
    open_ids: list[str] = []  # calls of the current assistant message still waiting for a result
    answered: set[str] = set()
    in_group = False
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not in_group:
                problems.append(f"message {index}: tool result {call_id!r} follows no tool call")
            elif call_id in answered:
                problems.append(f"message {index}: second result for tool call {call_id!r}")
            elif call_id not in open_ids:
                problems.append(f"message {index}: tool result {call_id!r} answers no open call")
            else:
                open_ids.remove(call_id)
                answered.add(call_id)
            continue
        if open_ids:
            problems.append(f"message {index}: tool calls {open_ids} have no result")
        open_ids, answered = [], set()
        in_group = role == "assistant" and bool(message.get("tool_calls"))
        if in_group:
            open_ids = call_ids(message)
            if len(set(open_ids)) != len(open_ids):
                problems.append(f"message {index}: duplicate tool call ids {open_ids}")
    if open_ids:
        problems.append(f"end of request: tool calls {open_ids} have no result")
    return problems


def content_of(message: Message) -> str:
    """A message's content as a string (text parts joined when it is a list of parts, OpenAI multimodal format)."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def text_of(message: Message) -> str:
    """The text a message carries: its content (:func:`content_of`) plus the names and arguments of its tool calls."""
    parts = [content_of(message)]
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        parts.append(f"{fn.get('name', '')}({fn.get('arguments', '')})")
    return "\n".join(p for p in parts if p)


def one_line(value: str, limit: int) -> str:
    """``value`` with whitespace collapsed to single spaces, cut to ``limit`` characters with "…"
    (at a space when there is one in the second half, so a path or handle is not cut in two)."""
    flat = " ".join(value.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: max(0, limit - 1)]
    space = cut.rfind(" ")
    return (cut[:space] if space >= limit // 2 else cut) + "…"
