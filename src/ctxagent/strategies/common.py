"""Helpers the strategies share: pins, tool-call lookup, short renderings, ranges to compact (flattened
text for summarizers is in :mod:`ctxagent.strategies.rendering`). Pure functions over entries (no I/O).
Units: every ``*_tokens`` argument is tokens, every ``limit`` or ``*_chars`` argument is characters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from itertools import groupby
from typing import Any

from ctxagent.handles import base_handle
from ctxagent.messages import Message, content_of, loads_json, one_line, text_of
from ctxagent.sessions import redact
from ctxagent.strategies.base import Compaction, Entry, Outcome, StrategyContext, T, changes, groups, protected
from ctxagent.tokens import count_message, count_text

_SIZE_BEFORE_HANDLE = re.compile(r"(~?[0-9][0-9,]*) tokens; saved as @")


def pins_in(texts: Iterable[str], pins: Sequence[str]) -> list[str]:
    """The pins (in ``pins`` order, once each) that occur verbatim in any of ``texts``."""
    if not pins:
        return []
    joined = list(texts)
    return [p for p in dict.fromkeys(pins) if p and any(p in t for t in joined)]


def with_pins(content: str, removed: Iterable[str], pins: Sequence[str]) -> str:
    """``content`` plus one ``[pinned] ...`` line per pin found in ``removed`` and not in ``content``:
    how a strategy that removes text keeps every pinned fact in the view verbatim."""
    missing = [p for p in pins_in(removed, pins) if p not in content]
    return content + "".join(f"\n[pinned] {p}" for p in missing)


def keep_pins(view: Sequence[Entry], outcome: Outcome, ctx: StrategyContext) -> Outcome:
    """``outcome`` (of a strategy run on ``view``) with each compaction's note given the pinned facts its
    range removed, in the compaction and the view alike: how ``truncate``, which knows no pins, keeps them."""
    if not ctx.pins or not outcome.compactions:
        return outcome
    fixed: dict[tuple[int, int], Compaction] = {}
    for comp in outcome.compactions:
        if comp.message is None:
            continue
        removed = [text_of(e.message) for e in view if comp.start <= e.start and e.end <= comp.end]
        content = with_pins(content_of(comp.message), removed, ctx.pins)
        if content != content_of(comp.message):
            message = {**comp.message, "content": content}
            fixed[(comp.start, comp.end)] = replace(comp, message=message,
                                                    tokens=count_message(message, ctx.model))
    if not fixed:
        return outcome
    compactions = [fixed.get((c.start, c.end), c) for c in outcome.compactions]
    new_view = []
    for entry in outcome.view:
        done = fixed.get((entry.start, entry.end))
        if done is not None and done.message is not None and entry.kind == done.strategy:  # fixed: all have one
            entry = replace(entry, message=done.message, tokens=done.tokens)
        new_view.append(entry)
    return Outcome(new_view, compactions, outcome.offloads)


def calls_of_results(view: Sequence[Entry]) -> dict[int, dict[str, Any]]:
    """For each tool-result index of ``view``, its call, looked up in the preceding assistant message."""
    found: dict[int, dict[str, Any]] = {}
    calls: dict[Any, dict[str, Any]] = {}
    for index, entry in enumerate(view):
        calls, call = follow_calls(calls, entry)
        if call is not None:
            found[index] = call
    return found


def follow_calls(calls: dict[Any, dict[str, Any]], entry: Entry) -> tuple[dict[Any, dict[str, Any]],
                                                                         dict[str, Any] | None]:
    """One step of a walk over a view: ``(calls in force after entry, entry's call or None)``. An assistant
    message puts its calls (by id) in force, a tool result looks its call up there, any other ends them."""
    if entry.role == "assistant":
        return {c.get("id"): c for c in entry.message.get("tool_calls", ())}, None
    if entry.role != "tool":
        return {}, None
    return calls, calls.get(entry.message.get("tool_call_id"))


def call_name(call: dict[str, Any] | None) -> str:
    """The function name of a tool call ("?" when unknown)."""
    return str((call or {}).get("function", {}).get("name") or "?")


def call_arguments(call: dict[str, Any] | None) -> str:
    """The raw JSON arguments of a tool call ("" when unknown)."""
    return str((call or {}).get("function", {}).get("arguments") or "")


def call_args(call: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON arguments of a tool call as an object ({} when missing, not JSON or not an object)."""
    function = (call or {}).get("function")
    raw = function.get("arguments") if isinstance(function, dict) else None
    try:
        data = loads_json(raw) if isinstance(raw, str) and raw.strip() else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def cut_line(value: str, limit: int) -> str:
    """``value`` as one line of at most ``limit`` characters (:func:`~ctxagent.messages.one_line`),
    its secrets redacted first: the transcript's secret scan finds a key by its whole shape, and a
    compaction's label cut inside an ``sk-proj-...`` key kept its first 20 characters on disk (issue 31).
    Redact, then cut, as everywhere ctxagent shortens a text it stores."""
    return one_line(redact.default().text(value), limit)


def short_args(arguments: str, limit: int = 80) -> str:
    """Arguments in short: ``key=value`` pairs of the JSON object (raw text when not JSON), one line."""
    try:
        data = loads_json(arguments) if arguments.strip() else {}
    except ValueError:
        return cut_line(arguments, limit)
    if isinstance(data, dict):
        parts = (f"{key}={value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
                 for key, value in data.items())
        return cut_line(", ".join(parts), limit)
    return cut_line(json.dumps(data, ensure_ascii=False), limit)


def short_call(call: dict[str, Any] | None, limit: int = 80) -> str:
    """``name(key=value, ...)`` of a tool call, arguments cut to ``limit`` characters."""
    return f"{call_name(call)}({short_args(call_arguments(call), limit)})"


def canonical_call(call: dict[str, Any] | None) -> tuple[str, str]:
    """``(name, arguments)`` with the arguments as canonical JSON (sorted keys, no spaces) when valid."""
    raw = call_arguments(call)
    try:
        args = json.dumps(loads_json(raw), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except ValueError:
        args = raw.strip()
    return call_name(call), args


def handle_of(entry: Entry) -> str:
    """The handle that names a tool result's full text (``Entry.handle``, chosen when its record
    was written); the runner stores the original under it from :attr:`Outcome.offloads`."""
    return entry.handle or base_handle(str(entry.message.get("tool_call_id") or ""))


REFS_FRACTION = 0.05  # of the window: the handles one replacement names, at most (~6 tokens each)


def refs_of(entries: Iterable[Entry], window: int) -> tuple[str, ...]:
    """The handles of the tool results ``entries`` stand for (their own, or a replacement's ``refs``), once
    each, the newest that fit :data:`REFS_FRACTION` of the ``window`` (tokens): a note never grows with the session."""
    found: dict[str, None] = {}
    for entry in entries:
        if entry.role == "tool":
            found.setdefault(handle_of(entry), None)
        for ref in entry.refs:
            found.setdefault(ref, None)
    limit = max(20, int(REFS_FRACTION * window / 6))
    return tuple(list(found)[-limit:])


QUOTES_FRACTION = 0.1  # of the window: the user messages one replacement keeps verbatim, at most


def quotes_of(entries: Sequence[Entry], max_tokens: float, model: str = "") -> tuple[str, ...]:
    """The user messages ``entries`` hold (original ones, and those earlier replacements quoted),
    oldest first, the newest kept while they add up to at most ``max_tokens``."""
    found: list[str] = []
    for entry in entries:
        if entry.role == "user" and entry.kind == "message":
            found.append(content_of(entry.message))
        found.extend(entry.quotes)
    return tuple(newest_within(list(dict.fromkeys(found)), lambda quote: count_text(quote, model) + 2, max_tokens))


def newest_within(items: Sequence[T], cost: Callable[[T], float], limit: float) -> list[T]:
    """The newest of ``items`` (oldest first, as given) whose ``cost`` adds up to at most ``limit``."""
    total = 0.0
    for start in range(len(items), 0, -1):
        total += cost(items[start - 1])
        if total > limit:
            return list(items[start:])
    return list(items)


def quotes_block(quotes: Sequence[str]) -> str:
    """The lines a replacement of a range ends with: the user messages it removed, verbatim."""
    if not quotes:
        return ""
    return "\n[user messages of these turns, verbatim]\n" + "\n".join(f"> {q}" for q in quotes)


def handles_line(refs: Sequence[str]) -> str:
    """The line a replacement of a range ends with: the handles of the tool results it removed."""
    if not refs:
        return ""
    return "\n[full tool results of these messages, by handle (read_output, grep_output): " + " ".join(refs) + "]"


def size_of(entry: Entry) -> str:
    """The size of a tool result's full text in tokens, as shown: from an offloaded preview's own
    ``[full output: ... N tokens; saved as @...]`` line when there is one, else the entry's tokens."""
    match = _SIZE_BEFORE_HANDLE.search(content_of(entry.message))
    return match.group(1) if match else f"{entry.tokens:,}"


def replaced(entry: Entry, content: str, ctx: StrategyContext, kind: str) -> Entry:
    """A replacement of ``entry``: same message but its ``content``, same seq range, turn and handle, ``kind`` set."""
    message = {**entry.message, "content": content}
    return Entry(message, count_message(message, ctx.model), entry.start, entry.end, entry.turn, kind,
                 entry.handle, entry.offloaded)


def shrunk(entry: Entry, text: str, ctx: StrategyContext, kind: str) -> Entry | None:
    """:func:`replaced` by ``text`` and the pins of ``entry``'s content (:func:`with_pins`), or None when
    that has as many tokens as ``entry`` or more."""
    new = replaced(entry, with_pins(text, [content_of(entry.message)], ctx.pins), ctx, kind)
    return new if new.tokens < entry.tokens else None


def runs_to_compact(view: Sequence[Entry], keep_first: int, keep_last: int) -> list[list[int]]:
    """Indexes of ``view`` a range strategy may replace, as contiguous runs of whole units (PAIR holds
    whatever replaces them), oldest first. Kept: HEAD, every unit up to the task's plus the
    ``keep_first`` units after it (task setup), the last ``keep_last`` units, and a run that is only
    one earlier replacement (:func:`nothing_new`)."""
    units = groups(view)
    keep = protected(view)
    task = next((i for i, e in enumerate(view) if e.role == "user" and e.kind == "message"), None)
    anchor = task if task is not None else 0 if view and view[0].role == "system" else -1  # HEAD ends at its unit
    head_end = next((u for u, unit in enumerate(units) if anchor in unit), -1)
    first = head_end + 1 + max(0, keep_first)
    last = max(0, len(units) - max(0, keep_last))
    runs = consecutive(i for unit in units[first:last] if not keep.intersection(unit) for i in unit)
    return [run for run in runs if not nothing_new(view, run)]


def consecutive(indexes: Iterable[int]) -> list[list[int]]:
    """``indexes`` (ascending) cut into runs of consecutive numbers."""
    return [[index for _, index in run] for _, run in groupby(enumerate(indexes), lambda pair: pair[1] - pair[0])]


def replace_runs(view: list[Entry], runs: Sequence[Sequence[int]], make: Callable[[list[Entry]], Message],
                 ctx: StrategyContext, name: str, *, only_smaller: bool = False) -> Outcome:
    """Replace each run of ``view`` by the one message ``make(run entries)`` returns, followed by the run's
    user messages (:func:`quotes_block`) and handles (:func:`handles_line`), recorded as a compaction (seq
    range of the run) so replay rebuilds the same view. ``only_smaller``: a run whose replacement has as
    many tokens or more stays as it is (the view is returned itself when no run is replaced)."""
    out = list(view)
    replaced: list[list[Entry]] = []
    for indexes in reversed(runs):  # the newest first: the indexes of older runs stay valid
        run = [view[i] for i in indexes]
        refs = refs_of(run, ctx.budget.window)
        quotes = quotes_of(run, QUOTES_FRACTION * ctx.budget.window, ctx.model)
        message = make(run)
        message = {**message, "content": content_of(message) + quotes_block(quotes) + handles_line(refs)}
        tokens = count_message(message, ctx.model)
        if only_smaller and tokens >= sum(e.tokens for e in run):
            continue
        out[indexes[0]:indexes[-1] + 1] = [Entry(message, tokens, run[0].start, run[-1].end, run[-1].turn, kind=name,
                                                 refs=refs, quotes=quotes)]
        replaced.append(run)
    if not replaced:
        return Outcome(view)
    unstored = [e for run in reversed(replaced) for e in run if e.role == "tool" and e.kind == "message"
                and not e.offloaded]  # the original results, not in the output store yet
    return Outcome(out, changes(view, out, name), unstored)


def nothing_new(view: Sequence[Entry], run: Sequence[int]) -> bool:
    """Whether ``run`` is only one earlier replacement (a summary, a note): compacting it again gains nothing."""
    return len(run) == 1 and view[run[0]].kind != "message"
