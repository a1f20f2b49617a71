"""``settle``: the tool results of one reply are budgeted together, before they are first sent.

The rule and why (issue 34): docs/context.md, "The results of one reply are settled together". The
results never sent (``ctx.free_from`` on) become previews, largest first, until they fit under the
trigger; only over :data:`STUBS` of the window (or the trigger when higher) one-line stubs: in a
4,096-token window the trigger left ~600 tokens for messages, a 2 MB log's 545-token preview alone
became a stub, and a 1.5B model, never seeing its lines nor how to search the output, answered
``{"request_id": "ERROR"}``. Each cut is a recorded compaction (NO LOSS); results that fit are left
as they are (IDENTITY).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from ctxagent.messages import content_of
from ctxagent.strategies.base import Entry, Outcome, Scan, StrategyContext, groups, protected
from ctxagent.strategies.common import handle_of, short_call, shrunk, with_pins
from ctxagent.strategies.rendering import clip
from ctxagent.strategies.step import Count, StrategyConfig

STUBS = 0.9
"""The share of the window over which the newest results become stubs (previews stay below it)."""


class SettleStep(StrategyConfig):
    """``settle``: the newest results cut to previews, largest first, when together they do not fit."""

    strategy: Literal["settle"] = "settle"
    trigger: float | None = Field(0, ge=0, le=1, description=(
        "fraction of the window the request must be over for the step to run (default 0: every request; "
        "the check is cheap and only results never sent are edited)"))
    preview_tokens: Count = Field(400, description="tokens of head and tail a result cut to a preview keeps")

    def apply(self, view: list[Entry], ctx: StrategyContext, scan: Scan | None = None) -> Outcome:
        """Cut the newest results to previews, largest first, until they fit; see the module docstring."""
        owner, results = newest_results(view, ctx.free_from)
        if not results:
            return Outcome(view)
        fixed = [view[i] for i in sorted(protected(view) | {owner}) if i not in results]
        calls = {call.get("id"): call for call in view[owner].message.get("tool_calls") or ()}
        out = list(view)

        def fits(room: float) -> bool:
            return ctx.budget.total([*fixed, *(out[i] for i in results)]) <= room

        stored: list[int] = []
        trigger = ctx.budget.trigger
        for cut, room in (("preview", ctx.budget.window * trigger), ("stub", ctx.budget.window * max(trigger, STUBS))):
            for index in sorted(results, key=lambda i: (-out[i].tokens, i)):
                if fits(room):
                    break
                call = calls.get(view[index].message.get("tool_call_id"))
                if (new := self._cut(cut, view[index], out[index], call, ctx)) is not None:
                    out[index] = new
                    if not view[index].offloaded and view[index].kind == "message" and index not in stored:
                        stored.append(index)  # the original goes to the output store: its handle resolves
        if all(a is b for a, b in zip(out, view, strict=True)):
            return Outcome(view)  # IDENTITY (also for previews that fit the window, over the trigger)
        return Outcome(out, offloads=[view[i] for i in stored])

    def _cut(self, cut: str, original: Entry, entry: Entry, call: dict[str, Any] | None,
             ctx: StrategyContext) -> Entry | None:
        """``entry`` (``original``, the result of ``call``, as cut so far) made a ``preview`` or a ``stub``;
        None when that would not shrink it (a preview of a preview)."""
        if cut == "preview" and (entry.offloaded or entry.kind != "message"):
            return None  # already a preview
        text = (preview(original, self.preview_tokens, ctx.pins, ctx.model) if cut == "preview"
                else stub(original, call, ctx.pins))
        return shrunk(entry, text, ctx, self.strategy)  # the text holds the original's pins, so entry's too


def newest_results(view: Sequence[Entry], free_from: int) -> tuple[int, list[int]]:
    """``(index of the assistant message, indexes of its tool results)`` of the newest unit that holds
    results, when none of them was sent yet (seq at or after ``free_from``); else ``(-1, [])``."""
    for unit in reversed(groups(view)):
        results = [i for i in unit if view[i].role == "tool"]
        if results:
            return (unit[0], results) if all(view[i].start >= free_from for i in results) else (-1, [])
    return -1, []


def preview(entry: Entry, max_tokens: int, pins: tuple[str, ...], model: str = "") -> str:
    """A tool result cut middle-out to about ``max_tokens``, then the line that names its size and
    handle (the shape of an offloaded output's line, which stubs read the size from), plus its pins."""
    content = content_of(entry.message)
    line = (f"\n[full output: {entry.tokens:,} tokens; saved as {handle_of(entry)}; cut to a preview because the "
            "results of this reply did not fit the context window together; read_output or grep_output reads it]")
    return with_pins(clip(content, max_tokens, model) + line, [content], pins)


def stub(entry: Entry, call: dict[str, object] | None, pins: tuple[str, ...]) -> str:
    """The one-line stand-in of a result when even previews do not fit."""
    line = (f"[ctxagent: the result of {short_call(call, 80)}, {entry.tokens:,} tokens; saved as {handle_of(entry)}; "
            "left out because the results of this reply did not fit the context window together; "
            "read_output or grep_output reads it]")
    return with_pins(line, [content_of(entry.message)], pins)
