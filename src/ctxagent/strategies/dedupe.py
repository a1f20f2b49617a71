"""``dedupe``: a repeated tool result points at the earlier one; a repeated call is flagged.

Source of the rule (DESIGN.md, "Knowledge"): conversation history and retrieval injections
compound if nobody manages them; pointer memory lets the model see a handle instead of a value;
"resumed sessions continue without asking for what they were already given" is how a strategy is
judged, and an agent that repeats a call is asking again.

A tool result whose text is identical to an earlier result's in the view, or the same once
whitespace is collapsed (case kept), becomes ``[same result as turn T, handle H]`` (H: the earlier
result's handle; the earlier original goes to ``Outcome.offloads`` so H resolves). A result of a
call repeated exactly (same tool name, same canonical JSON arguments) is flagged
``[this call was already made at turn T; its result is handle H]``: in front of the reference
when the result is also the same, else in front of the new result, which stays in full. Only
original results (not ones another strategy replaced) are compared and referenced; a reference
is made only when it is smaller than the result. Only results not yet sent (from
``ctx.free_from`` on) are replaced, so the cached prefix never changes (PREFIX); each replacement is
recorded as a compaction. Deterministic, idempotent; a view without repeats is returned unchanged.

Parameters:
    min_tokens: tokens a result must exceed to be replaced by a reference; default 20.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ctxagent.strategies.base import MEMO, Entry, Outcome, StrategyContext
from ctxagent.strategies.common import (
    calls_of_results,
    canonical_call,
    content_of,
    handle_of,
    replaced,
    stored_handle,
    with_pins,
)


class Dedupe:
    """Reference repeated tool results and flag repeated calls; see the module docstring."""

    name = "dedupe"
    uses_llm = False
    batched = True
    params: ClassVar[dict[str, Any]] = {"min_tokens": 20}

    def apply(self, view: list[Entry], ctx: StrategyContext) -> Outcome:
        min_tokens = int(ctx.params.get("min_tokens", self.params["min_tokens"]))
        calls = calls_of_results(view)
        by_text: dict[str, int] = {}
        by_call: dict[tuple[str, str], int] = {}
        out = list(view)
        referenced: list[Entry] = []
        for index, entry in enumerate(view):
            if entry.role != "tool" or entry.kind != "message":
                continue
            call = calls.get(index)
            if entry.start < ctx.free_from:  # already sent: only remembered as an earlier result
                norm, key = MEMO.get(entry, (self.name, id(call)), lambda e=entry, c=call: self._keys(e, c))
                by_text.setdefault(norm, index)
                if key is not None:
                    by_call.setdefault(key, index)
                continue
            norm, key = MEMO.get(entry, (self.name, id(call)), lambda e=entry, c=call: self._keys(e, c))
            same_text = by_text.get(norm) if entry.tokens > min_tokens else None
            same_call = by_call.get(key) if key is not None else None
            new, used = None, []
            if same_text is not None or same_call is not None:
                earlier = tuple(view[i] if i is not None else None for i in (same_text, same_call))
                new, flags = MEMO.get(entry, (self.name, *map(id, earlier), ctx.pins, ctx.model),
                                      lambda i=index, t=same_text, c=same_call: self._replacement(view, i, t, c, ctx))
                used = [i for i, flag in zip((same_text, same_call), flags, strict=True) if flag]
            if new is None:
                by_text.setdefault(norm, index)
                if key is not None:
                    by_call.setdefault(key, index)
                continue
            out[index] = new
            referenced.extend(view[i] for i in used)
        if out == view:
            return Outcome(view)
        offloads = {(e.start, e.end): e for e in referenced if stored_handle(e) is None}
        return Outcome(out, [], list(offloads.values()))

    @staticmethod
    def _keys(entry: Entry, call: dict[str, Any] | None) -> tuple[str, tuple[str, str] | None]:
        """The normalized text of a result (white space collapsed) and its call's canonical key."""
        return " ".join(content_of(entry.message).split()), canonical_call(call) if call is not None else None

    def _replacement(self, view: list[Entry], index: int, same_text: int | None, same_call: int | None,
                     ctx: StrategyContext) -> tuple[Entry | None, tuple[bool, bool]]:
        """The entry that replaces result ``index`` (None: keep it) and which of the earlier results
        (same text, same call) it names. Index-free, so it can be remembered per entry."""
        entry = view[index]
        flag = ""
        if same_call is not None:
            earlier = view[same_call]
            flag = (f"[this call was already made at turn {earlier.turn}; its result is handle "
                    f"{handle_of(earlier)}]")
        content = content_of(entry.message)
        if same_text is not None:
            earlier = view[same_text]
            reference = f"[same result as turn {earlier.turn}, handle {handle_of(earlier)}]"
            shorter = with_pins(f"{flag} {reference}".strip(), [content], ctx.pins)
            new = replaced(entry, {**entry.message, "content": shorter}, ctx, self.name)
            if new.tokens < entry.tokens:
                return new, (True, same_call is not None)
        if same_call is not None:
            message = {**entry.message, "content": f"{flag}\n{content}"}
            return replaced(entry, message, ctx, self.name), (False, True)
        return None, (False, False)
