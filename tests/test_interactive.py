"""The interactive path on a real terminal (a pty): slash commands, multi-line paste, the permission
prompt that asks again, the live status of a running tool; and the batch heartbeat (issue 16)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import subprocess
import sys
import termios
import time
from pathlib import Path

from clihelp import call, ctxagent, records, script
from ctxagent.cli.run import for_terminal

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def _controlling_terminal() -> None:
    """In the child: a new session whose controlling terminal is the pty on stdin, so that Ctrl-C
    typed there is SIGINT to it (the terminal's foreground process group), as in a real terminal."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """``ctxagent ARGS`` on a pseudo-terminal, its controlling terminal: :meth:`expect` text,
    :meth:`send` keys (``\x03`` is Ctrl-C: SIGINT, ``\x04`` Ctrl-D: end of input)."""

    def __init__(self, *args: str, cwd: Path, env: dict[str, str] | None = None):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen([sys.executable, "-m", "ctxagent", *args], cwd=cwd, stdin=slave, stdout=slave,
                                     stderr=slave, preexec_fn=_controlling_terminal,
                                     env={**os.environ, "COLUMNS": "200", **(env or {})})
        os.close(slave)
        self.seen = ""
        self.pos = 0  # where the next expect() starts looking: after the last text found (as pexpect does)

    def expect(self, text: str, timeout: float = 60) -> str:
        """Wait for ``text`` after what the last call found; returns all the terminal showed."""
        deadline = time.monotonic() + timeout
        while text not in self.seen[self.pos:]:
            assert time.monotonic() < deadline, f"{text!r} never came; the terminal showed:\n{self.seen[-3000:]}"
            if select.select([self.master], [], [], 0.1)[0]:
                try:
                    self.seen += ANSI.sub("", os.read(self.master, 65536).decode("utf-8", "replace"))
                except OSError:
                    break
        self.pos = self.seen.index(text, self.pos) + len(text)
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


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _messages(session: str) -> list[dict]:
    return [r["message"] for r in records(session) if r["kind"] == "message"]


def _wait_for(check, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_ctrl_c_during_a_tool_call_cancels_the_turn_and_the_session_goes_on(tmp_path):
    """Ctrl-C during a tool call ended the whole run (exit 130); as in Claude Code, Codex and aider it
    cancels that turn: the tool's process group is killed, an interrupted result recorded (PAIR),
    and the prompt comes back."""
    from ctxagent.agent.tool_calls import CANCELLED
    from ctxagent.messages import pair_violations

    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("c1", "shell", command="echo $$ > pid; sleep 60")]},
                                         {"content": "after the cancel"}])
    term = Terminal("run", "--session", "cc1", "--allow", "shell", "--model", model, "start", cwd=tmp_path)
    term.expect("running shell")
    _wait_for(lambda: (tmp_path / "pid").is_file() and (tmp_path / "pid").read_text().strip())
    pid = int((tmp_path / "pid").read_text())
    term.send("\x03")
    term.expect("cancelled")
    term.expect("> ")
    assert term.proc.poll() is None and not _alive(pid)  # the session goes on; the command's group is gone
    term.send("go on\n")
    term.expect("after the cancel")
    term.expect("> ")
    term.send("/exit\n")
    assert term.close() == 0
    messages = _messages("cc1")
    assert [m["content"] for m in messages if m["role"] == "user"] == ["start", "go on"]
    assert next(m for m in messages if m["role"] == "tool")["content"] == CANCELLED
    assert pair_violations(messages) == []
    ends = [r for r in records("cc1") if r["kind"] == "end"]
    assert [e["reason"] for e in ends] == ["interrupted", "answered"]


def test_a_second_ctrl_c_within_a_moment_quits(tmp_path):
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("c1", "shell", command="sleep 60")]}, "never"])
    term = Terminal("run", "--session", "cc2", "--allow", "shell", "--model", model, "start", cwd=tmp_path)
    term.expect("running shell")
    term.send("\x03")
    term.expect("cancelled")
    term.send("\x03")  # within QUIT_WINDOW_S of the first: at the prompt, or still cancelling
    term.expect("'ctxagent resume --session cc2' continues")
    assert term.close() == 130


def test_an_empty_enter_does_not_end_the_session_nor_does_one_ctrl_c_at_the_prompt(tmp_path):
    """An empty line ended the interactive session; it asks again (``/exit`` or Ctrl-D end it)."""
    model = script(tmp_path / "s.yaml", [{"content": "first answer"}, {"content": "second answer"}])
    term = Terminal("run", "--session", "cc3", "--model", model, "one", cwd=tmp_path)
    term.expect("first answer")
    term.expect("> ")
    term.send("\n")
    term.expect("> ")  # asked again
    term.send("\x03")
    term.expect("Ctrl-C again within 2 s quits")
    term.expect("> ")
    assert term.proc.poll() is None
    term.send("two\n")
    term.expect("second answer")
    term.expect("> ")
    term.send("\x04")
    assert term.close() == 0
    assert [m["content"] for m in _messages("cc3") if m["role"] == "user"] == ["one", "two"]


def test_reaching_max_turns_returns_to_the_prompt(tmp_path):
    """``--max-turns`` ended an interactive session (exit 3); it ends the turn, the prompt comes back."""
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("c1", "shell", command="echo hi")]},
                                         {"content": "finished after more turns"}])
    term = Terminal("run", "--session", "cc4", "--allow", "shell", "--max-turns", "1", "--model", model, "go",
                    cwd=tmp_path)
    term.expect("stopped after max_turns=1 model calls")
    term.expect("send a message to go on")
    term.expect("> ")
    term.send("continue\n")
    term.expect("finished after more turns")
    term.expect("> ")
    term.send("/exit\n")
    assert term.close() == 0
    assert [e["reason"] for e in records("cc4") if e["kind"] == "end"] == ["max_turns", "answered"]


LITELLM_PROFILE = "context_window: 50000\nmax_output_tokens: 200\nretries: 0\n"


def _litellm_terminal(tmp_path: Path, server, *args: str) -> Terminal:
    """An interactive run of ``openai/gpt-4o-mini`` against ``server`` (a FakeOpenAI): real litellm HTTP."""
    (tmp_path / "p.yaml").write_text(LITELLM_PROFILE, encoding="utf-8")
    return Terminal(*args, "--model", "openai/gpt-4o-mini", "--api-base", server.base_url, "--profile",
                    str(tmp_path / "p.yaml"), cwd=tmp_path, env={"OPENAI_API_KEY": "sk-local"})


def test_ctrl_c_during_a_model_call_cancels_the_turn_and_the_answer_comes_before_the_lessons(tmp_path, fake_openai):
    """Two failures of one interactive session against a real HTTP model: Ctrl-C during the model call
    ended the run (exit 130); and the lessons step called the model before the answer was shown (an
    answer at ~22 s instead of ~15 s with a 6-second model). Now the call is cancelled and the prompt
    comes back; the answer is shown with one request made, the lessons request comes when the session
    ends, under a status, and a reply not in the lessons JSON shape is warned of once."""
    server = fake_openai([{"content": "too late", "delay_s": 30}, {"content": "the second answer"},
                          {"content": "no JSON here, sorry", "delay_s": 0.5}])
    term = _litellm_terminal(tmp_path, server, "run", "--session", "mc1", "first")
    _wait_for(lambda: len(server.requests) == 1)  # the request is out, its reply 30 s away
    term.send("\x03")
    term.expect("cancelled")
    term.expect("> ")
    term.send("again\n")
    term.expect("the second answer")
    assert len(server.requests) == 2  # the answer is on the screen; no lessons request yet
    term.expect("> ")
    term.send("/exit\n")
    term.expect("learning lessons from this session")
    term.expect("lessons: the model's lessons were not used")
    assert term.close() == 0
    assert len(server.requests) == 3 and "lessons" in server.requests[2]["messages"][-1]["content"]
    messages = _messages("mc1")
    assert [m["content"] for m in messages if m["role"] in ("user", "assistant")] == [
        "first", "again", "the second answer"]
    server.add({"content": "the third answer"}, {"content": "still no JSON"})
    term = _litellm_terminal(tmp_path, server, "resume", "--session", "mc1", "more")
    term.expect("the third answer")
    term.send("/exit\n")
    assert term.close() == 0
    assert len(server.requests) == 5  # the model was asked again...
    notes = [r for r in records("mc1") if r["kind"] == "note" and r["source"] == "lessons"]
    assert len(notes) == 1 and "lessons were not used" not in term.seen  # ...but warned of once per session
