"""Reading a provider's reply into a :class:`~ctxagent.agent.model.Reply`, and the outcome of each kind of bad reply.

Never imports litellm. See docs/usage.md, "Provider failures", for the bad replies and what each does.

**Reasoning is never lost (NO LOSS).** :data:`~ctxagent.agent.model.REASONING_FIELDS` are kept on the
stored assistant message as litellm expects them back: ``reasoning_content`` (DeepSeek answers HTTP 400
"Missing `reasoning_content` field" without it: api-docs.deepseek.com/guides/thinking_mode, "Tool
calls") and Anthropic's ``thinking_blocks``, signatures included (litellm 1.110.2 turns them back into
content blocks: ``litellm_core_utils/prompt_templates/factory.py``, ``anthropic_messages_pt``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from ctxagent.agent.model_types import Reply, ToolCall, Usage
from ctxagent.messages import Message, loads_json
from ctxagent.tools.base import ERROR_PREFIX

INVALID_ARGUMENTS_KEY = "invalid_json_arguments"  # wire-only wrapper of unparsable arguments (native providers)
STREAM_ENDED = "stream ended before a finish_reason"  # litellm 1.110.2's words for a stream without its end


class IncompleteReply(Exception):
    """A reply that cannot be used as it came: no choices, a cut stream, nothing in it. ``reason``: one line;
    ``retryable``: whether one more request may help (not at the output limit: it is cut again)."""

    def __init__(self, reason: str, *, retryable: bool = True, empty: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.empty = empty  # the reply came whole and said nothing (not cut, not without choices)


def _plain(value: Any) -> Any:
    """``value`` as plain JSON data (pydantic and litellm objects dumped, dicts and lists copied)."""
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def reasoning_fields(message: Any) -> dict[str, Any]:
    """The reasoning a litellm response message carries, as plain data: ``reasoning_content`` when it is
    text (an empty text too: the provider sent it), ``thinking_blocks`` when it is a non-empty list (each
    block as a dict, signature and all)."""
    found: dict[str, Any] = {}
    reasoning = getattr(message, "reasoning_content", None)
    if isinstance(reasoning, str):
        found["reasoning_content"] = reasoning
    blocks = getattr(message, "thinking_blocks", None)
    if isinstance(blocks, list | tuple) and blocks:
        found["thinking_blocks"] = [b for b in _plain(blocks) if isinstance(b, dict)]
    return found


def tool_calls(message: Any) -> tuple[ToolCall, ...]:
    """The tool calls of a litellm response message, arguments as raw JSON text (maybe invalid)."""
    calls = []
    for index, call in enumerate(getattr(message, "tool_calls", None) or []):
        fn = call.function
        args = fn.arguments if isinstance(fn.arguments, str) else json.dumps(fn.arguments or {})
        calls.append(ToolCall(str(call.id or f"call_{index + 1}"), str(fn.name or ""), args))
    return tuple(calls)


def read_reply(response: Any, usage: Usage | None, max_output_tokens: int | None = None) -> Reply:
    """Our :class:`Reply` of a litellm ``ModelResponse`` (its first choice), reasoning kept; ``usage`` is
    already read; ``max_output_tokens`` is named when the output limit cut it. Raises
    :class:`IncompleteReply` for no choices or an empty reply."""
    choices = getattr(response, "choices", None) or []
    if not choices:
        raise IncompleteReply("the reply has no choices")
    choice = choices[0]
    message = choice.message
    reply = Reply(content=message.content, tool_calls=tool_calls(message), usage=usage,
                  finish_reason=choice.finish_reason, extra=reasoning_fields(message))
    if not reply.tool_calls and not (reply.content or "").strip():
        raise _empty(reply, max_output_tokens)
    return reply


def _empty(reply: Reply, max_output_tokens: int | None) -> IncompleteReply:
    thought = " (it holds only reasoning)" if reply.extra else ""
    if reply.finish_reason == "length":
        limit = f"max_output_tokens {max_output_tokens}" if max_output_tokens else "the provider's default output limit"
        return IncompleteReply(f"the reply reached the output limit ({limit}) before any text or tool call"
                               f"{thought}; raise max_output_tokens in the profile", retryable=False)
    return IncompleteReply(f"the reply has neither text nor tool calls{thought} "
                           f"(finish_reason {reply.finish_reason!r})", empty=True)


def empty_reply(err: BaseException) -> bool:
    """Whether ``err`` (a ``ProviderError`` from a backend) was raised for a whole reply with neither
    text nor tool calls (not one cut at the output limit, cut short or without choices)."""
    return any(isinstance(e, IncompleteReply) and e.empty for e in exception_chain(err))


def read_stream(stream: Iterable[Any], build: Callable[[list[Any]], Any]) -> Any:
    """The response assembled (``build``: litellm's ``stream_chunk_builder``) from every chunk of ``stream``.
    Raises :class:`IncompleteReply` when the stream is cut (:func:`stream_cut`); other errors propagate."""
    chunks: list[Any] = []
    try:
        for chunk in stream:
            chunks.append(chunk)
    except Exception as err:
        if not stream_cut(err):
            raise
        count = f"{len(chunks)} chunk{'s' if len(chunks) != 1 else ''}"
        if any(STREAM_ENDED in str(e).lower() for e in exception_chain(err)):
            raise IncompleteReply(f"the reply stream ended after {count} without a finish_reason") from err
        raise IncompleteReply(f"the reply stream was cut after {count}: {err_words(err)}") from err
    return build(chunks)


def exception_chain(err: BaseException) -> list[BaseException]:
    """``err`` and the exceptions it was raised from, outermost first (at most 20)."""
    found: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and len(found) < 20 and all(current is not f for f in found):
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def stream_cut(err: BaseException) -> bool:
    """Whether ``err``, raised while reading a reply stream, means the stream was cut short: a dropped
    connection or litellm's "Stream ended before a finish_reason"; not a timeout nor the server's error event."""
    import httpx

    chain = exception_chain(err)
    if any(isinstance(e, httpx.TimeoutException | TimeoutError) for e in chain):
        return False
    if any(isinstance(e, httpx.RemoteProtocolError | httpx.ReadError | StopIteration) for e in chain):
        return True
    return any(STREAM_ENDED in str(e).lower() for e in chain)


def err_words(err: BaseException) -> str:
    """The innermost exception's words: what the transport saw."""
    inner = exception_chain(err)[-1]
    return " ".join(str(inner).split())[:200] or type(inner).__name__


def wire_message(message: Message, *, openai_wire: bool) -> Message:
    """``message`` as it is sent to the provider; the stored message is never changed.

    On the OpenAI wire an assistant tool call without text gets ``content: ""`` (litellm drops
    ``content: None``, and llama.cpp builds and LM Studio answer HTTP 500 to a message without
    ``content``). For providers whose messages litellm translates (``openai_wire`` False), arguments that
    are not a JSON object go as ``{"invalid_json_arguments": RAW}`` (litellm raises before sending
    otherwise, which would stop every later request), empty ones as ``{}``.
    """
    if message.get("role") != "assistant" or not message.get("tool_calls"):
        return message
    if openai_wire:
        return message if message.get("content") is not None else {**message, "content": ""}
    calls = [_parsable(call) for call in message["tool_calls"]]
    return message if all(a is b for a, b in zip(calls, message["tool_calls"], strict=True)) else {
        **message, "tool_calls": calls}


def _parsable(call: dict[str, Any]) -> dict[str, Any]:
    """``call`` whose arguments parse as a JSON object (a copy when they had to be wrapped)."""
    fn = call.get("function") or {}
    raw = fn.get("arguments")
    if not isinstance(raw, str):
        return call
    if not raw.strip():
        return {**call, "function": {**fn, "arguments": "{}"}}
    try:
        if isinstance(loads_json(raw), dict):
            return call
    except ValueError:
        pass
    return {**call, "function": {**fn, "arguments": json.dumps({INVALID_ARGUMENTS_KEY: raw}, ensure_ascii=False)}}


def cut_call_error(reply: Reply, call: ToolCall) -> str | None:
    """The error tool result (``ERROR: ...``, how to recover) for ``call`` when ``reply`` was cut at the
    output limit inside its arguments; None when it was not cut or the arguments parse."""
    if reply.finish_reason != "length":
        return None
    try:
        loads_json(call.arguments or "{}")
    except ValueError:
        return (f"{ERROR_PREFIX}the reply was cut at the output limit (finish_reason \"length\") inside the arguments "
                f"of {call.name}, so they are incomplete JSON ({len(call.arguments):,} characters arrived) and the "
                "call was not run. Make the call again with shorter arguments (write a large file in several parts).")
    return None
