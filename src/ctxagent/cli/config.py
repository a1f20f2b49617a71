"""Defaults for ``run`` and ``resume`` from configuration: ``ctxagent config show|trust|path``.

Sources, the first that sets a key of :data:`KEYS` wins (docs/usage.md, "Configuration"): the command
line, ``CTXAGENT_<KEY>``, the project file ``.ctxagent.yaml`` once trusted (its path and SHA-256
recorded by ``config trust``: a repository must not choose the model, server or grants of whoever runs
in it), the user file ``config.yaml``, the bundled ``default`` profile. Never imports litellm.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ctxagent.cli import redacted
from ctxagent.dirs import user_dir
from ctxagent.errors import ProfileError, UsageError, first_error
from ctxagent.profile import line_of, load_profile, parse_yaml
from ctxagent.sessions.files import private_dir, replace_whole
from ctxagent.tools.environment import withheld

KEYS = ("model", "profile", "api_base", "context_window", "allow")
PROJECT_FILE = ".ctxagent.yaml"
app = typer.Typer(help="Show where defaults come from; trust a project file.", no_args_is_help=True,
                  rich_markup_mode=None)


class ConfigFile(BaseModel):
    """The keys a user or project configuration file may set."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    profile: str | None = None
    api_base: str | None = None
    context_window: int | None = Field(None, ge=256)
    allow: str | list[str] | None = None


@dataclass(frozen=True)
class Value:
    """One effective setting and where it came from (``cli``, ``env CTXAGENT_X``, a file path, ``default``)."""

    value: Any
    source: str


def user_file() -> Path:
    return user_dir("config") / "config.yaml"


def project_file(start: Path | None = None) -> Path | None:
    """The nearest ``.ctxagent.yaml`` from ``start`` (the working directory) upward, or None."""
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        if (candidate / PROJECT_FILE).is_file():
            return candidate / PROJECT_FILE
    return None


def _trust_file() -> Path:
    return user_dir("config") / "trusted.json"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _known() -> dict[str, str]:
    """The trusted files: resolved path -> SHA-256 (empty when there is no readable record)."""
    try:
        known = json.loads(_trust_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def trusted(path: Path) -> bool:
    """Whether the user trusted ``path`` as it is now (same SHA-256 as when trusted)."""
    try:
        return _known().get(str(path.resolve())) == _digest(path)
    except OSError:
        return False


def read_file(path: Path) -> ConfigFile:
    """Parse and validate one configuration file. Raises ``ProfileError`` naming file, line and key."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ProfileError(f"cannot read configuration ({err})", path=str(path)) from err
    data = parse_yaml(text, str(path))
    try:
        return ConfigFile.model_validate(data)
    except ValidationError as err:
        where, what = first_error(err)
        line = line_of(yaml.compose(text), where.split(".")[:1] if where else [])
        raise ProfileError(what, path=str(path), line=line, key=where) from err


def effective(cli: dict[str, Any] | None = None, *, start: Path | None = None) -> dict[str, Value]:
    """Every key of :data:`KEYS` with its effective value and source; ``cli``: what the command line gave
    (None: not given). Raises ``ProfileError`` for a bad file, ``UsageError`` for a bad env value."""
    layers: list[tuple[str, dict[str, Any]]] = [("cli", dict(cli or {}))]
    env: dict[str, str | int] = {key: os.environ[f"CTXAGENT_{key.upper()}"] for key in KEYS
                                 if os.environ.get(f"CTXAGENT_{key.upper()}")}
    if "context_window" in env:
        try:
            env["context_window"] = int(env["context_window"])
        except ValueError:
            raise UsageError(f"CTXAGENT_CONTEXT_WINDOW={env['context_window']!r} is not a number of tokens") from None
    layers.append(("env", env))
    project = project_file(start)
    if project is not None and trusted(project):
        layers.append((str(project), read_file(project).model_dump(exclude_none=True)))
    if user_file().is_file():
        layers.append((str(user_file()), read_file(user_file()).model_dump(exclude_none=True)))
    out: dict[str, Value] = {}
    for key in KEYS:
        source, value = next(((s, data[key]) for s, data in layers if data.get(key) is not None), ("default", None))
        out[key] = Value(", ".join(value) if isinstance(value, list) else value,
                         f"env CTXAGENT_{key.upper()}" if source == "env" else source)
    return out


def untrusted_note(start: Path | None = None) -> str | None:
    """A note when a project file is there but not trusted (it is then not used), else None."""
    project = project_file(start)
    if project is None or trusted(project):
        return None
    return f"{project} is not used: it is not trusted ('ctxagent config trust' uses it, after you read it)"


def resolved(values: dict[str, Value]) -> dict[str, Value]:
    """``values`` (:func:`effective`) with what a new session would use where no source sets a key: the
    profile ``default``, its model and its context window (source ``profile NAME``); the others stay
    None. A profile that cannot be read leaves them None, its error as the source."""
    out = dict(values)
    name = str(values["profile"].value or "default")
    if values["profile"].value is None:
        out["profile"] = Value(name, "default")
    try:
        profile = load_profile(name)
    except ProfileError as err:
        return {**out, "model": values["model"] if values["model"].value else Value(None, f"profile {name}: {err}")}
    if values["model"].value is None:
        out["model"] = Value(profile.model, f"profile {name}")
    if values["context_window"].value is None:
        out["context_window"] = Value(profile.context_window, f"profile {name}") if profile.context_window else \
            Value(None, f"litellm's model info for {out['model'].value}, read when a run starts")
    return out


UNSET = {"api_base": "the provider's own endpoint", "allow": "nothing beyond the profile's permissions"}


@app.command("show")
def show(json_out: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False) -> None:
    """The settings a new run would use here (the model actually used, the profile...), each
    with where it came from (a value's secrets, such as a password or token in api_base, shown
    as markers), and the environment variables the shell's commands and MCP servers do not get
    (tools/environment.py)."""
    values = {key: Value(redacted(v.value) if isinstance(v.value, str) else v.value, v.source)
              for key, v in resolved(effective()).items()}
    kept, passes = _withheld(values["profile"].value)
    if json_out:
        print(json.dumps({**{k: {"value": v.value, "source": v.source} for k, v in values.items()},
                          "withheld_from_tools": {"value": kept, "source": "environment",
                                                  "pass_through": passes}}))
        return
    for key, value in values.items():
        shown = f"- ({UNSET[key]})" if value.value is None and key in UNSET else "-" if value.value is None \
            else value.value
        source = "" if value.source == shown else f"  ({value.source})"  # profile default, not "default (default)"
        print(f"{key:15} {shown}{source}")
    through = f"; tool_environment.pass_through: {', '.join(passes)}" if passes else ""
    print(f"withheld from tools: {', '.join(kept) or '-'}  (environment{through})")
    note = untrusted_note()
    if note:
        print(f"note: {note}")


def _withheld(profile: str | None) -> tuple[list[str], list[str]]:
    """The names withheld from tools here, and the profile's pass-through list (none when it does not load)."""
    try:
        passes = list(load_profile(profile or "default").tool_environment.pass_through)
    except (ProfileError, UsageError, OSError):
        passes = []
    return withheld(pass_through=passes), passes


@app.command("trust")
def trust() -> None:
    """Trust the project file (.ctxagent.yaml) found from here upward, as it is now."""
    project = project_file()
    if project is None:
        raise UsageError(f"no {PROJECT_FILE} in {Path.cwd()} or above")
    read_file(project)  # a broken file is not trusted

    private_dir(_trust_file().parent)
    known = _known()
    known[str(project.resolve())] = _digest(project)
    replace_whole(_trust_file(), json.dumps(known, indent=1) + "\n")  # whole or not at all, owner-only
    print(f"trusted {project}")


@app.command("path")
def path() -> None:
    """Where the user configuration file is (it may not exist yet) and the project file in use."""
    print(f"user file: {user_file()}{'' if user_file().is_file() else ' (none)'}")
    project = project_file()
    print(f"project file: {project or '(none)'}" + ("" if project is None else
                                                     " (trusted)" if trusted(project) else " (not trusted)"))
