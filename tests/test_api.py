"""The public API (issue 35 item 5): what ``ctxagent`` exports, and each entry point for real.

``Context`` is checked against ctxagent's own loop: for the messages of a session ``ctxagent`` ran
against a local OpenAI-compatible server, it builds the very requests that server received.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxagent
from clihelp import call, script
from ctxagent.messages import pair_violations, tool_call
from ctxagent.sessions.transcript import Transcript
from examplecount import examples

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"
EXAMPLES = ROOT / "examples" / "api"
MODEL = "openai/gpt-4o-mini"


# -- the declared surface ----------------------------------------------------------------------


def documented() -> list[str]:
    """The names docs/api.md's reference table lists (its rows' first cell, `` `ctxagent.NAME` ``)."""
    text = DOC.read_text(encoding="utf-8").split("## Reference", 1)[1]
    return re.findall(r"^\| `ctxagent\.(\w+)`", text, flags=re.M)


def test_all_is_what_the_documentation_lists_and_every_name_imports():
    assert sorted(documented()) == sorted(name for name in ctxagent.__all__ if name != "__version__")
    for name in ctxagent.__all__:
        assert getattr(ctxagent, name) is not None
        namespace: dict[str, Any] = {}
        exec(f"from ctxagent import {name}", namespace)
        assert namespace[name] is getattr(ctxagent, name)
    assert set(ctxagent.__all__) <= set(dir(ctxagent))


def test_every_public_name_of_the_package_is_in_all():
    """As httpx's tests/test_exported_members.py: nothing public at the top that ``__all__`` does not
    declare (the subpackages, which importing the names loads, are modules, not API)."""
    for name in ctxagent.__all__:
        getattr(ctxagent, name)
    public = {name for name, value in vars(ctxagent).items()
              if not name.startswith("_") and not isinstance(value, type(sys))}
    assert public <= set(ctxagent.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Agent'"):
        ctxagent.Agent  # noqa: B018


def test_import_help_and_the_public_names_load_no_litellm_nor_does_building_a_view():
    code = ("import sys, ctxagent\nassert [m for m in sys.modules if m.startswith('ctxagent')] == ['ctxagent']\n"
            "from ctxagent.cli import invoke\nassert invoke(['--help']) == 0 and 'litellm' not in sys.modules\n"
            "names = [getattr(ctxagent, n) for n in ctxagent.__all__]\n"
            "view = ctxagent.Context(model='gpt-4o', context_window=8000).view("
            "[{'role': 'system', 'content': 's'}, {'role': 'user', 'content': 'task'}])\n"
            "assert len(view.messages) == 2 and 'litellm' not in sys.modules, sorted(sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


# -- Context: the view a profile would send ----------------------------------------------------


def fetch_tool(folder: Path) -> str:
    """A user tool returning a real file's lines (typer's own source, a different slice per page)."""
    import typer.main

    (folder / "pages.py").write_text(textwrap.dedent(f"""
        def fetch(n: int) -> str:
            \"\"\"Page n of a file.\"\"\"
            import pathlib
            lines = pathlib.Path({typer.main.__file__!r}).read_text(encoding="utf-8").splitlines()
            return "\\n".join(lines[n * 60:n * 60 + 40 + 35 * (n % 4)])
        """), encoding="utf-8")
    return f"{folder / 'pages.py'}:fetch"


def plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as compared: litellm sends an assistant's ``None`` content as ``""``."""
    return [{**m, "content": m.get("content") or ""} for m in messages]


def test_context_builds_the_requests_ctxagent_run_sent(fake_openai, tmp_path):
    """For the message history of a real run (a user tool, 24 results, masking and truncation in a
    small window), ``Context.view`` of each prefix is the request the server received then."""
    profile = tmp_path / "small.yaml"
    profile.write_text("extends: default\ncontext_window: 4000\nmax_output_tokens: 400\ntools: [read_output]\n"
                       "lessons: {enabled: false}\n", encoding="utf-8")
    replies: list[Any] = [{"tool_calls": [{"id": f"c{n}", "name": "fetch", "arguments": {"n": n}}]} for n in range(29)]
    server = fake_openai([*replies, {"content": "done"}])
    with ctxagent.open_session("real", model=MODEL, api_base=server.base_url, profile=str(profile),
                               tools=[fetch_tool(tmp_path)], allow=["fetch"]) as session:
        assert session.run("Read pages 0 to 28.").answer == "done"
        transcript = Transcript(session.directory / "transcript.jsonl")
    messages = [r.message for r in transcript.records() if getattr(r, "kind", "") == "message"]
    context = ctxagent.Context(str(profile), model=MODEL, tools=server.requests[0]["tools"],
                               outputs=tmp_path / "outputs", transcript=str(transcript.path))
    made = []
    for k, request in enumerate(server.requests):
        view = context.view(messages[:2 + 2 * k])
        assert plain(view.messages) == plain(request["messages"]), f"request {k}"
        made += [c.strategy for c in view.compactions]
    assert {"mask_observations", "truncate"} <= set(made)


def session_messages(results: int, size: int = 300) -> list[dict[str, Any]]:
    """A history of ``results`` tool calls, each answered with about ``size`` tokens of log lines."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."},
                                      {"role": "user", "content": "Find the failing request."}]
    for n in range(results):
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [tool_call(f"call_{n}", "shell", json.dumps({"command": f"cat {n}.log"}))]})
        body = "".join(f"{n}.log line {i}: GET /items/{i * n} 200\n" for i in range(size // 12))
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": body})
    return messages


def test_views_keep_the_laws_and_every_handle_they_name_resolves(tmp_path):
    context = ctxagent.Context("default", model=MODEL, context_window=6000, outputs=tmp_path / "out")
    history = session_messages(40)
    last: ctxagent.View | None = None
    for end in range(4, len(history) + 1, 2):
        view = context.view(history[:end])
        assert pair_violations(view.messages) == []  # PAIR
        assert view.tokens <= view.window == 6000  # BUDGET
        assert view.messages[0] == history[0] and view.messages[1] == history[1]  # HEAD: system, task
        assert view.messages[-2:] == history[end - 2:end]  # the newest unit, as sent
        if last is not None and not view.compactions:  # PREFIX: it extends the last request
            assert view.messages[:len(last.messages)] == last.messages
        for compaction in view.compactions:
            assert 0 <= compaction.start <= compaction.end < end  # indexes into the messages given
        last = view
    assert context.outputs is not None
    stubs = [m for m in last.messages if m["role"] == "tool" and "ctxagent" in m["content"]]
    named = {h for m in last.messages for h in re.findall(r"@call_\d+", str(m["content"]))}
    assert stubs and named  # NO LOSS: the model keeps a way back to each result it no longer sees
    for handle in named:
        n = int(handle.removeprefix("@call_"))
        assert context.outputs.resolve(handle) == history[3 + 2 * n]["content"]


def test_a_history_that_does_not_extend_the_last_one_starts_over(tmp_path):
    history = session_messages(30)
    context = ctxagent.Context("default", model=MODEL, context_window=6000)
    context.view(history)
    edited = [*history[:2], {"role": "user", "content": "Another question."}]
    assert context.view(edited).messages == ctxagent.Context("default", model=MODEL, context_window=6000).view(
        edited).messages == edited


@pytest.mark.parametrize(("messages", "error"), [
    ([{"role": "user", "content": "hi"}, "not a message"], "message 1 is not an OpenAI-format message"),
    ([{"role": "robot", "content": "hi"}], "message 0 is not"),
    ([{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "1"}], "break PAIR"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [tool_call("x", "f", "{}")]}],
     "break PAIR"),
])
def test_messages_that_are_not_a_history_are_usage_errors(messages, error):
    context = ctxagent.Context("default", model=MODEL, context_window=8000)
    with pytest.raises(ctxagent.UsageError, match=error):
        context.view(messages)
    assert context.view([{"role": "user", "content": "hi"}]).messages == [{"role": "user", "content": "hi"}]


def test_a_pair_break_in_messages_appended_later_is_found_with_its_index():
    """PAIR is checked on the new messages alone (not the whole history each call): a second result
    for a call answered in the last call's history is still an error, named as in the whole."""
    history = session_messages(5)
    context = ctxagent.Context("default", model=MODEL, context_window=8000)
    context.view(history)
    late = {"role": "tool", "tool_call_id": "call_4", "content": "again"}
    with pytest.raises(ctxagent.UsageError, match="message 12: second result for tool call 'call_4'"):
        context.view([*history, late])
    with pytest.raises(ctxagent.UsageError, match="message 13: tool result 'call_4' follows no tool call"):
        context.view([*history, {"role": "user", "content": "go on"}, late])
    assert context.view([*history, {"role": "user", "content": "go on"}]).messages[-1]["content"] == "go on"


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[int]]:
    """A history of units (a user message, or a reply with 0-3 calls and their results of 1-900 words),
    and the ends of the units at which a loop would ask for a view."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    ends = []
    for unit in range(draw(st.integers(1, 14))):
        calls = draw(st.integers(0, 3))
        if calls == 0 and draw(st.booleans()):
            messages.append({"role": "user", "content": f"and then {unit}?"})
        else:
            ids = [f"c{unit}_{k}" for k in range(calls)]
            messages.append({"role": "assistant", "content": "ok" if not ids else None,
                             **({"tool_calls": [tool_call(i, "shell", "{}") for i in ids]} if ids else {})})
            messages += [{"role": "tool", "tool_call_id": i, "content": "word " * draw(st.integers(1, 900))}
                         for i in ids]
        ends.append(len(messages))
    return messages, ends


tails = st.lists(st.sampled_from([{"role": "user", "content": "more"}, {"role": "tool", "tool_call_id": "c0_0",
                                   "content": "late"}, {"role": "assistant", "content": None,
                                   "tool_calls": [tool_call("z", "f", "{}")]},
                                   {"role": "tool", "tool_call_id": "z", "content": "z"}]), max_size=3)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), tail=tails)
def test_every_view_keeps_pair_budget_and_head_and_a_bad_tail_is_refused_as_a_whole_check_would(history, tail):
    messages, ends = history
    context = ctxagent.Context("default", model=MODEL, context_window=3000)
    for end in ends:
        view = context.view(messages[:end])
        assert pair_violations(view.messages) == [] and view.tokens <= view.window  # PAIR, BUDGET
        assert view.messages[:2] == messages[:2]  # HEAD
    whole = [*messages, *tail]
    if pair_violations(whole):
        with pytest.raises(ctxagent.UsageError, match="break PAIR"):
            context.view(whole)
    else:
        assert pair_violations(context.view(whole).messages) == []


def test_a_local_models_window_comes_from_its_server():
    from ctxagent.testing import FakeOpenAI

    props = {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}  # llama.cpp's /props
    with FakeOpenAI(info={"/props": props}) as server:
        context = ctxagent.Context("default", model="openai/qwen2.5-coder-1.5b", api_base=server.base_url)
    assert context.window == 4096 and server.info_requests == ["GET /props"]


def test_a_task_over_the_trigger_alone_is_a_context_overflow_and_an_unknown_window_a_usage_error():
    context = ctxagent.Context("default", model=MODEL, context_window=6000)
    with pytest.raises(ctxagent.ContextOverflowError, match="protected part"):
        context.view([{"role": "user", "content": "word " * 6000}])
    with pytest.raises(ctxagent.UsageError, match="context window is unknown"):
        ctxagent.Context("default")
    with pytest.raises(ctxagent.ProfileError):
        ctxagent.Context(str(ROOT / "missing.yaml"), context_window=8000)


# -- Outputs: offload and resolve --------------------------------------------------------------


def installed(package: str, name: str) -> Path:
    """A data file of an installed package (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / name


def test_outputs_offload_a_large_text_exactly_and_keep_a_small_one_inline(tmp_path):
    outputs = ctxagent.Outputs(tmp_path / "out", limit_tokens=2_000, model=MODEL)
    source = installed("typer", "main.py").read_text(encoding="utf-8")
    small = outputs.offload("exit code: 0\nok", call_id="call_1", tool="shell")
    assert small == ctxagent.Offloaded("exit code: 0\nok", None, None)
    big = outputs.offload(source, call_id="call_2", tool="read_file")
    assert big.handle == "@call_2" and big.path is not None and big.path.read_text(encoding="utf-8") == source
    assert "@call_2" in big.content and len(big.content) < len(source) // 4  # a preview naming the handle
    assert source.splitlines()[0] in big.content and source.rstrip().splitlines()[-1] in big.content  # middle-out
    assert outputs.resolve("@call_2") == source and outputs.handle_of("call_2") == "@call_2"
    again = ctxagent.Outputs(tmp_path / "out")  # another process: found by the folder's metadata
    assert again.handle_of("call_2") == "@call_2" and again.handle_of("call_1") is None
    assert outputs.offload(source, call_id="call_2").handle == "@call_2.2"  # a repeated id: a copy, not a clobber


def test_outputs_store_structured_values_and_resolve_their_parts(tmp_path):
    prices = json.loads(installed("litellm", "model_prices_and_context_window_backup.json").read_text(encoding="utf-8"))
    outputs = ctxagent.Outputs(tmp_path / "out")
    stored = outputs.offload(prices, call_id="prices", tool="load")
    assert stored.handle == "@prices" and stored.path is not None and stored.path.suffix == ".json"
    model = next(name for name, info in prices.items()  # a key holding '/' is named with ~1 (JSON Pointer)
                 if isinstance(info, dict) and "max_input_tokens" in info and "/" not in name)
    assert outputs.resolve(f"@prices/{model}/max_input_tokens") == prices[model]["max_input_tokens"]
    resolved = outputs.resolve_arguments({"window": f"@prices/{model}/max_input_tokens", "all": ["@prices"],
                                          "text": "@@prices"})
    assert resolved == {"window": prices[model]["max_input_tokens"], "all": [prices], "text": "@prices"}
    binary = bytes(range(256)) * 4
    assert outputs.resolve(outputs.offload(binary, call_id="blob").handle or "") == binary
    assert outputs.offload(None).content == "null"  # a JSON scalar: its text, inline
    with pytest.raises(TypeError):
        outputs.offload(object())


@pytest.mark.parametrize(("ref", "error"), [
    ("@pricez", "unknown handle @pricez.*nearest: @prices"),
    ("@prices/nope", "has no key 'nope'"),
    ("prices", "not a handle"),
    ("@../etc/passwd", "not a handle: '@../etc/passwd' is malformed"),
])
def test_a_handle_that_names_nothing_is_a_usage_error_naming_the_nearest(tmp_path, ref, error):
    outputs = ctxagent.Outputs(tmp_path / "out")
    outputs.offload({"a": 1}, call_id="prices")
    with pytest.raises(ctxagent.UsageError, match=error):
        outputs.resolve(ref)
    with pytest.raises(ctxagent.UsageError, match="unknown handle"):
        outputs.resolve_arguments({"x": ["@nothing"]})


def test_a_secret_in_an_offloaded_value_is_redacted_on_disk(tmp_path):
    key = "sk-proj-" + "Abc123Def456Ghi789Jkl012Mno345Pqr678Stu901Vwx234"
    outputs = ctxagent.Outputs(tmp_path / "out", limit_tokens=200)
    stored = outputs.offload(f"OPENAI_API_KEY={key}\n" * 300, call_id="env")
    assert stored.path is not None and key not in stored.path.read_text(encoding="utf-8")
    assert "[REDACTED:" in stored.path.read_text(encoding="utf-8")


# -- open_session and Session: ctxagent's own loop ---------------------------------------------


def test_a_session_runs_turns_against_a_local_server_and_resumes_by_name(fake_openai, tmp_path):
    (tmp_path / "notes.txt").write_text("the launch code is 7-4-1\n", encoding="utf-8")
    server = fake_openai([{"tool_calls": [call("r1", "read_file", path="notes.txt")]},
                          {"content": "The code is 7-4-1."}, {"content": "I said 7-4-1."}])
    with ctxagent.open_session("agent", model=MODEL, api_base=server.base_url, workdir=tmp_path) as session:
        events = list(session.stream("What is the launch code?"))
        kinds = [type(e).__name__ for e in events]
        assert kinds == ["Requesting", "Replied", "ToolStarted", "ToolDone", "Requesting", "Replied", "Finished"]
        assert isinstance(events[-1], ctxagent.Finished) and events[-1].answer == "The code is 7-4-1."
        assert session.directory.name == "agent" and (session.directory / "transcript.jsonl").is_file()
    with ctxagent.open_session("agent") as session:  # its model, server and workdir come from the transcript
        finished = session.run("Say it again.")
    assert (finished.status, finished.answer) == ("answered", "I said 7-4-1.")
    last = server.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert "7-4-1" in last[3]["content"]


def test_a_scripted_session_stops_at_max_turns_resumably_and_then_answers(tmp_path):
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("l1", "list_dir", path=".")]}, "all listed"])
    with ctxagent.open_session("scripted", model=model, workdir=tmp_path) as session:
        with pytest.raises(ctxagent.LimitReached, match="max_turns=1"):
            session.run("List the folder.", max_turns=1)
        assert session.run().answer == "all listed"  # None: the run that stopped goes on
        with pytest.raises(ctxagent.UsageError, match="nothing left to do"):
            session.run()
        with pytest.raises(ctxagent.UsageError, match="empty"):
            session.run(" \x00 ")


def test_an_open_session_is_busy_for_another_opener_until_closed(tmp_path):
    model = script(tmp_path / "s.yaml", ["hi"])
    session = ctxagent.open_session("busy", model=model)
    with pytest.raises(ctxagent.SessionBusyError, match="in use"):
        ctxagent.open_session("busy")
    session.close()
    session.close()
    with ctxagent.open_session("busy") as again:
        assert again.run("hello").answer == "hi"


def test_a_session_that_cannot_open_leaves_nothing_behind(tmp_path):
    with pytest.raises(ctxagent.ProfileError):
        ctxagent.open_session("broken", model=script(tmp_path / "s.yaml", ["hi"]), profile=str(tmp_path / "none.yaml"))
    with pytest.raises(ctxagent.UsageError, match="invalid session name"):
        ctxagent.open_session("../escape")
    with pytest.raises(ctxagent.UsageError, match=r"unknown tool|not a tool|allow"):
        ctxagent.open_session("broken", model=script(tmp_path / "s.yaml", ["hi"]), allow=["no_such_tool"])
    sessions = tmp_path / "ctxagent-data" / "sessions"
    assert not (sessions / "broken").exists()


# -- the documentation and its examples --------------------------------------------------------


def test_every_code_block_of_the_page_is_in_an_example_that_runs():
    """The page's code is the examples' code (so the examples' tests run it)."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    sources = [path.read_text(encoding="utf-8") for path in EXAMPLES.glob("*.py")]
    assert blocks
    for block in blocks:
        lines = [line.strip() for line in block.splitlines() if line.strip() and line.strip() != "..."]
        assert any(all(line in source for line in lines) for source in sources), block


def run_example(name: str, tmp_path: Path) -> dict[str, Any]:
    import os

    env = {**os.environ, "CTXAGENT_DATA_DIR": str(tmp_path / "data"), "TMPDIR": str(tmp_path)}  # its folders too
    out = subprocess.run([sys.executable, str(EXAMPLES / name), "--json"], capture_output=True, text=True,
                         env=env, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_own_loop_example_keeps_every_request_in_its_window(tmp_path):
    numbers = run_example("own_loop.py", tmp_path)
    assert numbers["requests"] == 9 and max(numbers["tokens"]) <= numbers["window"] == 16_000
    assert any(c.startswith("mask_observations") for c in numbers["compactions"])
    assert numbers["day3_lines"] == 2_000 and "@call_3" in numbers["handles"]  # offloaded, exact
    assert numbers["answer"].startswith("Day 3")


def test_the_session_example_answers_twice_and_resolves_the_log_it_read(tmp_path):
    numbers = run_example("session.py", tmp_path)
    assert numbers["tools"][0] == "read_file -> @log (stored, previewed)"
    assert numbers["log_is_exact"] and numbers["errors_in_log"] == 21
    assert numbers["answer"].startswith("21 of the 2000") and numbers["second_answer"]
    assert (tmp_path / "data" / "sessions" / numbers["session"] / "transcript.jsonl").is_file()


def test_the_readme_links_the_page():
    assert "(docs/api.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
