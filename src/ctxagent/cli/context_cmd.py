"""``ctxagent inspect context``: the exact messages the next request would send, and the budget.

A terminal gets a rich table; a pipe or a file gets the same rows as plain, aligned text (rich is
not even imported then: a cold ``inspect context`` into a pipe is mostly the transcript's read).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from ctxagent.cli.options import SessionOpt, pick
from ctxagent.messages import one_line

if TYPE_CHECKING:
    from ctxagent.agent.turns import NextRequest
    from ctxagent.sessions.session import Session

BAR = 50  # characters of the budget bar


def budget_bar(used: int, window: int, target: float, trigger: float) -> str:
    """``[#####....|....!....]`` : used tokens against the window, ``|`` the target, ``!`` the trigger."""
    cells = ["#" if i < round(BAR * used / window) else "." for i in range(BAR)]
    for fraction, mark in ((target, "|"), (trigger, "!")):
        cells[min(BAR - 1, int(BAR * fraction))] = mark
    return "[" + "".join(cells) + "]"


def context(
    ctx: typer.Context,
    session: SessionOpt = None,
    path: Annotated[str | None, typer.Option("--path", help="interactive or batch (default: the session's).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """The messages the next request would send, tokens per message, the budget, the compactions."""
    if path not in (None, "interactive", "batch"):
        raise typer.BadParameter("--path is interactive or batch")
    show(pick(session, ctx.obj), "batch" if path == "batch" else "interactive" if path else None, json_out)


def show(session: Session, path: Literal["interactive", "batch"] | None, json_out: bool) -> None:
    """Print what ``inspect context`` shows of ``session`` (``path``: None, the session's)."""
    from ctxagent.agent.breakdown import breakdown
    from ctxagent.agent.peek import next_request
    from ctxagent.strategies.pipeline import rule_in_force

    nxt = next_request(session, path=path, every_compaction=json_out)
    b = nxt.budget
    rule = rule_in_force(nxt.profile.pipeline(nxt.path), nxt.view, b, nxt.turn)
    parts = breakdown(nxt.view, b.tools)
    if json_out:
        print(json.dumps({
            "path": nxt.path, "profile": nxt.profile.name,
            "budget": {"window": b.window, "used": b.total(nxt.view), "target": int(b.window * b.target),
                       "trigger": int(b.window * b.trigger), "tools": b.tools, "reserved": b.reserved,
                       "scale": b.scale},
            "turn": nxt.turn, "rule": rule, "categories": parts,
            "messages": [{"message": e.message, "tokens": e.tokens, "seq": [e.start, e.end], "kind": e.kind}
                         for e in nxt.view],
            "compactions": {"recorded": [r.model_dump(mode="json") for r in nxt.recorded],
                            "next": [c.__dict__ for c in nxt.compactions]},
            "same_as_last": {"messages": nxt.same, "tokens": sum(e.tokens for e in nxt.view[:nxt.same]),
                             "last_messages": len(nxt.last)},
            "lessons": nxt.lessons.model_dump(mode="json", include={"scope", "ids", "text"}) if nxt.lessons else None,
        }, ensure_ascii=False))
        return
    _render(_rows(nxt), _notes(nxt, rule, parts))


COLUMNS = ("#", "seq", "role", "kind", "tokens", "cache", "content")


def _rows(nxt: NextRequest) -> list[tuple[str, ...]]:
    """One row per message of the next request: the :data:`COLUMNS`."""
    rows: list[tuple[str, ...]] = []
    for i, e in enumerate(nxt.view):
        seq = str(e.start) if e.start == e.end else f"{e.start}-{e.end}"
        content = e.message.get("content") or [c["function"]["name"] for c in e.message.get("tool_calls") or []]
        rows.append((str(i), seq, e.role, e.kind, str(e.tokens), "same" if i < nxt.same else "new",
                     one_line(str(content), 90)))
    return rows


def _notes(nxt: NextRequest, rule: str, parts: dict[str, int]) -> list[str]:
    """The lines after the table: the cached prefix, the budget, the categories, the rule, lessons, compactions."""
    from ctxagent.agent.breakdown import lines as category_lines

    same_tokens = sum(e.tokens for e in nxt.view[:nxt.same])
    b, used = nxt.budget, nxt.budget.total(nxt.view)
    lines = [f"prefix: the first {nxt.same} of {len(nxt.view)} messages ({same_tokens} tokens) are identical to "
             f"the last request sent ({len(nxt.last)} messages); a provider's prompt cache can serve them",
             f"budget {budget_bar(used, b.window, b.target, b.trigger)} {used - b.reserved:,} prompt tokens + "
             f"{b.reserved:,} reserved for the reply = {used:,} of {b.window:,} (target {int(b.window * b.target):,}, "
             f"trigger {int(b.window * b.trigger):,}; tool schemas {b.tools:,}, calibration x{b.scale:.2f})",
             "by category (our count, before calibration):",
             *(f"  {line}" for line in category_lines(parts, b.reserved, b.window)),
             f"rule in force at turn {nxt.turn} ({nxt.profile.name}, {nxt.path}): {rule}"]
    if nxt.lessons is not None and nxt.lessons.text:  # in the pins message, as recorded when the session started
        lines.append(f"lessons shown ({', '.join(nxt.lessons.ids)}; in the pins message, chosen when the session "
                     f"started):\n{nxt.lessons.text}")
    lines += _recorded(nxt.recorded, nxt.counts)
    lines += [f"would compact next: {c.strategy} #{c.start}-#{c.end} ({c.tokens_before} -> {c.tokens} tokens)"
              for c in nxt.compactions]
    return lines


def _recorded(recorded: list[Any], counts: dict[str, int]) -> list[str]:
    """One line per compaction in ``recorded`` (the newest), after a count per strategy (``counts``) when
    the session recorded more (a 500-turn session records thousands: mostly masks of old results)."""
    lines = []
    total = sum(counts.values())
    if total > len(recorded):
        per = ", ".join(f"{name} {n:,}" for name, n in Counter(counts).most_common())
        lines.append(f"recorded compactions: {total:,} ({per}); the newest {len(recorded)} "
                     "(--json lists every one):")
    return lines + [f"recorded compaction: {r.strategy} #{r.start}-#{r.end} ({r.tokens_before} -> {r.tokens} tokens)"
                    for r in recorded]


def _render(rows: list[tuple[str, ...]], notes: list[str]) -> None:
    if not sys.stdout.isatty():
        _plain(rows, notes)
        return
    from ctxagent.cli.console import Console, Table, Text

    console = Console(highlight=False, soft_wrap=True)
    table = Table(*COLUMNS)
    for row in rows:
        table.add_row(*row[:-1], Text(row[-1]))
    console.print(table)
    for line in notes:
        console.print(Text(line))


def _plain(rows: list[tuple[str, ...]], notes: list[str]) -> None:
    """The rows as aligned text columns (the content last, unpadded), then the notes."""
    widths = [max(len(r[i]) for r in [COLUMNS, *rows]) for i in range(len(COLUMNS) - 1)]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]
           for row in [COLUMNS, *rows]]
    sys.stdout.write("\n".join([*out, *notes]) + "\n")

