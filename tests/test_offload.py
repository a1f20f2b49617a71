"""The offload wrapper: what stays inline, what goes to the output store, and what the model sees."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from ctxagent import tokens
from ctxagent.agent.model import ToolCall
from ctxagent.sessions.redact import scan
from ctxagent.sessions.store import OutputStore
from ctxagent.tools.base import Spooled
from ctxagent.tools.offload import (
    INLINE_MAX_BYTES,
    OffloadPolicy,
    envelope_overhead,
    fits,
    settle,
    store_text,
    threshold,
)

CALL = ToolCall(id="call_9f8XkQ2mZbL0aYv7", name="shell", arguments='{"command": "make"}')


@pytest.fixture
def store(tmp_path: Path) -> OutputStore:
    return OutputStore(tmp_path / "session" / "outputs")


def run(value: str | bytes | Spooled, store: OutputStore, limit: int = 1000, call: ToolCall = CALL,
        **policy: int) -> tuple[str, object]:
    return settle(value, call=call, tool_name="shell", store=store,
                  policy=OffloadPolicy(limit_tokens=limit, **policy))


def spool(store: OutputStore, data: bytes, note: str = "") -> Spooled:
    fd, path = store.spool()
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return Spooled(path, note)


def test_threshold_is_limit_minus_measured_envelope_overhead() -> None:
    message = {"role": "tool", "tool_call_id": CALL.id, "content": ""}
    overhead = envelope_overhead(CALL.id)
    assert overhead == tokens.count_message(message) + tokens.count_text(json.dumps(message))
    assert overhead > tokens.count_message(message)  # the JSON envelope is counted too
    assert envelope_overhead("c" * 300) > overhead  # a longer id costs more
    assert threshold(OffloadPolicy(limit_tokens=10_000), CALL.id) == 10_000 - overhead
    assert threshold(OffloadPolicy(limit_tokens=5), CALL.id) == 0


def test_text_at_the_threshold_stays_inline_one_token_more_is_offloaded(store: OutputStore) -> None:
    text = "".join(f"result {i}: value={i * 7}\n" for i in range(200))
    count = tokens.count_text(text)
    assert len(text.encode()) > count  # the tokenizer decides, not the cheap byte check
    limit = count + envelope_overhead(CALL.id)
    assert run(text, store, limit=limit) == (text, None)
    content, record = run(text, store, limit=limit - 1)
    assert record is not None and content != text
    assert store.path_of(record.handle).read_text() == text


def test_fits_cheap_byte_check_and_early_stop() -> None:
    assert fits("héllo", 6)  # 6 bytes: fits without tokenizing
    assert not fits("x" * (INLINE_MAX_BYTES + 1), 10**9)  # over 4 MiB: never inline
    assert not fits("word " * 100_000, 50)


def test_small_values_stay_inline_and_store_nothing(store: OutputStore) -> None:
    assert run("hello\n", store) == ("hello\n", None)
    assert run("naïve\n".encode(), store) == ("naïve\n", None)  # UTF-8 bytes are text
    assert not store.root.exists()


def test_non_utf8_bytes_are_always_offloaded_exactly(store: OutputStore) -> None:
    data = b"caf\xe9 cr\xe8me\n"
    content, record = run(data, store, limit=100_000)
    assert record is not None and not record.binary
    stored = store.path_of(record.handle)
    assert stored.read_bytes() == data
    assert "caf\ufffd cr\ufffdme" in content  # previewed as valid UTF-8
    assert record.sha256 == hashlib.sha256(data).hexdigest()
    assert (record.bytes, record.lines) == (len(data), 1)


def test_binary_bytes_are_described_with_handle_and_path(store: OutputStore) -> None:
    data = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    content, record = run(data, store, limit=100_000)
    assert record is not None and record.binary and not record.tokens_exact
    path = store.path_of(record.handle)
    assert path.read_bytes() == data
    assert "PNG image" in content
    assert content.splitlines()[-1] == (
        f"[full output: 1,032 bytes of binary data; saved as @kQ2mZbL0aYv7 at {path.absolute()}; "
        "inspect it with the shell (e.g. `file`, `xxd | head`)]"
    )


def test_offloaded_text_record_and_content(store: OutputStore) -> None:
    lines = [f"line {i}\n" for i in range(1, 5001)]
    text = "".join(lines)
    call = ToolCall(id="read1", name="read_file", arguments=json.dumps({"path": "x" * 1000}))
    content, record = run(text, store, limit=2000, call=call, head_lines=5, tail_lines=3)
    assert record is not None
    assert record.handle == "@read1" and record.call_id == "read1" and record.tool == "shell"
    assert record.path == "outputs/read1.out"
    assert (record.bytes, record.lines) == (len(text), 5000)
    assert (record.tokens, record.tokens_exact) == (tokens.count_text(text), True)
    assert record.arguments == call.arguments[:500]
    assert content.startswith("".join(lines[:5]) + "[... 4,992 lines,")
    assert "".join(lines[-3:]) + "[full output: 5,000 lines" in content
    assert store.path_of("@read1").read_text() == text


def test_second_offload_of_same_call_gets_a_new_handle(store: OutputStore) -> None:
    big = "z" * 50_000
    first = run(big, store, limit=100)[1]
    second = run(big, store, limit=100)[1]
    assert first is not None and second is not None
    assert (first.handle, second.handle) == ("@kQ2mZbL0aYv7", "@kQ2mZbL0aYv7.2")


def test_content_is_shrunk_until_it_fits_the_threshold(store: OutputStore) -> None:
    text = "".join(f"{i} alpha beta gamma delta epsilon\n" for i in range(20_000))
    limit = 300
    content, record = run(text, store, limit=limit, max_chars=4000)
    assert record is not None
    assert tokens.count_text(content) <= threshold(OffloadPolicy(limit_tokens=limit), CALL.id)
    assert "[... " in content and "saved as" in content


def test_small_text_spool_is_inlined_with_note_and_deleted(store: OutputStore) -> None:
    spooled = spool(store, b"built 3 targets\n", note="exit code: 0")
    assert run(spooled, store) == ("exit code: 0\nbuilt 3 targets\n", None)
    assert not spooled.path.exists()
    empty = spool(store, b"", note="exit code: 1")
    assert run(empty, store) == ("exit code: 1", None)


def test_large_spool_is_adopted_without_copy(store: OutputStore) -> None:
    data = b"".join(b"row %d\n" % i for i in range(300_000))  # > 1 MiB: hashed across chunks
    spooled = spool(store, data, note="exit code: 2")
    inode = spooled.path.stat().st_ino
    content, record = run(spooled, store, limit=1000)
    assert record is not None
    final = store.path_of(record.handle)
    assert final.stat().st_ino == inode and not spooled.path.exists()
    assert final.read_bytes() == data
    assert record.sha256 == hashlib.sha256(data).hexdigest()
    assert record.lines == 300_000
    assert content.startswith("exit code: 2\nrow 0\n")
    assert f"search it with grep_output(\"{record.handle}\", pattern)" in content
    assert content.endswith(f"pass \"{record.handle}\" as a tool argument to use the whole text]")


def test_non_utf8_spool_is_offloaded(store: OutputStore) -> None:
    spooled = spool(store, b"\xff\xfe", note="exit code: 0")
    content, record = run(spooled, store, limit=100_000)
    assert record is not None and store.path_of(record.handle).read_bytes() == b"\xff\xfe"
    assert content.startswith("exit code: 0\n[binary output: 2 bytes")


def test_text_over_4_mib_is_offloaded_with_estimated_tokens(store: OutputStore) -> None:
    text = "0123456789abcde\n" * (INLINE_MAX_BYTES // 16 + 1)
    content, record = run(text, store, limit=10**9)
    assert record is not None and not record.tokens_exact
    assert record.tokens == (len(text) + 3) // 4
    assert f"~{record.tokens:,} tokens" in content


def test_measure_streams(tmp_path: Path) -> None:
    path = tmp_path / "f"
    data = b"a" * (1024 * 1024 - 1) + b"\nb\nlast"  # the first newline ends the first chunk
    path.write_bytes(data)
    stats = scan.measure(path).stats
    assert (stats.bytes, stats.lines, stats.sha256) == (len(data), 3, hashlib.sha256(data).hexdigest())


def test_store_text_keeps_an_original_the_view_dropped(store: OutputStore) -> None:
    text = "masked result\n" * 10
    record = store_text(store, "@call7", "call_7", text, tool_name="shell")
    assert store.path_of("@call7").read_text() == text
    assert (record.handle, record.call_id, record.tool, record.path) == ("@call7", "call_7", "shell",
                                                                         "outputs/call7.out")
    assert (record.bytes, record.lines, record.tokens) == (len(text), 10, tokens.count_text(text))
    assert record.sha256 == hashlib.sha256(text.encode()).hexdigest()


def test_lone_surrogate_in_a_large_str_is_stored_not_lost(store: OutputStore) -> None:
    content, record = run(("x" * 60 + "\ud800\n") * 500, store, limit=1000)
    assert record is not None and record.bytes == 64 * 500
    assert content.startswith("x" * 60 + "\ufffd" * 3 + "\n")
