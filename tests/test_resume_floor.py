"""The realistic resume transcript of benchmarks/resume_transcript.py: real record kinds and shapes,
deterministic, and a session ctxagent resumes (the figures themselves: python -m benchmarks.resume_floor)."""

from __future__ import annotations

import importlib
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `benchmarks` is a top-level folder of the repository, not installed
    sys.path.insert(0, str(ROOT))
resume_transcript = importlib.import_module("benchmarks.resume_transcript")
resume_floor = importlib.import_module("benchmarks.resume_floor")


def test_the_realistic_transcript_has_real_shapes_and_resumes(tmp_path: Path) -> None:
    from ctxagent.agent.state import fold
    from ctxagent.sessions.transcript import Transcript

    path = resume_transcript.write(tmp_path / "a", 250)
    lines = path.read_bytes().splitlines()
    kinds = Counter(json.loads(line)["kind"] for line in lines)
    assert {"session", "message", "usage", "compaction", "output", "end"} <= set(kinds)
    assert 250 <= kinds["message"] <= 403
    assert resume_transcript.write(tmp_path / "b", 250).read_bytes().replace(b'"name":"b"', b'"name":"a"', 1) \
        == path.read_bytes()  # deterministic
    state = fold(Transcript(path).records())
    assert state.next_seq == kinds["message"] and not state.repairs and state.usage.calls == kinds["usage"]
    assert state.stored and state.ledger.files  # offloaded outputs, files read and written


def test_the_table_has_every_figure_with_its_floor_and_ratio() -> None:
    data = {"pairs": 3, "messages": 10_000, "records": 19_513, "transcript_mb": 19.8,
            "open": {"floor_s": 0.05, "s": 0.4, "ratio": 8.0}, "cold": {"floor_s": 0.25, "s": 1.2, "ratio": 4.8},
            "decode_mb_s": {"msgspec_dicts": 500, "records_loads": 250},
            "memory": {"python_pass_mb": 10, "run_beyond_mb": 95, "inspect_beyond_mb": 90, "tokenizer_beyond_mb": 80}}
    [(title, header, rows)] = resume_floor.tables(data)
    assert "10,000 messages" in title and header[:4] == ["what", "figure", "floor (same run)", "ratio"]
    assert rows[0][1:] == ["0.400 s", "read + msgspec-decode every line 0.050 s", "8.00x", "–", "–"]
    assert rows[1][1:] == ["1.200 s", "new python: import typer + decode every line 0.250 s", "4.80x", "≤ 1 s",
                           "not met"]
    assert rows[3][-1].startswith("not met") and "80 MB" in rows[3][-1]
