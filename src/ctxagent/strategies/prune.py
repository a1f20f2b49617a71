"""``prune``: dead ends leave the view once a later attempt of the same tool succeeded.

Source of the rule (DESIGN.md, "Knowledge"): pruning removes dead-end searches once the cause is
found; a state of verified facts beats a verbatim record of failures; the session shape table
applies light pruning from 5-15 turns under 70% of the budget.

A result is dead (:func:`is_dead`) by what the tool reported first: an error, a timeout, a kill,
or a status line (:func:`status_of`), non-zero dead and zero alive whatever the output says (a
successful ``grep -r 'No such file'`` is no dead end); only without a status by its words (empty, or
short and saying "not found"). A dead result ``min_age_turns`` old is pruned once a later unit holds
a success of the same tool: a unit whose results all are becomes one note ``[ctxagent pruned dead
ends ...]`` (PAIR holds; consecutive ones share it), any other a one-line stub in its tool message
(when smaller), each naming the handle of the full result (offloaded) and keeping its pins. The
newest unit is never pruned. Run it before ``mask_observations`` (a stub no longer shows a failure).
Already-sent results are pruned only in batches of ``batch`` (PREFIX).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, Literal

from pydantic import Field

from ctxagent.messages import content_of, text_of
from ctxagent.strategies.base import Entry, EntryMemo, Outcome, Scan, StrategyContext, groups
from ctxagent.strategies.common import (
    call_name,
    consecutive,
    cut_line,
    follow_calls,
    handle_of,
    refs_of,
    short_call,
    shrunk,
    with_pins,
)
from ctxagent.strategies.step import Count, StrategyConfig
from ctxagent.tokens import count_message

_FAILED = re.compile(r"\A\s*(?:ERROR\b|timed out after|killed by signal)")
_WORDS = r"(?:exit[ _-]?(?:code|status)|return[ _-]?code)\s*(?:[:=]|\bis\b)?\s*(-?\d+)"
_BRACKET = (r"\[\s*(?:(?:command|process)\s+(?:finished|exited)\s+with\s+)?"
            r"(?:exit[ _-]?(?:code|status)|return[ _-]?code|exit)\s*[:=]?\s*(-?\d+)\s*\]")
_STATUS = re.compile(rf"\s*(?:{_WORDS}|{_BRACKET})\s*(?:[;,.(].*)?", re.IGNORECASE)  # as a first line
_STATUS_LAST = re.compile(rf"\s*{_BRACKET}\s*", re.IGNORECASE)  # as a last line: bracketed only
_NOTHING = re.compile(r"no such file|not found|no matches|0 matches|nothing found|does not exist",
                      re.IGNORECASE)


def status_of(content: str) -> int | None:
    """The exit status a tool result reports: from its first non-empty line when that is a status
    line (``exit code: 0``, ``Exit code: 1``, ``exit status 2``, ``returncode=0``, ``[exit 1]``, ...),
    else from its last when that is a bracketed one (``[Command finished with exit code 0]``: a
    bare ``exit 1`` ending a script that was read is no status); None when neither is."""
    lines = [line for line in content.splitlines() if line.strip()]
    match = (_STATUS.fullmatch(lines[0]) or _STATUS_LAST.fullmatch(lines[-1])) if lines else None
    if match is None:
        return None
    return int(next(group for group in match.groups() if group is not None))


def is_dead(entry: Entry, max_tokens: int = 200) -> bool:
    """Whether a tool result found nothing or failed (module docstring): its status first, else its words."""
    content = content_of(entry.message)
    if _FAILED.match(content):
        return True
    status = status_of(content)
    if status is not None:
        return status != 0
    if not content.strip():
        return True
    return entry.tokens <= max_tokens and bool(_NOTHING.search(content))


def first_line(entry: Entry) -> str:
    """The first non-empty line of a result (with the next one after a status line such as
    ``exit code: 0``), cut to 100 characters, or ``(empty)``."""
    lines = [line for line in content_of(entry.message).splitlines() if line.strip()]
    if not lines:
        return "(empty)"
    return cut_line(" | ".join(lines[:2]) if _STATUS.fullmatch(lines[0]) else lines[0], 100)


@dataclass
class _State:
    """What ``prune`` folds: the current unit (as :func:`groups` cuts them), the newest unit holding a
    success of each tool, and the dead original results."""

    unit: int = -1  # index of the entry that opened the current unit
    unit_calls: bool = False  # the current unit was opened by an assistant message with tool calls
    calls: dict[Any, dict[str, Any]] = field(default_factory=dict)  # the current assistant's calls by id
    success: dict[str, int] = field(default_factory=dict)
    dead: list[tuple[int, int, dict[str, Any], int]] = field(default_factory=list)  # (index, unit, call, turn)
    turn: int = 0


class PruneStep(StrategyConfig):
    """``prune``: failed calls superseded by a later success of the same tool dropped."""

    batched: ClassVar[bool] = True
    strategy: Literal["prune"] = "prune"
    min_age_turns: Count = Field(3, description="turns a dead result must be old before it is pruned")
    max_tokens: Count = Field(200, description="tokens under which a result is checked for 'not found'-style wordings")
    batch: Count = Field(3, description="dead results that must qualify before any already-sent one is pruned")

    def apply(self, view: list[Entry], ctx: StrategyContext, scan: Scan | None = None) -> Outcome:
        scan = scan or Scan()
        memo = scan.memo
        state = scan.fold(view, self.max_tokens, _State,
                          lambda state, index, entry: self._fold(state, index, entry, memo))
        now, batch = max(ctx.turn, state.turn), max(1, self.batch)
        found = [(i, unit) for i, unit, call, turn in state.dead if unit != state.unit
                 and now - turn >= self.min_age_turns and state.success.get(call_name(call), -1) > unit]
        if len(found) < batch and not ctx.budget.over(view, ctx.budget.trigger):
            found = [(i, unit) for i, unit in found if view[unit].start >= ctx.free_from]
        dead = {i for i, _ in found}
        if not dead:
            return Outcome(view)
        calls = {i: call for i, _, call, _ in state.dead if i in dead}
        whole = [u for u in groups(view) if len(u) > 1 and all(i in dead for i in u[1:])]
        out: list[Entry | None] = list(view)
        offloads: list[Entry] = []
        for run in consecutive(i for unit in whole for i in unit):
            entries = [view[i] for i in run]
            out[run[0]] = memo.get(entries[0], (ctx.pins, ctx.model), partial(self._note, entries, calls, run, ctx),
                                   tuple(entries[1:]))
            for i in run[1:]:
                out[i] = None
            offloads.extend(e for e in entries if e.role == "tool")
        in_whole = {i for u in whole for i in u}
        for index in sorted(dead - in_whole):
            entry, call = view[index], calls.get(index)
            new = memo.get(entry, (ctx.pins, ctx.model), partial(self._stub, entry, call, ctx), (call,))
            if new is not None:
                out[index] = new
                offloads.append(entry)
        view_out = [e for e in out if e is not None]
        if view_out == view:
            return Outcome(view)
        return Outcome(view_out, [], offloads)

    def _fold(self, state: _State, index: int, entry: Entry, memo: EntryMemo) -> None:
        """Fold one entry: its unit, the newest success of each tool, the dead original results."""
        state.turn = max(state.turn, entry.turn)
        if not (entry.role == "tool" and state.unit_calls):
            state.unit, state.unit_calls = index, bool(entry.message.get("tool_calls"))
        state.calls, call = follow_calls(state.calls, entry)
        if entry.role != "tool":
            return
        name = call_name(call)
        dead = memo.get(entry, ("dead", self.max_tokens), lambda: is_dead(entry, self.max_tokens))
        if not dead and entry.kind != self.strategy:
            state.success[name] = max(state.success.get(name, -1), state.unit)
        elif dead and entry.kind == "message" and call is not None:
            state.dead.append((index, state.unit, call, entry.turn))

    def _stub(self, entry: Entry, call: dict[str, Any] | None, ctx: StrategyContext) -> Entry | None:
        """The one-line stub of a dead result, or None when it would not be smaller."""
        line = (f"[ctxagent pruned dead end: {short_call(call, 60)} → {first_line(entry)}; "
                f"superseded by a later {call_name(call)} call; full result: {handle_of(entry)}]")
        return shrunk(entry, line, ctx, self.strategy)

    def _note(self, entries: list[Entry], calls: dict[int, dict[str, Any]], run: list[int],
              ctx: StrategyContext) -> Entry:
        """The user-role note entry that stands for whole pruned units (``entries``, at indexes ``run``)."""
        parts = [f"{short_call(calls.get(i), 60)} → {first_line(e)} ({handle_of(e)})"
                 for i, e in zip(run, entries, strict=True) if e.role == "tool"]
        line = "[ctxagent pruned dead ends (later attempts succeeded): " + "; ".join(parts) + "]"
        message = {"role": "user", "content": with_pins(line, (text_of(e.message) for e in entries), ctx.pins)}
        return Entry(message, count_message(message, ctx.model), entries[0].start, entries[-1].end,
                     entries[-1].turn, kind=self.strategy, refs=refs_of(entries, ctx.budget.window))
