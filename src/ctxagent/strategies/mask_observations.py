"""``mask_observations``: old tool results become a one-line stub that points at the full result.

Source of the rule (DESIGN.md, "Knowledge"; issue 3): published studies on coding agents found
observation masking as good as LLM summarization at about half the cost, with a window of ~10
turns; the tool-result lifecycle is "full while referenced, then findings only, then removed";
pointer memory lets the model see a key (a handle) instead of the value.

The last ``keep`` tool results stay verbatim. Each older result over ``min_tokens`` becomes
``[ctxagent masked an old tool result: shell(command=ls -la), 1,234 tokens; full result: @c12 ...]``
(the call in short, looked up in the preceding assistant message, the size, the handle). An
offloaded preview (its content names its own handle) becomes the stub whatever its size and
points at the stored file. The original entry of every other masked result goes to
``Outcome.offloads`` so the runner stores it under ``handle_for(tool_call_id)``. Pinned facts of
a masked result are kept in its stub. View-only (no compaction): recomputed on every request,
deterministic and idempotent; a view where nothing qualifies is returned unchanged (IDENTITY).

Parameters:
    keep: tool results (counted from the newest) kept verbatim; default 10.
    min_tokens: tokens a result must exceed to be masked (offloaded previews always are); default 50.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ctxagent.strategies.base import MEMO, Entry, Outcome, StrategyContext
from ctxagent.strategies.common import (
    calls_of_results,
    content_of,
    handle_of,
    replaced,
    short_call,
    size_of,
    stored_handle,
    with_pins,
)


def stub(entry: Entry, call: dict | None, pins: tuple[str, ...]) -> str:
    """The one-line stub of a masked tool result (plus ``[pinned]`` lines for its pinned facts)."""
    handle = handle_of(entry)
    line = (
        f"[ctxagent masked an old tool result: {short_call(call, 80)}, {size_of(entry)} tokens; "
        f"full result: {handle} (read_output or grep_output)]"
    )
    return with_pins(line, [content_of(entry.message)], pins)


class MaskObservations:
    """Mask old tool results; see the module docstring."""

    name = "mask_observations"
    uses_llm = False
    params: ClassVar[dict[str, Any]] = {"keep": 10, "min_tokens": 50}

    def apply(self, view: list[Entry], ctx: StrategyContext) -> Outcome:
        keep = int(ctx.params.get("keep", self.params["keep"]))
        min_tokens = int(ctx.params.get("min_tokens", self.params["min_tokens"]))
        results = [i for i, e in enumerate(view) if e.role == "tool"]
        old = results[: max(0, len(results) - keep)]
        calls = calls_of_results(view)
        out = list(view)
        offloads: list[Entry] = []
        changed = False
        for index in old:
            entry = view[index]
            if entry.kind != "message":
                continue
            call = calls.get(index)
            new, stored = MEMO.get(entry, (self.name, id(call), min_tokens, ctx.pins, ctx.model),
                                   lambda e=entry, c=call: self._masked(e, c, ctx, min_tokens))
            if new is None:
                continue
            out[index], changed = new, True
            if not stored:
                offloads.append(entry)
        return Outcome(out, [], offloads) if changed else Outcome(view)

    def _masked(self, entry: Entry, call: dict[str, Any] | None, ctx: StrategyContext,
                min_tokens: int) -> tuple[Entry | None, bool]:
        """``(stub entry or None, already stored)``: None when ``entry`` is too small to mask or
        its stub would not be smaller. One call per entry: the memo keeps the answer."""
        stored = stored_handle(entry) is not None
        if not stored and entry.tokens <= min_tokens:
            return None, stored
        new = replaced(entry, {**entry.message, "content": stub(entry, call, ctx.pins)}, ctx, self.name)
        return (new if new.tokens < entry.tokens else None), stored
