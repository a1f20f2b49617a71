"""The interactive path on a real terminal (a pty): slash commands, multi-line paste, the permission
prompt that asks again, the live status of a running tool; and the batch heartbeat (issue 16)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from clihelp import call, ctxagent, records, script
from ctxagent.cli.run import for_terminal

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


class Terminal:
    """``ctxagent ARGS`` on a pseudo-terminal: :meth:`expect` text, :meth:`send` keys."""

    def __init__(self, *args: str, cwd: Path):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen([sys.executable, "-m", "ctxagent", *args], cwd=cwd, stdin=slave, stdout=slave,
                                     stderr=slave, start_new_session=True, env={**os.environ, "COLUMNS": "200"})
        os.close(slave)
        self.seen = ""

    def expect(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            assert time.monotonic() < deadline, f"{text!r} never came; the terminal showed:\n{self.seen[-3000:]}"
            if select.select([self.master], [], [], 0.1)[0]:
                try:
                    self.seen += ANSI.sub("", os.read(self.master, 65536).decode("utf-8", "replace"))
                except OSError:
                    break
        return self.seen

    def send(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=30)
        finally:
            os.close(self.master)


def test_slash_commands_and_a_multi_line_paste(tmp_path):
    model = script(tmp_path / "s.yaml", [{"content": "first answer"}, {"content": "second answer"}])
    term = Terminal("run", "--session", "tty1", "--model", model, "the task", cwd=tmp_path)
    term.expect("first answer")
    term.expect("> ")
    term.send("/help\n")
    term.expect("/compact")
    term.send("/pin deploy key K-9\n")
    term.expect("pinned: deploy key K-9")
    term.send("/cost\n")
    term.expect("session: 1 calls")
    term.send("/nope\n")
    term.expect("unknown command")
    term.send("line one\nline two\n")  # one paste: the lines arrive together
    term.expect("second answer")
    term.expect("> ")
    term.send("/exit\n")
    assert term.close() == 0
    recs = records("tty1")
    assert [r["fact"] for r in recs if r["kind"] == "pin"] == ["deploy key K-9"]
    users = [r["message"]["content"] for r in recs if r["kind"] == "message" and r["message"]["role"] == "user"]
    assert users == ["the task", "line one\nline two"]


def test_permission_prompt_asks_again_on_an_unclear_reply_and_a_tool_shows_its_progress(tmp_path):
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("c1", "shell", command="sleep 2.5; echo done-here")]},
                                         {"content": "ran it"}])
    term = Terminal("run", "--session", "tty2", "--model", model, "go", cwd=tmp_path)
    term.expect("allow?")
    term.send("maybe\n")
    term.expect("please answer y (yes), n (no) or a (always)")
    term.send("y\n")
    term.expect("running shell · 1 s")  # the live status while the tool runs
    term.expect("ran it")
    term.expect("> ")
    term.send("\x04")  # Ctrl-D ends the session (an empty line no longer does)
    assert term.close() == 0
    tool = next(r for r in records("tty2") if r["kind"] == "message" and r["message"]["role"] == "tool")
    assert "done-here" in tool["message"]["content"]


def test_a_long_tool_call_prints_a_heartbeat_in_batch_mode(tmp_path):
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("c1", "shell", command="seq 1 5000; sleep 1.5")]},
                                         {"content": "done"}])
    out = ctxagent("run", "--batch", "--allow", "shell", "--session", "hb", "--model", model, "go",
                   env={"CTXAGENT_HEARTBEAT_S": "0.4"})
    assert out.returncode == 0, out.stderr
    beats = [line for line in out.stderr.splitlines() if "tool shell still running" in line]
    assert beats and "of output so far" in beats[-1] and "23.9 kB" in beats[-1]  # seq 1 5000 = 23,894 bytes


def test_an_answer_value_over_the_terminal_size_is_cut_and_says_how_to_get_it():
    text = "\n".join(f"row {i}" for i in range(100_000))
    shown = for_terminal(text, "s1")
    assert len(shown) < 25_000 and shown.startswith("row 0\n") and shown.endswith("row 99999")
    assert "--output FILE" in shown and f"{len(text):,} characters" in shown
    assert for_terminal("short", "s1") == "short"


def test_a_heartbeat_after_the_spool_was_adopted_does_not_report_0_bytes(tmp_path):
    """Regression (seen under load): the tool ended and its spool file was adopted before the ticker was
    stopped, and the last heartbeat said "0 bytes of output so far" after "23.9 kB"."""
    from ctxagent.cli.render import Ticker

    spool = tmp_path / ".spool-1"
    spool.write_bytes(b"x" * 23_894)
    seen: list[int] = []
    ticker = Ticker(0.01, lambda _s, n: seen.append(n), tmp_path)
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    spool.rename(tmp_path / "c1.txt")  # adopted: no spool file left
    count = len(seen)
    while len(seen) < count + 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    ticker.stop()
    assert len(seen) >= count + 3 and set(seen) == {23_894}, seen


def test_batch_progress_is_printed_as_rich_printed_it_but_an_emoji_code_stays_text(capsys):
    """Batch progress on stderr goes through PlainErr, not rich (~30 ms of imports a run): the same
    text rich's console printed (control codes dropped, tabs expanded), except that rich turned
    ``:b:`` or ``:smile:`` in a tool's arguments into an emoji."""
    import io

    from rich.console import Console

    from ctxagent.cli.render import PlainErr

    for text in ["turn 1: asking the model (5/100 tokens)", "a\tb\n\tc", "x\ry\bz\a\x0b\x0c!", "e\x1b[31mred\x00",
                 "uni ünï 漢字", "trailing  \n", "[bold]not markup[/bold]"]:
        rich = io.StringIO()
        Console(file=rich, highlight=False, soft_wrap=True).print(text, markup=False)
        PlainErr().print(text)
        assert capsys.readouterr().err == rich.getvalue(), repr(text)
    PlainErr().print('  tool shell({"command": "echo a:b:c :smile:"}) ok')
    assert capsys.readouterr().err == '  tool shell({"command": "echo a:b:c :smile:"}) ok\n'
