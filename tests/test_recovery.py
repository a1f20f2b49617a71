"""Overflow recovery against the local fake provider: context-length errors in each provider's words."""

from __future__ import annotations

import json

import pytest

from clihelp import run_cli
from ctxagent.messages import pair_violations
from ctxagent.testing import CONTEXT_STYLES, context_error


def turns_with_output(n: int) -> list[dict]:
    return [{"content": None, "tool_calls": [{"id": f"c{i}", "name": "shell",
                                              "arguments": {"command": f"seq 1 {300 + i}"}}]} for i in range(n)]



def profile(tmp_path, window: int = 50_000) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(f"context_window: {window}\nmax_output_tokens: 500\nretries: 0\n"
                    "permissions: {kinds: {exec: allow}}\n", encoding="utf-8")  # batch: shell runs unasked
    return str(path)


@pytest.mark.parametrize("style", CONTEXT_STYLES)
def test_context_error_triggers_one_emergency_compaction_and_resend(tmp_path, fake_openai, style):
    server = fake_openai([*turns_with_output(6), context_error(style), {"content": "recovered"}])
    out = run_cli("run", "--json", "--session", "rec", "--model", "openai/fake", "--api-base", server.base_url,
                  "--profile", profile(tmp_path), "count things")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert (out.exit_code, result["answer"]) == (0, "recovered"), out.stdout
    rejected, resent = server.requests[-2], server.requests[-1]
    assert rejected["messages"] != resent["messages"]  # never the identical payload twice
    assert len(json.dumps(resent["messages"])) < len(json.dumps(rejected["messages"]))
    assert pair_violations(resent["messages"]) == [] and server.rejected == []
    assert resent["messages"][0] == rejected["messages"][0]  # HEAD: system message byte-identical
    assert resent["messages"][1]["content"] == "count things"  # the task is kept


def test_gives_up_with_exit_5_after_two_recoveries(tmp_path, fake_openai):
    server = fake_openai([*turns_with_output(6), context_error(), context_error(), context_error()])
    out = run_cli("run", "--json", "--session", "gone", "--model", "openai/fake", "--api-base", server.base_url,
                  "--profile", profile(tmp_path), "count things")
    assert out.exit_code == 5
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "2 emergency compactions" in result["error"] and "largest parts" in result["error"]
    sent = [json.dumps(r["messages"]) for r in server.requests]
    assert len(sent) == len(set(sent))  # no payload was sent twice
    assert len(server.requests) == 6 + 3


def test_budget_is_checked_before_sending(tmp_path, fake_openai):
    """BUDGET: when even the protected part cannot fit, stop with exit 5 and send nothing."""
    server = fake_openai([{"content": "never"}])
    out = run_cli("run", "--json", "--session", "tiny", "--model", "openai/fake", "--api-base", server.base_url,
                  "--profile", profile(tmp_path, window=1200), "x " * 2000)
    assert out.exit_code == 5
    assert server.requests == []
    assert "protected part" in json.loads(out.stdout.strip().splitlines()[-1])["error"]
