"""Failures a new user's trial found in the issue 10/11 work, each pinned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clihelp import call, ctxagent, records, script
from ctxagent.errors import ProfileError
from ctxagent.profile import parse_profile


def _session(tmp_path: Path, name: str, replies: list, *args: str) -> tuple[Path, object]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    model = script(tmp_path / f"{name}-script.yaml", replies)
    out = ctxagent("run", "--batch", "--json", "--session", name, "--model", model, *args, "go", cwd=work)
    return work, out


def _transcript(name: str) -> Path:
    import os

    return Path(os.environ["CTXAGENT_DATA_DIR"]) / "sessions" / name / "transcript.jsonl"


def test_a_duplicated_assistant_line_is_left_out_not_a_traceback(tmp_path):
    replies = [{"tool_calls": [call("a1", "list_dir", path=".")]}, {"content": "done"}, {"content": "again"}]
    work, out = _session(tmp_path, "dupa", replies)
    assert out.returncode == 0, out.stderr
    path = _transcript("dupa")
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if '"tool_calls"' in line)
    path.write_text("".join([*lines[:at + 1], lines[at], *lines[at + 1:]]))  # the reply's line twice
    resumed = ctxagent("resume", "--json", "--session", "dupa", "more", cwd=work)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["answer"] == "again"
    assert "repeats the tool calls a1 of an earlier reply" in resumed.stderr
    assert any(r["kind"] == "note" and "repeats the tool calls" in r["text"] for r in records("dupa"))


def test_resume_with_another_profile_clears_a_thrash_stop(tmp_path):
    profile = tmp_path / "th.yaml"
    profile.write_text("context_window: 8000\nmax_output_tokens: 300\ntarget: 0.3\ntrigger: 0.45\n"
                       "pipelines:\n  batch:\n    - strategy: truncate\n")
    turns = [{"tool_calls": [call(f"s{i}", "shell", command=f"seq 1 700; echo {i}")]} for i in range(12)]
    work, out = _session(tmp_path, "th", [*turns, {"content": "done"}], "--profile", str(profile), "--allow", "shell")
    assert out.returncode == 3 and json.loads(out.stdout)["status"] == "thrash", out.stderr
    again = ctxagent("resume", "--json", "--session", "th", "--profile", "minimal", "--allow", "shell", cwd=work)
    assert json.loads(again.stdout)["status"] != "thrash", again.stderr


def test_an_emptied_transcript_is_not_resumed_as_a_new_default_session(tmp_path):
    work, out = _session(tmp_path, "empty", [{"content": "done"}])
    assert out.returncode == 0, out.stderr
    _transcript("empty").write_text("")
    resumed = ctxagent("resume", "--json", "--session", "empty", "more", cwd=work)
    assert resumed.returncode == 2 and "is empty" in json.loads(resumed.stdout)["error"]
    assert _transcript("empty").read_text() == ""  # nothing written: no header with default settings


@pytest.mark.parametrize("value", [1])
def test_loop_guard_1_would_warn_on_every_first_call_and_is_refused(value):
    with pytest.raises(ProfileError, match="loop_guard"):
        parse_profile(f"loop_guard: {value}\n", source="p.yaml")
    assert parse_profile("loop_guard: 0\n", source="p.yaml").loop_guard == 0


def test_a_file_name_with_byte_ff_as_list_dir_shows_it_reaches_the_real_file(tmp_path):
    """list_dir shows byte 0xFF as \\xff; read_file of that name said 'no such file' and write_file
    created a second file literally named with a backslash."""
    import os

    work = tmp_path / "work"
    work.mkdir()
    real = os.path.join(os.fsencode(work), b"f\xffe.txt")
    with open(real, "wb") as fh:
        fh.write(b"old text\n")
    replies = [{"tool_calls": [call("l", "list_dir", path=".")]},
               {"tool_calls": [call("r", "read_file", path="f\\xffe.txt")]},
               {"tool_calls": [call("w", "write_file", path="f\\xffe.txt", content="new text\n")]},
               {"content": "done"}]
    _, out = _session(tmp_path, "ffname", replies, "--allow", "write_file")
    assert out.returncode == 0, out.stderr
    results = {r["message"]["tool_call_id"]: r["message"]["content"] for r in records("ffname")
               if r["kind"] == "message" and r["message"]["role"] == "tool"}
    assert "f\\xffe.txt" in results["l"] and results["r"] == "old text\n"
    with open(real, "rb") as fh:
        assert fh.read() == b"new text\n"
    assert sorted(os.listdir(os.fsencode(work))) == [b"f\xffe.txt"]  # no literal backslash name
