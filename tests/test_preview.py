"""Middle-out previews of stored outputs: head, tail, marker, cuts inside lines, binary."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxagent import tokens
from ctxagent.tools.clean import clean
from ctxagent.tools.preview import (
    EXACT_TOKENS_MAX_BYTES,
    guess_type,
    looks_binary,
    move_lines,
    preview_file,
)
from examplecount import examples


def write(tmp_path: Path, data: bytes | str) -> Path:
    path = tmp_path / "out.txt"
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


def split(text: str, marker: str) -> tuple[str, str]:
    head, found, tail = text.partition(marker)
    assert found, "marker not in the preview text"
    return head, tail


def test_head_and_tail_of_many_lines_with_exact_marker(tmp_path: Path) -> None:
    lines = [f"line {i}\n" for i in range(1, 1001)]
    path = write(tmp_path, "".join(lines))
    preview = preview_file(path, head_lines=3, tail_lines=2, max_chars=4000)
    head, tail = split(preview.text, preview.marker)
    assert head == "".join(lines[:3])
    assert tail == "".join(lines[-2:])
    middle = "".join(lines[3:-2])
    assert preview.lines == 1000
    assert preview.omitted_lines == 995
    assert preview.omitted_bytes == len(middle.encode())
    assert preview.omitted_tokens == tokens.count_text(middle)
    assert preview.tokens_exact
    assert preview.marker == (f"[... 995 lines, {len(middle):,} bytes, {tokens.count_text(middle):,} "
                              "tokens omitted: lines 4-998 ...]\n")


def test_small_output_is_shown_whole_without_marker(tmp_path: Path) -> None:
    text = "".join(f"row {i}\n" for i in range(50))
    preview = preview_file(write(tmp_path, text), head_lines=40, tail_lines=20, max_chars=4000)
    assert preview.text == text
    assert preview.marker == ""
    assert (preview.omitted_lines, preview.omitted_bytes) == (0, 0)


def test_char_budget_is_split_between_head_and_tail(tmp_path: Path) -> None:
    lines = [f"{i:04d} " + "y" * 94 + "\n" for i in range(1000)]  # 100 characters a line
    preview = preview_file(write(tmp_path, "".join(lines)), head_lines=40, tail_lines=20, max_chars=1000)
    head, tail = split(preview.text, preview.marker)
    assert head == "".join(lines[:6])  # 60 % of 1,000 characters
    assert tail == "".join(lines[-4:])  # what the head left
    assert preview.omitted_lines == 990
    assert "lines 7-996" in preview.marker


def test_last_line_without_newline_counts(tmp_path: Path) -> None:
    path = write(tmp_path, "a\nb\nc")
    with open(path, "rb") as fh:
        assert move_lines(fh) == 3
    preview = preview_file(path, head_lines=1, tail_lines=1, max_chars=100)
    assert preview.text == "a\n[... 1 line, 2 bytes, 2 tokens omitted: line 2 ...]\nc"
    assert preview.lines == 3


def test_empty_file(tmp_path: Path) -> None:
    preview = preview_file(write(tmp_path, b""), head_lines=3, tail_lines=3, max_chars=100)
    assert (preview.text, preview.lines, preview.bytes, preview.binary) == ("", 0, 0, False)


@pytest.mark.parametrize("max_chars", range(60, 68))
def test_one_huge_line_is_cut_inside_on_character_boundaries(tmp_path: Path, max_chars: int) -> None:
    unit = "aé€😀"  # 1, 2, 3 and 4 bytes: cut points land everywhere inside characters
    text = unit * 50_000  # one 200,000-character line
    path = write(tmp_path, text)
    preview = preview_file(path, head_lines=40, tail_lines=20, max_chars=max_chars)
    preview.text.encode("utf-8")  # valid UTF-8: no lone surrogate
    assert "\ufffd" not in preview.text
    head, tail = split(preview.text, preview.marker)
    head = head.removesuffix("\n")  # the marker starts on its own line
    assert text.startswith(head) and text.endswith(tail)
    assert len(head) == int(max_chars * 0.6) and len(head) + len(tail) == max_chars
    assert preview.omitted_bytes == len(text.encode()) - len(head.encode()) - len(tail.encode())
    assert preview.omitted_lines == 0
    assert "middle of line 1" in preview.marker


def test_huge_line_between_short_lines_is_omitted_whole(tmp_path: Path) -> None:
    path = write(tmp_path, "first\n" + "x" * 200_000 + "\nlast\n")
    preview = preview_file(path, head_lines=40, tail_lines=20, max_chars=4000)
    assert preview.text.startswith("first\n[... 1 line, 200,001 bytes,")
    assert preview.text.endswith("omitted: line 2 ...]\nlast\n")
    assert preview.omitted_lines == 1


def test_head_cut_when_first_line_is_huge(tmp_path: Path) -> None:
    path = write(tmp_path, "x" * 10_000 + "\n" + "".join(f"t{i}\n" for i in range(3)))
    preview = preview_file(path, head_lines=40, tail_lines=20, max_chars=100)
    head, tail = split(preview.text, preview.marker)
    assert head == "x" * 60  # the marker brings its own newline
    assert preview.marker.startswith("\n[")
    assert tail == "t0\nt1\nt2\n"
    assert "part of line 1" in preview.marker
    assert preview.omitted_bytes == 10_000 - 60 + 1


def test_undecodable_bytes_show_as_replacement_character(tmp_path: Path) -> None:
    data = b"caf\xe9 au lait\n" * 3
    preview = preview_file(write(tmp_path, data), head_lines=5, tail_lines=5, max_chars=1000)
    assert preview.text == "caf\ufffd au lait\n" * 3
    assert not preview.binary


def test_tokens_are_estimated_over_4_mib(tmp_path: Path) -> None:
    path = write(tmp_path, b"0123456789abcde\n" * (EXACT_TOKENS_MAX_BYTES // 16 + 1))
    preview = preview_file(path, head_lines=2, tail_lines=2, max_chars=1000)
    assert not preview.tokens_exact
    assert preview.omitted_tokens == (preview.omitted_bytes + 3) // 4
    assert f"~{preview.omitted_tokens:,} tokens" in preview.marker


def test_binary_is_described_not_dumped(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 10
    preview = preview_file(write(tmp_path, png), head_lines=5, tail_lines=5, max_chars=1000)
    assert preview.binary
    assert "PNG image" in preview.text and f"{len(png):,} bytes" in preview.text
    assert preview.omitted_bytes == len(png)
    packed = gzip.compress(b"hello " * 1000)
    assert "gzip" in preview_file(write(tmp_path, packed), head_lines=5, tail_lines=5, max_chars=10).text


def test_binary_detection() -> None:
    assert looks_binary(b"text\x00more")
    assert looks_binary(bytes(range(128, 256)) * 4)
    assert not looks_binary("naïve café ".encode() * 100)
    assert not looks_binary("€".encode() * 100 + "€".encode()[:2])  # cut character at the end
    assert guess_type(b"\x7fELF\x02\x01") == "ELF executable"
    assert guess_type(b"%PDF-1.7") == "PDF document"
    assert guess_type(b"plain") is None


_payloads = st.one_of(
    st.binary(max_size=3000),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=1500).map(str.encode),
    st.lists(st.sampled_from([b"\n", b"ab", "é".encode(), "😀".encode(), b"\xff", b"\xe2\x82"]),
             max_size=800).map(b"".join),
)


@settings(max_examples=examples(300), deadline=None)
@given(
    data=_payloads,
    head_lines=st.integers(0, 6),
    tail_lines=st.integers(0, 6),
    max_chars=st.integers(0, 400),
)
def test_preview_is_valid_utf8_and_bounded(data: bytes, head_lines: int, tail_lines: int,
                                           max_chars: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "out"
        path.write_bytes(data)
        preview = preview_file(path, head_lines=head_lines, tail_lines=tail_lines, max_chars=max_chars)
    preview.text.encode("utf-8")  # raises on a lone surrogate
    assert preview.bytes == len(data)
    assert preview.lines == data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    if preview.binary:
        return
    assert len(preview.text) <= max_chars + len(preview.marker)
    assert (preview.marker == "") == (preview.omitted_bytes == 0)
    if preview.marker:
        head, tail = split(preview.text, preview.marker)
        assert 0 < preview.omitted_bytes <= len(data)
        assert preview.omitted_lines <= preview.lines
    else:
        head, tail = preview.text, ""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    if clean(text) != text:  # terminal control is not shown as is (tests/test_clean_outputs.py)
        return
    assert text.startswith(head) and text.endswith(tail)
