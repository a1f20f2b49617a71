"""Issue 32's "done when", against the real llama.cpp server and Qwen2.5-Coder-1.5B, with no
``--context-window`` (the window comes from the server): a run reads notes.txt through a tool and
answers from it; a run finds the one ERROR line's request id in a 2 MB log through the offloaded
output's handle in most tries; the default profile runs in a 4,096-token window.

Marked ``realmodel``: skipped, with the reason, unless ``pytest --realmodel`` and the server and the
model are found (``python -m benchmarks.realserver --fetch --build``). Minutes each on two cores.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from benchmarks import realtasks
from benchmarks.realserver import LlamaServer

from clihelp import records, result_of, run_cli

pytestmark = [pytest.mark.realmodel, pytest.mark.timeout(3600)]
MODEL = "openai/qwen2.5-coder-1.5b"


@pytest.fixture(scope="module")
def server() -> Iterator[LlamaServer]:
    with LlamaServer(4096, nice=5) as running:
        yield running


COLD = "extends: default\ntemperature: 0\n"
"""The default profile at temperature 0, as the benchmark runs it: at llama.cpp's default 0.8 this model
found the log's request id in 0 of 3 tries here on 2026-12-04 (docs/local-models.md, "Measured")."""


def run(server: LlamaServer, folder: Path, session: str, task: str):
    profile = folder / "cold.yaml"
    profile.write_text(COLD, encoding="utf-8")
    return run_cli("run", "--json", "--session", session, "--model", MODEL, "--api-base", server.base_url,
                   "--workdir", str(folder), "--profile", str(profile), "--timeout", "900", "--no-lessons", task)


def calls(session: str) -> list[str]:
    return [c["function"]["name"] for r in records(session) if r["kind"] == "message"
            for c in r["message"].get("tool_calls") or []]


def test_a_run_reads_notes_through_a_tool_and_answers_from_it(server, tmp_path):
    realtasks.files(**{"notes.txt": "The launch code is TANGO-42.\n"})(tmp_path)
    out = run(server, tmp_path, "notes", "Read notes.txt and tell me the launch code.")
    result = result_of(out)
    assert result["status"] == "answered" and "TANGO-42" in result["answer"], out.stdout
    assert "read_file" in calls("notes")
    header = next(r for r in records("notes") if r["kind"] == "session")
    assert header["context_window"] == 4096  # from the server's /props


def test_the_error_lines_request_id_is_found_through_the_handle_in_most_tries(server, tmp_path):
    realtasks.app_log(tmp_path)
    found = 0
    for attempt in range(3):
        out = run(server, tmp_path, f"log{attempt}", "Read app.log and tell me the request id of the one ERROR line.")
        result = result_of(out)
        used_handle = any(name in ("grep_output", "read_output") for name in calls(f"log{attempt}"))
        found += result["status"] == "answered" and realtasks.ERROR_ID in result["answer"] and used_handle
        if found == 2:
            break
    assert found >= 2


def test_the_default_profile_runs_in_a_4096_token_window(server, tmp_path):
    realtasks.reports(tmp_path)  # three ~700-token outputs: more than the window holds with the schemas
    out = run(server, tmp_path, "small", "Read report1.txt, then report2.txt, then report3.txt, one at a time. "
                                         "Then tell me the CODE line of report3.txt.")
    result = result_of(out)
    # never an overflow nor a thrash stop: the window holds (before the small-window target was lifted above
    # the schemas and the reserve, every request compacted and the thrash guard stopped it); the loop guard
    # may stop this model, which repeats a refused shell call (seen at temperature 0 on 2026-12-04)
    assert result["status"] in ("answered", "max_turns", "loop_guard"), out.stdout
    usage = [r for r in records("small") if r["kind"] == "usage"]
    assert usage and all(u["prompt_tokens"] <= 4096 for u in usage)
