"""Shared fixtures. Tests fake only the model: everything else is real (DESIGN.md)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

import examplecount  # noqa: F401 (registers the suite's hypothesis profiles)
from ctxagent.testing import FakeOpenAI, Item

settings.load_profile("suite")  # `pytest --hypothesis-profile=thorough` loads another after this

DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens, so connections fail at once
KEY_VARS = (
    "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_API_KEY", "AZURE_OPENAI_API_KEY", "GEMINI_API_KEY",
    "GOOGLE_API_KEY", "MISTRAL_API_KEY", "GROQ_API_KEY", "OPENROUTER_API_KEY", "DEEPSEEK_API_KEY",
    "TOGETHERAI_API_KEY", "COHERE_API_KEY", "XAI_API_KEY", "HF_TOKEN", "HUGGINGFACE_API_KEY",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
)
BASE_VARS = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "OLLAMA_API_BASE")


SHM = Path("/dev/shm")
SHM_FREE = 8 << 30  # bytes /dev/shm must have free to hold the tests' folders


def pytest_configure(config: pytest.Config) -> None:
    """Temporary files in RAM (``TMPDIR`` in ``/dev/shm``, for pytest's folders, the benchmarks' and
    every subprocess's) when it has room, unless ``CTXAGENT_TESTS_ON_DISK`` is set: every transcript
    append fsyncs, and on a busy disk the fsyncs took a third of the benchmark fixture's time (136 s
    of 394 s, measured). The tests kill processes, they do not cut power, so what they check
    (ordering, torn lines, resume) is the same on either."""
    if os.environ.get("CTXAGENT_TESTS_ON_DISK") or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    try:
        roomy = SHM.is_dir() and os.access(SHM, os.W_OK) and shutil.disk_usage(SHM).free >= SHM_FREE
    except OSError:
        roomy = False
    if roomy:
        folder = SHM / f"ctxagent-tests-{os.getuid()}"
        folder.mkdir(mode=0o700, exist_ok=True)
        os.environ["TMPDIR"] = str(folder)  # the xdist workers and every subprocess inherit it
        tempfile.tempdir = None  # computed again from TMPDIR


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--realmodel", action="store_true",
                     help="run the tests marked realmodel (a real llama-server and model; minutes each)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``realmodel`` are skipped, with the reason, unless ``--realmodel`` is given and
    the server and model are found (benchmarks/realserver.py): the suite needs neither."""
    marked = [item for item in items if item.get_closest_marker("realmodel")]
    if not marked:
        return
    from benchmarks.realserver import missing

    reason = missing() if config.getoption("--realmodel") else \
        "a real-model test (minutes on CPU): runs with pytest --realmodel"
    if reason:
        for item in marked:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _no_real_model_calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Make every model call except to 127.0.0.1 fail fast, and keep data in a temporary directory.

    HTTP(S) goes through a proxy that refuses connections (127.0.0.1 and localhost bypass it), and
    no provider key or base URL is left in the environment.
    """
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(var, DEAD_PROXY)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    for var in {*KEY_VARS, *BASE_VARS, *(v for v in os.environ if v.endswith("_API_KEY"))}:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CTXAGENT_DATA_DIR", str(tmp_path / "ctxagent-data"))
    monkeypatch.setenv("CTXAGENT_CONFIG_DIR", str(tmp_path / "ctxagent-config"))  # never the user's own
    for key in ("MODEL", "PROFILE", "API_BASE", "CONTEXT_WINDOW", "ALLOW"):
        monkeypatch.delenv(f"CTXAGENT_{key}", raising=False)


@pytest.fixture(autouse=True)
def _no_event_loop_left_open() -> Iterator[None]:
    """Close an event loop a test left set on the main thread (litellm's sync completion, run in
    this process by a CLI test, makes one and never closes it). The ctxagent CLI exits after a run;
    a test process lives on, and the loop was collected in whatever test ran next, failing it with
    an "unclosed event loop" ResourceWarning (seen in test_truncate, three times)."""
    yield
    loop = getattr(asyncio.get_event_loop_policy()._local, "_loop", None)  # type: ignore[attr-defined]
    if loop is not None and not loop.is_running() and not loop.is_closed():
        loop.close()
        asyncio.set_event_loop(None)


@pytest.fixture
def fake_openai() -> Iterator[Callable[[Iterable[Item]], FakeOpenAI]]:
    """A factory: ``start(replies)`` runs a :class:`FakeOpenAI` playing ``replies``; all stop at teardown."""
    servers: list[FakeOpenAI] = []

    def start(replies: Iterable[Item] = (), **options: Any) -> FakeOpenAI:
        server = FakeOpenAI(replies, **options).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
