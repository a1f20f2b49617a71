"""``ctxagent profiles list|show|schema``, ``extends:`` in profile files, and the shipped JSON Schema."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clihelp import ctxagent
from ctxagent.cli import app
from ctxagent.errors import ProfileError
from ctxagent.profile import Profile, bundled_names, json_schema_text, load_profile, merge

SHIPPED = resources.files("ctxagent") / "profiles" / "profile.schema.json"


def ok(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


# -- list and show ----------------------------------------------------------------------------------

def test_list_names_every_bundled_profile_with_a_description():
    lines = ok("profiles", "list").splitlines()
    assert [line.split()[0] for line in lines] == bundled_names()
    batch = next(line for line in lines if line.startswith("batch "))
    assert "unattended" in batch
    assert all(len(line.split(None, 1)) == 2 for line in lines)  # none without a description


@pytest.mark.parametrize("name", bundled_names())
def test_show_prints_every_key_and_loads_back_to_the_same_profile(name, tmp_path):
    text = ok("profiles", "show", name)
    shown = yaml.safe_load(text)
    assert set(shown) == set(Profile.model_fields)  # every key, defaults filled in
    again = load_profile(write(tmp_path / "again.yaml", text))
    assert again.model_dump() == load_profile(name).model_dump()


def test_show_of_a_bad_profile_names_file_line_and_key(tmp_path):
    path = write(tmp_path / "bad.yaml", "model: x\npreview:\n  head_lines: -3\n")
    out = ctxagent("profiles", "show", path)
    assert out.returncode == 2
    assert f"{path}:3 (key 'preview.head_lines')" in out.stderr, out.stderr


# -- extends ----------------------------------------------------------------------------------------

def test_extends_a_bundled_profile_merges_mappings_and_replaces_lists(tmp_path):
    path = write(tmp_path / "mine.yaml", "extends: default\nmax_turns: 7\npreview:\n  head_lines: 5\n"
                                         "tools: [shell, read_output]\npipelines:\n  batch:\n"
                                         "    - strategy: truncate\n")
    profile, base = load_profile(path), load_profile("default")
    assert profile.name == "mine" and profile.max_turns == 7
    assert profile.preview.head_lines == 5 and profile.preview.tail_lines == base.preview.tail_lines  # merged
    assert profile.tools == ["shell", "read_output"]  # replaced
    assert [s.strategy for s in profile.pipeline("batch")] == ["truncate"]  # the list replaced ...
    assert profile.pipeline("interactive") == base.pipeline("interactive")  # ... its sibling kept
    shown = yaml.safe_load(ok("profiles", "show", path))
    assert shown["max_turns"] == 7 and shown["preview"]["tail_lines"] == base.preview.tail_lines


def test_extends_a_relative_path_through_a_chain(tmp_path, monkeypatch):
    write(tmp_path / "base" / "root.yaml", "extends: minimal\ncontext_window: 32000\nmax_turns: 3\n")
    write(tmp_path / "base" / "mid.yaml", "extends: root.yaml\nmax_turns: 4\n")
    path = write(tmp_path / "top.yaml", "extends: base/mid.yaml\nretries: 1\n")
    monkeypatch.chdir(tmp_path / "base")  # relative to the file, not to the working directory
    profile = load_profile(path)
    assert (profile.context_window, profile.max_turns, profile.retries) == (32000, 4, 1)
    assert profile.pipelines == load_profile("minimal").pipelines and profile.name == "top"


def test_an_extends_cycle_names_the_files(tmp_path):
    a = write(tmp_path / "a.yaml", "extends: b.yaml\n")
    b = write(tmp_path / "b.yaml", "max_turns: 3\nextends: ./a.yaml\n")
    with pytest.raises(ProfileError) as err:
        load_profile(a)
    assert "extends cycle" in str(err.value)
    assert f"{a} -> {b} -> {a}" in str(err.value) and err.value.key == "extends"
    assert (err.value.path, err.value.line) == (str(Path(b).resolve()), 2)
    self_ref = write(tmp_path / "self.yaml", "extends: self.yaml\n")
    with pytest.raises(ProfileError, match="extends cycle"):
        load_profile(self_ref)
    out = ctxagent("profiles", "show", a)
    assert out.returncode == 2 and "extends cycle" in out.stderr


def test_extends_errors_name_the_file_that_holds_the_key(tmp_path):
    write(tmp_path / "base.yaml", "# the base\nmax_turns: 3\npreview:\n  max_chars: 10\n")
    child = write(tmp_path / "child.yaml", "extends: base.yaml\nretries: 1\n")
    with pytest.raises(ProfileError) as err:
        load_profile(child)
    assert (err.value.path, err.value.line, err.value.key) == (str(tmp_path / "base.yaml"), 4, "preview.max_chars")
    bad_child = write(tmp_path / "bad.yaml", "extends: default\n\nretries: 99\n")
    with pytest.raises(ProfileError) as err:
        load_profile(bad_child)
    assert (err.value.path, err.value.line, err.value.key) == (bad_child, 3, "retries")
    override = write(tmp_path / "fix.yaml", "extends: base.yaml\npreview:\n  max_chars: 500\n")
    assert load_profile(override).preview.max_chars == 500  # the child's value replaces the bad one


def test_extends_of_a_missing_file_or_a_non_string(tmp_path):
    missing = write(tmp_path / "m.yaml", "model: x\nextends: nowhere.yaml\n")
    with pytest.raises(ProfileError) as err:
        load_profile(missing)
    assert (err.value.path, err.value.line, err.value.key) == (missing, 2, "extends")
    assert "nowhere.yaml" in str(err.value) and "bundled: " in str(err.value)
    listed = write(tmp_path / "l.yaml", "extends: [default, batch]\n")
    with pytest.raises(ProfileError, match="extends names one profile") as err:
        load_profile(listed)
    assert (err.value.line, err.value.key) == (1, "extends")


def test_a_run_uses_an_extended_profile(tmp_path):
    path = write(tmp_path / "p.yaml", "extends: batch\ncontext_window: 9000\n")
    model = tmp_path / "s.yaml"
    model.write_text("- content: hi\n", encoding="utf-8")
    out = ctxagent("run", "--json", "--session", "ext", "--profile", path, "--model", f"scripted:{model}", "x")
    assert out.returncode == 0, out.stderr
    context = json.loads(ctxagent("inspect", "context", "--session", "ext", "--json").stdout)
    assert context["budget"]["window"] == 9000 and context["profile"] == "p"


def test_merge_is_deep_for_mappings_only():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert merge(base, {"a": {"c": [3]}, "d": None}) == {"a": {"b": 1, "c": [3]}, "d": None}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1}  # inputs unchanged


# -- schema -----------------------------------------------------------------------------------------

def test_the_shipped_schema_is_the_generated_one():
    assert SHIPPED.read_text(encoding="utf-8") == json_schema_text(), (
        "regenerate it: ctxagent profiles schema > src/ctxagent/profiles/profile.schema.json")
    assert ok("profiles", "schema") == json_schema_text()
    schema = json.loads(json_schema_text())
    assert schema["properties"]["extends"]["type"] == "string"
    assert schema["additionalProperties"] is False


def test_the_schema_describes_every_strategys_parameters():
    from ctxagent.strategies import registry  # noqa: F401 (declares every strategy)
    from ctxagent.strategies.step import kinds, known

    schema = json.loads(json_schema_text())
    steps = schema["properties"]["pipelines"]["additionalProperties"]["items"]
    assert set(steps["discriminator"]["mapping"]) == set(known())
    for name, ref in steps["discriminator"]["mapping"].items():
        step = schema["$defs"][ref.rpartition("/")[2]]
        declared = kinds()[name].model_fields
        assert set(step["properties"]) == set(declared) and step["additionalProperties"] is False
        assert all(prop.get("description") for key, prop in step["properties"].items() if key != "strategy"), name
    keep = schema["$defs"]["SummarizeStep"]["properties"]["keep_turns"]
    assert keep["minimum"] == 1 and keep["default"] == 6 and "turn in flight" in keep["description"]


def test_the_schema_accepts_every_bundled_profile_and_rejects_a_typo(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads(json_schema_text()))
    for name in bundled_names():
        data = yaml.safe_load((resources.files("ctxagent") / "profiles" / f"{name}.yaml").read_text(encoding="utf-8"))
        assert not list(validator.iter_errors(data)), name
        assert not list(validator.iter_errors(yaml.safe_load(ok("profiles", "show", name)))), name
    assert not list(validator.iter_errors({"extends": "default", "max_turns": 3}))
    assert list(validator.iter_errors({"max_turn": 3}))  # additional property
    assert list(validator.iter_errors({"preview": {"head_lines": -1}}))


def test_a_session_keeps_the_effective_profile_of_a_file_that_extends_another(tmp_path):
    """The kept copy of a profile file held only its own YAML: once its base file was gone too, the
    session could not be resumed."""
    from clihelp import ctxagent, script

    base = tmp_path / "base.yaml"
    base.write_text("max_turns: 7\npins: [from-the-base]\n", encoding="utf-8")
    child = tmp_path / "child.yaml"
    child.write_text("extends: base.yaml\nmax_output_tokens: 300\n", encoding="utf-8")
    model = script(tmp_path / "s.yaml", [{"content": "one"}, {"content": "two"}])
    assert ctxagent("run", "--session", "ext", "--profile", str(child), "--model", model, "x").returncode == 0
    base.unlink()
    child.unlink()
    out = ctxagent("resume", "--json", "--session", "ext", "again")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["answer"] == "two"
