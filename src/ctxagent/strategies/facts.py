"""Exact values of a compacted range, copied by code so no summary can lose them.

An LLM summary may paraphrase "port 8443" as "the usual TLS port" or drop a commit hash; the
checks of :mod:`ctxagent.strategies.summarizing` cannot see that. So every LLM-written replacement
of a range ends with a block of the exact values its messages hold, found by regular expressions,
those already verbatim in the summary left out, each once under what it belongs to. The rule, its
format, its room (:data:`CARRY_FACTOR`) and what it fixed (issue 34): docs/context.md, "Exact values
survive summaries". Pure and deterministic (the block is recorded in a compaction).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxagent.messages import content_of
from ctxagent.strategies.base import Entry
from ctxagent.strategies.common import call_args, call_name, cut_line, follow_calls, handle_of, short_call
from ctxagent.strategies.rendering import label_range
from ctxagent.strategies.step import FACTS_TOKENS
from ctxagent.tokens import count_text

LINE_CHARS = 200  # characters: an error line is cut to this
LABEL_CHARS = 80  # characters of a group's label (a call in short)
HANDLES_SHOWN = 4  # handles on a group's line (a call repeated more often: the first ones, then "…")
LEFT_OUT_HANDLES = 12  # handles on the left-out line, then "and N more"
CARRY_FACTOR = 3  # the groups of earlier blocks get this many times a block's room, besides it
VALUE_INDENT = "  "
LEFT_OUT_PREFIX = "left out: "
LABEL = "[exact values from messages {range}, copied by ctxagent]"
_LABEL_START = "[exact values from messages "

_PATH_END = r"(?::\d+(?::\d+)?)?"  # an optional :line or :line:column
_EXTENSIONS = (r"(?:py|js|ts|tsx|jsx|json|ya?ml|toml|md|txt|csv|log|cfg|conf|ini|sh|go|rs|c|h|cpp|hpp|java"
               r"|kt|rb|php|html|css|sql|lock|env)")
_KINDS: tuple[tuple[int, re.Pattern[str]], ...] = (
    # (rank: lower is more specific and kept first when over the cap, pattern of the value)
    (0, re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")),  # UUID
    (0, re.compile(r"(?<![\w-])(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,64}(?![\w-])")),  # hash
    (1, re.compile(r"(?<![\w+.-])[a-zA-Z][a-zA-Z0-9+.-]{0,15}://[^\s<>\"'`)\]}]+")),  # URL
    (3, re.compile(r"(?<![\w/.:~-])(?:~|\.{1,2})?(?:/[\w.@+-]+)+/?" + _PATH_END)),  # absolute path
    (3, re.compile(r"(?<![\w/.:~@+-])(?=[\w.@+-]*[A-Za-z_])[\w.@+-]+(?:/[\w.@+-]+){2,}" + _PATH_END)),  # a/b/c
    (3, re.compile(r"(?<![\w/.:~@+-])(?:[\w.@+-]+/)*[\w-]+(?:\.[\w-]+)*\." + _EXTENSIONS + r"\b"
                   + _PATH_END)),  # a file name with a known extension, maybe in a folder
    (4, re.compile(r"(?<![\w./-])(?:localhost|\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-fA-F:]+\]"
                   r"|[A-Za-z][\w-]*(?:\.[\w-]+)+):\d{2,5}\b")),  # host:port
    (4, re.compile(r"(?i)\bport\b\s*[=:]?\s*\d{2,5}\b")),  # port N
    (6, re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*\s?(?:ms|µs|us|ns|s|sec|secs|seconds?|min|mins|minutes?|h"
                   r"|hours?|days?|%|[KMGTP]i?B|[kKMG]B|bytes?|B|tokens?|req/s|rps|qps|GHz|MHz|cores?)"
                   r"(?![\w%])")),  # a number with a unit
    (6, re.compile(r"(?<![\w.,])[$€£]\d+(?:[.,]\d+)*")),  # money
    (6, re.compile(r"(?<![\w.])v?\d+\.\d+\.\d+(?:\.\d+)?(?:[-+][\w.]+)?(?!\.?\w)")),  # a version or an IP
    (6, re.compile(r"(?i)\bexit (?:code|status)\s*[:=]?\s*-?\d+")),
    (7, re.compile(r"(?<![\w@.])@[A-Za-z0-9_-]+(?:\.[0-9]+)?(?![\w@])")),  # handle
)
_ERROR = re.compile(
    r"\b[A-Z]\w*(?:Error|Exception)\b|\bTraceback\b|\bFAIL(?:ED)?\b|\bpanic:"
    r"|(?i:\b(?:error|fatal|failed|failure|denied|refused|timed out|no such file|not found"
    r"|command not found|segmentation fault|killed)\b)"
)
_USELESS_ERROR = re.compile(r"^Traceback \(most recent call last\):?$")
_TRAILING = ".,;:!?'\""
RANK_CARRIED, RANK_ERROR = 2, 5
_PARTIAL_HANDLE = re.compile(r"@[A-Za-z0-9_./~%-]*$")
_HANDLE_IN_LINE = re.compile(r"(?<![\w@.])@[A-Za-z0-9_-]+(?:\.[0-9]+)?")
_HANDLES_AT_END = re.compile(r" \(@[A-Za-z0-9_.-]+(?: @[A-Za-z0-9_.-]+)*(?: …)?\)$")
_LEFT_COUNT = re.compile(r"(\d+) more value")


def _matches(text: str) -> Iterator[tuple[int, int, str]]:
    """``(position, rank, value)`` of each pattern match and error line of ``text``."""
    for rank, pattern in _KINDS:
        for match in pattern.finditer(text):
            value = match.group(0).rstrip(_TRAILING)
            if len(value) >= 2 and "\n" not in value:  # a block line holds one value (``\s`` spans lines)
                yield match.start(), rank, value
    position = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped and _ERROR.search(stripped) and not _USELESS_ERROR.match(stripped):
            yield position + line.index(stripped[0]), RANK_ERROR, _cut(stripped)
        position += len(line)


def _cut(line: str) -> str:
    """``line`` cut to :data:`LINE_CHARS`, never inside a handle: a cut one would name another output
    (``@call_3_0`` cut to ``@call_3``), so a handle the cut reaches is left out whole."""
    if len(line) <= LINE_CHARS:
        return line.rstrip()
    return _PARTIAL_HANDLE.sub("", line[:LINE_CHARS]).rstrip()


def values_in(text: str) -> list[tuple[int, str]]:
    """``(rank, value)`` of every exact value (a substring of ``text``) the patterns find, error lines
    included, in order of first appearance, once each with its lowest rank."""
    ranks: dict[str, int] = {}
    for _, rank, value in sorted(_matches(text), key=lambda item: item[0]):
        ranks[value] = min(rank, ranks.get(value, rank))
    return [(rank, value) for value, rank in ranks.items()]


def call_label(call: dict[str, Any] | None) -> str:
    """What a call's values belong to, in short: a shell call's command (its first line), else
    ``name(key=value, ...)``; at most :data:`LABEL_CHARS` characters."""
    if call is None or not isinstance(call.get("function"), dict):
        return "?"
    args = call_args(call)
    command = args.get("command", args.get("cmd"))
    if isinstance(command, str) and command.strip():
        return cut_line(command.strip().splitlines()[0], LABEL_CHARS)
    return short_call(call, max(10, LABEL_CHARS - len(call_name(call)) - 2))


def _call_values(call: dict[str, Any]) -> Iterator[tuple[int, str]]:
    """The exact values of the string arguments of a tool call (a shell command is its label)."""
    for key, value in call_args(call).items():
        if isinstance(value, str) and key not in ("command", "cmd"):
            yield from values_in(value)


@dataclass
class Group:
    """Exact values (``(rank, value)``, first seen first) and what they belong to: ``label`` (a call in short,
    a message; "" for an old block's bare value) and the ``handles`` of the results that hold them."""

    label: str
    handles: list[str] = field(default_factory=list)
    values: list[tuple[int, str]] = field(default_factory=list)

    def header(self) -> str:
        """The group's line: its label and the handles of its results."""
        if not self.handles:
            return self.label
        shown = " ".join(self.handles[:HANDLES_SHOWN]) + (" …" if len(self.handles) > HANDLES_SHOWN else "")
        return f"{self.label} ({shown})"


@dataclass
class LeftOut:
    """Values a block had no room for: how many, and the handles of the results that hold them."""

    count: int = 0
    handles: list[str] = field(default_factory=list)

    def add(self, count: int, handles: Sequence[str]) -> None:
        self.count += count
        self.handles.extend(h for h in handles if h not in self.handles)

    def line(self, short: bool = False) -> str:
        """The block's last line ("" when nothing was left out); ``short``: without the handles."""
        if not self.count:
            return ""
        plural = "" if self.count == 1 else "s"
        if short or not self.handles:
            holder = "the results named here by handle hold" if self.handles else "the transcript holds"
            return f"- {LEFT_OUT_PREFIX}{self.count} more value{plural}; {holder} them"
        where = " ".join(self.handles[:LEFT_OUT_HANDLES])
        if len(self.handles) > LEFT_OUT_HANDLES:
            where += f" and {len(self.handles) - LEFT_OUT_HANDLES} more"
        return f"- {LEFT_OUT_PREFIX}{self.count} more value{plural}; full results: {where} (read_output, grep_output)"


def _rank(value: str) -> int:
    """The rank of a carried value: that of the pattern that matches it whole, else :data:`RANK_CARRIED`."""
    return min((rank for rank, found in values_in(value) if found == value), default=RANK_CARRIED)


def _parse(lines: Sequence[str]) -> tuple[list[Group], LeftOut]:
    """The groups of an earlier block's lines as :func:`split_blocks` gives them (a header, then
    indented values; a header alone is one bare value of an old block) and its left-out line."""
    groups: list[Group] = []
    left = LeftOut()
    for line in lines:
        if line.startswith(VALUE_INDENT):
            if groups and groups[-1].label:
                value = line[len(VALUE_INDENT):]
                groups[-1].values.append((_rank(value), value))
        elif line.startswith(LEFT_OUT_PREFIX):
            count = _LEFT_COUNT.match(line[len(LEFT_OUT_PREFIX):])
            left.add(int(count.group(1)) if count else 0, _HANDLE_IN_LINE.findall(line))
        else:
            handles = _HANDLES_AT_END.search(line)
            label = line[:handles.start()] if handles else line
            groups.append(Group(label, _HANDLE_IN_LINE.findall(handles.group(0)) if handles else []))
    for group in groups:  # a header with no value lines is a bare value of an old block
        if not group.values:
            group.values.append((_rank(group.header()), group.header()))
            group.label, group.handles = "", []
    return groups, left


def split_blocks(content: str) -> tuple[str, list[str]]:
    """``content`` without its facts blocks (an earlier summary's), and the lines they hold
    (without their ``- `` bullet; values under a group keep their indent)."""
    rest: list[str] = []
    lines: list[str] = []
    inside = False
    for line in content.splitlines():
        if line.startswith(_LABEL_START):
            inside = True
        elif inside and (line.startswith("- ") or line.startswith(VALUE_INDENT)):
            lines.append(line[2:] if line.startswith("- ") else line)
        else:
            inside = False
            rest.append(line)
    return "\n".join(rest), lines


@dataclass
class _Groups:
    """Groups by label, in order of first appearance; a value already in a group is not added again."""

    by_label: dict[str, Group] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)

    def add(self, label: str, values: Iterable[tuple[int, str]], handle: str | None = None) -> None:
        group = self.by_label.setdefault(label, Group(label))
        if handle and handle not in group.handles:
            group.handles.append(handle)
        for rank, value in values:
            if value not in self.seen and value not in label:
                self.seen.add(value)
                group.values.append((rank, value))

    def groups(self) -> list[Group]:
        return [g for g in self.by_label.values() if g.values]


def _seq(entry: Entry) -> str:
    """``#n`` (or ``#a-#b`` for a replacement of a range): where an entry's text is in the transcript."""
    return f"#{entry.start}" if entry.start == entry.end else label_range([entry])


def collect(entries: Sequence[Entry]) -> tuple[list[Group], LeftOut, list[Group]]:
    """``(carried groups, carried left-out, fresh groups)`` of ``entries``: the groups of the facts blocks
    of earlier summaries among them, and the exact values of the rest, each under what it belongs to
    (the handles of the entries' own tool results are no values: the groups name them)."""
    own = {handle_of(e) for e in entries if e.role == "tool"} | {r for e in entries for r in e.refs}
    carried_groups: list[Group] = []
    left = LeftOut()
    fresh = _Groups()
    calls: dict[Any, dict[str, Any]] = {}
    for entry in entries:
        rest, lines = split_blocks(content_of(entry.message))
        if lines:
            groups, earlier = _parse(lines)
            carried_groups.extend(groups)
            left.add(earlier.count, earlier.handles)
        found = [(rank, v) for rank, v in values_in(rest) if v not in own]
        calls, call = follow_calls(calls, entry)
        if entry.role == "assistant":
            for made in entry.message.get("tool_calls") or []:
                fresh.add(call_label(made), [(r, v) for r, v in _call_values(made) if v not in own])
            fresh.add(f"assistant {_seq(entry)}", found)
        elif entry.role == "tool":
            fresh.add(call_label(call) if call else f"tool result {_seq(entry)}", found, handle_of(entry))
        else:
            fresh.add(f"{entry.role if entry.kind == 'message' else entry.kind} {_seq(entry)}", found)
    known = {value for group in carried_groups for _, value in group.values}
    for group in fresh.groups():  # a value an earlier block lists stays in its group there
        group.values = [(rank, value) for rank, value in group.values if value not in known]
    return carried_groups, left, [g for g in fresh.groups() if g.values]


def choose(groups: Sequence[Group], summary: str, max_tokens: int, model: str = "") -> list[tuple[int, str]]:
    """``(group index, value)`` of the values to list, best first: those not verbatim in ``summary``
    nor inside another chosen value, most specific (lowest rank) first, newest group first within a
    rank, while their lines (a group's header once) fit ``max_tokens`` tokens."""
    candidates = sorted(((rank, -g, pos, g, value) for g, group in enumerate(groups)
                         for pos, (rank, value) in enumerate(group.values) if value not in summary))
    chosen: list[tuple[int, str]] = []
    opened: set[int] = set()
    total = 0
    for *_, g, value in candidates:
        if max_tokens - total < 3:
            break
        if any(value in other for _, other in chosen):
            continue
        bare = not groups[g].label
        cost = count_text(f"\n- {value}" if bare else f"\n{VALUE_INDENT}{value}", model) + 1
        if not bare and g not in opened:
            cost += count_text(f"\n- {groups[g].header()}", model) + 1
        if total + cost <= max_tokens:
            chosen.append((g, value))
            opened.add(g)
            total += cost
    return [(g, v) for g, v in chosen if not any(v != other and v in other for _, other in chosen)]


def _render(label: str, groups: Sequence[Group], chosen: Sequence[tuple[int, str]], left: str) -> str:
    """The block: its label, each group with a chosen value (its header, then those values), the left-out line."""
    picked = set(chosen)
    lines = [label]
    for g, group in enumerate(groups):
        values = [v for _, v in group.values if (g, v) in picked]
        if not values:
            continue
        if group.label:
            lines.append(f"- {group.header()}")
            lines.extend(f"{VALUE_INDENT}{v}" for v in values)
        else:
            lines.extend(f"- {v}" for v in values)
    if left:
        lines.append(left)
    return "\n".join(lines)


def facts_block(entries: Sequence[Entry], summary: str, max_tokens: int = FACTS_TOKENS, model: str = "") -> str:
    """The labelled block of the exact values of ``entries`` missing from ``summary``, each under
    what it belongs to; "" when there is none or ``max_tokens`` (tokens: the range's own values,
    label included; carried ones get :data:`CARRY_FACTOR` times as much again) is 0."""
    if not entries or max_tokens <= 0:
        return ""
    carried_groups, left, fresh = collect(entries)
    label = LABEL.format(range=label_range(entries))
    room = max_tokens - count_text(label, model) - 1
    fresh_chosen = choose(fresh, summary, room, model) if room > 0 else []
    old_chosen = choose(carried_groups, summary, CARRY_FACTOR * max_tokens, model)
    groups = [*carried_groups, *fresh]
    order = [*((g + len(carried_groups), v) for g, v in fresh_chosen), *old_chosen]  # the range's own first
    cap = max_tokens + (CARRY_FACTOR * max_tokens if carried_groups else 0)
    while True:
        lost = LeftOut(left.count, list(left.handles))
        kept = set(order)
        for g, group in enumerate(groups):
            missing = [v for _, v in group.values if (g, v) not in kept and v not in summary]
            if missing:
                lost.add(len(missing), group.handles)
        if not order and not lost.count:
            return ""
        for left_line in dict.fromkeys([lost.line(), lost.line(short=True)]):  # the handles, when they fit
            block = _render(label, groups, order, left_line)
            if count_text(block, model) <= cap:
                return block
        if not order:
            return ""
        order.pop()


def with_facts(summary: str, entries: Sequence[Entry], max_tokens: int = FACTS_TOKENS, model: str = "") -> str:
    """``summary`` followed by its facts block (:func:`facts_block`), when there is one."""
    block = facts_block(entries, summary, max_tokens, model)
    return f"{summary}\n{block}" if block else summary
