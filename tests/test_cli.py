"""End-to-end: the real CLI in subprocesses, real tools, real JSONL; only the model is scripted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clihelp import call, ctxagent, records, script, tool_messages


def data_dir() -> str:
    return os.environ["CTXAGENT_DATA_DIR"]


def test_batch_answer_alone_on_stdout_and_json(tmp_path):
    model = script(tmp_path / "s.yaml", [{"content": "forty-two"}])
    out = ctxagent("run", "--batch", "--session", "plain", "--model", model, "what is it?")
    assert (out.returncode, out.stdout) == (0, "forty-two\n"), out.stderr
    assert "session plain" in out.stderr
    model = script(tmp_path / "j.yaml", [{"content": "yes"}])
    out = ctxagent("run", "--json", "--session", "js", "--model", model, "-", stdin="task from stdin")
    obj = json.loads(out.stdout)
    assert obj["session"] == "js" and obj["status"] == "answered" and obj["answer"] == "yes"
    assert obj["turns"] == 1 and obj["usage"]["prompt_tokens"] > 0
    users = [r["message"]["content"] for r in records("js") if r["kind"] == "message"
             and r["message"]["role"] == "user"]
    assert users == ["task from stdin"]


def test_offload_then_read_by_handle(tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("".join(f"line {i} value={i * 7}\n" for i in range(60_000)), encoding="utf-8")
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("cat1", "shell", command=f"cat {big}")]},
        {"tool_calls": [call("r1", "read_output", handle="@cat1", start_line=31337, end_line=31337),
                        call("g1", "grep_output", handle="@cat1", pattern=r"^line 4242 ")]},
        {"content": "done"},
    ])
    out = ctxagent("run", "--batch", "--allow", "shell", "--session", "off", "--model", model, "find line 31337")
    assert out.returncode == 0, out.stderr
    results = tool_messages("off")
    assert "@cat1" in results["cat1"] and "value=219359" not in results["cat1"]
    assert "line 31336 value=219352" in results["r1"]  # 0-based line 31336 is file line 31337
    assert "line 4242 value=29694" in results["g1"]
    outputs = [r for r in records("off") if r["kind"] == "output"]
    assert [o["handle"] for o in outputs] == ["@cat1"]
    stored = os.path.join(data_dir(), "sessions", "off", outputs[0]["path"])
    assert Path(stored).read_bytes() == big.read_bytes()


def test_max_turns_then_resume_answers(tmp_path):
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("a", "shell", command="echo one")]},
        {"tool_calls": [call("b", "shell", command="echo two")]},
        {"content": "finished"},
    ])
    out = ctxagent("run", "--batch", "--allow-all", "--session", "lim", "--model", model, "--max-turns", "2", "go")
    assert out.returncode == 3, out.stderr
    assert "warning: --allow-all" in out.stderr
    assert "max_turns" in out.stderr
    listed = ctxagent("sessions", "list", "--json")
    row = next(json.loads(x) for x in listed.stdout.splitlines() if json.loads(x)["name"] == "lim")
    assert row["status"] == "max_turns"
    out = ctxagent("resume", "--batch", "--allow", "shell", "--session", "lim")
    assert (out.returncode, out.stdout) == (0, "finished\n"), out.stderr
    again = ctxagent("resume", "--batch", "--session", "lim")  # answered: reported again, no model call
    assert (again.returncode, again.stdout) == (0, "finished\n"), again.stderr


def test_resume_most_recent_with_new_message(tmp_path):
    model = script(tmp_path / "s.yaml", [{"content": "first"}, {"content": "second"}])
    assert ctxagent("run", "--batch", "--session", "r1", "--model", model, "q1").returncode == 0
    out = ctxagent("resume", "--batch", "q2")
    assert (out.returncode, out.stdout) == (0, "second\n"), out.stderr
    users = [r["message"]["content"] for r in records("r1") if r["kind"] == "message"
             and r["message"]["role"] == "user"]
    assert users == ["q1", "q2"]


def test_second_writer_is_refused_and_writes_nothing(tmp_path):
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("slow", "shell", command="sleep 3; echo slept")]},
        {"content": "ok"},
    ])
    first = subprocess.Popen([sys.executable, "-m", "ctxagent", "run", "--batch", "--allow", "shell",
                              "--session", "busy", "--model", model, "task"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    transcript = os.path.join(data_dir(), "sessions", "busy", "transcript.jsonl")
    deadline = time.time() + 30
    while not (os.path.exists(transcript) and "slow" in Path(transcript).read_text()):
        assert time.time() < deadline and first.poll() is None
        time.sleep(0.05)
    before = Path(transcript).read_bytes()
    second = ctxagent("resume", "--batch", "--session", "busy", "another")
    assert second.returncode == 1 and "in use" in second.stderr
    assert Path(transcript).read_bytes() == before
    _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err


def test_torn_last_line_is_set_aside_on_resume(tmp_path):
    model = script(tmp_path / "s.yaml", [{"content": "one"}, {"content": "two"}])
    assert ctxagent("run", "--batch", "--session", "torn", "--model", model, "q").returncode == 0
    path = os.path.join(data_dir(), "sessions", "torn", "transcript.jsonl")
    with open(path, "ab") as fh:
        fh.write(b'{"kind":"message","seq":99,"turn":')
    out = ctxagent("resume", "--batch", "--session", "torn", "again")
    assert (out.returncode, out.stdout) == (0, "two\n"), out.stderr
    assert "torn last line" in out.stderr
    assert os.path.exists(os.path.join(data_dir(), "sessions", "torn", "transcript.torn-1.jsonl"))


def test_bad_profile_exit_2_names_file_line_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: scripted:x\npreview:\n  head_lines: lots\n", encoding="utf-8")
    out = ctxagent("run", "--batch", "--profile", str(bad), "task")
    assert out.returncode == 2
    assert f"{bad}:3 (key 'preview.head_lines')" in out.stderr


def test_tool_errors_go_back_to_the_model(tmp_path):
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("u", "no_such_tool", x=1),
                        {"id": "j", "name": "shell", "arguments": '{"command": "echo hi"'},
                        call("e", "read_file", path=str(tmp_path / "missing.txt")),
                        call("w", "list_dir", path=str(tmp_path / "nope"))]},
        {"content": "recovered"},
    ])
    out = ctxagent("run", "--batch", "--session", "errs", "--model", model, "try things", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "recovered\n"), out.stderr
    results = tool_messages("errs")
    assert list(results) == ["u", "j", "e", "w"]  # call order, paired by id
    assert results["u"].startswith("ERROR") and "shell" in results["u"]
    assert results["j"].startswith("ERROR") and "JSON" in results["j"]
    assert results["e"].startswith("ERROR") and "missing.txt" in results["e"]
    assert results["w"].startswith("ERROR")


def test_binary_non_utf8_and_one_huge_line(tmp_path):
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [
            call("bin", "shell", command="head -c 3000 /dev/urandom; printf '\\0\\0'"),
            call("latin", "shell", command="printf 'caf\\xe9 cr\\xe8me\\n'"),
            call("wide", "shell", command="python3 -c \"print('\u00e9' * 200000)\""),
        ]},
        {"content": "ok"},
    ])
    out = ctxagent("run", "--batch", "--allow", "shell", "--session", "bytes", "--model", model, "bytes")
    assert out.returncode == 0, out.stderr
    results = tool_messages("bytes")
    assert "@bin" in results["bin"] and "binary" in results["bin"].lower()
    assert "@latin" in results["latin"]  # not valid UTF-8: stored exactly, never dumped
    assert len(results["wide"]) < 10_000 and "@wide" in results["wide"]
    results["wide"].encode("utf-8")  # valid text
    stored = os.path.join(data_dir(), "sessions", "bytes", "outputs", "latin.out")
    assert Path(stored).read_bytes() == b"caf\xe9 cr\xe8me\n"


def test_inspect_and_help_do_not_import_litellm():
    code = ("import sys\nfrom ctxagent.cli import invoke\n"  # main() would end the process after one command
            "assert invoke(['--help']) == 0\n"
            "assert 'litellm' not in sys.modules, 'litellm imported'\n"
            "assert invoke(['sessions', 'list']) == 0\n"
            "assert 'litellm' not in sys.modules, 'litellm imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_unknown_session_and_bad_name():
    out = ctxagent("inspect", "transcript", "--session", "ghost")
    assert out.returncode == 2 and "no session named 'ghost'" in out.stderr
    out = ctxagent("run", "--batch", "--session", "../escape", "x")
    assert out.returncode == 2 and "invalid session name" in out.stderr


@pytest.mark.parametrize("args", [["--help"], ["inspect", "--help"], ["sessions", "--help"]])
def test_help_works(args):
    out = ctxagent(*args)
    assert out.returncode == 0 and "Usage" in out.stdout


def test_inspect_names_a_compactions_stored_original_instead_of_from_nothing():
    """``output @ctx4_0 from : 175 bytes``: the original of a result a compaction cut has no tool."""
    from ctxagent.cli.inspect import _output
    from ctxagent.sessions import records

    cut = records.OutputRecord(handle="@ctx4_0", call_id="ctx4_0", tool="", path="outputs/ctx4_0.out", bytes=175,
                               lines=2, tokens=67, sha256="")
    assert "@ctx4_0 (result ctx4_0, kept when a compaction cut it): 175 bytes" in _output(cut)
    assert "@ctx2_0 from read_file: 9 bytes" in _output(cut.model_copy(update={"handle": "@ctx2_0", "tool": "read_file",
                                                                                  "bytes": 9}))
