"""``ctxagent report`` in a real headless browser, and ``inspect context``'s breakdown (issue 33).

A real session against a real HTTP model (FakeOpenAI on 127.0.0.1, litellm in a ``python -m ctxagent``
subprocess: OpenAI's automatic prompt cache and gpt-4o-mini's prices give cached tokens and a spend),
with an offload and compactions. The page is opened from disk by Chromium (Debian package
``chromium``) with no network; the numbers the browser built are checked against the transcript,
and a screenshot of each test is kept beside it (and checked to show the bars). Skipped, with the
reason, where no Chromium is installed."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from clihelp import call, ctxagent, records, script
from ctxagent.cli.report import COLORS

BROWSER = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(name)), None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no Chromium: apt-get install chromium (Debian package)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PROFILE = "extends: default\ncontext_window: 6000\nmax_output_tokens: 200\nretries: 0\n"


def shot_path(tmp_path: Path, name: str) -> Path:
    """Where a test's screenshot goes: ``$CTXAGENT_SCREENSHOTS/NAME.png`` when set (kept for a person or
    a CI artifact), else the test's temporary folder (kept when it fails)."""
    folder = Path(os.environ.get("CTXAGENT_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}.png"


def browse(page: Path, shot: Path, size: str = "1200,2400") -> list[dict[str, str]]:
    """Open ``page`` from disk in headless Chromium: a screenshot to ``shot`` (PNG), and the DOM as
    the browser built it, as the attributes of every element (its tag under ``tag``)."""
    for args in ([f"--screenshot={shot}", f"--window-size={size}"], ["--dump-dom"]):
        with tempfile.TemporaryDirectory() as profile:  # a fresh browser profile each time
            out = subprocess.run([BROWSER, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],  # type: ignore[list-item]
                                 capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
    collector = _Elements()
    collector.feed(out.stdout)
    return collector.found


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append({"tag": tag, **{k: v or "" for k, v in attrs}})


def pixels(png: Path) -> tuple[int, int, set[tuple[int, int, int]]]:
    """Width, height and the set of RGB colours of an 8-bit RGB or RGBA PNG (stdlib zlib; filters undone)."""
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    idat = b""
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + size]
        idat += body if kind == b"IDAT" else b""
        chunks.setdefault(kind, body)
        pos += 12 + size
    width, height, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert depth == 8 and color in (2, 6)
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left, up = line[i - bpp] if i >= bpp else 0, prev[i]
            corner = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                guess = min((abs(p - left), 0, left), (abs(p - up), 1, up), (abs(p - corner), 2, corner))[2]
                line[i] = (line[i] + guess) & 255
        rows.append(line)
        prev = line
    colors = {tuple(row[i:i + 3]) for row in rows[::4] for i in range(0, stride, bpp * 4)}
    return width, height, colors  # type: ignore[return-value]


def rgb(hex_color: str) -> tuple[int, int, int]:
    return tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


@pytest.fixture(scope="module")
def session(tmp_path_factory, fake_server):
    """A finished session of a real HTTP model: an offloaded output, 13 more tool calls (masks of old
    results), answered. Returns (the data dir, the session's name)."""
    folder = tmp_path_factory.mktemp("report")
    replies = [{"tool_calls": [call("big", "shell", command="seq 1 30000")]}]
    replies += [{"tool_calls": [call(f"c{i}", "shell", command=f"seq {i * 100} {i * 100 + 150}")]} for i in range(13)]
    fake_server.reset(*replies, {"content": "done counting"})
    (folder / "p.yaml").write_text(PROFILE, encoding="utf-8")
    env = {**os.environ, "CTXAGENT_DATA_DIR": str(folder / "data"), "OPENAI_API_KEY": "sk-local"}
    out = subprocess.run([sys.executable, "-m", "ctxagent", "run", "--batch", "--allow", "shell", "--session", "rep",
                          "--model", "openai/gpt-4o-mini", "--api-base", fake_server.base_url, "--profile",
                          str(folder / "p.yaml"), "count"], cwd=folder, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return folder / "data", "rep"


@pytest.fixture(scope="module")
def fake_server():
    from ctxagent.testing import FakeOpenAI

    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def data(session, monkeypatch):
    monkeypatch.setenv("CTXAGENT_DATA_DIR", str(session[0]))
    return session[1]


@needs_browser
def test_the_report_shows_the_transcripts_numbers_in_a_browser(data, tmp_path):
    """Nothing showed a session's context over time, though the transcript holds every figure."""
    page = tmp_path / "report.html"
    out = ctxagent("report", "--session", data, "--output", str(page))
    assert out.returncode == 0 and f"wrote the report of session {data} to {page}" in out.stderr, out.stderr
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text  # nothing to fetch: it opens from disk
    found = browse(page, shot := shot_path(tmp_path, "report-of-a-real-session"))
    recs = records(data)
    usage = [r for r in recs if r["kind"] == "usage" and not r["model"].startswith(("summarizer:", "agent:"))]

    charts = [e["id"] for e in found if e["tag"] == "svg" and e.get("id", "").endswith("-chart")]
    zoomed = max(u["prompt_tokens"] for u in usage) * 2 <= 6000  # the largest prompt under half the window
    assert charts == ["window-chart", *(["zoom-chart"] if zoomed else [])]
    bars = [e for e in found if e.get("class") == "request" and e["tag"] == "g"]
    assert len(bars) == len(usage) * len(charts) and len(usage) == 15  # one bar per request in each chart
    bars = bars[:len(usage)]  # the window-scale chart's (a zoomed one draws the same bars)
    assert [(int(b["data-cached"]), int(b["data-uncached"])) for b in bars] == [
        (u["cached_tokens"], u["prompt_tokens"] - u["cached_tokens"]) for u in usage]
    assert sum(u["cached_tokens"] for u in usage) > 0  # the prompt cache served some: both parts are drawn
    table = [(int(e["data-request"]), int(e["data-prompt"])) for e in found if e["tag"] == "tr" and "data-prompt" in e]
    assert table == [(i + 1, u["prompt_tokens"]) for i, u in enumerate(usage)]

    marks = [(e["data-kind"], e["data-name"]) for e in found if e.get("class") == "mark"]
    assert len(marks) % len(charts) == 0  # each chart marks the same
    marks = marks[:len(marks) // len(charts)]
    expected = [("compaction", r["strategy"]) if r["kind"] == "compaction" else ("offload", r["handle"])
                for r in recs if r["kind"] in ("compaction", "output")]
    assert marks == expected and ("offload", "@big") in expected
    assert sum(1 for k, _ in expected if k == "compaction") >= 3  # mask_observations at work
    lines = {e["class"]: int(e["data-tokens"]) for e in found if e.get("class") in ("window", "ceiling")}
    assert lines == {"window": 6000, "ceiling": 6000 - 200 - 256}

    parts = {e["data-category"]: int(e["data-tokens"]) for e in found if "data-category" in e}
    assert set(parts) == {"system", "tools", "pins", "messages", "tool_results", "total", "reserved", "free"}
    shown = sum(parts[k] for k in ("system", "tools", "pins", "messages", "tool_results"))
    assert shown == parts["total"] == usage[-1]["prompt_tokens"]  # the server counts as we do: the last request
    system = next(r for r in recs if r["kind"] == "message" and r["message"]["role"] == "system")
    assert parts["system"] == system["tokens"] and parts["reserved"] == 456
    cost = next(e for e in found if e.get("id") == "total-cost")
    assert float(cost["data-usd"]) == pytest.approx(sum(u["cost_usd"] for u in recs if u["kind"] == "usage"))
    assert float(cost["data-usd"]) > 0  # gpt-4o-mini has a price

    width, height, colors = pixels(shot)
    assert (width, height) == (1200, 2400)
    assert {rgb(COLORS["cached"]), rgb(COLORS["uncached"]), rgb(COLORS["compaction"])} <= colors  # bars, marks


@needs_browser
def test_a_session_without_a_request_still_reports(tmp_path):
    model = script(tmp_path / "s.yaml", [])  # exhausted at once: no reply, no usage
    assert ctxagent("run", "--batch", "--session", "none", "--model", model, "go").returncode == 4
    page = tmp_path / "none.html"
    assert ctxagent("report", "--session", "none", "-o", str(page)).returncode == 0
    found = browse(page, shot := shot_path(tmp_path, "report-without-a-request"), size="1200,800")
    assert next(e for e in found if e.get("id") == "requests")["data-count"] == "0"
    assert "No request was sent yet." in page.read_text(encoding="utf-8")
    assert rgb("#ffffff") in pixels(shot)[2]


def test_inspect_context_prints_the_breakdown_by_category(tmp_path):
    """The same breakdown as the report's, as text and in --json: it adds up to the request's tokens."""
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("c1", "shell", command="seq 1 200")]}, "done"])
    assert ctxagent("run", "--batch", "--allow", "shell", "--session", "ctx", "--model", model, "go").returncode == 0
    shown = json.loads(ctxagent("inspect", "context", "--session", "ctx", "--json").stdout)
    parts, budget = shown["categories"], shown["budget"]
    assert list(parts) == ["system", "tools", "pins", "messages", "tool_results"]
    assert sum(parts.values()) == budget["used"] - budget["reserved"] and parts["tools"] == budget["tools"]
    tool_tokens = sum(m["tokens"] for m in shown["messages"] if m["message"]["role"] == "tool")
    assert parts["tool_results"] == tool_tokens > 0
    text = ctxagent("inspect", "context", "--session", "ctx").stdout
    assert f"{parts['tool_results']:,} tokens" in text
    for label in ("system prompt", "tool schemas", "pinned facts", "messages", "tool results",
                  "reserved for the reply", "free", "window"):
        assert any(line.strip().startswith(label) for line in text.splitlines()), label
    assert f"{budget['used'] - budget['reserved']:,} prompt tokens + {budget['reserved']:,} reserved" in text


def test_the_report_page_is_written_whole_and_names_nothing_outside(tmp_path):
    """Without a browser: the page is one file, every number of the chart is in it, no external reference."""
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("c1", "shell", command="seq 1 30000")]}, "done"])
    assert ctxagent("run", "--batch", "--allow", "shell", "--session", "w", "--model", model, "go").returncode == 0
    out = ctxagent("report", "--session", "w", cwd=tmp_path)
    page = tmp_path / "ctxagent-report-w.html"
    assert out.returncode == 0 and page.is_file() and not list(tmp_path.glob(".*.tmp"))
    text = page.read_text(encoding="utf-8")
    for needle in ("<script src", "<link", "@import", "url("):
        assert needle not in text
    assert 'data-name="@c1"' in text and 'id="zoom-chart"' in text  # named; prompts far under the window
    code = ("import sys\nfrom ctxagent.cli import invoke\n"
            f"assert invoke(['report', '--session', 'w', '-o', {str(tmp_path / 'again.html')!r}]) == 0\n"
            "assert invoke(['sessions', 'fork', 'w', 'w2']) == 0\n"
            "assert 'litellm' not in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr  # never imports litellm (~3.6 s)


def test_many_marks_become_ticks_above_the_bars_and_a_long_table_starts_folded():
    """At 500 requests the compaction lines hid the bars: past LABELLED_MARKS places, marks are ticks
    in two strips above the plot (every one still named in its tooltip and listed in the table)."""
    from ctxagent.agent.timeline import Mark, Request, Timeline
    from ctxagent.cli.report import LABELLED_MARKS, TOP, render

    requests = [Request(i, i, 1000 + i, 500, 10, 1000 + i, 0.001, 128_000, 4352) for i in range(1, 201)]
    marks = [Mark("compaction" if i % 2 else "offload", i, f"m{i}", f"detail {i}") for i in range(2, 200)]
    page = render(Timeline("s", "m", requests, marks), {}, 128_000, 4352)
    assert len(marks) > LABELLED_MARKS and page.count('class="mark"') == 2 * len(marks)  # both charts
    assert f'y1="{TOP}"' not in page.split('class="mark"')[1]  # a tick in the strip, not a line over the plot
    assert ">compactions</text>" in page and "<details><summary>each, before" in page
    assert page.count("<title>detail 7</title>") == 2 and page.count('<tr data-kind="compaction">') == 99
