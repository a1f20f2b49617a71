"""The parsed-encoding cache (ctxagent.bpe_cache): same encoding as tiktoken's, never a failure."""

from __future__ import annotations

import os

import tiktoken

from ctxagent import bpe_cache, tokens

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
