"""Lessons without a run: the laws of ranking and the block (hypothesis), the deterministic rules,
verdicts, merging, eviction and the store file."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ctxagent.lessons import curate, extract
from ctxagent.lessons.model import Evidence, Lesson, Scope, Vote, lesson_id, terms_of
from ctxagent.lessons.rank import Query, block, rank, render
from ctxagent.lessons.store import LessonStore, scrub
from ctxagent.sessions import records
from ctxagent.tokens import count_text
from examplecount import examples

SCOPE = "project:/work/p"


def lesson(key: str, rule: str = "", *, kind: str = "flag", prior: float = 0.5, session: str = "s1",
           updated: float = 1_000.0, votes: tuple[str, ...] = ()) -> Lesson:
    rule = rule or f"rule about {key}"
    return Lesson(id=lesson_id(SCOPE, key), rule=rule, kind=kind, key=key, scope=SCOPE, source=session,
                  evidence=[Evidence(session=session, seqs=[2, 3])], prior=prior, terms=terms_of(rule),
                  votes=[Vote(session=f"v{i}", verdict=v, seqs=[1]) for i, v in enumerate(votes)],  # type: ignore[arg-type]
                  created=updated, updated=updated)


words = st.sampled_from(["build", "deploy", "pytest", "legacy", "flag", "ssl", "cache", "docker", "make", "lint"])
lessons_st = st.lists(
    st.builds(lambda ws, p, u, v: lesson(" ".join(ws), "`" + " ".join(ws) + "` " + " ".join(ws) * 3, prior=p,
                                         updated=u, votes=tuple(v)),
              st.lists(words, min_size=1, max_size=6), st.floats(0, 1), st.floats(0, 1e7),
              st.lists(st.sampled_from(["confirmed", "contradicted"]), max_size=4)),
    max_size=12, unique_by=lambda x: x.id)


@settings(max_examples=examples(60), deadline=None)
@given(lessons_st, st.integers(0, 400), st.lists(words, max_size=5))
def test_the_block_never_exceeds_max_tokens(items: list[Lesson], max_tokens: int, task: list[str]) -> None:
    chosen = block(rank(items, Query(" ".join(task), "/work/p", SCOPE), now=1e7), max_tokens)
    assert count_text(chosen.text) <= max_tokens
    assert len(set(chosen.ids)) == len(chosen.ids)


@settings(max_examples=examples(60), deadline=None)
@given(lessons_st, st.lists(words, max_size=5), st.randoms(use_true_random=False))
def test_ranking_is_deterministic_whatever_the_order_of_the_store(items: list[Lesson], task: list[str],
                                                                   rnd: random.Random) -> None:
    query = Query(" ".join(task), "/work/p", SCOPE)
    shuffled = list(items)
    rnd.shuffle(shuffled)
    assert [x.id for x in rank(items, query, 5e6)] == [x.id for x in rank(shuffled, query, 5e6)]


@settings(max_examples=examples(40), deadline=None)
@given(lessons_st)
def test_a_contradiction_never_raises_a_lessons_rank(items: list[Lesson]) -> None:
    if not items:
        return
    query = Query("build", "/work/p", SCOPE)
    target = items[0]
    before = [x.id for x in rank(items, query, 1e7)].index(target.id)
    hit = curate.vote(target, Vote(session="later", verdict="contradicted", seqs=[4])).model_copy(
        update={"updated": target.updated})
    after = [x.id for x in rank([hit, *items[1:]], query, 1e7)].index(target.id)
    assert after >= before


def test_rank_prefers_overlap_with_the_task() -> None:
    docker = lesson("docker", "`docker build` needs `--network host`")
    pytest_ = lesson("pytest", "`pytest` needs `-p no:cov`")
    assert rank([docker, pytest_], Query("run pytest on the suite", "/work/p", SCOPE), 1_000)[0] is pytest_
    assert rank([docker, pytest_], Query("docker image build", "/work/p", SCOPE), 1_000)[0] is docker


def test_a_rule_without_evidence_is_rejected() -> None:
    with pytest.raises(ValidationError, match="evidence"):
        lesson("x").model_copy(update={}).model_validate({**lesson("x").model_dump(), "evidence": []})
    with pytest.raises(ValidationError, match="seqs"):
        Evidence(session="s1", seqs=[])


def test_near_duplicates_merge_and_one_session_counts_once() -> None:
    a = lesson("flag\x00make\x00--fast", "`make` needs `--fast` here: make failed", session="s1")
    b = a.model_copy(update={"key": "flag\x00make\x00--fast ", "id": lesson_id(SCOPE, "other"),
                             "evidence": [Evidence(session="s2", seqs=[5])]})
    merged = curate.merge([a], b)
    assert len(merged) == 1 and merged[0].sessions() == {"s1", "s2"} and merged[0].confirmations == 1
    again = curate.merge(merged, b)  # the same session learning it again (an interactive run answered twice)
    assert again[0].confirmations == 1
    voted = curate.vote(curate.vote(a, Vote(session="s3", verdict="confirmed", seqs=[1])),
                        Vote(session="s3", verdict="confirmed", seqs=[1]))
    assert voted.confirmations == 1


def test_eviction_drops_the_weakest_and_keeps_file_order() -> None:
    items = [lesson("a", prior=0.9), lesson("b", prior=0.1), lesson("c", prior=0.5)]
    assert [x.key for x in curate.evict(items, 2)] == ["a", "c"]


def test_deleted_session_takes_its_lessons_and_its_votes() -> None:
    own = lesson("a", session="gone")
    shared = curate.merge([lesson("b", session="kept")], lesson("b", session="gone"))[0]
    voted = curate.vote(lesson("c", session="kept"), Vote(session="gone", verdict="contradicted", seqs=[1]))
    live = curate.live([own, shared, voted], lambda name: name != "gone")
    assert [x.key for x in live] == ["b", "c"]
    assert live[0].sessions() == {"kept"} and live[1].votes == []


def shell_records(*steps: tuple[str, str]) -> list[records.MessageRecord]:
    """Message records of shell calls: ``(command, result content)`` each."""
    out, seq = [], 2
    for n, (command, content) in enumerate(steps):
        call = {"id": f"c{n}", "type": "function",
                "function": {"name": "shell", "arguments": json.dumps({"command": command})}}
        out.append(records.MessageRecord(seq=seq, turn=n + 1, tokens=1,
                                         message={"role": "assistant", "content": None, "tool_calls": [call]}))
        out.append(records.MessageRecord(seq=seq + 1, turn=n + 1, tokens=1,
                                         message={"role": "tool", "tool_call_id": f"c{n}", "content": content}))
        seq += 2
    return out


def test_flag_rule_ignores_redirections_and_names_its_records(tmp_path: Path) -> None:
    items = shell_records(("make deploy 2>&1 > log.txt", "exit code: 1\nwarning\nError: needs --env"),
                          ("make deploy --env prod", "exit code: 0\nok"))
    [found] = extract.extract(items, session="s1", scope=SCOPE, workdir=tmp_path)
    assert found.kind == "flag" and found.program == "make deploy" and found.tokens == ["--env", "prod"]
    assert found.evidence[0].seqs == [2, 3, 4, 5] and "Error: needs --env" in found.rule


def test_pipelines_and_unrelated_successes_teach_no_flag(tmp_path: Path) -> None:
    piped = shell_records(("make a | tee x", "exit code: 1\nno"), ("make a --x | tee x", "exit code: 0"))
    assert extract.extract(piped, session="s1", scope=SCOPE, workdir=tmp_path) == []
    assert extract.extract(shell_records(("make a", "exit code: 1\nno"), ("make b", "exit code: 0")),
                           session="s1", scope=SCOPE, workdir=tmp_path) == []


def test_error_fix_rule_names_the_command_that_fixed_it(tmp_path: Path) -> None:
    items = shell_records(("python app.py", "exit code: 1\nModuleNotFoundError: No module named 'yaml'"),
                          ("pip install pyyaml", "exit code: 0\nok"), ("python app.py", "exit code: 0\nok"))
    [found] = extract.extract(items, session="s1", scope=SCOPE, workdir=tmp_path)
    assert found.kind == "error_fix" and "pip install pyyaml" in found.rule and "No module named" in found.rule


def test_judge_confirms_the_flag_used_and_contradicts_success_without_it(tmp_path: Path) -> None:
    flag = lesson("k").model_copy(update={"program": "make deploy", "tokens": ["--env", "prod"]})
    used = extract.attempts(shell_records(("make deploy --env prod", "exit code: 0")))
    without = extract.attempts(shell_records(("make deploy", "exit code: 0")))
    failed = extract.attempts(shell_records(("make deploy", "exit code: 2\nerror")))
    assert extract.judge(flag, used, session="s", workdir=tmp_path).verdict == "confirmed"  # type: ignore[union-attr]
    assert extract.judge(flag, without, session="s", workdir=tmp_path).verdict == "contradicted"  # type: ignore[union-attr]
    assert extract.judge(flag, failed, session="s", workdir=tmp_path) is None


def test_store_keeps_a_bad_hand_edit_and_writes_owner_only(tmp_path: Path) -> None:
    store = LessonStore(tmp_path / "lessons")
    path = store.path(Scope(SCOPE))
    with store.editing(path) as items:
        items.append(lesson("a"))
    path.write_text(path.read_text() + '{"id": "broken"}\n')
    with store.editing(path) as items:
        items.append(lesson("b"))
    assert [x.key for x in store.load(Scope(SCOPE))] == ["a", "b"]
    assert path.read_text().splitlines()[-1] == '{"id": "broken"}' and len(store.problems()) == 1
    assert path.stat().st_mode & 0o777 == 0o600 and store.root.stat().st_mode & 0o777 == 0o700


def test_scrub_hides_this_users_home_and_other_users_homes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/alice")
    assert scrub("see /home/alice/p/x and /home/bob/.ssh/id and /Users/carol/k") == \
        "see ~/p/x and /home/<user>/.ssh/id and /home/<user>/k"


def test_render_is_empty_without_lines() -> None:
    assert render([]) == "" and block([], 500).text == ""


def read_records(*paths: str) -> list[records.MessageRecord]:
    out, seq = [], 2
    for n, path in enumerate(paths):
        call = {"id": f"r{n}", "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": path})}}
        out += [records.MessageRecord(seq=seq, turn=n + 1, tokens=1,
                                      message={"role": "assistant", "content": None, "tool_calls": [call]}),
                records.MessageRecord(seq=seq + 1, turn=n + 1, tokens=1,
                                      message={"role": "tool", "tool_call_id": f"r{n}", "content": "text"})]
        seq += 2
    return out


def test_read_first_is_weak_alone_and_judged_by_what_later_sessions_read(tmp_path: Path) -> None:
    [found] = extract.extract(read_records(str(tmp_path / "docs/SETUP.md"), "a.py"), session="s1", scope=SCOPE,
                              workdir=tmp_path)
    assert found.kind == "read_first" and found.path == "docs/SETUP.md" and found.confidence < 0.4
    first = extract.attempts(read_records("docs/SETUP.md", "b.py"))
    never = extract.attempts(read_records("b.py"))
    assert extract.judge(found, first, session="s2", workdir=tmp_path).verdict == "confirmed"  # type: ignore[union-attr]
    assert extract.judge(found, never, session="s3", workdir=tmp_path).verdict == "contradicted"  # type: ignore[union-attr]


def test_an_unreadable_store_keeps_the_recorded_block_on_resume(tmp_path: Path) -> None:
    from ctxagent.lessons.hooks import Learner
    from ctxagent.profile_schema import LessonsConfig

    (tmp_path / "lessons").write_text("a file, not a folder")
    learner = Learner("s", LessonsConfig(), tmp_path, store=LessonStore(tmp_path / "lessons"))
    shown = records.LessonsRecord(scope=SCOPE, ids=["L00000000"], lines=["x"], text=render(["x"]))
    assert learner.refresh(shown) == [] and learner.opening("task") == []
    assert "lessons not updated" in learner.finish([], shown)


def test_llm_reply_in_a_fence_parses_and_extra_keys_are_refused() -> None:
    from ctxagent.lessons.llm import parse

    ok = parse('```json\n{"lessons": [{"rule": "Run make with -j1 here.", "evidence": [3], "confidence": 0.4}]}\n```')
    assert ok.lessons[0].scope == "project"
    with pytest.raises(ValueError, match="why: Extra inputs"):
        parse('{"lessons": [{"rule": "Run make with -j1 here.", "evidence": [3], "confidence": 0.4, "why": 1}]}')


def test_a_test_fixed_by_editing_code_teaches_no_flag(tmp_path: Path) -> None:
    """Regression: ``pytest t.py`` failed, the agent fixed the code, ``pytest t.py -x`` passed; the
    lesson "pytest needs -x" was false (the edit, not the flag, made it pass)."""
    items = shell_records(("pytest t.py", "exit code: 1\nFAILED t.py::test_a"), ("pytest t.py -x", "exit code: 0"))
    write = {"id": "w", "type": "function", "function": {"name": "write_file",
                                                          "arguments": json.dumps({"path": "a.py", "content": "x"})}}
    between = [records.MessageRecord(seq=10, turn=1, tokens=1,
                                     message={"role": "assistant", "content": None, "tool_calls": [write]}),
               records.MessageRecord(seq=11, turn=1, tokens=1,
                                     message={"role": "tool", "tool_call_id": "w", "content": "wrote a.py"})]
    edited = [*items[:2], *between, *items[2:]]
    edited = [r.model_copy(update={"seq": n}) for n, r in enumerate(edited, 2)]
    assert extract.extract(edited, session="s1", scope=SCOPE, workdir=tmp_path) == []
    [plain] = extract.extract(items, session="s1", scope=SCOPE, workdir=tmp_path)
    assert plain.prior == 0.6  # the error did not name -x


def test_a_leading_assignment_is_not_the_program(tmp_path: Path) -> None:
    """Regression (trial): ``LANG=C ./tool build`` taught "`LANG=C` needs ..." and a redacted
    ``KEY=[REDACTED]`` prefix was stored quoted, a command no shell can run."""
    items = shell_records(("LANG=C TOKEN=x ./tool build app1", "exit code: 2\nerror: needs --legacy"),
                          ("LANG=C TOKEN=x ./tool build app1 --legacy", "exit code: 0\nbuilt"))
    [found] = extract.extract(items, session="s1", scope=SCOPE, workdir=tmp_path)
    assert found.program == "./tool build" and found.tokens == ["--legacy"]
    assert "LANG=C" not in found.rule and "'" not in found.rule


def test_secret_option_values_never_reach_a_lesson() -> None:
    """Regression (trial): ``--pass=...`` and ``--apikey VALUE`` were copied into lessons and from there
    into every later session's pinned block."""
    text = scrub("./tool push --apikey Zx9value77 --pass=Tr0ub4dor --auth-token 'a b' --sort-key name")
    assert "Zx9value77" not in text and "Tr0ub4dor" not in text and "'a b'" not in text
    assert text.count("[REDACTED:option]") == 3 and "--sort-key name" in text
