"""``ctxagent report``: one self-contained HTML file showing where a session's tokens went
(docs/usage.md). No server, no network: inline CSS and SVG, from the transcript (agent/timeline.py)
and the last request's view (agent/breakdown.py). Every figure carries its number in a ``data-*``
attribute, so a test reads the page as a browser built it. Never imports litellm.
"""

from __future__ import annotations

import html
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ctxagent.agent.breakdown import CATEGORIES, LABELS, breakdown
from ctxagent.agent.peek import next_request
from ctxagent.agent.timeline import timeline
from ctxagent.cli.options import SessionOpt, StoreOpt, pick
from ctxagent.sessions.files import replace_whole

if TYPE_CHECKING:
    from ctxagent.agent.timeline import Mark, Request, Timeline

WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 1100, 320, 80, 30, 30  # the charts' size and margins, CSS pixels
OPEN_ROWS = 50  # a longer table of marks starts folded (the browser lays it out only when opened)
LABELLED_MARKS = 40  # places named on the chart at most (every mark is in the table, each with a tooltip)
COLORS = {"cached": "#3a7d44", "uncached": "#4a78c2", "window": "#c0392b", "ceiling": "#e67e22",
          "compaction": "#8e44ad", "offload": "#16a085", "system": "#7f8c8d", "tools": "#d35400",
          "pins": "#f1c40f", "messages": "#4a78c2", "tool_results": "#3a7d44"}


def report(
    session: SessionOpt = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the page here.", dir_okay=False,
                                                show_default="ctxagent-report-SESSION.html in this directory")]
    = None,
    store: StoreOpt = None,
) -> None:
    """Write one self-contained HTML file (no server, no network: it opens from disk) showing where a
    session's tokens went: every request's tokens, cached and uncached, against the window and the
    reply's reserve; each compaction and offload; the last request by category; the spend."""
    chosen = pick(session, store)
    data = timeline(chosen.name, chosen.transcript.records())
    nxt = next_request(chosen)
    parts = breakdown(nxt.last, nxt.budget.tools) if nxt.last else {}
    target = output or Path(f"ctxagent-report-{chosen.name.replace('/', '-')}.html")
    page = render(data, parts, nxt.budget.window, nxt.budget.reserved)
    replace_whole(target, page)
    print(f"wrote the report of session {chosen.name} to {target} ({len(data.requests):,} requests, "
          f"{len(page):,} bytes; open it in a browser)", file=sys.stderr)


def render(data: Timeline, parts: dict[str, int], window: int, reserved: int) -> str:
    """The page: ``parts`` is the last request by category (empty: none yet), ``window`` and ``reserved``
    the session's window and reply reserve now (tokens)."""
    title = f"ctxagent report: session {data.session}"
    cost = "no price known" if data.cost_usd is None else f"${data.cost_usd:,.4f}"
    sections = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="facts">model <b>{_e(data.model)}</b> · <b id="requests" data-count="{len(data.requests)}">'
        f"{len(data.requests):,}</b> requests · {len(data.runs):,} run{'' if len(data.runs) == 1 else 's'} · "
        f'spend <b id="total-cost" data-usd="{data.cost_usd if data.cost_usd is not None else ""}">{cost}</b> · '
        f"written {_e(time.strftime('%Y-%m-%d %H:%M:%S'))}</p>",
        "<h2>Tokens of every request</h2>",
        _legend(),
        _chart(data, scale=max([window, *(r.window for r in data.requests)]), chart_id="window-chart"),
        *_zoomed(data, window),
        "<h2>The last request by category</h2>",
        _categories(parts, window, reserved),
        "<h2>Spend</h2>",
        _spend(data),
        f"<h2>Compactions and offloads ({len(data.marks):,})</h2>",
        f"<details{' open' if len(data.marks) <= OPEN_ROWS else ''}><summary>each, before the request that first "
        f"saw it</summary>{_marks(data.marks)}</details>",
        f"<details><summary>Every request ({len(data.requests):,})</summary>{_requests(data.requests)}</details>",
    ]
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(sections) + f"\n{TIMING}</body></html>\n")


STYLE = ("body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:16px;"
         "margin-top:28px}table{border-collapse:collapse}td,th{padding:2px 10px;border-bottom:1px solid #ddd;"
         "text-align:right}td:first-child,th:first-child{text-align:left}.facts{color:#444}.legend span{margin-right:"
         "16px}.sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}"
         "svg text{font:11px system-ui,sans-serif}#marks td{text-align:left}")
TIMING = ("<script>addEventListener('load',()=>{const n=performance.getEntriesByType('navigation')[0];"
          "document.documentElement.dataset.loadMs=(n?n.loadEventStart:performance.now()).toFixed(1)})</script>")
"""The page's own load time, for ``benchmarks/report_render.py`` (it reads it from the rendered page)."""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _legend() -> str:
    items = [("cached", "prompt tokens served by the prompt cache"), ("uncached", "prompt tokens not cached"),
             ("window", "context window"), ("ceiling", "window less the reply's reserve"),
             ("compaction", "compaction"), ("offload", "offload")]
    return '<p class="legend">' + "".join(f'<span><i class="sw" style="background:{COLORS[k]}"></i>{_e(t)}</span>'
                                          for k, t in items) + "</p>"


def _chart(data: Timeline, scale: int, chart_id: str) -> str:
    """Stacked bars (cached under uncached) per request, the window and ceiling lines, the marks."""
    n, plot_w, plot_h = max(1, len(data.requests)), WIDTH - LEFT - 10, HEIGHT - TOP - BOTTOM
    step = plot_w / n

    def y(tokens: float) -> float:
        return TOP + plot_h * (1 - min(tokens, scale) / scale)

    out = [f'<svg id="{chart_id}" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
           f'data-scale="{scale}" role="img" aria-label="tokens of every request">']
    for frac in (0, 0.25, 0.5, 0.75, 1):  # the axis: a tick every quarter of the scale
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - 10}" y1="{y(scale * frac):.1f}" y2="{y(scale * frac):.1f}" '
                   f'stroke="#eee"/><text x="{LEFT - 6}" y="{y(scale * frac) + 4:.1f}" text-anchor="end">'
                   f"{int(scale * frac):,}</text>")
    for r in data.requests:
        x, w = LEFT + (r.index - 1) * step, max(step * 0.8, 0.5)
        tip = (f"request {r.index} (turn {r.turn}): {r.prompt:,} prompt tokens, {r.cached:,} cached, "
               f"{r.uncached:,} uncached; reply {r.completion:,}")
        out.append(f'<g class="request" data-request="{r.index}" data-cached="{r.cached}" '
                   f'data-uncached="{r.uncached}"><title>{_e(tip)}</title>'
                   f'<rect class="cached" x="{x:.2f}" y="{y(r.cached):.2f}" width="{w:.2f}" '
                   f'height="{y(0) - y(r.cached):.2f}" fill="{COLORS["cached"]}"/>'
                   f'<rect class="uncached" x="{x:.2f}" y="{y(r.prompt):.2f}" width="{w:.2f}" '
                   f'height="{y(r.cached) - y(r.prompt):.2f}" fill="{COLORS["uncached"]}"/></g>')
    out += _limit_lines(data.requests, scale, step, y)
    out += _mark_lines(data.marks, step, y(0))
    out.append(f'<text x="{LEFT}" y="{HEIGHT - 8}">request 1</text><text x="{WIDTH - 10}" y="{HEIGHT - 8}" '
               f'text-anchor="end">request {len(data.requests):,}</text></svg>')
    return "\n".join(out)


def _zoomed(data: Timeline, window: int) -> list[str]:
    """The chart again at the scale of the largest prompt, when that is under half the window."""
    largest = max([1, *(r.prompt for r in data.requests)])
    if largest * 2 > window:
        return []
    return ["<h2>The same, zoomed to the largest prompt</h2>",
            _chart(data, scale=largest * 11 // 10, chart_id="zoom-chart")]


def _limit_lines(requests: list[Request], scale: int, step: float, y: Callable[[float], float]) -> list[str]:
    """The window and the ceiling (window less reserve) as step lines over the requests, drawn
    where they are on the chart's scale (their label says so where they are above it)."""
    if not requests:
        return []
    out = []
    for key, name, values in (("window", "window", [r.window for r in requests]),
                              ("ceiling", "window less the reply reserve", [r.window - r.reserved for r in requests])):
        last = values[-1]
        label = f"{name} {last:,}"
        if min(values) > scale:  # off this chart: said, not drawn at its top edge
            out.append(f'<text class="{key}" data-tokens="{last}" x="{LEFT + 4}" '
                       f'y="{TOP + (22 if key == "ceiling" else 8)}" fill="{COLORS[key]}">'
                       f"{_e(label)}: above this scale</text>")
            continue
        points = " ".join(f"{LEFT + (r.index - 1 + end) * step:.2f},{y(value):.2f}"
                          for r, value in zip(requests, values, strict=True) for end in (0, 1))
        out.append(f'<polyline class="{key}" data-tokens="{last}" points="{points}" fill="none" '
                   f'stroke="{COLORS[key]}" stroke-width="1.5" stroke-dasharray="6 3"/>'
                   f'<text x="{LEFT + 4 if key == "window" else WIDTH - 12}" y="{y(last) + 12:.1f}" '
                   f'text-anchor="{"start" if key == "window" else "end"}" fill="{COLORS[key]}">{_e(label)}</text>')
    return out


def _mark_lines(marks: list[Mark], step: float, bottom: float) -> list[str]:
    """One line per mark before its request, named in its tooltip. Where the marks are at few places:
    lines the plot's height and one label per place (``mask_observations x7, @big``); where they are
    at many, ticks in a strip along the top (compactions) and one under it (offloads), so the bars stay seen."""
    places: dict[int, list[Mark]] = {}
    for mark in marks:
        places.setdefault(mark.before, []).append(mark)
    sparse = len(places) <= LABELLED_MARKS
    out: list[str] = []
    for mark in marks:
        x = LEFT + (mark.before - 1) * step
        top = TOP if sparse else 3 if mark.kind == "compaction" else 16  # dense: strips above the plot
        end = bottom if sparse else top + 10
        out.append(f'<g class="mark" data-kind="{mark.kind}" data-name="{_e(mark.name)}" data-before="{mark.before}">'
                   f'<title>{_e(mark.detail)}</title><line x1="{x:.2f}" x2="{x:.2f}" y1="{top}" y2="{end:.1f}" '
                   f'stroke="{COLORS[mark.kind]}" stroke-width="{1 if sparse else 2}" opacity="0.8"/></g>')
    if not sparse:
        return [*out, f'<text x="{LEFT - 6}" y="11" text-anchor="end" fill="{COLORS["compaction"]}">compactions</text>',
                f'<text x="{LEFT - 6}" y="24" text-anchor="end" fill="{COLORS["offload"]}">offloads</text>']
    for i, (before, here) in enumerate(places.items()):
        strategies = Counter(m.name for m in here if m.kind == "compaction")
        handles = [m.name for m in here if m.kind == "offload"]
        text = ", ".join([*(name if n == 1 else f"{name} x{n}" for name, n in strategies.items()),
                          *(handles if len(handles) <= 2 else [f"{len(handles)} outputs stored"])])
        color = COLORS["compaction" if any(m.kind == "compaction" for m in here) else "offload"]
        out.append(f'<text x="{LEFT + (before - 1) * step + 3:.1f}" y="{TOP + 10 + 12 * (i % 3)}" '
                   f'fill="{color}">{_e(text if len(text) <= 60 else text[:59] + "…")}</text>')
    return out


def _categories(parts: dict[str, int], window: int, reserved: int) -> str:
    """The last request by category: a table and one stacked bar of the window."""
    if not parts:
        return "<p>No request was sent yet.</p>"
    rows, x, bar = [], 0.0, []
    total = sum(parts.values())
    for key in CATEGORIES:
        share = parts[key] / window
        rows.append(f'<tr data-category="{key}" data-tokens="{parts[key]}"><td><i class="sw" '
                    f'style="background:{COLORS[key]}"></i>{_e(LABELS[key])}</td><td>{parts[key]:,}</td>'
                    f"<td>{100 * share:.1f}%</td></tr>")
        bar.append(f'<rect x="{x:.2f}" y="0" width="{share * WIDTH:.2f}" height="18" fill="{COLORS[key]}">'
                   f"<title>{_e(LABELS[key])}: {parts[key]:,} tokens</title></rect>")
        x += share * WIDTH
    free = max(0, window - total - reserved)
    rows.append(f'<tr data-category="total" data-tokens="{total}"><td><b>the request</b></td><td><b>{total:,}</b>'
                f"</td><td>{100 * total / window:.1f}%</td></tr>")
    rows.append(f'<tr data-category="reserved" data-tokens="{reserved}"><td>reserved for the reply</td>'
                f"<td>{reserved:,}</td><td>{100 * reserved / window:.1f}%</td></tr>")
    rows.append(f'<tr data-category="free" data-tokens="{free}"><td>free</td><td>{free:,}</td>'
                f"<td>{100 * free / window:.1f}%</td></tr>")
    return (f'<svg width="{WIDTH}" height="18" viewBox="0 0 {WIDTH} 18">{"".join(bar)}</svg>'
            f'<table id="categories"><tr><th>category</th><th>tokens</th><th>of the {window:,}-token window</th>'
            f"</tr>{''.join(rows)}</table><p>Our count (tiktoken) of the request as sent; the provider's count "
            "of the same request is in the table below.</p>")


def _spend(data: Timeline) -> str:
    rows = "".join(f'<tr data-model="{_e(model)}" data-calls="{s.calls}" data-usd="{s.cost_usd if s.priced else 0}">'
                   f"<td>{_e(model)}</td><td>{s.calls:,}</td><td>{s.prompt_tokens:,}</td><td>{s.cached_tokens:,}</td>"
                   f"<td>{s.completion_tokens:,}</td><td>{f'${s.cost_usd:,.4f}' if s.priced else '-'}</td></tr>"
                   for model, s in data.spend.items())
    return ('<table id="spend"><tr><th>model</th><th>calls</th><th>prompt tokens</th><th>cached</th>'
            f"<th>reply tokens</th><th>cost</th></tr>{rows}</table>")


def _marks(marks: list[Mark]) -> str:
    if not marks:
        return "<p>None: every request held the session's messages as they were written.</p>"
    rows = "".join(f'<tr data-kind="{m.kind}"><td>before request {m.before:,}</td><td>{m.kind}</td>'
                   f"<td>{_e(m.detail)}</td></tr>" for m in marks)
    return f'<table id="marks"><tr><th>where</th><th>what</th><th>detail</th></tr>{rows}</table>'


def _requests(requests: list[Request]) -> str:
    rows = "".join(f'<tr data-request="{r.index}" data-prompt="{r.prompt}"><td>{r.index}</td><td>{r.turn}</td>'
                   f"<td>{r.prompt:,}</td><td>{r.cached:,}</td><td>{r.uncached:,}</td><td>{r.completion:,}</td>"
                   f"<td>{r.estimated:,}</td><td>{r.window:,}</td><td>{r.reserved:,}</td>"
                   f"<td>{'-' if r.cost_usd is None else f'${r.cost_usd:.5f}'}</td></tr>" for r in requests)
    return ('<table id="every-request"><tr><th>request</th><th>turn</th><th>prompt</th><th>cached</th><th>uncached'
            "</th><th>reply</th><th>our estimate</th><th>window</th><th>reserve</th><th>cost</th></tr>"
            f"{rows}</table>")
