"""The scripted backend: assistant replies read in order from a YAML file (docs/usage.md).

A product feature for reproducible batch runs and demos, not only a test double::

    - content: "Let me look."          # optional text
      tool_calls:                      # optional
        - id: read1                    # the call id; the output's handle is @read1
          name: read_file
          arguments: {path: data.json} # a mapping (sent as JSON) or a string (sent as is)
    - content: "The answer is 42."

On resume it continues after the replies the session holds; ``complete`` raises ``ProviderError``
("script exhausted") when it runs out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml

from ctxagent.agent.model_types import Reply, ToolCall, Usage
from ctxagent.errors import ProviderError, UsageError
from ctxagent.messages import Message
from ctxagent.tokens import count_messages, count_text, count_tools


def _reply(item: Any, index: int, where: str) -> Reply:
    if isinstance(item, str):
        item = {"content": item}
    if not isinstance(item, dict):
        raise UsageError(f"{where}: reply {index + 1} must be a mapping or a string")
    calls = []
    for n, call in enumerate(item.get("tool_calls") or []):
        if not isinstance(call, dict) or "name" not in call:
            raise UsageError(f"{where}: reply {index + 1}, tool call {n + 1} needs a 'name'")
        args = call.get("arguments", {})
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        calls.append(ToolCall(str(call.get("id") or f"call_{index + 1}_{n + 1}"), str(call["name"]), text))
    content = item.get("content")
    return Reply(content=None if content is None else str(content), tool_calls=tuple(calls))


class ScriptedModel:
    """Plays the replies of a script in order, starting at reply ``start`` (0-based); usage is our own
    token counts, so budgets and reports work offline."""

    def __init__(self, replies: Sequence[Reply], *, name: str = "scripted", start: int = 0):
        self.replies = list(replies)
        self.name = name
        self.position = start

    @classmethod
    def from_file(cls, path: str, *, start: int = 0) -> ScriptedModel:
        """Load a script. Raises ``UsageError`` if the file is missing or not a YAML list."""
        try:
            with open(path, encoding="utf-8") as fh:  # a stream, so YAML errors name the file
                data = yaml.safe_load(fh)
        except (OSError, yaml.YAMLError) as err:
            raise UsageError(f"cannot read script {path}: {err}") from err
        if not isinstance(data, list):
            raise UsageError(f"{path}: a script is a YAML list of replies")
        return cls([_reply(item, i, path) for i, item in enumerate(data)], name=f"scripted:{path}", start=start)

    def price(self, prompt_tokens: int, completion_tokens: int) -> float:
        """A scripted reply costs nothing (US dollars)."""
        return 0.0

    def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> Reply:
        if self.position >= len(self.replies):
            raise ProviderError(f"script exhausted: {self.name} has {len(self.replies)} replies and all were used")
        reply = self.replies[self.position]
        self.position += 1
        prompt = count_messages(messages) + count_tools(tools)
        usage = Usage(prompt_tokens=prompt, completion_tokens=count_text(reply.content or ""), cost_usd=0.0)
        return Reply(reply.content, reply.tool_calls, usage, "tool_calls" if reply.tool_calls else "stop")
