"""Issue 11, "Tool outputs as the model sees them": the offload threshold follows the context window,
and terminal control bytes (escape sequences, carriage-return frames, backspaces) never reach the
context. Each regression test is named after the failure it pins."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clihelp import call, ctxagent, records, script, tool_messages
from ctxagent import tokens
from ctxagent.agent.setup import offload_policy
from ctxagent.errors import ProfileError
from ctxagent.messages import ToolCall
from ctxagent.profile import Profile, parse_profile
from ctxagent.sessions.redact import RedactingStore, Redactor
from ctxagent.sessions.store import OutputStore
from ctxagent.tools.base import Spooled, ToolContext
from ctxagent.tools.clean import apply_backspaces, clean, last_frame
from ctxagent.tools.offload import INLINE_MAX_BYTES, OffloadPolicy, settle, threshold
from ctxagent.tools.toolset import make_toolset

CALL = ToolCall(id="call_clean0001", name="shell", arguments='{"command": "pytest"}')
TOLERANCE = 2  # tokens: cleaned text may differ from the plain text by a trailing reset or so


@pytest.fixture
def store(tmp_path: Path) -> OutputStore:
    return OutputStore(tmp_path / "session" / "outputs")


def settle_text(value: str | bytes | Spooled, store: OutputStore, limit: int = 20_000) -> tuple[str, object]:
    return settle(value, call=CALL, tool_name="shell", store=store, policy=OffloadPolicy(limit_tokens=limit))


def spool(store: OutputStore, data: bytes, note: str = "exit code: 0") -> Spooled:
    fd, path = store.spool()
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return Spooled(path, note)


def result_lines(n: int = 1000, *, colour: bool) -> str:
    """``n`` pytest-like result lines, with ANSI colours or plain."""
    green, reset = ("\x1b[32m", "\x1b[0m") if colour else ("", "")
    bold = "\x1b[1m" if colour else ""
    return "".join(f"tests/test_api.py::test_case_{i} {bold}{green}PASSED{reset} {green}[{i * 100 // n:3d}%]{reset}\n"
                   for i in range(n))




def progress(frames: int = 20_001) -> str:
    """``frames`` carriage-return progress frames on one line, then a result line."""
    bars = "".join(f"\rdownloading {i:5d}/{frames - 1} [{'#' * (i * 20 // (frames - 1)):<20}]" for i in range(frames))
    return bars + "\nresult: 42 files ok\n"


FINAL_FRAME = f"downloading 20000/20000 [{'#' * 20}]"


# --- 1. the offload threshold follows the window ---------------------------------------------------


def test_seq_3000_in_a_10000_window_was_kept_inline_and_ended_the_run(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("context_window: 10000\n", encoding="utf-8")  # tool_result_limit: default 20,000
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("seq1", "shell", command="seq 1 3000")]},
                                         {"content": "done"}])
    out = ctxagent("run", "--batch", "--allow", "shell", "--session", "win", "--model", model,
                   "--profile", str(profile), "count to 3000")
    assert (out.returncode, out.stdout) == (0, "done\n"), out.stderr
    content = tool_messages("win")["seq1"]
    assert "@seq1" in content and "read_output" in content
    assert content.startswith("exit code: 0\n1\n2\n") and "3000\n" in content and "\n1500\n" not in content
    assert tokens.count_text(content) <= 2500  # 25 % of the window
    [output] = [r for r in records("win") if r["kind"] == "output"]
    assert output["handle"] == "@seq1" and output["lines"] == 3000


def test_tool_result_limit_alone_let_one_result_fill_a_small_window() -> None:
    profile = Profile(context_window=10_000)
    assert offload_policy(profile, "m").limit_tokens == 2_500  # the profile's window
    assert offload_policy(profile, "m", window=40_000).limit_tokens == 10_000  # the session's window wins
    assert offload_policy(Profile(), "m").limit_tokens == 20_000  # no window known: the limit alone
    assert offload_policy(Profile(), "m", window=128_000).limit_tokens == 20_000  # 32,000 > 20,000
    tight = Profile(tool_result_limit=1_000, tool_result_fraction=0.5)
    assert offload_policy(tight, "m", window=10_000).limit_tokens == 1_000
    assert threshold(offload_policy(profile, ""), CALL.id) < 2_500  # minus the envelope overhead


@pytest.mark.parametrize("value", ["0", "-0.1", "0.95", "lots"])
def test_tool_result_fraction_is_validated(value: str) -> None:
    with pytest.raises(ProfileError) as err:
        parse_profile(f"tool_result_fraction: {value}\n", source="p.yaml")
    assert err.value.key == "tool_result_fraction"


# --- 2. terminal control bytes never reach the context ------------------------------------------


def test_coloured_test_lines_cost_twice_their_plain_text_and_were_offloaded(store: OutputStore) -> None:
    coloured, plain = result_lines(colour=True), result_lines(colour=False)
    assert tokens.count_text(coloured) > threshold(OffloadPolicy(20_000), CALL.id)  # raw: over the limit
    content, record = settle_text(coloured, store)
    assert record is None and content == plain
    assert abs(tokens.count_text(content) - tokens.count_text(plain)) <= TOLERANCE
    spooled, record = settle_text(spool(store, coloured.encode()), store)  # the shell's way in
    assert record is None and spooled == "exit code: 0\n" + plain


def test_progress_frames_cost_10000x_their_final_frame_and_hid_it(store: OutputStore) -> None:
    frames = progress()
    plain = FINAL_FRAME + "\nresult: 42 files ok\n"
    assert tokens.count_text(frames) > 100_000
    content, record = settle_text(spool(store, frames.encode()), store)
    assert record is None and content == "exit code: 0\n" + plain
    assert abs(tokens.count_text(content) - tokens.count_text("exit code: 0\n" + plain)) <= TOLERANCE


def test_progress_frames_final_frame_visible_in_an_offloaded_preview(store: OutputStore) -> None:
    text = progress() + "".join(f"log line {i}\n" for i in range(3000))
    content, record = settle_text(text, store, limit=2_000)
    assert record is not None
    assert content.startswith(FINAL_FRAME + "\nresult: 42 files ok\nlog line 0\n")
    assert "\r" not in content and "log line 2999\n" in content
    assert "lines 41-" in content  # line numbers of the raw output (cleaning keeps every line)
    stored = store.root.parent / record.path
    assert stored.read_bytes() == text.encode()  # the file keeps the raw bytes
    assert record.tokens == tokens.count_text(clean(text))  # what reading it costs the model


def test_coloured_output_offloaded_keeps_raw_bytes_and_previews_plain(store: OutputStore) -> None:
    coloured = result_lines(4000, colour=True)
    content, record = settle_text(spool(store, coloured.encode()), store, limit=2_000)
    assert record is not None and "\x1b" not in content
    assert content.startswith("exit code: 0\ntests/test_api.py::test_case_0 PASSED [  0%]\n")
    assert (store.root.parent / record.path).read_bytes() == coloured.encode()


def test_cleaned_preview_is_made_from_the_redacted_file(tmp_path: Path) -> None:
    store = RedactingStore(tmp_path / "outputs", Redactor())
    secret = "AKIA" + "ABCDEFGHIJKLMNOP"
    coloured = f"\x1b[31mkey {secret}\x1b[0m\n" + result_lines(4000, colour=True)
    content, record = settle_text(spool(store, coloured.encode()), store, limit=2_000)
    assert record is not None and secret not in content and "\x1b" not in content
    assert content.startswith("exit code: 0\nkey [REDACTED:aws-access-key]\n")


def test_spool_over_4_mib_is_not_cleaned_whole_but_its_preview_is(store: OutputStore) -> None:
    lines = result_lines(40_000, colour=True).encode()
    data = lines * (INLINE_MAX_BYTES // len(lines) + 1)
    assert len(data) > INLINE_MAX_BYTES
    content, record = settle_text(spool(store, data), store)
    assert record is not None and not record.tokens_exact  # estimated, never tokenized
    assert "\x1b" not in content and "test_case_0 PASSED [  0%]\n" in content
    assert (store.root.parent / record.path).stat().st_size == len(data)


def test_shell_colour_reaches_the_context_plain(tmp_path: Path) -> None:
    ctx = ToolContext(store=OutputStore(tmp_path / "outputs"), workdir=tmp_path)
    tools = make_toolset(["shell"], ctx, OffloadPolicy(limit_tokens=2000))
    command = r"printf '\033[1;31mFAILED\033[0m test_x\n'; printf '10%%\r50%%\r100%%\n'; printf 'ab\bc\n'"
    outcome = tools.call(ToolCall("c1", "shell", json.dumps({"command": command})))
    assert outcome.content == "exit code: 0\nFAILED test_x\n100%\nac\n"


# --- clean() itself -----------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b[32mok\x1b[0m", "ok"),  # CSI: SGR colours
    ("\x1b[1;38;5;208mbold\x1b[m", "bold"),  # CSI with 256-colour parameters
    ("a\x1b[2K\x1b[1Gb\x1b[?25l", "ab"),  # erase line, cursor column, private mode
    ("\x9b31mc1\x9b0m", "c1"),  # 8-bit CSI
    ("\x1b]0;title\x07text", "text"),  # OSC ended by BEL
    ("\x1b]8;;https://x.org\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8 hyperlink ended by ST
    ("\x1bP1$r0m\x1b\\after", "after"),  # DCS
    ("\x1b]2;never ended\nnext", "\nnext"),  # an open control string ends at its line
    ("\x1b(Bx\x1b7y\x1b8z\x1bM", "xyz"),  # nF (charset) and single-character escapes
    ("lone\x1b", "lone"),  # a cut sequence
    ("1%\r50%\r100%\nnext\n", "100%\nnext\n"),  # frames collapse to the last
    ("\rframe 1\rframe 2\r", "frame 2"),  # leading and trailing carriage returns
    ("dos\r\nline\r\n", "dos\r\nline\r\n"),  # CRLF line ends stay
    ("_\bX_\bY", "XY"),  # overstrike underline
    ("abc\b\b\bxyz", "xyz"),
    ("\bstart", "start"),  # nothing to erase at the line start
    ("bell\x07 nul\x00 del\x7f", "bell nul del"),
    ("tab\tff\fvt\v", "tab\tff\fvt\v"),
])
def test_clean_shows_what_a_terminal_shows(raw: str, shown: str) -> None:
    assert clean(raw) == shown
    assert clean(shown) == shown  # idempotent


def test_clean_keeps_lines_and_returns_plain_text_itself() -> None:
    plain = "no control here\nat all ü 漢\n"
    assert clean(plain) is plain
    noisy = "".join(f"\x1b[33m{i}\r{i}!\x1b[0m\b\n" for i in range(100))
    assert clean(noisy).count("\n") == noisy.count("\n") == 100
    assert last_frame("a\rb\r") == "b" and last_frame("\r\r") == ""
    assert apply_backspaces("ab\b\b\bc") == "c"
