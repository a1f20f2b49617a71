"""Profiles: YAML files that configure the model, the budget, the tools and the strategy pipelines.

A profile is named (a bundled one: ``default``, ``batch``, ...) or a path to a YAML file. Every key
is validated by pydantic against :mod:`ctxagent.profile_schema` (whose models are re-exported here),
then the pipelines by :mod:`ctxagent.strategies.checks`; a bad profile raises
:class:`~ctxagent.errors.ProfileError` naming the file, the line and the key. Units: every size called
``*_tokens`` or ``context_window`` is in tokens; ``preview.max_chars`` is in characters; fractions are
of the context window.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ctxagent.errors import ProfileError
from ctxagent.profile_schema import (
    DEFAULT_SYSTEM_PROMPT,
    DEFAULT_TOOLS,
    MIN_GAP,
    Path_,
    PreviewConfig,
    Profile,
    RecallConfig,
    StrategyConfig,
    SummarizerConfig,
    thrash_problem,
)
from ctxagent.strategies.checks import check_gaps, check_pipelines

__all__ = ["DEFAULT_SYSTEM_PROMPT", "DEFAULT_TOOLS", "MIN_GAP", "Path_", "PreviewConfig", "Profile", "RecallConfig",
           "StrategyConfig", "SummarizerConfig", "bundled_names", "load_profile", "parse_profile", "thrash_problem"]


def bundled_names() -> list[str]:
    """Names of the profiles that ship with ctxagent."""
    folder = resources.files("ctxagent") / "profiles"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_profile(spec: str = "default") -> Profile:
    """Load a bundled profile by name, or a YAML file by path.

    Raises:
        ProfileError: file missing, unreadable or not UTF-8, invalid YAML, or a key that does not
            validate (the message names the file, the line and the dotted key).
    """
    if spec in bundled_names():
        source = f"<bundled:{spec}>"
        text = (resources.files("ctxagent") / "profiles" / f"{spec}.yaml").read_text(encoding="utf-8")
    else:
        source = spec
        try:
            text = Path(spec).read_text(encoding="utf-8")
        except OSError as err:
            known = ", ".join(bundled_names())
            raise ProfileError(f"cannot read profile ({err.strerror}); bundled: {known}", path=spec) from err
        except UnicodeDecodeError as err:
            line = Path(spec).read_bytes()[: err.start].count(b"\n") + 1
            raise ProfileError(f"not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); "
                               "save the profile as UTF-8", path=spec, line=line) from err
    return parse_profile(text, source=source, default_name=Path(spec).stem)


def parse_profile(text: str, *, source: str, default_name: str = "custom") -> Profile:
    """Validate profile YAML ``text``; ``source`` names it in errors. Raises ``ProfileError``."""
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise ProfileError(
            f"invalid YAML: {getattr(err, 'problem', err)}",
            path=source, line=mark.line + 1 if mark else None,
        ) from err
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ProfileError("a profile is a YAML mapping of keys to values", path=source, line=1)
    data.setdefault("name", default_name)
    try:
        profile = Profile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = [str(p) for p in first["loc"]]
        raise ProfileError(
            first["msg"], path=source, line=_line_of(node, loc), key=".".join(loc) or None
        ) from err
    try:
        check_gaps(profile, source=source)
        check_pipelines(profile, source=source)
    except ProfileError as err:
        message = str(err).split(": ", 1)[-1]
        line = _line_of(node, (err.key or "").split("."))
        raise ProfileError(message, path=source, line=line, key=err.key) from None
    return profile


def _line_of(node: Any, loc: list[str]) -> int | None:
    """1-based line of the deepest YAML node on the path ``loc`` (keys and list indexes)."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if str(k.value) == part), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
            line = node.start_mark.line + 1
        else:
            break
    return line
