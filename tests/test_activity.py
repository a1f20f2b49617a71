"""Never redo work (issue 11): the file-activity ledger, repeat-read notes, identical pure calls,
the loop guard and the thrash guard, each through the real CLI with a scripted model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clihelp import call, ctxagent, records, script, tool_messages
from ctxagent.agent.activity import Ledger, canonical, streak
from ctxagent.sessions.records import FileTouch, MessageRecord
from ctxagent.tokens import count_text

FORTY_LINES = "".join(f"def handler_{i}(request):  # route /api/v1/items/{i} returns JSON\n" for i in range(40))


def _work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text(FORTY_LINES)
    (work / "other.py").write_text("x = 1\n")
    return work


def _context(session: str) -> list[dict[str, Any]]:
    out = ctxagent("inspect", "context", "--session", session, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["messages"]


def test_seven_reads_of_an_unchanged_file_return_its_content_once(tmp_path):
    """Failure pinned: 7 read_file calls of a 40-line file each returned the full 605 tokens."""
    work = _work(tmp_path)
    turns = []
    for i in range(7):  # interleaved with another call, so the loop guard does not fire
        turns.append({"tool_calls": [call(f"r{i}", "read_file", path="app.py"), call(f"o{i}", "list_dir")]})
    back = {"tool_calls": [call("back", "read_output", handle="@r0")]}  # the handle a note names resolves
    model = script(tmp_path / "s.yaml", [*turns, back, {"content": "done"}])
    out = ctxagent("run", "--batch", "--session", "reads", "--model", model, "go", cwd=work)
    assert (out.returncode, out.stdout) == (0, "done\n"), out.stderr
    results = tool_messages("reads")
    assert results["r0"] == FORTY_LINES and count_text(FORTY_LINES) > 500
    for i in range(1, 7):
        assert FORTY_LINES[:40] not in results[f"r{i}"]
        assert "app.py is unchanged since you read it at turn 1" in results[f"r{i}"]
        assert "@r0" in results[f"r{i}"] and count_text(results[f"r{i}"]) < 100
    assert FORTY_LINES.splitlines()[39] in results["back"]  # stored when the first note pointed at it


def test_repeat_read_of_a_changed_file_returns_the_new_content(tmp_path):
    work = _work(tmp_path)
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("r1", "read_file", path="app.py")]},
        {"tool_calls": [call("w", "write_file", path="app.py", content="changed = True\n")]},
        {"tool_calls": [call("r2", "read_file", path="app.py")]},
        {"tool_calls": [call("r3", "read_file", path="app.py", start_line=1, end_line=1)]},  # other arguments
        {"content": "done"},
    ])
    out = ctxagent("run", "--batch", "--session", "changed", "--model", model, "--allow", "write_file", "go",
                   cwd=work)
    assert out.returncode == 0, out.stderr
    results = tool_messages("changed")
    assert results["r2"] == "changed = True\n" and results["r3"] == "changed = True\n"


def test_ledger_names_files_read_and_written_after_a_compaction(tmp_path):
    """Failure pinned: after compaction the context no longer mentioned the other files read or written."""
    work = _work(tmp_path)
    profile = tmp_path / "small.yaml"
    profile.write_text("context_window: 6000\nmax_output_tokens: 300\ntarget: 0.4\ntrigger: 0.6\n"
                       "tools: [shell, read_file, write_file, list_dir, read_output, grep_output]\n"
                       "pipelines:\n  batch:\n    - strategy: truncate\n")
    turns: list[Any] = [{"tool_calls": [call("r", "read_file", path="app.py")]},
                        {"tool_calls": [call("w", "write_file", path="notes/plan.md", content="plan\n")]}]
    turns += [{"tool_calls": [call(f"s{i}", "shell", command=f"seq {i * 1000} {i * 1000 + 250}")]}
              for i in range(1, 7)]
    model = script(tmp_path / "s.yaml", [*turns, {"content": "done"}])
    out = ctxagent("run", "--batch", "--session", "ledger", "--model", model, "--profile", str(profile),
                   "--allow", "shell,write_file", "go", cwd=work)
    assert out.returncode == 0, out.stderr
    kinds = [r["kind"] for r in records("ledger")]
    assert "compaction" in kinds
    seen = json.dumps(_context("ledger"))
    assert FORTY_LINES[:30] not in seen  # the read itself was compacted away ...
    assert "read app.py as @r" in seen and "wrote notes/plan.md as @w" in seen  # ... the ledger names it
    sha = [r for r in records("ledger") if r["kind"] == "message" and r.get("file")]
    assert {r["file"]["op"] for r in sha} == {"read", "write"} and all(len(r["file"]["sha256"]) == 64 for r in sha)


def test_identical_grep_output_call_returns_its_handle(tmp_path):
    work = _work(tmp_path)
    grep = {"handle": "@big", "pattern": "^77"}
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("big", "shell", command="seq 1 30000")]},
        {"tool_calls": [call("g1", "grep_output", **grep)]},
        {"tool_calls": [call("l", "list_dir")]},
        {"tool_calls": [call("g2", "grep_output", **grep)]},
        {"content": "done"},
    ])
    out = ctxagent("run", "--batch", "--session", "pure", "--model", model, "--allow", "shell", "go", cwd=work)
    assert out.returncode == 0, out.stderr
    results = tool_messages("pure")
    assert "7700" in results["g1"]
    assert "the same grep_output call ran at turn 2; its result is @g1" in results["g2"]


def test_identical_shell_calls_always_run(tmp_path):
    """A shell command's output depends on the world: never short-circuited, only loop-guarded."""
    work = _work(tmp_path)
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("a", "shell", command="cat counter 2>/dev/null; echo x >> counter")]},
        {"tool_calls": [call("b", "shell", command="cat counter 2>/dev/null; echo x >> counter")]},
        {"content": "done"},
    ])
    out = ctxagent("run", "--batch", "--session", "sh", "--model", model, "--allow", "shell", "go", cwd=work)
    assert out.returncode == 0, out.stderr
    assert (work / "counter").read_text() == "x\nx\n"


def test_loop_guard_warns_at_k_then_stops_resumably(tmp_path):
    work = _work(tmp_path)
    same = [{"tool_calls": [call(f"c{i}", "list_dir", path=".")]} for i in range(6)]
    model = script(tmp_path / "s.yaml", [*same, {"content": "done"}])
    out = ctxagent("run", "--batch", "--json", "--session", "loop", "--model", model, "go", cwd=work)
    assert out.returncode == 3, out.stderr
    assert json.loads(out.stdout)["status"] == "loop_guard"
    results = tool_messages("loop")
    assert "[ctxagent loop guard]" not in results["c2"]
    assert "this is the 4th identical call in a row" in results["c3"] and "app.py" in results["c3"]
    assert results["c4"].startswith("ERROR: [ctxagent loop guard] not run: 5 identical calls")
    assert "warning: loop guard: list_dir: 4 identical calls in a row" in out.stderr
    notes = [r for r in records("loop") if r["kind"] == "note"]
    assert [n["source"] for n in notes] == ["loop guard"]
    ends = [r for r in records("loop") if r["kind"] == "end"]
    assert ends[-1]["reason"] == "loop_guard"


def _repeat_shell(tmp_path: Path, session: str, command: str, times: int, answer: str) -> tuple[Any, dict]:
    """``times`` identical shell calls, one a reply, then ``answer``: the run's output and its results."""
    work = _work(tmp_path)
    calls = [{"tool_calls": [call(f"p{i}", "shell", command=command)]} for i in range(times)]
    model = script(tmp_path / "s.yaml", [*calls, {"content": answer}])
    out = ctxagent("run", "--batch", "--json", "--session", session, "--model", model, "--allow", "shell", "go",
                   cwd=work)
    return out, tool_messages(session)


def test_six_identical_polls_whose_output_changes_are_progress_not_a_loop(tmp_path):
    """Issue 34: six identical polling calls whose output changed (0%, 20%, 40%...) were stopped at
    the fifth with exit 3, after a warning claiming the result would not change."""
    poll = "n=$(cat progress 2>/dev/null || echo 0); echo \"job at $n%\"; echo $((n + 20)) > progress"
    out, results = _repeat_shell(tmp_path, "poll", poll, 6, "job done")
    assert out.returncode == 0 and json.loads(out.stdout)["answer"] == "job done", out.stderr
    assert [f"job at {20 * i}%" in results[f"p{i}"] for i in range(6)] == [True] * 6
    assert not any("loop guard" in text for text in results.values())
    assert "loop guard" not in out.stderr


def test_a_poll_that_stops_changing_is_a_loop_again(tmp_path):
    """The count starts where the result last changed: two changing polls, then five identical ones
    (the job stuck at 40%) are warned at the fourth identical result and stopped at the fifth."""
    poll = ("n=$(cat progress 2>/dev/null || echo 0); echo \"job at $n%\"; "
            "[ $n -lt 40 ] && echo $((n + 20)) > progress; true")
    out, results = _repeat_shell(tmp_path, "stuck", poll, 9, "never")
    assert out.returncode == 3 and json.loads(out.stdout)["status"] == "loop_guard", out.stderr
    assert "job at 40%" in results["p2"] and "loop guard" not in results["p4"]
    assert "this is the 4th identical call in a row" in results["p5"]
    assert results["p6"].startswith("ERROR: [ctxagent loop guard] not run: 5 identical calls")


def test_identical_offloaded_outputs_count_as_the_same_result(tmp_path):
    """An offloaded result's preview names its own handle (different at every call): the loop guard
    compares the stored output's sha256, so the same big output five times is still a loop."""
    out, results = _repeat_shell(tmp_path, "bigloop", "seq 1 30000", 6, "never")
    assert out.returncode == 3 and json.loads(out.stdout)["status"] == "loop_guard", out.stderr
    assert "@p0" in results["p0"] and "@p1" in results["p1"]  # offloaded: previews that differ
    assert results["p4"].startswith("ERROR: [ctxagent loop guard] not run: 5 identical calls")


def test_streak_counts_only_repeats_with_the_latest_result():
    sigs = ["x"] * 5
    assert streak(sigs, 4, [1, 2, 3, 4, 5], ["a", "a", "a", "a", None]) == 5
    assert streak(sigs, 4, [1, 2, 3, 4, 5], ["a", "b", "c", "d", None]) == 2
    assert streak(sigs, 4, [1, 2, 3, 4, 5], ["a", "b", "c", "c", None]) == 3
    assert streak(sigs, 0, [1, 2, 3, 4, 5], [None] * 5) == 1


def test_identical_parallel_calls_in_one_reply_are_one_step_for_the_loop_guard(tmp_path):
    """Regression: six identical calls in one reply counted as six in a row, so the loop guard warned
    at the 4th and refused the 5th and 6th, though the model had made one step."""
    work = _work(tmp_path)
    parallel = [{"tool_calls": [call(f"p{i}", "list_dir", path=".") for i in range(6)]}]
    model = script(tmp_path / "s.yaml", [*parallel, {"content": "done"}])
    out = ctxagent("run", "--batch", "--session", "parallel", "--model", model, "go", cwd=work)
    assert (out.returncode, out.stdout) == (0, "done\n"), out.stderr
    assert not any("loop guard" in text for text in tool_messages("parallel").values())
    assert streak(["x", "x", "x", "y", "y"], 2, [1, 1, 1, 2, 3]) == 1  # one reply: one step
    assert streak(["x", "x", "x", "y", "y"], 4, [1, 1, 1, 2, 3]) == 2


def test_loop_guard_zero_turns_it_off(tmp_path):
    work = _work(tmp_path)
    profile = tmp_path / "p.yaml"
    profile.write_text("loop_guard: 0\n")
    same = [{"tool_calls": [call(f"c{i}", "list_dir", path=".")]} for i in range(6)]
    model = script(tmp_path / "s.yaml", [*same, {"content": "done"}])
    out = ctxagent("run", "--batch", "--session", "noloop", "--model", model, "--profile", str(profile), "go",
                   cwd=work)
    assert (out.returncode, out.stdout) == (0, "done\n"), out.stderr


def test_compaction_on_every_request_escalates_then_stops_resumably(tmp_path):
    """Thrash guard: K requests in a row that compact escalate (half the target), 2K stop (exit 3)."""
    work = _work(tmp_path)
    profile = tmp_path / "thrash.yaml"
    profile.write_text("context_window: 8000\nmax_output_tokens: 300\ntarget: 0.45\ntrigger: 0.6\n"
                       "tool_result_fraction: 0.5\ntool_result_limit: 4000\nloop_guard: 0\n"
                       "pipelines:\n  batch:\n    - strategy: truncate\n")
    turns = [{"tool_calls": [call(f"s{i}", "shell", command=f"seq {i * 100000} {i * 100000 + 899}")]}
             for i in range(1, 14)]
    model = script(tmp_path / "s.yaml", [*turns, {"content": "done"}])
    out = ctxagent("run", "--batch", "--json", "--session", "thrash", "--model", model, "--profile", str(profile),
                   "--allow", "shell", "go", cwd=work)
    assert out.returncode == 3, out.stderr
    assert json.loads(out.stdout)["status"] == "thrash"
    assert "warning: thrash guard: the context was compacted on 3 requests in a row" in out.stderr
    assert "'ctxagent resume --session thrash --profile P' continues" in out.stderr


def _read(seq: int, handle: str, path: str, sha: str, args: str = "{}") -> MessageRecord:
    return MessageRecord(seq=seq, turn=seq, tokens=5, handle=handle,
                         message={"role": "tool", "tool_call_id": handle[1:], "content": "x"},
                         file=FileTouch(path=path, op="read", sha256=sha, args=args))


def test_ledger_line_is_latest_first_and_relative_to_the_workdir():
    ledger = Ledger()
    for seq, (handle, path) in enumerate([("@a", "/w/a.py"), ("@b", "/w/src/b.py"), ("@c", "/w/a.py")]):
        ledger.apply(_read(seq, handle, path, f"{seq:064x}"))
    line = ledger.line("/w")
    assert line.index("read a.py as @c") < line.index("read src/b.py as @b") and "@a" not in line


def test_streak_and_canonical_arguments():
    assert canonical('{"b": 1, "a": 2}') == canonical('{"a":2,"b":1}')
    assert canonical("{not json") == "{not json"
    assert [streak(["x", "y", "y", "y"], i) for i in range(4)] == [1, 1, 2, 3]


# ---------------------------------------------------------------- the adaptive profile's selection table


def _sized_view(tokens: int) -> list:
    from ctxagent.strategies.base import Entry

    return [Entry({"role": "system", "content": "s"}, 10, 0, 0, 0),
            Entry({"role": "user", "content": "t"}, tokens, 1, 1, 1)]


def test_adaptive_profile_follows_the_selection_table():
    """Seed 003: none under 5 turns, light pruning under 70% (from 45%: issue 34), sliding window
    70-85%, checkpoint past 85% and 15 turns, retrieval past 50 turns."""
    from ctxagent.profile import load_profile
    from ctxagent.strategies.base import Budget
    from ctxagent.strategies.pipeline import rule_in_force

    profile = load_profile("adaptive")
    assert "recall" in profile.tools
    budget = Budget(window=100_000, tools=0, reserved=0, target=profile.target, trigger=profile.trigger)
    for path in ("interactive", "batch"):
        steps = profile.pipeline(path)  # type: ignore[arg-type]
        def rule(turn: int, fraction: float, steps: list = steps) -> str:
            return rule_in_force(steps, _sized_view(int(fraction * 100_000)), budget, turn)

        assert rule(3, 0.6) == "no management"
        assert rule(3, 0.95) == "no management"  # only the unlabelled safety net acts
        assert rule(6, 0.3) == "no management"  # far from the window: never rewritten (issue 34)
        assert rule(6, 0.5).startswith("light pruning")
        assert rule(6, 0.75).startswith("sliding window")
        assert rule(10, 0.88).startswith("sliding window")  # past 85% but not 15 turns
        assert rule(20, 0.88).startswith("checkpoint")
        assert rule(60, 0.55).startswith("retrieval")


def test_failed_summary_is_reported_on_stderr_and_in_the_transcript(tmp_path):
    """Failure pinned: a rejected summary fell back to truncation silently."""
    work = _work(tmp_path)
    summarizer = script(tmp_path / "sum.yaml", [{"content": " "}] * 10)  # empty: fails the summary check
    profile = tmp_path / "sum.yaml.profile"
    profile.write_text(f"context_window: 6000\nmax_output_tokens: 300\ntarget: 0.4\ntrigger: 0.6\n"
                       f"allow_llm_in_batch: true\nsummarizer: {{model: '{summarizer}'}}\n"
                       "pipelines:\n  batch:\n    - strategy: summarize\n      keep_turns: 1\n"
                       "    - strategy: truncate\n")
    turns = [{"tool_calls": [call(f"s{i}", "shell", command=f"seq {i * 1000} {i * 1000 + 250}")]} for i in range(1, 7)]
    model = script(tmp_path / "s.yaml", [*turns, {"content": "done"}])
    out = ctxagent("run", "--batch", "--session", "sumfail", "--model", model, "--profile", str(profile),
                   "--allow", "shell", "go", cwd=work)
    assert (out.returncode, out.stdout) == (0, "done\n"), out.stderr
    assert "warning: compaction: summarize:" in out.stderr and "fell back to truncation" in out.stderr
    notes = [r for r in records("sumfail") if r["kind"] == "note"]
    assert notes and notes[0]["source"] == "compaction" and "the summary is empty" in notes[0]["text"]


def test_inspect_context_names_the_rule_in_force(tmp_path):
    work = _work(tmp_path)
    turns = [{"tool_calls": [call(f"l{i}", "list_dir", path=f"{'.' if i % 2 else 'src'}")]} for i in range(6)]
    model = script(tmp_path / "s.yaml", [*turns, {"content": "done"}])
    out = ctxagent("run", "--batch", "--session", "adapt", "--model", model, "--profile", "adaptive",
                   "--max-turns", "2", "go", cwd=work)
    assert out.returncode == 3, out.stderr  # max_turns: resumable
    shown = ctxagent("inspect", "context", "--session", "adapt", "--json")
    data = json.loads(shown.stdout)
    assert (data["turn"], data["rule"], data["profile"]) == (3, "no management", "adaptive")
    out = ctxagent("resume", "--session", "adapt", "--max-turns", "3", cwd=work)
    text = ctxagent("inspect", "context", "--session", "adapt").stdout
    assert "rule in force at turn 6 (adaptive, batch): no management" in text  # far from the window (issue 34)
