"""Flattened text of view entries for summarizers and notes: a seq-labelled rendering, middle-out
clipping, fact-looking lines, the task, range labels. Pure functions. Units: ``max_tokens`` is
tokens, ``FACT_LINE_CHARS`` characters.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxagent.messages import content_of
from ctxagent.strategies.base import Entry
from ctxagent.strategies.common import calls_of_results, cut_line, newest_within, short_call
from ctxagent.tokens import count_text

_FACT = re.compile(
    r"(?:^|[\s'\"(=:])(?:~|\.{1,2})?/[\w.@-]+"  # an absolute or relative path
    r"|\b[\w-]+\.(?:py|js|ts|json|ya?ml|toml|md|txt|csv|log|cfg|ini|sh|go|rs|c|h|cpp|java|html|sql)\b"
    r"|\d"  # a number
    r"|@[A-Za-z0-9_-]+"  # a handle
    r"|https?://"
    r"|\b(?:error|exception|traceback|failed|failure|denied|refused|timed out|exit code)\b",
    re.IGNORECASE,
)
FACT_LINE_CHARS = 160  # a fact line is cut to this many characters


def render(entries: Sequence[Entry]) -> str:
    """A plain-text rendering of ``entries`` (whole units) for a summarizer: one block per message labelled
    with its seq (``#12``), a tool result as ``result of name(args): ...``; no tool schemas, no tool-role messages."""
    calls = calls_of_results(entries)
    blocks: list[str] = []
    for index, entry in enumerate(entries):
        seq = f"#{entry.start}" if entry.start == entry.end else f"#{entry.start}-{entry.end}"
        body = content_of(entry.message)
        if entry.role == "tool":
            blocks.append(f"{seq} result of {short_call(calls.get(index), 200)}: {body}")
        elif entry.role == "assistant":
            if body:
                blocks.append(f"{seq} assistant: {body}")
            for call in entry.message.get("tool_calls") or []:
                blocks.append(f"{seq} assistant called {short_call(call, 200)}")
        elif entry.kind != "message":
            blocks.append(f"{seq} {body}")
        else:
            blocks.append(f"{seq} {entry.role}: {body}")
    return "\n".join(blocks)


def clip(value: str, max_tokens: int, model: str = "") -> str:
    """``value`` cut middle-out (head and tail kept, a marker between) to about ``max_tokens``."""
    tokens = count_text(value, model)
    if tokens <= max_tokens:
        return value
    keep = max(0, int(len(value) * max_tokens / tokens * 0.9) // 2)
    marker = f"\n[... {tokens - max_tokens:,} tokens cut ...]\n"
    return value[:keep] + marker + (value[-keep:] if keep else "")


def fact_lines(entries: Sequence[Entry], max_tokens: int, model: str = "") -> list[str]:
    """Lines of ``entries`` that look like facts (paths, numbers, handles, URLs, errors), once
    each, cut to :data:`FACT_LINE_CHARS`; the newest kept when they exceed ``max_tokens``."""
    found: dict[str, None] = {}
    for line in render(entries).splitlines():
        line = line.strip()
        if len(line) >= 4 and _FACT.search(line):
            found.setdefault(cut_line(line, FACT_LINE_CHARS), None)
    return newest_within(list(found), lambda line: count_text(line, model) + 1, max_tokens)


def task_text(view: Sequence[Entry]) -> str:
    """The task (first user message) of ``view``, or "" when there is none."""
    return next((content_of(e.message) for e in view if e.role == "user" and e.kind == "message"), "")


def label_range(run: Sequence[Entry]) -> str:
    """``#a-#b`` (seq numbers) of a run of entries."""
    return f"#{run[0].start}-#{run[-1].end}"
