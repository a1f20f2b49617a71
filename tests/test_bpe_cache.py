"""The parsed-encoding cache (ctxagent.bpe_cache): same encoding as tiktoken's, never a failure."""

from __future__ import annotations

import functools
import os

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxagent import bpe_cache, tokens
from examplecount import examples

SAMPLE = "def fn(x):\n    return x ** 2  # ünïcödé, 中文, emoji 🎉 and <|endoftext|> as text\n"


def _source() -> str:
    tokens.encoding.cache_clear()
    tokens.encoding("o200k_base")  # sets TIKTOKEN_CACHE_DIR to litellm's bundled files
    return os.environ["TIKTOKEN_CACHE_DIR"]


def test_cached_encoding_is_tiktokens_own(monkeypatch, tmp_path):
    monkeypatch.setenv("CTXAGENT_CACHE_DIR", str(tmp_path))
    source = _source()
    first = bpe_cache.encoding("o200k_base", source)  # parsed by tiktoken, then saved
    saved = list((tmp_path / "tokenizers").glob("o200k_base-*.marshal"))
    assert len(saved) == 1
    second = bpe_cache.encoding("o200k_base", source)  # read from the cache file
    reference = tiktoken.get_encoding("o200k_base")
    assert second is not first
    for enc in (first, second):
        assert enc.encode_ordinary(SAMPLE) == reference.encode_ordinary(SAMPLE)
        assert enc._mergeable_ranks == reference._mergeable_ranks
        assert enc._special_tokens == reference._special_tokens
        assert enc._pat_str == reference._pat_str


def test_damaged_cache_file_falls_back_and_is_rewritten(monkeypatch, tmp_path):
    monkeypatch.setenv("CTXAGENT_CACHE_DIR", str(tmp_path))
    source = _source()
    bpe_cache.encoding("cl100k_base", source)
    [path] = (tmp_path / "tokenizers").glob("cl100k_base-*.marshal")
    path.write_bytes(path.read_bytes()[:1000])  # torn
    enc = bpe_cache.encoding("cl100k_base", source)
    assert enc.encode_ordinary(SAMPLE) == tiktoken.get_encoding("cl100k_base").encode_ordinary(SAMPLE)
    assert path.stat().st_size > 1_000_000  # rewritten whole


def test_cache_key_follows_the_source_files(monkeypatch, tmp_path):
    monkeypatch.setenv("CTXAGENT_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "bpe"
    source.mkdir()
    (source / "abc").write_bytes(b"x")
    before = bpe_cache._entry("o200k_base", str(source))
    (source / "abc").write_bytes(b"xy")
    after = bpe_cache._entry("o200k_base", str(source))
    assert before is not None and after is not None and before != after
    assert bpe_cache._entry("o200k_base", None) is None
    assert bpe_cache._entry("o200k_base", str(tmp_path / "missing")) is None


ASCII = st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=300)


@settings(max_examples=examples(300), deadline=None)
@given(text=st.one_of(ASCII, st.lists(st.sampled_from(
    ["def", " f", "(x)", "  ", "\n", "\t", "1234567", "'s", "HTTP", "!!", "  \n  ", "x" * 40, "#", "_id"]),
    max_size=60).map("".join)))
def test_the_light_counter_counts_ascii_exactly_as_tiktoken(text):
    """LightCounter (Python BPE from the cached ranks) against tiktoken's CoreBPE, both encodings."""
    for name in ("o200k_base", "cl100k_base"):
        assert _light(name).count(text) == len(tiktoken.get_encoding(name).encode_ordinary(text)), name


def test_the_light_counter_refuses_non_ascii():
    with pytest.raises(ValueError):
        _light("o200k_base").count("café")


def test_a_short_ascii_count_builds_no_encoding_and_a_long_or_unicode_one_does(monkeypatch):
    _light("o200k_base")  # the cache entry exists
    monkeypatch.setattr(tokens, "_built", set())
    monkeypatch.setattr(tokens, "_light_chars", {})
    tokens.encoding.cache_clear()
    assert tokens.count_text("hi there") == 2
    assert tokens._built == set()  # counted by the light counter
    assert tokens.count_text("naïve") == len(tiktoken.get_encoding("o200k_base").encode_ordinary("naïve"))
    assert tokens._built == {"o200k_base"}
    tokens.encoding.cache_clear()


def test_a_costly_merge_is_left_to_the_encoding(monkeypatch):
    """Letters in a row are one piece, merged pair by pair in quadratic time (4,000 took 12 s): the
    light counter refuses such a text, and count_text counts it with the encoding, exactly."""
    text = "a" * 4000
    with pytest.raises(ValueError):
        _light("o200k_base").count(text)
    short = text[:200]  # a piece this long still merges (~40K), exactly
    assert _light("o200k_base").count(short) == len(tiktoken.get_encoding("o200k_base").encode_ordinary(short))
    monkeypatch.setattr(tokens, "_built", set())
    monkeypatch.setattr(tokens, "_light_chars", {})
    tokens.encoding.cache_clear()
    assert tokens.count_text(text) == len(tiktoken.get_encoding("o200k_base").encode_ordinary(text))
    assert tokens._built == {"o200k_base"}
    tokens.encoding.cache_clear()


@functools.cache
def _light(name: str) -> bpe_cache.LightCounter:
    source = _source()
    bpe_cache.encoding(name, source)  # writes the cache entry when missing
    counter = bpe_cache.light_counter(name, source)
    assert counter is not None
    return counter


def test_the_rank_table_holds_exactly_the_ranks_and_refuses_other_files(tmp_path):
    from ctxagent import rank_table

    enc = tiktoken.get_encoding("cl100k_base")
    ranks = enc._mergeable_ranks
    path = tmp_path / "t.ranks"
    rank_table.write(path, enc._pat_str, ranks)
    table = rank_table.RankTable(path)
    assert table.pattern == enc._pat_str
    assert all(table.get(token) == rank for token, rank in ranks.items())
    assert table.get(b"") is None and b"\xff\xfe not a token at all" not in table and "str" not in table
    assert isinstance(_light("o200k_base")._ranks, rank_table.RankTable)  # the light counter maps it
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ValueError):
        rank_table.RankTable(path)
    path.write_bytes(b"CTXRANK0" + bytes(100))
    with pytest.raises(ValueError):
        rank_table.RankTable(path)


def test_a_long_text_is_encoded_once_while_it_is_among_the_latest_and_again_once_pushed_out(monkeypatch):
    """One tool output is counted by several layers (offload threshold, tool message, stored file): the
    count of a long text is remembered, also for an equal text read back, within a character budget."""
    long = "\n".join(f"line {i}: ünïcödé value={i * 7}" for i in range(300))  # over LONG_CHARS, not ASCII
    assert len(long) > tokens.LONG_CHARS
    monkeypatch.setattr(tokens, "_LONG", tokens._LongCounts())
    monkeypatch.setattr(tokens, "LONG_KEPT_CHARS", 3 * len(long) + 100)  # room for three such texts
    encoded: list[int] = []
    real = tokens._encoded
    monkeypatch.setattr(tokens, "_encoded", lambda text, name: encoded.append(len(text)) or real(text, name))
    first = tokens.count_text(long)  # (sets TIKTOKEN_CACHE_DIR for tiktoken below: it is offline)
    expected = len(tiktoken.get_encoding("o200k_base").encode_ordinary(long))
    assert first == tokens.count_text("".join(list(long))) == expected  # an equal copy hits
    assert encoded == [len(long)]
    assert tokens.count_text(long, "gpt-4") == len(tiktoken.get_encoding("cl100k_base").encode_ordinary(long))
    assert len(encoded) == 2  # another encoding, another count
    tokens.count_text(long + " 0")  # three texts kept
    assert tokens.count_text(long) == expected and len(encoded) == 3  # still kept, and now the latest used
    tokens.count_text(long + " 1")  # a fourth: the least recently used (the cl100k count) goes
    assert tokens.count_text(long) == expected and len(encoded) == 4
    tokens.count_text(long, "gpt-4")
    assert len(encoded) == 5  # pushed out: encoded again
    assert tokens.count_text("short text, ünïcödé") and len(encoded) == 6  # short texts are not remembered
    assert tokens.count_text("short text, ünïcödé") and len(encoded) == 7
