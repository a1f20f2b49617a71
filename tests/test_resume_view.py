"""SAME CONTEXT ON RESUME: after a stop, the next request is byte for byte the one an uninterrupted
run sends at the same point — for every bundled profile, on both paths; summaries are not recomputed."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from clihelp import FIXED_SYSTEM_PROMPT
from ctxagent.agent.config import RunConfig
from ctxagent.agent.setup import open_runner
from ctxagent.errors import LimitReached
from ctxagent.profile import bundled_names, load_profile
from ctxagent.sessions.session import Session

TURNS = 14


def agent_script(path: Path) -> str:
    replies = [{"content": f"step {i}", "tool_calls": [
        {"id": f"c{i}", "name": "shell", "arguments": {"command": f"seq {i * 1000} {i * 1000 + 160}"}}]}
        for i in range(TURNS)]
    replies.append({"content": "done"})
    path.write_text(yaml.safe_dump(replies), encoding="utf-8")
    return f"scripted:{path}"


def profile_file(tmp_path: Path, name: str) -> str:
    """The bundled profile ``name`` with a small window (so its pipelines act) and a scripted summarizer."""
    summaries = [f"SUMMARY-{n}: steps so far ran seq over numbered ranges." for n in range(1, 40)]
    (tmp_path / "summaries.yaml").write_text(yaml.safe_dump(summaries), encoding="utf-8")
    bundled = load_profile(name)
    # only what differs from the defaults (each of a test's five runs parses this file, twice): the same profile
    data = bundled.model_dump(mode="json", exclude_defaults=True)
    data["pipelines"] = {path: [{"strategy": step.strategy, **step.model_dump(mode="json", exclude_defaults=True)}
                                for step in steps] for path, steps in bundled.pipelines.items()}
    data["system_prompt"] = FIXED_SYSTEM_PROMPT  # where the summaries fall is sized to it
    data.update(context_window=7_000, max_output_tokens=300, margin_tokens=50, tool_result_limit=900,
                max_turns=100, summarizer={"model": f"scripted:{tmp_path / 'summaries.yaml'}", "max_tokens": 300})
    for steps in data["pipelines"].values():  # masking alone would keep this small window under the trigger
        for step in steps:
            if step["strategy"] == "mask_observations":
                step["keep_tokens"] = 0.6
    # this test is about the context, not about asking before the shell runs
    data["permissions"] = {**data.get("permissions", {}), "kinds": {"exec": "allow"}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(path)


def run(data: Path, profile: str, model: str, path: str, tmp_path: Path, max_turns: int | None) -> list[str]:
    """Run (or resume) session ``s`` in data dir ``data``; the JSON text of every request it sent.

    Every run uses the same session name in a data dir whose name has one letter, so the paths in
    notes and previews cost the same tokens and differ only by that letter (normalized here)."""
    sent: list[str] = []
    os.environ["CTXAGENT_DATA_DIR"] = str(data)
    with Session.at("s").writer() as s:
        runner = open_runner(s, RunConfig(profile_spec=profile, model_spec=model, api_base=None, path=path,  # type: ignore[arg-type]
                             workdir=tmp_path))
        complete = runner.model.complete

        def recording(messages, tools):
            text = json.dumps(list(messages), ensure_ascii=False, sort_keys=True)
            sent.append(text.replace(str(data), "DATA"))
            return complete(messages, tools)

        runner.model.complete = recording  # type: ignore[method-assign]
        first = None if runner.state.next_seq else "count with seq"
        try:
            for _ in runner.run(first, max_turns=max_turns):
                pass
        except LimitReached:
            pass
    return sent


@pytest.mark.parametrize("path", ["batch", "interactive"])
@pytest.mark.parametrize("name", bundled_names())
def test_resumed_request_equals_uninterrupted_one(tmp_path, monkeypatch, name, path):
    monkeypatch.setenv("CTXAGENT_DATA_DIR", str(tmp_path))  # restored after the test
    profile = profile_file(tmp_path, name)
    whole = run(tmp_path / "w", profile, agent_script(tmp_path / "a.yaml"), path, tmp_path, None)
    assert len(whole) == TURNS + 1
    for stop, letter in ((5, "x"), (9, "y")):
        model = agent_script(tmp_path / f"{letter}.yaml")
        first = run(tmp_path / letter, profile, model, path, tmp_path, stop)
        rest = run(tmp_path / letter, profile, model, path, tmp_path, None)
        assert first == whole[:stop]
        assert rest == whole[stop:], f"request {stop + 1} after resume differs from the uninterrupted run"
    compacted = [r for r in whole if "[ctxagent" in r]
    assert compacted, "the small window should have made the pipeline act"
    if path == "interactive" and name == "default":  # summarize ran: the summary made before the stop was replayed
        made = re.search(r"SUMMARY-\d+", whole[stop - 1])
        assert made and made.group(0) in whole[stop]
