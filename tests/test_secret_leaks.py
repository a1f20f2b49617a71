"""Every secret removed whole, everywhere it goes, and kept out of the tools (issue 31): one regression
test per way a secret got out, each named after the failure it pins.

Fake credentials are composed at run time from a seeded generator (no key-shaped literal is committed).
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import os
import random
import string
import sys
import time
from pathlib import Path

import pytest

from clihelp import call, ctxagent, records, script, tool_messages
from ctxagent.agent.model import ToolCall
from ctxagent.sessions.redact import RedactingStore, Redactor
from ctxagent.strategies.common import short_args
from ctxagent.tools.base import ToolContext
from ctxagent.tools.builtin import SHELL
from ctxagent.tools.offload import OffloadPolicy
from ctxagent.tools.permissions import Gate, Grants, PermissionsConfig
from ctxagent.tools.toolset import make_toolset

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
leaked = importlib.import_module("benchmarks.secret_corpus").leaked
ALNUM = string.ascii_letters + string.digits


def chars(n: int, alphabet: str = ALNUM, seed: str = "") -> str:
    """``n`` random characters, the same for the same ``seed`` whatever ran before (tests run in any order)."""
    rnd = random.Random(f"{seed}/{n}/{alphabet}")
    return "".join(rnd.choice(alphabet) for _ in range(n))


def password(seed: str) -> str:
    """A password as people make them: letters, digits and a symbol."""
    return chars(8, seed=seed) + chars(3, string.digits, seed) + "!" + chars(2, seed=seed + "+")


PROJECT_KEY = "sk-" + "proj-" + chars(80, ALNUM + "_-", "project")
RUN_KEY = "sk-" + chars(48, seed="run")
GITHUB = "gh" + "p_" + chars(36, seed="github")


def data_dir() -> Path:
    return Path(os.environ["CTXAGENT_DATA_DIR"])


def everything_written() -> bytes:
    return b"\n".join(p.read_bytes() for p in data_dir().rglob("*") if p.is_file())


# ------------------------------------------------------------------ exact values, whole


@pytest.mark.parametrize("tail", [" is#Strong99", "#Strong99", "; Strong99", ' "Strong" 99', "'Strong' 99"])
def test_a_credential_variable_printed_by_env_lost_only_its_first_characters(tail, tmp_path):
    """``DB_PASSWORD=[REDACTED:password] is#Strong99``: the shape stopped at a space, ``#``, ``;`` or a
    quote, and the exact value starting inside its match was skipped. Exact values come out whole."""
    value = "Hunter2" + tail
    redactor = Redactor.from_env({"DB_PASSWORD": value})
    for text in (f"DB_PASSWORD={value}\nHOME=/home/ada\n", f'DB_PASSWORD="{value}"', f"export DB_PASSWORD='{value}'"):
        out = redactor.text(text)
        assert not leaked(value, out, window=6), out
        assert "[REDACTED:env:DB_PASSWORD]" in out
        assert redactor.data(text.encode()) == out.encode()
    # through a real run: the model cats a .env file while the variable is set in ctxagent's environment
    (tmp_path / ".env").write_text(f"DB_PASSWORD={value}\nDEBUG=1\n", encoding="utf-8")
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("cat", "shell", command="cat .env")]}, "done"])
    out = ctxagent("run", "--batch", "--session", "dotenv", "--model", model, "--allow", "shell", "go",
                   cwd=tmp_path, env={"DB_PASSWORD": value})
    assert out.returncode == 0, out.stderr
    assert "DB_PASSWORD=[REDACTED:env:DB_PASSWORD]\nDEBUG=1" in tool_messages("dotenv")["cat"]
    assert not leaked(value, everything_written().decode("utf-8", "replace"), window=6)


# ------------------------------------------------------------------ redact, then cut


def test_invalid_json_quoted_back_at_200_characters_kept_a_keys_first_characters(tmp_path):
    """The quote of invalid JSON was cut at 200 characters, then redacted: ``sk-proj-abcdefgh`` is no
    key's shape, so a key's first characters reached the transcript."""
    raw = '{"command": "' + "x" * (200 - 16 - 15) + " " + PROJECT_KEY + " oops"  # the key's first 14 before the cut
    toolset = make_toolset(["shell"], ToolContext(RedactingStore(tmp_path / "outputs"), tmp_path),
                           OffloadPolicy(limit_tokens=2_000))
    outcome = toolset.call(ToolCall("c1", "shell", raw))
    assert outcome.is_error and "not valid JSON" in outcome.content
    assert not leaked(PROJECT_KEY, Redactor().text(outcome.content))


def test_a_permission_record_cut_at_500_characters_kept_a_tokens_first_characters(tmp_path):
    gate = Gate(PermissionsConfig(), "interactive", Grants(ask=lambda tool, arguments, workdir: "yes"),
                workdir=tmp_path)
    command = "echo " + "y" * (500 - 2 - 12 - 5 - 15) + " " + GITHUB  # in the record's JSON: the first 14 fit
    assert gate.decide(SHELL, {"command": command}, call_id="a")[0] is None
    (decision,) = gate.take_decisions()
    assert len(decision.arguments) <= 500 and not leaked(GITHUB, Redactor().text(decision.arguments))


def test_an_output_records_arguments_cut_at_500_characters_kept_a_keys_first_characters(tmp_path):
    command = "seq 1 30000 # " + "z" * (500 - 14 - 16 - 15) + " " + PROJECT_KEY
    toolset = make_toolset(["shell"], ToolContext(RedactingStore(tmp_path / "outputs"), tmp_path),
                           OffloadPolicy(limit_tokens=200))
    outcome = toolset.call(ToolCall("c1", "shell", json.dumps({"command": command})))
    assert outcome.output is not None
    assert not leaked(PROJECT_KEY, Redactor().text(outcome.output.arguments))


def test_a_compaction_label_cut_inside_a_key_kept_its_first_characters():
    """A strategy's one-line label of a tool call (``shell(command=curl -H token sk-proj-Ab3dEf9hIj…)``)
    was cut inside the key, and ``sk-proj-`` plus 12 characters is no key's shape: the fragment went
    to the transcript in the compaction record. A word the cut would split is now left out whole."""
    arguments = json.dumps({"command": f"key {PROJECT_KEY} --prompt hello"})
    for limit in range(20, 140):
        label = short_args(arguments, limit)
        assert len(label) <= limit and not leaked(PROJECT_KEY, Redactor().text(label)), (limit, label)


# ------------------------------------------------------------------ after the command returned


def test_a_detached_child_wrote_into_the_stored_output_after_the_command_returned(tmp_path):
    """A process the command detached (``setsid``) kept the spool file open and wrote a key into the
    stored, redacted output after it was adopted: the file changed under its record's sha256. The
    command's output now goes through a pipe that is closed when the command returns."""
    store = RedactingStore(tmp_path / "outputs")
    toolset = make_toolset(["shell"], ToolContext(store, tmp_path), OffloadPolicy(limit_tokens=200))
    command = f"setsid sh -c 'sleep 0.4; echo late {PROJECT_KEY}' & seq 1 20000"
    outcome = toolset.call(ToolCall("c1", "shell", json.dumps({"command": command})))
    assert outcome.output is not None
    stored = store.root / Path(outcome.output.path).name
    time.sleep(0.8)  # the child writes after 0.4 s (it is not waited for: it is no longer the command's)
    data = stored.read_bytes()
    assert hashlib.sha256(data).hexdigest() == outcome.output.sha256
    assert b"late" not in data and PROJECT_KEY.encode() not in data


# ------------------------------------------------------------------ lessons


def test_a_lessons_tokens_field_kept_an_options_value_and_lessons_export_printed_it(tmp_path):
    """A flag lesson's ``tokens`` are the words the working command added (``--apikey VALUE``); each was
    scrubbed alone, and a value alone is no secret's shape."""
    from ctxagent.lessons import extract
    from ctxagent.lessons.model import Scope
    from ctxagent.lessons.store import LessonStore
    from test_lessons_units import shell_records

    value = chars(14, seed="lesson")
    items = shell_records(("./tool push app1", "exit code: 2\nerror: needs --apikey"),
                          (f"./tool push app1 --apikey {value}", "exit code: 0\npushed"))
    [lesson] = extract.extract(items, session="s1", scope="project:/work/p", workdir=tmp_path)
    assert value in lesson.tokens  # what extraction finds; the store must not keep it
    store = LessonStore()
    with store.editing(store.path(Scope("project:/work/p"))) as lessons:
        lessons.append(lesson)
    assert value.lower().encode() not in everything_written().lower()  # nor in the lower-cased terms
    out = ctxagent("lessons", "export")
    assert out.returncode == 0 and "--apikey" in out.stdout and value.lower() not in out.stdout.lower()


# ------------------------------------------------------------------ what ctxagent prints


def test_stream_json_printed_raw_secrets_and_the_runs_own_provider_key(tmp_path):
    model = script(tmp_path / "s.yaml", [
        {"content": f"I will use {GITHUB}.", "tool_calls": [call("e", "shell", command=f"echo {PROJECT_KEY}")]},
        f"Done with {RUN_KEY}."])
    out = ctxagent("run", "--output-format", "stream-json", "--session", "sj", "--model", model, "--allow", "shell",
                   f"deploy with {RUN_KEY}", env={"OPENAI_API_KEY": RUN_KEY})
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert events[-1]["type"] == "result" and "[REDACTED:env:OPENAI_API_KEY]" in events[-1]["answer"]
    for key in (RUN_KEY, PROJECT_KEY, GITHUB):
        assert not leaked(key, out.stdout + out.stderr), key
    plain = ctxagent("run", "--batch", "--json", "--session", "js", "--model", model, "--allow", "shell", "go",
                     env={"OPENAI_API_KEY": RUN_KEY})
    assert plain.returncode == 0 and not leaked(RUN_KEY, plain.stdout)


def test_config_show_printed_the_api_bases_password_and_token(tmp_path):
    password, token = "Pw" + chars(12, string.digits, "config"), chars(24, seed="config")
    base = f"https://ada:{password}@proxy.example/v1?api_key={token}"
    env = {"CTXAGENT_API_BASE": base, "OPENAI_API_KEY": RUN_KEY, "GH_TOKEN": GITHUB, "PLAIN_SETTING": "on"}
    shown = ctxagent("config", "show", env=env)
    as_json = ctxagent("config", "show", "--json", env=env)
    assert shown.returncode == as_json.returncode == 0
    for secret in (password, token, RUN_KEY, GITHUB):
        assert secret not in shown.stdout + as_json.stdout
    assert "https://ada:[REDACTED:url-password]@proxy.example/v1?api_key=[REDACTED:url-query]" in shown.stdout
    withheld = json.loads(as_json.stdout)["withheld_from_tools"]["value"]
    assert {"CTXAGENT_API_BASE", "OPENAI_API_KEY", "GH_TOKEN"} <= set(withheld) and "PLAIN_SETTING" not in withheld
    assert "withheld from tools: " in shown.stdout and "OPENAI_API_KEY" in shown.stdout


def test_a_secret_in_the_store_url_became_a_folder_name_and_appeared_in_an_error(tmp_path):
    password, token = "Pw" + chars(12, string.digits, "store"), chars(24, seed="store")
    url = f"memory://ada:{password}@bucket/team?access_token={token}"
    model = script(tmp_path / "s.yaml", ["done"])
    out = ctxagent("run", "--batch", "--session", "st", "--model", model, "go", env={"CTXAGENT_STORE": url})
    assert out.returncode == 0, out.stderr
    names = [p.name for p in data_dir().rglob("*")]
    assert names and not any(password in name or token in name for name in names)
    bad = ctxagent("sessions", "list", env={"CTXAGENT_STORE": f"nosuchproto://ada:{password}@h/p?token={token}"})
    assert bad.returncode != 0 and "nosuchproto" in bad.stderr
    assert password not in bad.stderr + bad.stdout and token not in bad.stderr + bad.stdout


# ------------------------------------------------------------------ credentials out of the tools


def test_the_shell_inherited_the_runs_provider_key(tmp_path):
    """A model's ``printenv OPENAI_API_KEY | base64`` sent the run's key to the provider and stored an
    encoded copy no redaction recognises. The shell now gets no credential variable."""
    database = f"postgres://app:{password('database')}@db.internal/app"
    env = {"OPENAI_API_KEY": RUN_KEY, "GITHUB_TOKEN": GITHUB, "DB_PASSWORD": password("db"),
           "SNOWFLAKE_JWT": chars(40, seed="jwt"), "DATABASE_URL": database, "MY_COPY": RUN_KEY,
           "PLAIN_SETTING": "kept", "SSH_KEY_DIR": str(tmp_path)}  # a place, though its name says KEY
    model = script(tmp_path / "s.yaml", [{"tool_calls": [
        call("b64", "shell", command="printenv OPENAI_API_KEY | base64; echo end"),
        call("env", "shell", command="env | cut -d= -f1 | sort")]}, "done"])
    out = ctxagent("run", "--batch", "--session", "envs", "--model", model, "--allow", "shell", "go", env=env)
    assert out.returncode == 0, out.stderr
    results = tool_messages("envs")
    names = set(results["env"].split())
    assert {"PLAIN_SETTING", "SSH_KEY_DIR", "PATH", "HOME"} <= names
    assert not names & {"OPENAI_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "SNOWFLAKE_JWT", "DATABASE_URL", "MY_COPY"}
    encoded = base64.b64encode(RUN_KEY.encode()).decode()
    assert results["b64"] == "exit code: 0\nend\n"  # nothing to encode: the variable is not there
    assert encoded[:20] not in everything_written().decode("utf-8", "replace")


def test_a_profile_passes_named_variables_to_the_shell(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text("tool_environment: {pass_through: ['GITHUB_*']}\n", encoding="utf-8")
    model = script(tmp_path / "s.yaml", [{"tool_calls": [
        call("env", "shell", command='echo "gh=$GITHUB_TOKEN openai=$OPENAI_API_KEY"')]}, "done"])
    out = ctxagent("run", "--batch", "--session", "pass", "--model", model, "--allow", "shell", "--profile",
                   str(profile), "go", env={"GITHUB_TOKEN": GITHUB, "OPENAI_API_KEY": RUN_KEY})
    assert out.returncode == 0, out.stderr
    assert "gh=[REDACTED:env:GITHUB_TOKEN] openai=\n" in tool_messages("pass")["env"]  # passed, then redacted
    assert not [r for r in records("pass") if GITHUB in json.dumps(r)]


def test_without_leases_a_detached_writer_is_found_in_proc(tmp_path, monkeypatch):
    """Where Linux's file leases are not to be had, the processes' open files tell the same: the
    detached writer is found, and a file only read (the store's scan of the spool) is no writer."""
    import fcntl
    import subprocess

    from ctxagent.tools import builtin

    monkeypatch.delattr(fcntl, "F_SETLEASE")
    path = tmp_path / "spool"
    with open(path, "wb") as fh:
        child = subprocess.Popen(["sleep", "5"], stdout=fh)
    try:
        with open(path, "rb"):  # a reader, as the store's follower is
            assert builtin._held_for_writing(path)
    finally:
        child.kill()
        child.wait()
    with open(path, "rb"):
        assert not builtin._held_for_writing(path)
