"""The factory that picks a model backend: ``scripted:PATH`` or any litellm model string.

The shared types live in :mod:`ctxagent.agent.model_types` (re-exported here), so the dependency runs
one way: factory -> backends -> types.
"""

from __future__ import annotations

from collections.abc import Callable

from ctxagent.agent.model_types import REASONING_FIELDS, Model, Reply, ToolCall, Usage, read_usage, to_stderr

__all__ = ["REASONING_FIELDS", "Model", "Reply", "ToolCall", "Usage", "make_model", "read_usage", "to_stderr"]


def make_model(spec: str, *, api_base: str | None = None, replies_done: int = 0,
               timeout_s: float = 120.0, retries: int = 2, max_output_tokens: int | None = None,
               prompt_cache: str = "auto", max_retry_wait_s: float = 60.0, send_tool_choice: bool = True,
               temperature: float | None = None, on_retry: Callable[[str], None] | None = to_stderr) -> Model:
    """The backend for ``spec``: ``scripted:PATH`` or a litellm model string (the other arguments are
    :class:`~ctxagent.agent.litellm_backend.LiteLLMModel`'s; a scripted model ignores them).

    ``replies_done`` is how many assistant replies the session already holds (a scripted model
    resumes from there). ``on_retry`` defaults to :func:`to_stderr`: retries are never silent.
    Raises ``UsageError`` for an unreadable script, ``ValueError`` for an unknown ``prompt_cache``.
    """
    if spec.startswith("scripted:"):
        from ctxagent.agent.scripted import ScriptedModel

        return ScriptedModel.from_file(spec.removeprefix("scripted:"), start=replies_done)
    from ctxagent.agent.litellm_backend import LiteLLMModel

    return LiteLLMModel(spec, api_base=api_base, timeout_s=timeout_s, retries=retries,
                        max_output_tokens=max_output_tokens, prompt_cache=prompt_cache,
                        max_retry_wait_s=max_retry_wait_s, send_tool_choice=send_tool_choice,
                        temperature=temperature, on_retry=on_retry)
