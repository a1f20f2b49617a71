"""Tools whose effect is on the context, not the world: ``pin``, ``checkpoint`` and ``delegate``.

They only acknowledge (``delegate`` refuses): the runner reads their calls from the transcript and
starts a delegate's sub-agent (agent/delegate.py). ``pin`` adds a fact to the pinned facts every view
carries verbatim (DESIGN.md, HEAD); a ``checkpoint`` call's arguments become the checkpoint the
``checkpoint`` strategy starts the next phase from.
"""

from __future__ import annotations

from typing import Any

from ctxagent.tools.base import Tool, ToolContext, ToolError
from ctxagent.tools.signature import function_tool


def _pin(ctx: ToolContext, fact: str) -> str:
    """Acknowledge a pinned fact (the runner reads it from the transcript).

    Args:
        fact: the fact, with its exact values
    """
    if not fact.strip():
        raise ToolError("pin needs a non-empty fact")
    return f"pinned: {fact.strip()} (kept verbatim in every later request)"


def _checkpoint(ctx: ToolContext, **fields: Any) -> str:
    return ("checkpoint saved; older messages will be replaced in your context by it "
            f"({', '.join(sorted(k for k, v in fields.items() if v))})")


PIN = function_tool(_pin, name="pin", description=(
    "Pin a fact (an exact value you must not lose: a path, an id, a number, a decision) so "
    "it stays verbatim in your context for the rest of the session, whatever is compacted."))


def _delegate(ctx: ToolContext, task: str, max_cost_usd: float | None = None,
              max_input_tokens: int | None = None) -> str:
    """Refuse: the runner answers delegate calls (it starts the sub-agent).

    Args:
        task: the assignment: what to do and what to return
        max_cost_usd: the sub-agent's budget in US dollars (from yours)
        max_input_tokens: the sub-agent's budget in prompt tokens
    """
    raise ToolError("delegate runs only inside a ctxagent run (the runner starts the sub-agent)")


DELEGATE = function_tool(
    _delegate, name="delegate",
    description=("Hand a self-contained task to a sub-agent, which works in its own context with the same tools "
                 "and returns its answer. Keep the task short (a few hundred tokens at most): pass large inputs "
                 "as handles (@abc), which the sub-agent can read. A long answer comes back as a preview and "
                 "a handle. Several delegate calls in one reply run at the same time."),
    resolve_handles=False,  # handles in the task are pointers the sub-agent reads, not values to paste
)


def context_tools(strategy_names: list[str]) -> list[Tool]:
    """The context tools a pipeline brings: ``checkpoint``, with the schema the ``checkpoint`` strategy
    reads its arguments by, when it uses that strategy. (``pin`` is a built-in tool a profile lists.)"""
    if "checkpoint" not in strategy_names:
        return []
    from ctxagent.strategies.checkpoint import CHECKPOINT_TOOL_SCHEMA

    function = CHECKPOINT_TOOL_SCHEMA["function"]
    return [Tool(name=function["name"], description=function["description"], parameters=function["parameters"],
                 fn=_checkpoint)]
