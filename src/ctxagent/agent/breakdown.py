"""Where the tokens of one request go, by category: what Claude Code's ``/context`` shows, for
``inspect context`` and ``ctxagent report``. Our uncalibrated count (tiktoken, :mod:`ctxagent.tokens`):
the categories add up to :meth:`Budget.estimate` of the view (``messages`` includes the request's own
framing, :data:`ctxagent.tokens.PER_REQUEST`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxagent.strategies.base import Entry
from ctxagent.tokens import PER_REQUEST

CATEGORIES = ("system", "tools", "pins", "messages", "tool_results")
LABELS = {"system": "system prompt", "tools": "tool schemas", "pins": "pinned facts", "messages": "messages",
          "tool_results": "tool results"}


def category_of(entry: Entry) -> str:
    if entry.kind == "pins":
        return "pins"
    return {"system": "system", "tool": "tool_results"}.get(entry.role, "messages")


def breakdown(view: Sequence[Entry], tool_tokens: int) -> dict[str, int]:
    """Tokens of a request by category, every one of :data:`CATEGORIES` present (0 when empty), in
    that order: ``view`` is the request's messages, ``tool_tokens`` its tool schemas' tokens."""
    out = dict.fromkeys(CATEGORIES, 0)
    out["tools"] = tool_tokens
    out["messages"] = PER_REQUEST if view else 0
    for entry in view:
        out[category_of(entry)] += entry.tokens
    return out


def lines(parts: dict[str, int], reserved: int, window: int) -> list[str]:
    """``parts`` (:func:`breakdown`) as text lines, one per category with its share of the window,
    then the reply's reserve and what is left free: the table ``inspect context`` prints."""
    width = max(len(label) for label in [*LABELS.values(), "reserved for the reply"])
    used = sum(parts.values())
    rows = [(LABELS[key], parts[key]) for key in CATEGORIES]
    rows += [("reserved for the reply", reserved), ("free", max(0, window - used - reserved))]
    out = [f"{label:<{width}}  {tokens:>9,} tokens  {100 * tokens / window:5.1f}%" for label, tokens in rows]
    return [*out, f"{'window':<{width}}  {window:>9,} tokens"]
