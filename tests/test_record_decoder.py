"""The record decoder (sessions/records.py), the token-count cache, and the plain output of
``inspect context`` (issue 18)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest

from ctxagent.sessions import records

SAMPLES: list[Any] = [
    records.SessionHeader(name="s", model="openai/gpt-4o-mini", profile="default", context_window=128_000,
                          tools=["./t.py"], limits={"max_turns": 3, "max_cost_usd": 0.5, "x": None}),
    records.SettingsRecord(model="scripted:/x.yaml", path="interactive", limits={"max_turns": None}),
    records.MessageRecord(seq=0, turn=0, tokens=9, message={"role": "system", "content": "be \"careful\"\n\u00e9"}),
    records.MessageRecord(seq=3, turn=2, tokens=40, handle="@abc", offloaded=True,
                          message={"role": "tool", "tool_call_id": "call_abc", "content": "x\x00y\u2028z"},
                          file=records.FileTouch(path="/w/a.py", op="read", sha256="ab" * 32, args='{"n":1}')),
    records.MessageRecord(seq=4, turn=3, tokens=20, message={"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{\"command\": \"ls\"}"}}]}),
    records.OutputRecord(handle="@abc", call_id="call_abc", tool="shell", path="outputs/abc.txt", bytes=10, lines=2,
                         tokens=3, sha256="0" * 64, type="ndarray", shape=[2, 3], dtype="float32"),
    records.UsageRecord(turn=1, model="m", prompt_tokens=10, completion_tokens=2, estimated_prompt_tokens=9,
                        cost_usd=None),
    records.CompactionRecord(strategy="truncate", start=2, end=9, message={"role": "user", "content": "[dropped]"},
                             tokens=5, tokens_before=90, refs=["@a"], quotes=["q"]),
    records.EndRecord(reason="max_cost", turn=4, wall_s=1.5, limit="run.max_cost_usd", spent=0.2, left=0.0),
    records.PermissionRecord(call_id="c", tool="shell", policy="p", decision="deny"),
    records.NoteRecord(turn=1, source="summarize", text="fell back"),
    records.PinRecord(turn=1, fact="port 8080"),
    records.ToolsRecord(server="git", tools=[{"name": "log", "description": "d", "input_schema": {}}]),
    records.LessonsRecord(scope="s", ids=["L1"], lines=["a"], text="a"),
]


def test_every_record_kind_has_a_sample() -> None:
    assert {type(r) for r in SAMPLES} == set(get_args(get_args(records.Record)[0]))


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: r.kind)
def test_every_record_kind_roundtrips(record: Any) -> None:
    line = records.dumps(record)
    back = records.loads(line.encode())
    assert type(back) is type(record) and back == record
    assert records.dumps(back) == line  # ROUNDTRIP: same bytes, same field order
    changes = back.changes if isinstance(back, records.SettingsRecord) else {}  # a settings record's are its extras
    assert back.model_extra == changes and back.model_copy(update={"ts": 1.0}).ts == 1.0


def test_a_field_of_a_newer_ctxagent_is_kept_and_written_back() -> None:
    line = ('{"ts":1,"kind":"message","seq":1,"turn":1,"tokens":3,"message":{"role":"user","content":"x"},'
            '"newer":"field"}')
    assert json.loads(records.dumps(records.loads(line)))["newer"] == "field"


@pytest.mark.parametrize("line", ['{"kind":"thought","x":1}', '{"kind":"message","seq":1}', "not json", "", "[1]"])
def test_bad_lines_raise_what_pydantic_raises(line: str) -> None:
    with pytest.raises(ValueError):
        records.loads(line)


def test_inspect_context_into_a_pipe_is_plain_text(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text("- content: hello there\n", encoding="utf-8")
    env = {**os.environ}
    run = [sys.executable, "-m", "ctxagent"]
    subprocess.run([*run, "run", "--batch", "--session", "p", "--model", f"scripted:{script}", "hi"],
                   capture_output=True, check=True, env=env, cwd=tmp_path)
    out = subprocess.run([*run, "inspect", "context", "--session", "p"], capture_output=True, text=True,
                         check=True, env=env).stdout
    lines = out.splitlines()
    assert lines[0].split() == ["#", "seq", "role", "kind", "tokens", "cache", "content"]
    assert lines[1].split()[:3] == ["0", "0", "system"] and "hello there" in out
    assert not any(c in out for c in "┏━│┃") and "\x1b[" not in out  # no table frame, no colour
    assert any(line.startswith("budget [") for line in lines)


def test_inspect_context_listed_every_recorded_compaction_one_per_line():
    """Regression: a 500-turn session printed 5,381 'recorded compaction' lines; now a count per
    strategy and the newest ten (--json keeps them all)."""
    from ctxagent.cli import context_cmd
    from ctxagent.sessions.records import CompactionRecord

    recorded = [CompactionRecord(strategy="mask_observations" if i % 3 else "truncate", start=i, end=i + 1,
                                 tokens=10, tokens_before=100) for i in range(25)]
    counts = {"truncate": 9, "mask_observations": 16}  # as the session state counts them
    lines = context_cmd._recorded(recorded[-10:], counts)
    assert lines[0].startswith("recorded compactions: 25 (mask_observations 16, truncate 9)")
    assert len(lines) == 1 + 10
    assert lines[-1] == "recorded compaction: truncate #24-#25 (100 -> 10 tokens)"  # 24 % 3 == 0
    few = {"truncate": 1, "mask_observations": 2}
    assert context_cmd._recorded(recorded[:3], few) == [f"recorded compaction: {r.strategy} #{r.start}-#{r.end} "
                                                   "(100 -> 10 tokens)" for r in recorded[:3]]


OLD_HEADER = ('{"ts":1.0,"kind":"session","schema_version":1,"name":"old","model":"m0","profile":"default",'
              '"context_window":8000,"path":"batch","api_base":null,"workdir":"/w","tools":[],"profile_text":null,'
              '"limits":null,"mcp_config":null,"mcp_config_sha256":null,"max_output_tokens":null}')
OLD_CHANGE = ('{"ts":2.0,"kind":"settings","model":"m1","api_base":null,"profile":null,"profile_text":null,'
              '"context_window":16000,"workdir":null,"tools":null,"path":null,"limits":{"max_turns":4},'
              '"mcp_config":null,"mcp_config_sha256":null,"max_output_tokens":null}')


def test_settings_written_in_the_old_shape_every_field_null_when_unchanged_fold_to_the_same_settings() -> None:
    """Header and settings records written before the one Settings model (a settings record listed
    every field, null when unchanged; a header's limits were null when none) load and fold as then."""
    from ctxagent.agent.state import fold

    header, change = records.loads(OLD_HEADER), records.loads(OLD_CHANGE)
    assert change.changes == {"model": "m1", "context_window": 16000, "limits": {"max_turns": 4}}
    settings = fold([header, change]).settings
    assert settings == records.Settings(model="m1", profile="default", context_window=16000, workdir="/w",
                                        limits={"max_turns": 4})


def test_a_settings_record_with_a_bad_value_is_no_record() -> None:
    with pytest.raises(ValueError, match="context_window"):
        records.loads(b'{"ts":2.0,"kind":"settings","context_window":"wide"}')
