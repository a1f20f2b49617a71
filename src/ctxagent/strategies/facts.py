"""Exact values of a compacted range, copied by code so no summary can lose them.

An LLM summary may paraphrase "port 8443" as "the usual TLS port" or drop a commit hash; the
checks of :mod:`ctxagent.strategies.summarizing` cannot see that. So every LLM-written replacement
of a range (``summarize``, the rolling summary of ``sliding_window``, an LLM ``checkpoint``) ends
with a block of the exact values found in the messages it replaces, extracted deterministically
(regular expressions, standard library only):

- URLs, file paths (``/etc/app.yaml``, ``tests/test_io.py:42``), ``host:port`` and ``port N``;
- UUIDs and hex hashes or ids (7-64 hex characters holding both digits and letters);
- numbers with units (``412 ms``, ``3.2s``, ``17%``, ``64 MB``), versions, exit codes;
- the commands of tool calls (the ``command`` argument of a shell call, its first line);
- error lines (``ValueError: ...``, ``error: ...``, ``... failed``), trimmed;
- handles (``@abc123``), except those of the range's own tool results (the handles line names them);
- the values of an earlier block in the range (a summary of a summary keeps them).

:func:`with_facts` appends the block to a checked summary: values already verbatim in the summary
are left out, the rest keep their first-seen order, and when they exceed the block's token cap the
most specific kinds (ids, URLs, commands, paths, ports) are kept first. Pure and deterministic:
the same entries and summary always give the same block (the text is recorded in a compaction).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from ctxagent.messages import loads_json
from ctxagent.strategies.base import Entry
from ctxagent.strategies.common import content_of, handle_of
from ctxagent.strategies.rendering import label_range
from ctxagent.strategies.step import FACTS_TOKENS
from ctxagent.tokens import count_text

LINE_CHARS = 200  # characters: an error line is cut to this; a longer command line is left out (not its values)
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
RANK_COMMAND, RANK_CARRIED, RANK_ERROR = 2, 2, 5
_PARTIAL_HANDLE = re.compile(r"@[A-Za-z0-9_./~%-]*$")


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
    """``(rank, value)`` of every exact value the patterns find in ``text`` (error lines
    included), in order of first appearance, once each with its lowest rank. Every value is a
    substring of ``text``."""
    ranks: dict[str, int] = {}
    for _, rank, value in sorted(_matches(text), key=lambda item: item[0]):
        ranks[value] = min(rank, ranks.get(value, rank))
    return [(rank, value) for value, rank in ranks.items()]


def _arguments(call: dict[str, object]) -> dict[str, object]:
    function = call.get("function")
    raw = function.get("arguments") if isinstance(function, dict) else None
    try:
        data = loads_json(raw) if isinstance(raw, str) and raw.strip() else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _call_values(entry: Entry) -> Iterator[tuple[int, str]]:
    """The command and the exact values of the string arguments of an assistant's tool calls."""
    for call in entry.message.get("tool_calls") or []:
        args = _arguments(call)
        command = args.get("command", args.get("cmd"))
        if isinstance(command, str) and command.strip():
            first = command.strip().splitlines()[0].strip()
            if len(first) <= LINE_CHARS:
                yield RANK_COMMAND, first
        for value in args.values():
            if isinstance(value, str):
                yield from values_in(value)


def split_blocks(content: str) -> tuple[str, list[str]]:
    """``content`` without its facts blocks (an earlier summary's), and the values they list."""
    rest: list[str] = []
    values: list[str] = []
    inside = False
    for line in content.splitlines():
        if line.startswith(_LABEL_START):
            inside = True
        elif inside and line.startswith("- "):
            values.append(line[2:])
        else:
            inside = False
            rest.append(line)
    return "\n".join(rest), values


def carried(content: str) -> list[str]:
    """The values of the facts blocks inside ``content`` (an earlier summary's), in order."""
    return split_blocks(content)[1]


def extract(entries: Sequence[Entry]) -> list[tuple[int, str]]:
    """``(rank, value)`` of the exact values of ``entries`` (see the module docstring), in order
    of first appearance, once each; handles of the entries' own tool results left out."""
    own = {handle_of(e) for e in entries if e.role == "tool"} | {r for e in entries for r in e.refs}
    found: dict[str, int] = {}
    for entry in entries:
        rest, values = split_blocks(content_of(entry.message))
        items = [*((RANK_CARRIED, v) for v in values), *values_in(rest), *_call_values(entry)]
        for rank, value in items:
            if value not in own:
                found[value] = min(rank, found.get(value, rank))
    return [(rank, value) for value, rank in found.items()]


def pick(values: Sequence[tuple[int, str]], summary: str, max_tokens: int, model: str = "") -> list[str]:
    """The values to list, in the given order: those not verbatim in ``summary`` nor inside another
    picked value, chosen most specific (lowest rank) first, newest first within a rank, while their
    lines fit ``max_tokens`` tokens."""
    fresh = [(i, rank, v) for i, (rank, v) in enumerate(values) if v not in summary]
    chosen: list[tuple[int, str]] = []
    total = 0
    for index, _rank, value in sorted(fresh, key=lambda item: (item[1], -item[0])):  # newest first
        if max_tokens - total < 3:
            break
        if any(value in other for _, other in chosen):
            continue
        cost = count_text(f"\n- {value}", model) + 1
        if total + cost <= max_tokens:
            chosen.append((index, value))
            total += cost
    kept = [v for _, v in sorted(chosen)]
    return [v for v in kept if not any(v != other and v in other for other in kept)]


def facts_block(entries: Sequence[Entry], summary: str, max_tokens: int = FACTS_TOKENS, model: str = "") -> str:
    """The labelled block of the exact values of ``entries`` missing from ``summary``, at most
    ``max_tokens`` tokens (label included); "" when there is none or no room."""
    if not entries or max_tokens <= 0:
        return ""
    label = LABEL.format(range=label_range(entries))
    room = max_tokens - count_text(label, model)
    picked = pick(extract(entries), summary, room, model) if room > 0 else []
    while picked:
        block = label + "".join(f"\n- {v}" for v in picked)
        if count_text(block, model) <= max_tokens:
            return block
        picked.pop()
    return ""


def with_facts(summary: str, entries: Sequence[Entry], max_tokens: int = FACTS_TOKENS, model: str = "") -> str:
    """``summary`` followed by its facts block (:func:`facts_block`), when there is one."""
    block = facts_block(entries, summary, max_tokens, model)
    return f"{summary}\n{block}" if block else summary
