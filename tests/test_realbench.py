"""The real-model benchmark's own parts that need no server (benchmarks/realmodel.py, realtasks.py,
realserver.py): every task's files and check, the report and seed 003's verdict, finding the server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from benchmarks import realserver, realtasks
from benchmarks.realmodel import NONE_PROFILE, Run, summary, tables, verdict

from ctxagent.profile import parse_profile

RIGHT = {"notes": "TANGO-42", "secret-file": "It is plum-koala-9.", "log-error-id": "7f3a9c41",
         "log-error-latency": "2113 ms", "model-map": "128000", "real-source": "True",
         "config-pair": "db.internal:5433", "on-call": "carol", "file-count": "There are 7 files.",
         "noisy-command": "83517", "three-reports": "VIOLET-33", "early-fact": "ORCHID-7"}


@pytest.mark.parametrize("task", [t for t in realtasks.TASKS if t.name in RIGHT], ids=lambda t: t.name)
def test_every_answer_task_sets_up_its_files_and_tells_the_right_answer_from_a_wrong_one(task, tmp_path):
    task.setup(tmp_path)
    assert any(tmp_path.rglob("*")) and task.turns
    assert task.check(RIGHT[task.name], tmp_path)
    assert not task.check("I do not know; 5d9dc9f8 maybe, or 1024.", tmp_path)


def test_the_log_holds_one_error_line_in_two_megabytes(tmp_path):
    realtasks.app_log(tmp_path)
    text = (tmp_path / "app.log").read_text(encoding="utf-8")
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(text) >= 2_000_000 and len(errors) == 1 and realtasks.ERROR_ID in errors[0]


def test_the_edit_tasks_check_the_folder_not_the_answer(tmp_path):
    fix = next(t for t in realtasks.TASKS if t.name == "fix-test")
    fix.setup(tmp_path)
    assert not fix.check("fixed it", tmp_path)
    (tmp_path / "calc.py").write_text(realtasks.CALC.replace("a - b", "a + b"), encoding="utf-8")
    assert fix.check("", tmp_path)
    edit = next(t for t in realtasks.TASKS if t.name == "edit-json")
    edit.setup(tmp_path)
    assert not edit.check("done", tmp_path)
    (tmp_path / "settings.json").write_text(json.dumps({**realtasks.SETTINGS, "debug": False}), encoding="utf-8")
    assert edit.check("", tmp_path)


def test_the_noisy_command_prints_its_total_last(tmp_path):
    realtasks.noisy_script(tmp_path)
    out = subprocess.run([sys.executable, "gen.py"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "DONE total=83517" and len(out) > 100_000


def test_the_tasks_cover_what_the_issue_names_and_can_be_chosen_by_name():
    assert len(realtasks.TASKS) >= 12 and {t.window for t in realtasks.TASKS} == {4096, 8192}
    assert [t.name for t in realtasks.select("notes,early-fact")] == ["notes", "early-fact"]
    with pytest.raises(SystemExit, match="unknown task"):
        realtasks.select("notes,nope")


def test_no_management_is_a_valid_profile_without_strategies():
    profile = parse_profile(NONE_PROFILE, source="none.yaml")
    assert profile.pipelines == {"interactive": [], "batch": []} and profile.tool_result_fraction == 0.9


def run(task, profile, success, status="answered", prompt=1000):
    return Run(task, profile, 0, 4096, success, status, "", 2, prompt, prompt // 2, 20, 10.0)


def test_the_report_and_seed_003s_verdict():
    runs = [run("a", "none", True), run("a", "default", True, prompt=600),
            run("b", "none", False, "context_overflow"), run("b", "default", True, prompt=900)]
    rows = {r["profile"]: r for r in summary(runs)}
    assert rows["none"]["success"] == 0.5 and rows["none"]["overflows"] == 1 and rows["default"]["success"] == 1
    lines = verdict(runs)
    assert lines[0] == "tasks where unmanaged overflowed: b"
    assert lines[1].startswith("default: success where unmanaged fits 100% vs 100% (within 3 points)")
    assert "where it overflows 100% vs 0%" in lines[1] and "600 vs 1,000 (-40%)" in lines[1]
    text = tables(runs, markdown=True)
    assert "| none | 1/2 (50%) |" in text and "| b | 0/1 | 1/1 |" in text


def test_a_missing_server_is_a_reason_not_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("LLAMA_SERVER", str(tmp_path / "no-such-server"))
    monkeypatch.setenv("CTXAGENT_REALMODEL_GGUF", str(tmp_path / "no.gguf"))
    reason = realserver.missing()
    assert reason is not None and "llama-server and the model not found" in reason and "--fetch --build" in reason
    with pytest.raises(RuntimeError, match="not found"):
        realserver.LlamaServer(4096).__enter__()


def test_the_server_is_looked_for_beside_the_repository_and_in_the_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("LLAMA_SERVER", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(realserver, "shared_dirs", lambda: [tmp_path / "shared"])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert realserver.find_server() is None
    cached = realserver.cache_dir() / "llama-server"
    cached.parent.mkdir(parents=True)
    cached.write_text("#!/bin/sh\n", encoding="utf-8")
    cached.chmod(0o755)
    assert realserver.find_server() == cached
    assert realserver.cache_dir() == Path(tmp_path) / "ctxagent-realmodel"
