"""Profiles: YAML files that configure the model, the budget, the tools and the strategy pipelines.

A profile is a bundled name (``default``, ``batch``, ...) or a path to a YAML file, which may
``extends:`` another (:func:`merge`). Every key is validated by pydantic against
:mod:`ctxagent.profile_schema`, then the pipelines by :mod:`ctxagent.strategies.checks`; a bad profile
raises :class:`~ctxagent.errors.ProfileError` naming the file, the line and the key. Every key, its
unit and its default: docs/context.md ("Profiles").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ctxagent.errors import ProfileError
from ctxagent.profile_schema import MIN_GAP, Path_, Profile
from ctxagent.strategies.checks import check_gaps, check_pipelines
from ctxagent.strategies.step import StrategyConfig, step_error

__all__ = ["MIN_GAP", "Path_", "Profile", "StrategyConfig", "bundled_names", "bundled_text", "load_profile", "merge",
           "parse_profile", "profile_files"]

EXTENDS = "extends"


def bundled_names() -> list[str]:
    """Names of the profiles that ship with ctxagent."""
    folder = resources.files("ctxagent") / "profiles"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def bundled_text(name: str) -> str:
    """The YAML text of the bundled profile ``name`` (one of :func:`bundled_names`)."""
    return (resources.files("ctxagent") / "profiles" / f"{name}.yaml").read_text(encoding="utf-8")


def load_profile(spec: str = "default") -> Profile:
    """Load a bundled profile by name, or a YAML file by path (its ``extends:`` chain merged in).

    Raises:
        ProfileError: file missing, unreadable or not UTF-8, invalid YAML, an ``extends`` that cannot
            be read or that comes back to a file of its chain, or a key that does not validate (the
            message names the file, the line and the dotted key).
    """
    text, source = _source_text(spec)
    return parse_profile(text, source=source, default_name=Path(spec).stem)


def _source_text(spec: str) -> tuple[str, str]:
    """The text of the profile ``spec`` and its source (``<bundled:NAME>`` or the path); ``ProfileError``
    when its file cannot be read."""
    if spec in bundled_names():
        return bundled_text(spec), f"<bundled:{spec}>"
    return _read_file(Path(spec), spec), spec


def profile_files(spec: str) -> list[Path]:
    """The files the profile ``spec`` is read from: its file and every file of its ``extends`` chain
    (a bundled profile's: the YAML file in the package), resolved, this file first. Empty when the
    profile cannot be read (the session's copy is used then)."""
    try:
        layers = _chain(*_source_text(spec), ())
    except ProfileError:
        return []
    folder = resources.files("ctxagent") / "profiles"
    return [Path(str(folder / f"{layer.source[len('<bundled:'):-1]}.yaml")).resolve() if layer.source.startswith("<")
            else Path(layer.source).resolve() for layer in layers]


def _read_file(path: Path, source: str, *, line: int | None = None, key: str | None = None) -> str:
    """The UTF-8 text of the profile file ``path``; ``ProfileError`` naming ``source`` (and the
    ``line``/``key`` that asked for it) when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        known = ", ".join(bundled_names())
        where = f"{path}: " if line is not None else ""
        raise ProfileError(f"cannot read profile {where}({err.strerror}); bundled: {known}",
                           path=source, line=line, key=key) from err
    except UnicodeDecodeError as err:
        bad = path.read_bytes()[: err.start].count(b"\n") + 1
        raise ProfileError(f"not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); "
                           "save the profile as UTF-8", path=str(path), line=bad) from err


@dataclass
class _Layer:
    """One file of an ``extends`` chain: where it came from, its text, its keys; its YAML node (for
    the lines of errors) is composed when asked for (parsing the text again: errors are rare)."""

    source: str
    text: str
    data: dict[str, Any]

    @cached_property
    def node(self) -> Any:
        return yaml.compose(self.text)


def parse_profile(text: str, *, source: str, default_name: str = "custom") -> Profile:
    """Validate profile YAML ``text`` (with its ``extends`` chain merged in); ``source`` names it in
    errors, and a relative ``extends`` path is taken from ``source``'s folder. Raises ``ProfileError``
    naming the file of the chain that holds the offending key, its line and the dotted key."""
    layers = _chain(text, source, ())
    data: dict[str, Any] = {}
    for layer in reversed(layers):  # the farthest base first, this file last
        data = merge(data, layer.data)
    data.setdefault("name", default_name)
    try:
        profile = Profile.model_validate(data)
        check_gaps(profile, source=source)
        check_pipelines(profile, source=source)
    except ValidationError as err:
        first = err.errors()[0]
        loc, message = step_error(first) or ([str(p) for p in first["loc"]], first["msg"])
        raise _blame(layers, loc, message) from err
    except ProfileError as err:
        raise _blame(layers, (err.key or "").split("."), str(err).split(": ", 1)[-1]) from None
    return profile


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` applied: mappings merged key by key at every depth, any other value of
    ``over`` (list, scalar, None) replacing ``base``'s. Returns a new dict; neither input changes."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        out[key] = merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return out


BUNDLED_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""What parses a bundled profile: libyaml's safe loader when PyYAML has it (~10x faster: ~5 ms of a
run; the same data, a test checks each bundled profile); any other file, whose errors are shown, is
parsed by PyYAML's own (libyaml words its errors differently)."""


def parse_yaml(text: str, source: str) -> dict[str, Any]:
    """The data of one profile file; ``ProfileError`` for bad YAML or a non-mapping. (Its node, for
    the line of a key: ``yaml.compose(text)``, then :func:`line_of`.)"""
    try:
        data = yaml.load(text, Loader=BUNDLED_LOADER) if source.startswith("<bundled:") else yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise ProfileError(
            f"invalid YAML: {getattr(err, 'problem', err)}",
            path=source, line=mark.line + 1 if mark else None,
        ) from err
    if data is not None and not isinstance(data, dict):
        raise ProfileError("a profile is a YAML mapping of keys to values", path=source, line=1)
    return data or {}


def _chain(text: str, source: str, seen: tuple[str, ...]) -> list[_Layer]:
    """The layers of ``text`` and of its ``extends`` bases, this file first. ``seen``: the sources
    of the files that extend this one (a cycle comes back to one of them)."""
    data = parse_yaml(text, source)
    layer = _Layer(source, text, data)
    if EXTENDS not in data:
        return [layer]
    spec = data.pop(EXTENDS)
    line = line_of(layer.node, [EXTENDS])
    if not isinstance(spec, str) or not spec.strip():
        raise ProfileError("extends names one profile: a bundled name or a path relative to this file",
                           path=source, line=line, key=EXTENDS)
    bundled = spec in bundled_names()
    folder = Path.cwd() if source.startswith("<") else Path(source).parent
    base_source = f"<bundled:{spec}>" if bundled else str((folder / Path(spec).expanduser()).resolve())
    chain = (*seen, source if source.startswith("<") else str(Path(source).resolve()))
    if base_source in chain:
        raise ProfileError(f"extends cycle: {' -> '.join([*chain, base_source])}", path=source, line=line,
                           key=EXTENDS)
    base_text = bundled_text(spec) if bundled else _read_file(Path(base_source), source, line=line, key=EXTENDS)
    bases = _chain(base_text, base_source, chain)
    for base in bases:
        base.data.pop("name", None)  # the profile is named after the file that extends, not its base
    return [layer, *bases]


def _blame(layers: list[_Layer], loc: list[str], message: str) -> ProfileError:
    """``message`` as the error of the layer whose keys hold most of the path ``loc`` (this file on a
    tie): that file, the line of the key, the dotted key."""
    def depth(data: Any) -> int:
        n = 0
        for part in loc:
            if isinstance(data, dict) and part in data:
                data = data[part]
            elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
                data = data[int(part)]
            else:
                break
            n += 1
        return n

    best = max(depth(layer.data) for layer in layers)
    layer = next(layer for layer in layers if depth(layer.data) == best)
    return ProfileError(message, path=layer.source, line=line_of(layer.node, loc), key=".".join(loc) or None)


def line_of(node: Any, loc: list[str]) -> int | None:
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


def json_schema_text() -> str:
    """The JSON Schema (draft 2020-12) of a profile YAML file, for editors, as shipped in
    ``profiles/profile.schema.json`` (indented, sorted keys, final newline): pydantic's schema of
    :class:`Profile` plus the ``extends`` key the loader reads before validation."""
    schema = Profile.model_json_schema()
    schema["properties"] = {
        EXTENDS: {"type": "string", "title": "Extends",
                  "description": "A bundled profile name or a path relative to this file: this file's keys "
                                 "are applied over it (mappings merged, lists and values replaced)."},
        **schema["properties"],
    }
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
