"""Token counting's encodings (ctxagent.tokens): built from litellm's bundled files through
tiktoken's public constructor, the same as tiktoken's own, and nothing set in the environment."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tiktoken

from ctxagent import tokens

SAMPLE_CHARS = 256 * 1024  # of each real file below: enough text of each kind, fast to encode twice


def _installed(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, package
    return Path(next(iter(spec.submodule_search_locations)), *parts)


REAL_TEXTS = [  # written by nobody here: emoji, stop words of many languages, JSON, Python source
    ("rich", "_emoji_codes.py"), ("bm25s", "stopwords.py"),
    ("litellm", "model_prices_and_context_window_backup.json"), ("tiktoken", "core.py"),
]


@pytest.fixture
def reference(monkeypatch: pytest.MonkeyPatch) -> dict[str, tiktoken.Encoding]:
    """tiktoken's own encodings, read from litellm's bundled files the way litellm points tiktoken at
    them (``TIKTOKEN_CACHE_DIR``; only here, in the test, to have the reference)."""
    path = tokens.SOURCES["o200k_base"].bundled()
    assert path is not None, "litellm ships the encodings' files"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(path.parent))
    return {name: tiktoken.get_encoding(name) for name in tokens.SOURCES}


@pytest.mark.parametrize("name", sorted(tokens.SOURCES))
def test_the_bundled_encodings_encode_real_files_exactly_as_tiktokens_own(name, reference):
    tokens.encoding.cache_clear()
    ours = tokens.encoding(name)
    assert isinstance(ours, tiktoken.Encoding) and ours is not reference[name]
    for package, file in REAL_TEXTS:
        text = _installed(package, file).read_text(encoding="utf-8")[:SAMPLE_CHARS]
        assert ours.encode_ordinary(text) == reference[name].encode_ordinary(text), (package, file)
    assert ours.decode(ours.encode_ordinary("naïve 中文 🎉")) == "naïve 中文 🎉"


def test_counting_sets_nothing_in_the_environment_and_leaves_no_file(tmp_path):
    """Regression: the count set ``TIKTOKEN_CACHE_DIR`` in ``os.environ`` (every tool's subprocess
    inherited it) and wrote a per-machine count cache at exit (``cache/token-counts.json``)."""
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    env["CTXAGENT_DATA_DIR"] = str(tmp_path / "data")
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    child = ("import os; from ctxagent import tokens\n"
             "print(tokens.count_text('hello world'), tokens.count_tools([{'name': 'x'}]), "
             "os.environ.get('TIKTOKEN_CACHE_DIR'))")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["2", str(tokens.count_tools([{"name": "x"}])), "None"]
    assert not (tmp_path / "data").exists() and list((tmp_path / "tmp").iterdir()) == []


def test_a_bundled_file_that_is_not_the_published_one_is_not_used(monkeypatch, tmp_path, reference):
    fake = tmp_path / "fb374d419588a4632f3f557e76b4b70aebbca790"
    fake.write_bytes(b"aGk= 0\n")  # a valid .tiktoken file ("hi" as rank 0), not OpenAI's o200k_base
    monkeypatch.setattr(tokens.Source, "bundled", lambda self: fake)
    asked: list[str] = []
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: asked.append(name) or reference[name])
    tokens.encoding.cache_clear()
    try:
        assert tokens.encoding("o200k_base") is reference["o200k_base"]
        assert asked == ["o200k_base"]
    finally:
        tokens.encoding.cache_clear()


def test_ranks_reads_the_tiktoken_format_and_refuses_other_bytes():
    assert tokens.ranks(b"aGk= 0\nIQ== 1\n\n") == {b"hi": 0, b"!": 1}
    for bad in (b"aGk= 0\nIQ==\n", b"aGk= zero\n", b"a 0\n"):
        with pytest.raises(ValueError):
            tokens.ranks(bad)
