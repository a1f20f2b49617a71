"""Issue 34, hard cases tried as a new user would, each pinned by a test named after its failure:
what summaries keep, parallel results that together overflow the window, and a calibration that
shrank the budget below the request itself. (The loop guard's polling case is in test_activity.py.)

The CLI runs in process against a local OpenAI-compatible server over real litellm HTTP where a
provider's usage report is the point; elsewhere with the scripted model."""

from __future__ import annotations

import json
from pathlib import Path

from clihelp import call, ctxagent, run_cli, script
from ctxagent.sessions import records
from ctxagent.sessions.session import Session
from ctxagent.tokens import PER_REQUEST, calibration, count_messages, count_tools, reported_prompt


def _profile(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- calibration --------------------------------------------------------------------------------


def test_a_server_reporting_only_uncached_prompt_tokens_cannot_shrink_the_budget(tmp_path, fake_openai):
    """A server that reported only the uncached part of the prompt as ``prompt_tokens`` drove the
    calibration to its 0.5 floor: a 25,032-token request was shown as 13,713/24,000, the compaction
    trigger never fired and the server rejected it. Now every request fits the window as we count it,
    and compaction fires."""
    window = 24_000
    turns = [{"content": None, "usage": {"prompt_tokens": "uncached"},
              "tool_calls": [{"id": f"c{i}", "name": "shell", "arguments": {"command": f"seq {i}00000 {i}01100"}}]}
             for i in range(1, 13)]
    server = fake_openai([*turns, {"content": "done", "usage": {"prompt_tokens": "uncached"}}])
    profile = _profile(tmp_path, f"context_window: {window}\nmax_output_tokens: 1000\nretries: 0\nmax_turns: 40\n"
                                 "permissions: {kinds: {exec: allow}}\npipelines:\n  batch:\n    - strategy: truncate\n")
    out = run_cli("run", "--batch", "--json", "--session", "uncached", "--model", "openai/fake", "--api-base",
                  server.base_url, "--profile", profile, "count")
    assert out.exit_code == 0, out.stdout + out.stderr
    reported = [r for r in Session.at("uncached").transcript.records() if isinstance(r, records.UsageRecord)]
    assert any(r.cached_tokens > r.prompt_tokens for r in reported)  # the server's reports: cached apart
    sizes = [PER_REQUEST + count_messages(body["messages"]) + count_tools(body.get("tools") or [])
             for body in server.requests]
    assert max(sizes) + 1000 <= window, sizes  # as we count it, with the reply's reserve
    kinds = [r for r in Session.at("uncached").transcript.records() if isinstance(r, records.CompactionRecord)]
    assert kinds, "the compaction trigger never fired"


def test_a_provider_count_never_lowers_the_estimate_and_cached_tokens_reported_apart_count():
    assert calibration(13_713, 25_032) == 1.0  # lower: our own count stands
    assert calibration(30_000, 25_000) == 1.2  # higher: the provider's tokenizer counts more
    assert calibration(90_000, 25_000) == 2.0 and calibration(0, 25_000) == 1.0
    assert reported_prompt(700, 24_332) == 25_032  # cached reported apart from prompt_tokens: added back
    assert reported_prompt(25_032, 24_332) == 25_032  # OpenAI: cached tokens are a part of prompt_tokens
    assert reported_prompt(300, 20_000, 4_732) == 25_032  # Anthropic's reads and writes apart
