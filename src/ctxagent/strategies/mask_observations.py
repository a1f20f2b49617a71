"""``mask_observations``: old tool results become a one-line stub that points at the full result.

Source of the rule (DESIGN.md, "Knowledge"; issue 3): published studies on coding agents found
observation masking as good as LLM summarization at about half the cost, with a window of ~10
turns; the tool-result lifecycle is "full while referenced, then findings only, then removed";
pointer memory lets the model see a key (a handle) instead of the value.

The newest results stay verbatim (at most ``keep``, and past the newest ``keep_tokens`` of the
window); each older one over ``min_tokens``, and every offloaded preview, becomes ``[ctxagent masked
an old tool result: shell(command=ls -la), 1,234 tokens; full result: @c12 ...]``. Masking rewrites a
message the provider has cached, so already-sent results are masked only once ``batch`` of them
qualify (or the request is over the trigger), then all at once (PREFIX; Anthropic's context editing
has ``clear_at_least`` for the same reason).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field

from ctxagent.strategies.base import Entry, EntryMemo, Outcome, Scan, StrategyContext
from ctxagent.strategies.common import (
    follow_calls,
    handle_of,
    newest_within,
    short_call,
    shrunk,
    size_of,
)
from ctxagent.strategies.step import Count, Fraction, StrategyConfig


def stub(entry: Entry, call: dict[str, Any] | None) -> str:
    """The one-line stub of a masked tool result."""
    return (f"[ctxagent masked an old tool result: {short_call(call, 80)}, {size_of(entry)} tokens; "
            f"full result: {handle_of(entry)} (read_output or grep_output)]")


@dataclass
class _State:
    """What masking folds: its tool results' indexes, and the original ones a stub shrinks (with it)."""

    results: list[int] = field(default_factory=list)
    maskable: list[tuple[int, Entry]] = field(default_factory=list)
    calls: dict[Any, dict[str, Any]] = field(default_factory=dict)  # the current assistant's calls by id


def _kept(view: list[Entry], recent: list[int], max_tokens: float) -> int:
    """How many ``recent`` results stay verbatim: the newest always, then older ones within ``max_tokens``."""
    return max(len(newest_within(recent, lambda index: view[index].tokens, max_tokens)), min(1, len(recent)))


class MaskObservationsStep(StrategyConfig):
    """``mask_observations``: old tool results replaced by a stub with their handle."""

    batched: ClassVar[bool] = True
    strategy: Literal["mask_observations"] = "mask_observations"
    keep: Count = Field(10, description="tool results (counted from the newest) kept verbatim")
    keep_tokens: Fraction = Field(0.15, description="fraction of the window those verbatim results may take")
    min_tokens: Count = Field(50, description="tokens a result must exceed to be masked (offloaded previews "
                              "always are)")
    batch: Count | None = Field(None, description="results that must qualify before any already-sent one is "
                                "masked; null: keep")

    def apply(self, view: list[Entry], ctx: StrategyContext, scan: Scan | None = None) -> Outcome:
        scan = scan or Scan()
        state = scan.fold(view, (self.min_tokens, ctx.pins, ctx.model), _State,
                          lambda state, index, entry: self._fold(state, index, entry, ctx, scan.memo))
        keep, results = self.keep, state.results
        batch = max(1, self.batch or keep or 1)
        kept = _kept(view, results[max(0, len(results) - keep):] if keep else [], self.keep_tokens * ctx.budget.window)
        boundary = results[len(results) - kept] if kept else len(view)
        masked = state.maskable[:bisect_left(state.maskable, boundary, key=lambda m: m[0])]
        if len(masked) < batch and not ctx.budget.over(view, ctx.budget.trigger):
            masked = [m for m in masked if view[m[0]].start >= ctx.free_from]
        if not masked:
            return Outcome(view)
        out = list(view)
        for index, new in masked:
            out[index] = new
        return Outcome(out, [], [view[i] for i, _ in masked if not view[i].offloaded])

    def _fold(self, state: _State, index: int, entry: Entry, ctx: StrategyContext, memo: EntryMemo) -> None:
        """Fold one entry: tool results in order, and the original ones a stub would shrink."""
        state.calls, call = follow_calls(state.calls, entry)
        if entry.role != "tool":
            return
        state.results.append(index)
        if entry.kind != "message":
            return
        new = memo.get(entry, (self.min_tokens, ctx.pins, ctx.model), lambda: self._masked(entry, call, ctx), (call,))
        if new is not None:
            state.maskable.append((index, new))

    def _masked(self, entry: Entry, call: dict[str, Any] | None, ctx: StrategyContext) -> Entry | None:
        """The stub entry, None when too small (an offloaded preview never is) or not smaller (memoized)."""
        if not entry.offloaded and entry.tokens <= self.min_tokens:
            return None
        return shrunk(entry, stub(entry, call), ctx, self.strategy)
