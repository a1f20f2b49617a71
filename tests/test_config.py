"""Configuration defaults (cli/config.py): precedence CLI > env > trusted project file > user file >
bundled, trust of project files, resume keeping what the session recorded, clear errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

from clihelp import ctxagent, result_of, run_cli, script
from ctxagent.sessions.session import Session


def shown(cwd: Path) -> dict:
    out = ctxagent("config", "show", "--json", cwd=cwd)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_precedence_cli_env_project_user_bundled(tmp_path):
    config_dir = Path(os.environ["CTXAGENT_CONFIG_DIR"])
    config_dir.mkdir(parents=True)
    (config_dir / "config.yaml").write_text("model: user/model\nprofile: batch\napi_base: http://user\n"
                                            "allow: [shell, write]\n", encoding="utf-8")
    project = tmp_path / "repo"
    (project / "src").mkdir(parents=True)
    (project / ".ctxagent.yaml").write_text("model: project/model\nprofile: minimal\n", encoding="utf-8")
    values = shown(project / "src")
    assert values["model"] == {"value": "user/model", "source": str(config_dir / "config.yaml")}  # untrusted
    assert values["allow"]["value"] == "shell, write" and values["context_window"] == {  # resolved when a run starts
        "value": None, "source": "litellm's model info for user/model, read when a run starts"}
    assert "not trusted" in ctxagent("config", "show", cwd=project / "src").stdout
    assert ctxagent("config", "trust", cwd=project / "src").returncode == 0
    values = shown(project / "src")
    assert values["model"] == {"value": "project/model", "source": str(project / ".ctxagent.yaml")}
    assert values["api_base"]["value"] == "http://user"
    out = ctxagent("config", "show", "--json", cwd=project, env={"CTXAGENT_MODEL": "env/model"})
    assert json.loads(out.stdout)["model"] == {"value": "env/model", "source": "env CTXAGENT_MODEL"}
    (project / ".ctxagent.yaml").write_text("model: sneaky/model\n", encoding="utf-8")  # edited after trust
    assert shown(project)["model"]["value"] == "user/model"


def test_a_new_session_takes_the_defaults_a_resumed_one_keeps_its_own(tmp_path, monkeypatch):
    first = script(tmp_path / "a.yaml", [{"content": "from a"}, {"content": "a again"}])
    other = script(tmp_path / "b.yaml", [{"content": "from b"}])
    monkeypatch.setenv("CTXAGENT_MODEL", first)
    monkeypatch.setenv("CTXAGENT_CONTEXT_WINDOW", "20000")
    out = run_cli("run", "--json", "--session", "c", "go")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "from a"), out.stdout
    assert next(Session.at("c").transcript.records()).context_window == 20000
    monkeypatch.setenv("CTXAGENT_MODEL", other)  # the session recorded its model: a default does not change it
    again = run_cli("resume", "--json", "--session", "c", "more")
    assert (again.exit_code, result_of(again)["answer"]) == (0, "a again"), again.stdout


def test_a_bad_configuration_names_file_line_and_key(tmp_path):
    config_dir = Path(os.environ["CTXAGENT_CONFIG_DIR"])
    config_dir.mkdir(parents=True)
    (config_dir / "config.yaml").write_text("model: m\ncontext_window: 10\n", encoding="utf-8")
    out = ctxagent("run", "--json", "--model", "scripted:x", "go")
    assert out.returncode == 2
    assert f"{config_dir / 'config.yaml'}:2 (key 'context_window')" in result_of(out)["error"]
    (config_dir / "config.yaml").write_text("modle: m\n", encoding="utf-8")
    assert "modle" in ctxagent("config", "show").stderr
    bad_env = ctxagent("config", "show", env={"CTXAGENT_CONTEXT_WINDOW": "big"})
    assert bad_env.returncode == 2 and "CTXAGENT_CONTEXT_WINDOW" in bad_env.stderr
