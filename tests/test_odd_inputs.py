"""Odd inputs and signals (issue 10): bytes that are not UTF-8, NUL bytes, a profile that is not
UTF-8, secrets where users and models put them, --output, --json on every exit path, failed setups
and SIGHUP. Each test runs the real CLI in a subprocess with a scripted model and pins one failure."""

from __future__ import annotations

import json
import os
import random
import signal
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clihelp import call, ctxagent, records, script, tool_messages
from ctxagent.sessions.redact import Redactor
from ctxagent.tools.clean import clean, encode_exact, mend, plain

NAME_FF = os.fsdecode(b"bad\xffname.txt")  # a file name holding byte 0xFF: "bad\udcffname.txt"
# random values, as keys and tokens are (issue 31: sequential or repeating fakes such as abcdefgh12345678 or
# ZZZZZZZZ are no secret's form, and a precise scan leaves them alone)
_T = ["".join(random.Random(f"odd-{i}").choices(string.ascii_letters + string.digits, k=n))
      for i, n in enumerate((16, 14, 13, 12, 12, 10, 32, 12, 12, 16))]


def data() -> Path:
    return Path(os.environ["CTXAGENT_DATA_DIR"])


def session_dirs() -> list[str]:
    root = data() / "sessions"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def raw_transcript(session: str) -> bytes:
    """The transcript's bytes; they must be valid UTF-8 whatever went in."""
    raw = (data() / "sessions" / session / "transcript.jsonl").read_bytes()
    raw.decode("utf-8")  # raises when a lone surrogate or a stray byte reached the file
    return raw


# ---------------------------------------------------------------- bytes that are not UTF-8


def test_list_dir_of_a_file_named_with_byte_ff_does_not_crash_the_run(tmp_path):
    """Failure pinned: list_dir on a folder holding a file named with byte 0xFF crashed the run with a
    UnicodeEncodeError traceback (exit 1) while writing the tool result."""
    work = tmp_path / "work"
    work.mkdir()
    (work / NAME_FF).write_bytes(b"x")
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("ls", "list_dir")]}, {"content": "done"}])
    out = ctxagent("run", "--batch", "--session", "ff", "--model", model, "list", cwd=work)
    assert (out.returncode, out.stdout) == (0, "done\n"), out.stderr
    assert "Traceback" not in out.stderr
    assert tool_messages("ff")["ls"] == "bad\\xffname.txt  1 bytes"
    raw_transcript("ff")


def test_a_task_with_byte_ff_starts_a_whole_session(tmp_path):
    """Failure pinned: byte 0xFF in the task crashed the run after the header was written (a
    half-made session). The task, as an argument or on stdin, is kept with the byte shown as \\xff."""
    model = script(tmp_path / "s.yaml", [{"content": "one"}, {"content": "two"}])
    out = ctxagent("run", "--batch", "--session", "task-ff", "--model", model, os.fsdecode(b"fix caf\xe9"))
    assert (out.returncode, out.stdout) == (0, "one\n"), out.stderr
    proc = subprocess.run([sys.executable, "-m", "ctxagent", "resume", "--batch", "--session", "task-ff", "-"],
                          input=b"again \xff with a NUL\x00 here\n", capture_output=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, b"two\n"), proc.stderr
    users = [r["message"]["content"] for r in records("task-ff")
             if r["kind"] == "message" and r["message"]["role"] == "user"]
    assert users == ["fix caf\\xe9", "again \\xff with a NUL here\n"]
    assert [r["reason"] for r in records("task-ff") if r["kind"] == "end"] == ["answered", "answered"]
    raw_transcript("task-ff")


def test_a_tool_error_quoting_a_lone_surrogate_is_written(tmp_path):
    """A model's arguments may hold a lone surrogate (a JSON \\udcff escape); the error that quotes
    it is written and sent with it made visible."""
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [{"id": "r", "name": "read_file", "arguments": '{"path": "no\\udcffsuch"}'},
                        {"id": "s", "name": "read_file", "arguments": '{"path": "lone\\ud800"}'},
                        {"id": "w", "name": "write_file", "arguments": '{"path": "w.txt", "content": "x\\udcff"}'}]},
        {"content": "done"},
    ])
    out = ctxagent("run", "--batch", "--session", "sur", "--model", model, "--allow", "write_file", "read",
                   cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    results = tool_messages("sur")
    assert results["r"].startswith("ERROR: no such file: no\\xffsuch (looked at ")
    assert results["s"].startswith("ERROR: ") and mend(results["s"]) == results["s"]
    assert results["w"].startswith("ERROR: content holds U+DCFF at character 1: a lone surrogate")
    assert not (tmp_path / "w.txt").exists()
    raw_transcript("sur")


def test_an_option_the_header_records_with_byte_ff_is_a_usage_error(tmp_path):
    bad = tmp_path / os.fsdecode(b"w\xff")
    bad.mkdir()
    model = script(tmp_path / "s.yaml", [{"content": "x"}])
    out = ctxagent("run", "--batch", "--session", "wd", "--workdir", str(bad), "--model", model, "x")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--workdir" in out.stderr and "\\xff" in out.stderr
    assert session_dirs() == []


def test_mend_plain_and_encode_exact():
    assert mend("a\udcffb\ud800") == "a\\xffb\ufffd"
    assert mend("plain") == "plain"
    assert plain("a\x00b\x07c\td\r\n\udce9") == "abc\td\r\n\\xe9"
    assert encode_exact(NAME_FF) == b"bad\xffname.txt"
    assert clean("x\x00y\x85z\udcff") == "xyz\\xff"


# ---------------------------------------------------------------- NUL bytes and controls


def _nul_tool(tmp_path: Path) -> str:
    module = tmp_path / "nultool.py"
    module.write_text("def nul_text() -> str:\n"
                      "    \"\"\"Text with NUL bytes and a C1 control.\"\"\"\n"
                      "    return 'name\\x00value\\x00\\x85end\\n'\n", encoding="utf-8")
    return f"{module}:nul_text"


def test_nul_bytes_in_textual_tool_output_are_never_sent_inline(tmp_path):
    """Failure pinned: NUL bytes inside otherwise textual output reached the request as \\u0000
    (several providers reject it). Text holding NUL is treated as binary: stored exactly, described."""
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("t", "nul_text"), call("sh", "shell", command="printf 'a\\000b\\n'"),
                        call("late", "shell", command="head -c 9000 /dev/zero | tr '\\0' x; printf '\\000tail\\n'")]},
        {"content": "done"},
    ])
    out = ctxagent("run", "--batch", "--session", "nul", "--model", model, "--tools", _nul_tool(tmp_path),
                   "--allow", "shell,nul_text", "go", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    results = tool_messages("nul")
    for content in results.values():
        assert "\x00" not in content and "\x85" not in content
    assert "binary data" in results["t"] and "binary data" in results["sh"]
    assert "xtail" in results["late"] and "saved as @late" in results["late"]  # past the sniff: cleaned preview
    outputs = {r["call_id"]: r for r in records("nul") if r["kind"] == "output"}
    assert set(outputs) == {"t", "sh", "late"}
    root = data() / "sessions" / "nul"
    assert (root / outputs["t"]["path"]).read_bytes() == b"name\x00value\x00\xc2\x85end\n"  # stored exactly
    assert (root / outputs["sh"]["path"]).read_bytes() == b"a\x00b\n"
    assert (root / outputs["late"]["path"]).read_bytes().endswith(b"x\x00tail\n")
    context = ctxagent("inspect", "context", "--session", "nul", "--json")
    assert context.returncode == 0 and "\\u0000" not in context.stdout


# ---------------------------------------------------------------- profiles


def test_a_profile_that_is_not_utf8_is_a_profile_error(tmp_path):
    """Failure pinned: a profile saved as Latin-1 crashed with a UnicodeDecodeError traceback."""
    profile = tmp_path / "latin1.yaml"
    profile.write_bytes(b"context_window: 8000\nsystem_prompt: caf\xe9\n")
    model = script(tmp_path / "s.yaml", [{"content": "x"}])
    out = ctxagent("run", "--batch", "--session", "p", "--profile", str(profile), "--model", model, "x")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"{profile}:2: not UTF-8 text (byte 0xe9" in out.stderr
    assert session_dirs() == []


# ---------------------------------------------------------------- secrets


def test_an_api_key_in_json_escaped_shell_arguments_never_reaches_the_transcript(tmp_path):
    """Failure pinned: `export API_KEY=\\"...\\"` in a shell call's arguments (JSON text, quotes
    escaped) was written to the transcript as is."""
    secret = "h" + _T[6][1:24]  # random, as a key is (a repeated "unter2" is no key's form: issue 31)
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("sh", "shell", command=f'export API_KEY="{secret}"; echo set')]},
        {"content": "done"},
    ])
    out = ctxagent("run", "--batch", "--session", "esc", "--model", model, "--allow", "shell", "go", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    raw = raw_transcript("esc").decode()
    assert secret not in raw and secret not in out.stderr
    assert 'API_KEY=\\\\\\"[REDACTED:secret]\\\\\\"' in raw  # in the arguments, JSON-escaped twice on disk


def test_secrets_in_the_api_base_the_profile_copy_and_the_error_message(tmp_path):
    """The userinfo and query of api_base, in the header, the profile copy kept in it, and the
    provider error printed on stderr and in the --json object."""
    password, key = "pw" + "Secret99", "q" + _T[0]  # a random key (a repeated "Key" is no key's form: issue 31)
    base = f"http://user:{password}@127.0.0.1:9/v1?api_key={key}"
    profile = tmp_path / "p.yaml"
    profile.write_text(f"model: openai/gpt-4o-mini\ncontext_window: 8000\nretries: 0\napi_base: {base}\n",
                       encoding="utf-8")
    out = ctxagent("run", "--json", "--session", "base", "--profile", str(profile), "--api-base", base, "x",
                   env={"OPENAI_API_KEY": "sk-" + "x" * 30})
    assert out.returncode == 4, out.stderr
    for text in (out.stdout, out.stderr, raw_transcript("base").decode()):
        assert password not in text and key not in text
    header = records("base")[0]
    assert "[REDACTED:" in header["api_base"] and "[REDACTED:" in header["profile_text"]


@pytest.mark.parametrize(("text", "kept"), [
    (f'curl -H "x-api-key: {_T[0]}" -H "X-Goog-Api-Key: {_T[1]}" https://h/v1', "x-api-key: "),
    (f"{{'api-key': '{_T[2]}', 'Cookie': 'session={_T[3]}; theme=dark mode'}}", "'api-key': '"),
    (f"GET https://h/v1/x?model=m&api_key={_T[4]}&sig={_T[5]} HTTP/1.1", "?model=m&api_key="),
    (f"git clone https://{_T[6]}@git.example.com/r.git", "https://"),
    (f'{{"access_token": "{_T[7]}", "Set-Cookie": "a={_T[8]}"}}', '"access_token": "'),
    (f"Proxy-Authorization: {_T[9]}", "Proxy-Authorization: "),
])
def test_secrets_in_headers_and_urls_are_redacted(text, kept):
    out = Redactor().text(text)
    assert kept in out and "[REDACTED:" in out
    for secret in (*_T, "session="):
        assert secret not in out
    assert Redactor().text(out) == out


def test_header_and_url_shapes_leave_ordinary_text_alone():
    benign = ["max_tokens: 4096", "the token count: 12", "monkey=bananas12345", "https://example.com/?page=2&q=x",
              "if (a && b) { return c ? d : e; }", "sort_keys=True", "tokens: the count is high",
              # code a benchmark caught being rewritten in stored outputs (dedupe then saw a changed result)
              'raise ValueError(f"bad token: {record_request!r}")', "the token: expired", "api_key: str | None",
              "return {'token': config_count, 'handler': error_payload_stream}", "token: configuration"]
    for text in benign:
        assert Redactor().text(text) == text


# ---------------------------------------------------------------- --output


@pytest.mark.parametrize("where", ["dir", "missing", "under-a-file"])
def test_output_that_cannot_be_written_fails_before_the_run(tmp_path, where):
    """Failure pinned: --output naming a directory failed only after the whole run, and a missing
    folder was created (with its parents)."""
    (tmp_path / "afile").write_text("x")
    target = {"dir": tmp_path, "missing": tmp_path / "new" / "deeper" / "out.txt",
              "under-a-file": tmp_path / "afile" / "out.txt"}[where]
    model = script(tmp_path / "s.yaml", [{"content": "x"}])
    out = ctxagent("run", "--json", "--session", "o", "--output", str(target), "--model", model, "x")
    assert out.returncode == 2 and "--output" in out.stderr
    assert json.loads(out.stdout)["status"] == "usage_error"
    assert not (tmp_path / "new").exists() and session_dirs() == []


def test_output_in_an_existing_folder_is_written(tmp_path):
    model = script(tmp_path / "s.yaml", [{"content": "the answer"}])
    target = tmp_path / "answer.txt"
    out = ctxagent("run", "--batch", "--session", "ok", "--output", str(target), "--model", model, "x")
    assert out.returncode == 0, out.stderr
    assert target.read_text() == "the answer\n"


# ---------------------------------------------------------------- --json on every exit path


@pytest.mark.parametrize(("args", "session"), [
    (["run", "--json", "--session", "bad/name", "x"], "bad/name"),
    (["run", "--json", "--max-turns", "0", "x"], None),
    (["resume", "--json", "--session", "ghost"], "ghost"),
    (["run", "--json", "--no-such-option", "x"], None),
    (["run", "--json", "   "], None),
])
def test_json_prints_its_object_for_usage_errors(args, session):
    """Failure pinned: a bad session name, --max-turns 0 or an unknown session printed nothing on
    stdout with --json, so `jq` got no input."""
    out = ctxagent(*args)
    assert out.returncode == 2
    result = json.loads(out.stdout)
    assert result["status"] == "usage_error" and result["session"] == session and result["error"]
    assert result["answer"] is None and result["turns"] == 0


# ---------------------------------------------------------------- failed setups


def test_failed_setups_leave_no_session_folder(tmp_path):
    """Failure pinned: every failed run left an empty session folder behind (~30 after a few)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools: [no_such_tool]\n", encoding="utf-8")
    good = script(tmp_path / "good.yaml", [{"content": "ok"}])
    failures = [["--profile", str(bad), "--model", good], ["--model", "scripted:/no/such.yaml"],
                ["--model", good, "--workdir", str(tmp_path / "missing")], ["--model", good, "--tools", "nope:fn"],
                ["--model", good, "--allow", "no_such_tool"]]  # refused after the header was written
    for i, args in enumerate(failures):
        out = ctxagent("run", "--batch", "--session", f"junk{i}", *args, "x")
        assert out.returncode == 2, out.stderr
    unnamed = ctxagent("run", "--batch", "--model", "scripted:/no/such.yaml", "x")
    assert unnamed.returncode == 2
    assert session_dirs() == []


# ---------------------------------------------------------------- SIGHUP


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_sighup_kills_the_shell_process_group_and_writes_an_interrupted_end_record(tmp_path):
    """Failure pinned: closing the terminal (SIGHUP) killed ctxagent at once: the shell command
    survived and no end record was written. Now it is SIGTERM's path, with exit 129."""
    pidfile = tmp_path / "sleep.pid"
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("slow", "shell", command=f"sleep 30 & echo $! > {pidfile}; wait")]},
        {"content": "after resume"},
    ])
    proc = subprocess.Popen([sys.executable, "-m", "ctxagent", "run", "--batch", "--allow", "shell", "--session",
                             "hup", "--model", model, "go"], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    child = int(pidfile.read_text())
    proc.send_signal(signal.SIGHUP)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # say what ctxagent was doing, rather than leak the process
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"ctxagent did not end within 30 s of SIGHUP; its stderr: {err[-2000:]}")
    assert proc.returncode == 129, err
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the shell command outlived ctxagent"
    ends = [r for r in records("hup") if r["kind"] == "end"]
    assert [e["reason"] for e in ends] == ["interrupted"]
    out = ctxagent("resume", "--batch", "--session", "hup", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "after resume\n"), out.stderr


def test_closing_the_terminal_ends_the_run_like_sighup(tmp_path):
    """The real case: ctxagent runs on a terminal that is closed (its pty master goes away). The
    kernel sends SIGHUP and writes to the terminal fail; the run still ends with exit 129, an
    interrupted end record and no shell command left running."""
    import fcntl
    import pty
    import termios

    pidfile = tmp_path / "sleep.pid"
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("slow", "shell", command=f"sleep 30 & echo $! > {pidfile}; wait")]},
        {"content": "never"},
    ])
    master, slave = pty.openpty()

    def controlling_terminal() -> None:
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([sys.executable, "-m", "ctxagent", "run", "--batch", "--allow", "shell", "--session",
                             "tty", "--model", model, "go"], cwd=tmp_path, stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True, preexec_fn=controlling_terminal)
    os.close(slave)
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline and proc.poll() is None
        if _readable(master):
            os.read(master, 65536)  # what ctxagent writes to the terminal; a full buffer would block it
        time.sleep(0.05)
    child = int(pidfile.read_text())
    os.close(master)  # the terminal window closes
    assert proc.wait(timeout=30) == 129
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)
    assert [r["reason"] for r in records("tty") if r["kind"] == "end"] == ["interrupted"]


def _readable(fd: int) -> bool:
    import select

    return bool(select.select([fd], [], [], 0)[0])


class _SignalAfterStart:
    """``os`` as tools/builtin.py sees it, but its first ``close`` (the spool's, right after the shell
    command started, before the tool waits for it) raises KeyboardInterrupt once the command runs:
    a signal that arrives in that window."""

    def __init__(self, pidfile: Path) -> None:
        self.pidfile, self.fired = pidfile, False

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def close(self, fd: int) -> None:
        os.close(fd)
        if not self.fired:
            self.fired = True
            deadline = time.monotonic() + 30
            while not (self.pidfile.exists() and self.pidfile.read_text().strip()) and time.monotonic() < deadline:
                time.sleep(0.02)
            raise KeyboardInterrupt


def test_a_signal_between_a_shell_commands_start_and_its_wait_still_kills_its_group(tmp_path, monkeypatch):
    """Failure pinned (seen once in a loaded suite run of the SIGHUP test): a signal that reached the
    run after the command started but before the shell tool waited for it left the command running,
    as only a run with sub-agents killed the running commands. Every interrupted run kills them now."""
    from ctxagent.tools import builtin

    pidfile = tmp_path / "sleep.pid"
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("slow", "shell", command=f"sleep 30 & echo $! > {pidfile}; wait")]},
        {"content": "after resume"}])
    fake_os = _SignalAfterStart(pidfile)
    monkeypatch.setattr(builtin, "os", fake_os)
    out = ctxagent("run", "--batch", "--allow", "shell", "--session", "window", "--model", model, "go", cwd=tmp_path)
    assert fake_os.fired and out.returncode == 130, out.stderr
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the shell command outlived the interrupted run"
    assert [e["reason"] for e in records("window") if e["kind"] == "end"] == ["interrupted"]
