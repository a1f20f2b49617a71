"""``dedupe``: a repeated tool result points at the earlier one; a repeated call is flagged.

Source of the rule (DESIGN.md, "Knowledge"): conversation history and retrieval injections
compound if nobody manages them; pointer memory lets the model see a handle instead of a value;
an agent that repeats a call is asking again for what it was already given.

A result whose text equals an earlier original result's (whitespace collapsed, case kept) becomes
``[same result as turn T, handle H]``; a result of a call repeated exactly (same tool, same
canonical JSON arguments) is flagged ``[this call was already made at turn T; its result is handle
H]``, before the reference or before the result, kept in full. A reference is made only when it is
smaller, and only in results not yet sent (PREFIX); the earlier and the replaced originals are
offloaded, so both handles resolve.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field

from ctxagent.messages import content_of
from ctxagent.strategies.base import Entry, EntryMemo, Outcome, Scan, StrategyContext
from ctxagent.strategies.common import (
    canonical_call,
    follow_calls,
    handle_of,
    replaced,
    shrunk,
)
from ctxagent.strategies.step import Count, StrategyConfig


class DedupeStep(StrategyConfig):
    """``dedupe``: a tool result identical to an earlier one replaced by a reference to it."""

    batched: ClassVar[bool] = True
    strategy: Literal["dedupe"] = "dedupe"
    min_tokens: Count = Field(20, description="tokens a result must exceed to be replaced by a reference")

    def apply(self, view: list[Entry], ctx: StrategyContext, scan: Scan | None = None) -> Outcome:
        scan = scan or Scan()
        state = scan.fold(view, (self.min_tokens, ctx.pins, ctx.model), _State,
                          lambda state, index, entry: self._fold(state, index, entry, ctx, scan.memo))
        found = [r for r in state.replaced if view[r[0]].start >= ctx.free_from]
        if not found:
            return Outcome(view)
        out = list(view)
        referenced: dict[tuple[int, int], Entry] = {}
        for index, new, used in found:
            out[index] = new
            # the replaced original is stored too: its own handle, named wherever it is later dropped, resolves
            referenced.update(((e.start, e.end), e) for e in (*used, view[index]) if not e.offloaded)
        return Outcome(out, [], list(referenced.values()))

    def _fold(self, state: _State, index: int, entry: Entry, ctx: StrategyContext, memo: EntryMemo) -> None:
        """Fold one entry: an original result not yet sent that repeats an earlier one gets its replacement."""
        state.calls, call = follow_calls(state.calls, entry)
        if entry.role != "tool" or entry.kind != "message":
            return
        norm, key = memo.get(entry, "keys", lambda: self._keys(entry, call), (call,))
        if entry.start >= ctx.free_from:
            same_text = state.by_text.get(norm) if entry.tokens > self.min_tokens else None
            same_call = state.by_call.get(key) if key is not None else None
            if same_text is not None or same_call is not None:
                new, flags = memo.get(entry, (ctx.pins, ctx.model),
                                      lambda: self._replacement(entry, same_text, same_call, ctx),
                                      (same_text, same_call))
                if new is not None:
                    used = [e for e, flag in zip((same_text, same_call), flags, strict=True) if flag and e is not None]
                    state.replaced.append((index, new, used))
                    return
        state.by_text.setdefault(norm, entry)
        if key is not None:
            state.by_call.setdefault(key, entry)

    @staticmethod
    def _keys(entry: Entry, call: dict[str, Any] | None) -> tuple[str, tuple[str, str] | None]:
        """The normalized text of a result (white space collapsed) and its call's canonical key."""
        return " ".join(content_of(entry.message).split()), canonical_call(call) if call is not None else None

    def _replacement(self, entry: Entry, same_text: Entry | None, same_call: Entry | None,
                     ctx: StrategyContext) -> tuple[Entry | None, tuple[bool, bool]]:
        """The entry that replaces result ``entry`` (None: keep it), and which earlier results it names."""
        flag = ""
        if same_call is not None:
            flag = (f"[this call was already made at turn {same_call.turn}; its result is handle "
                    f"{handle_of(same_call)}]")
        content = content_of(entry.message)
        if same_text is not None:
            reference = f"[same result as turn {same_text.turn}, handle {handle_of(same_text)}]"
            if (new := shrunk(entry, f"{flag} {reference}".strip(), ctx, self.strategy)) is not None:
                return new, (True, same_call is not None)
        if same_call is not None:
            return replaced(entry, f"{flag}\n{content}", ctx, self.strategy), (False, True)
        return None, (False, False)


@dataclass
class _State:
    """What dedupe folds: the first original result of each text and call, and the replacements made."""

    by_text: dict[str, Entry] = field(default_factory=dict)
    by_call: dict[tuple[str, str], Entry] = field(default_factory=dict)
    replaced: list[tuple[int, Entry, list[Entry]]] = field(default_factory=list)
    calls: dict[Any, dict[str, Any]] = field(default_factory=dict)  # the current assistant's calls by id
