"""Lessons (issue 15), end to end through the real CLI in this process: a scripted model, real shell
commands in a real project folder, the real JSONL store. Session 1 finds that a command needs a flag;
session 2 in the same project is shown the lesson and succeeds on its first call."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from clihelp import call, run_cli, script
from ctxagent.dirs import data_dir
from ctxagent.errors import UsageError
from ctxagent.lessons.hooks import Learner
from ctxagent.lessons.model import Scope
from ctxagent.lessons.rank import Query, rank
from ctxagent.lessons.store import LessonStore
from ctxagent.profile_schema import LessonsConfig

TOOL = """#!/bin/sh
for a in "$@"; do [ "$a" = "--legacy-ssl" ] && { echo "built $2"; exit 0; }; done
echo "error: handshake failed at $HOME_HINT: this server needs --legacy-ssl" >&2; exit 2
"""
LENIENT = "#!/bin/sh\necho \"built $2\"\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git repository (``.git``) with ``./tool``, whose ``build`` fails without ``--legacy-ssl``;
    the sessions work in its ``src`` folder (the scope is the repository root)."""
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (root / "src").mkdir()
    tool = root / "src" / "tool"
    tool.write_text(TOOL)
    tool.chmod(0o755)
    return root / "src"


def shell(call_id: str, command: str) -> dict:
    return call(call_id, "shell", command=command)


def run(project: Path, session: str, replies: list, task: str, *extra: str) -> dict:
    model = script(project.parent.parent / f"{session}.yaml", replies)
    out = run_cli("run", "--batch", "--json", "--allow", "shell", "--session", session, "--workdir", str(project),
                  "--model", model, *extra, task)
    assert out.exit_code == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def learn_flag(project: Path, session: str = "s1", target: str = "app1") -> None:
    run(project, session, [{"tool_calls": [shell("a", f"./tool build {target} 2>&1")]},
                           {"tool_calls": [shell("b", f"./tool build {target} --legacy-ssl")]},
                           f"built {target}"], f"build {target}")


def transcript(session: str) -> list[dict]:
    path = data_dir() / "sessions" / session / "transcript.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def context(session: str) -> dict:
    out = run_cli("inspect", "context", "--session", session, "--json")
    assert out.exit_code == 0, out.stderr
    return json.loads(out.stdout)


def lessons() -> list[dict]:
    out = run_cli("lessons", "list", "--json")
    assert out.exit_code == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_session_two_is_shown_the_flag_session_one_needed_and_succeeds_first_call(project: Path) -> None:
    learn_flag(project)
    [lesson] = lessons()
    assert lesson["kind"] == "flag" and "--legacy-ssl" in lesson["rule"] and "`./tool build`" in lesson["rule"]
    assert lesson["scope"] == f"project:{project.parent.resolve()}"  # the repository root, not src/
    by_seq = {r["seq"]: r["message"] for r in transcript("s1") if r["kind"] == "message"}
    seqs = lesson["evidence"][0]["seqs"]
    assert lesson["evidence"][0]["session"] == "s1" and len(seqs) == 4
    assert "./tool build app1 2>&1" in by_seq[seqs[0]]["tool_calls"][0]["function"]["arguments"]
    assert by_seq[seqs[1]]["content"].startswith("exit code: 2")
    assert "--legacy-ssl" in by_seq[seqs[2]]["tool_calls"][0]["function"]["arguments"]
    assert by_seq[seqs[3]]["content"].startswith("exit code: 0")

    result = run(project, "s2", [{"tool_calls": [shell("a", "./tool build app2 --legacy-ssl")]}, "built app2"],
                 "build app2")
    assert result["status"] == "answered" and result["turns"] == 2
    records = transcript("s2")
    [shown] = [r for r in records if r["kind"] == "lessons"]
    assert shown["ids"] == [lesson["id"]]
    first_result = next(r for r in records if r["kind"] == "message" and r["message"]["role"] == "tool")
    assert first_result["message"]["content"].startswith("exit code: 0")  # right on the first call
    pins = context("s2")["messages"][1]
    assert pins["kind"] == "pins" and lesson["id"] in pins["message"]["content"]
    assert context("s2")["lessons"]["ids"] == [lesson["id"]]
    [after] = lessons()
    assert after["confirmations"] == 1 and after["confidence"] > lesson["confidence"]
    assert after["votes"][0]["session"] == "s2" and after["votes"][0]["verdict"] == "confirmed"


def test_inspect_context_shows_the_injected_block(project: Path) -> None:
    learn_flag(project)
    run(project, "s2", [{"tool_calls": [shell("a", "./tool build app2 --legacy-ssl")]}, "built app2"], "build app2")
    out = run_cli("inspect", "context", "--session", "s2")
    assert out.exit_code == 0 and "lessons shown (L" in out.stdout and "--legacy-ssl" in out.stdout


def test_resume_shows_the_block_chosen_at_start_even_after_new_lessons(project: Path) -> None:
    learn_flag(project)
    run(project, "s2", [{"tool_calls": [shell("a", "./tool build app2 --legacy-ssl")]}, "built app2",
                        "done again"], "build app2")
    before = context("s2")["messages"][1]["message"]["content"]
    (project / "other").write_text("#!/bin/sh\n[ \"$2\" = --fast ] && exit 0; echo 'error: slow' >&2; exit 1\n")
    (project / "other").chmod(0o755)
    run(project, "s3", [{"tool_calls": [shell("a", "./other run")]}, {"tool_calls": [shell("b", "./other run --fast")]},
                        "ran"], "run other")
    assert len(lessons()) == 2
    out = run_cli("resume", "--batch", "--session", "s2", "again")
    assert out.exit_code == 0, out.stderr
    assert context("s2")["messages"][1]["message"]["content"] == before  # PREFIX: the pins message unchanged
    assert [r["kind"] for r in transcript("s2")].count("lessons") == 1


def test_forget_removes_the_lesson_from_new_and_resumed_sessions(project: Path) -> None:
    learn_flag(project)
    run(project, "s2", [{"tool_calls": [shell("a", "./tool build app2 --legacy-ssl")]}, "built app2", "ok"],
        "build app2")
    [lesson] = lessons()
    out = run_cli("lessons", "forget", lesson["id"])
    assert out.exit_code == 0 and lessons() == []
    run(project, "s3", ["nothing to do"], "build app3")
    assert not [r for r in transcript("s3") if r["kind"] == "lessons"]
    assert all(m["kind"] != "pins" for m in context("s3")["messages"])
    out = run_cli("resume", "--batch", "--session", "s2", "again")
    assert out.exit_code == 0, out.stderr
    assert transcript("s2")[-1]["kind"] == "end"
    assert lesson["id"] not in json.dumps(context("s2")["messages"])
    with pytest.raises(UsageError, match="no lesson"):
        run_cli("lessons", "show", lesson["id"])


def test_contradicted_lesson_loses_rank(project: Path) -> None:
    learn_flag(project)  # prior 0.6
    (project / "other").write_text("#!/bin/sh\n[ -e ready ] && exit 0; echo 'error: not ready' >&2; exit 1\n")
    (project / "other").chmod(0o755)
    run(project, "s2", [{"tool_calls": [shell("a", "./other run")]}, {"tool_calls": [shell("b", "touch ready")]},
                        {"tool_calls": [shell("c", "./other run")]}, "ran"], "run other")  # an error_fix, prior 0.5
    store, scope = LessonStore(), Scope(f"project:{project.parent.resolve()}")
    neutral = Query("", "", scope.name)
    flag = next(x for x in store.load(scope) if x.kind == "flag")
    fix = next(x for x in store.load(scope) if x.kind == "error_fix")
    assert "touch ready" in fix.rule
    assert [x.id for x in rank(store.load(scope), neutral, now=fix.updated)] == [flag.id, fix.id]
    (project / "tool").write_text(LENIENT)  # the server was fixed: the flag is no longer needed
    run(project, "s3", [{"tool_calls": [shell("a", "./tool build app3")]}, "built app3"], "build app3")
    after = next(x for x in store.load(scope) if x.id == flag.id)
    assert after.contradictions == 1 and after.confidence < flag.confidence
    assert [x.id for x in rank(store.load(scope), neutral, now=after.updated)] == [fix.id, flag.id]
    run(project, "s4", [{"tool_calls": [shell("a", "./tool build app4")]}, "built app4"], "build app4")
    assert Learner("s5", LessonsConfig(), project).opening("build app5")[0].ids == [fix.id]  # under the floor now


def test_no_lessons_neither_shows_nor_learns(project: Path) -> None:
    learn_flag(project)
    [lesson] = lessons()
    run(project, "s2", [{"tool_calls": [shell("a", "./tool build app2")]},
                        {"tool_calls": [shell("b", "./tool build app2 --legacy-ssl")]}, "built"],
        "build", "--no-lessons")
    assert not [r for r in transcript("s2") if r["kind"] == "lessons"]
    assert lessons() == [lesson]  # neither its evidence nor a vote


def test_deleting_a_session_deletes_what_it_taught(project: Path) -> None:
    learn_flag(project)
    assert run_cli("sessions", "rename", "s1", "first").exit_code == 0
    [lesson] = lessons()
    assert lesson["source"] == "first" and lesson["evidence"][0]["session"] == "first"
    assert run_cli("sessions", "delete", "first", "--yes").exit_code == 0
    assert lessons() == []


def test_lessons_never_hold_secrets_or_other_users_home_paths(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-live-0123456789abcdefABCDEF"
    monkeypatch.setenv("DEPLOY_TOKEN", secret)
    monkeypatch.setenv("HOME_HINT", f"/home/bob/keys/{secret}")
    learn_flag(project)
    text = "".join(p.read_text() for p in (data_dir() / "lessons").glob("*.jsonl"))
    assert "handshake failed" in text and secret not in text and "/home/bob" not in text


def test_store_is_owner_only(project: Path) -> None:
    learn_flag(project)
    folder = data_dir() / "lessons"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in folder.iterdir())


def test_a_store_that_cannot_be_written_warns_and_the_run_still_answers(project: Path) -> None:
    data_dir().mkdir(parents=True, exist_ok=True)
    (data_dir() / "lessons").write_text("not a folder")
    result = run(project, "s1", [{"tool_calls": [shell("a", "./tool build x")]},
                                 {"tool_calls": [shell("b", "./tool build x --legacy-ssl")]}, "built"], "build")
    assert result["status"] == "answered"
    assert any(r["kind"] == "note" and r["source"] == "lessons" for r in transcript("s1"))


def test_edit_sets_the_rule_and_refuses_a_lesson_without_evidence(project: Path) -> None:
    learn_flag(project)
    [lesson] = lessons()
    rule = "Always pass --legacy-ssl to ./tool build."
    assert run_cli("lessons", "edit", lesson["id"], "--rule", rule).exit_code == 0
    assert lessons()[0]["rule"] == "Always pass --legacy-ssl to ./tool build."
    path = next((data_dir() / "lessons").glob("*.jsonl"))
    stored = json.loads(path.read_text())
    path.write_text(json.dumps({**stored, "evidence": []}) + "\n")  # a hand edit that drops the evidence
    out = run_cli("lessons", "list", "--json")
    assert out.stdout == "" and "evidence" in out.stderr
    assert path.read_text().strip() == json.dumps({**stored, "evidence": []})  # kept as it is, never used


def test_export_markdown_names_the_evidence(project: Path) -> None:
    learn_flag(project)
    out = run_cli("lessons", "export", "--format", "markdown")
    assert out.exit_code == 0 and "evidence: session s1, records #2, #3, #4, #5" in out.stdout


def test_learner_block_fits_max_tokens_from_the_profile(project: Path) -> None:
    learn_flag(project)
    tiny = Learner("x", LessonsConfig(max_tokens=20), project)
    assert tiny.opening("build app2") == []
    assert Learner("x", LessonsConfig(), project).opening("build app2")[0].ids


def test_lessons_commands_start_without_litellm() -> None:
    code = ("import sys\nfrom ctxagent.cli import invoke\n"  # main() would end the process after one command
            "for argv in (['lessons', '--help'], ['lessons', 'list'], ['lessons', 'export']):\n"
            "    assert invoke(argv) == 0, argv\n"
            "    assert 'litellm' not in sys.modules, argv\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ})
    assert out.returncode == 0, out.stderr


def test_benchmark_lessons_take_fewer_calls_and_tokens_than_none() -> None:
    """Done-when of issue 15: 10 related tasks in sequence, with lessons, fewer turns and tokens."""
    root = Path(__file__).resolve().parent.parent
    if str(root) not in sys.path:  # `benchmarks` is a top-level folder of the repository, not installed
        sys.path.insert(0, str(root))
    from benchmarks import lessons as bench

    data = bench.run()
    off, on = data["rows"]
    assert off["answered"] == on["answered"] == 10
    assert on["calls"] < off["calls"] and on["prompt_tokens"] < off["prompt_tokens"]
    assert on["first_call_ok"] == 7 and off["first_call_ok"] == 0 and on["stored"] == 3 and off["stored"] == 0
    assert all(t["block_tokens"] <= 500 for t in on["tasks"])


def test_edit_scope_user_moves_the_lesson_to_every_project(project: Path, tmp_path: Path) -> None:
    learn_flag(project)
    [lesson] = lessons()
    assert run_cli("lessons", "edit", lesson["id"], "--scope", "user").exit_code == 0
    [moved] = lessons()
    assert moved["scope"] == "user" and (data_dir() / "lessons" / "user.jsonl").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert Learner("x", LessonsConfig(), elsewhere).opening("build")[0].ids == [lesson["id"]]
    with pytest.raises(UsageError, match="scope"):
        run_cli("lessons", "edit", lesson["id"], "--scope", "somewhere")


def llm_profile(project: Path, reply: str, allow: bool) -> str:
    """A profile whose summarizer is a scripted model replying ``reply`` (the lessons JSON)."""
    summarizer = script(project.parent.parent / "summarizer.yaml", [reply])
    path = project.parent.parent / "llm.yaml"
    path.write_text(f"extends: default\nallow_llm_in_batch: {str(allow).lower()}\n"
                    f"summarizer:\n  model: {json.dumps(summarizer)}\n")
    return str(path)


def run_llm(project: Path, reply: str, allow: bool) -> None:
    run(project, "s1", [{"tool_calls": [shell("a", "ls")]}, "listed"], "list the files",
        "--profile", llm_profile(project, reply, allow))


PROPOSAL = json.dumps({"lessons": [{"rule": "List the folder before building anything here.", "evidence": [2, 3],
                                    "scope": "project", "confidence": 0.9}]})


def test_llm_lessons_on_a_batch_path_only_with_allow_llm_in_batch(project: Path) -> None:
    run_llm(project, PROPOSAL, allow=False)
    assert lessons() == []
    run(project, "s2", [{"tool_calls": [shell("a", "ls")]}, "listed"], "list the files",
        "--profile", llm_profile(project, PROPOSAL, allow=True))
    [lesson] = lessons()
    assert lesson["kind"] == "llm" and lesson["evidence"] == [{"session": "s2", "seqs": [2, 3],
                                                               "note": "proposed by the model"}]
    assert lesson["prior"] == 0.5  # the model's 0.9, capped: a made-up rule earns its place
    assert any(r["kind"] == "usage" and r["model"].startswith("summarizer:") for r in transcript("s2"))


@pytest.mark.parametrize(("reply", "why"), [
    (json.dumps({"lessons": [{"rule": "Always run ls first in here.", "evidence": [99], "confidence": 0.5}]}),
     "no message #99"),
    (json.dumps({"lessons": [{"rule": "Always run ls first in here.", "evidence": [], "confidence": 0.5}]}),
     "evidence"),
    ("I think you should run ls.", "no JSON"),
])
def test_llm_lesson_without_real_evidence_is_rejected_and_the_run_still_answers(project: Path, reply: str,
                                                                                why: str) -> None:
    run_llm(project, reply, allow=True)
    assert lessons() == []
    [note] = [r for r in transcript("s1") if r["kind"] == "note" and r["source"] == "lessons"]
    assert why in note["text"]
    kinds = [r["kind"] for r in transcript("s1")]
    assert kinds[-3:] == ["end", "usage", "note"]  # asked after the answer (its end record), then warned
    assert transcript("s1")[-3]["reason"] == "answered"


def test_a_session_stopped_by_its_budget_keeps_what_it_learned_at_the_checkpoint(project: Path) -> None:
    """A budget stop writes a checkpoint before it ends the run; the lessons found so far are stored
    then, although the session never answered (no vote: nothing was confirmed)."""
    model = script(project.parent.parent / "cp.yaml", [
        {"tool_calls": [shell("a", "./tool build app1 2>&1")]},
        {"tool_calls": [shell("b", "./tool build app1 --legacy-ssl")]},
        {"tool_calls": [shell("c", "echo more")]}, "never reached"])
    out = run_cli("run", "--batch", "--json", "--allow", "shell", "--session", "cp", "--workdir", str(project),
                  "--model", model, "--max-input-tokens", "3300", "build app1")
    assert out.exit_code == 3, out.stderr
    assert any(r["kind"] == "compaction" and r["strategy"] == "checkpoint" for r in transcript("cp"))
    found = lessons()
    assert len(found) == 1 and "--legacy-ssl" in found[0]["rule"]
