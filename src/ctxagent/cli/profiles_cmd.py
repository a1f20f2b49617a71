"""``ctxagent profiles list|show|schema``: the bundled profiles, an effective profile, the JSON Schema."""

from __future__ import annotations

from typing import Annotated

import typer

from ctxagent.profile import bundled_names, bundled_text, json_schema_text, load_profile

app = typer.Typer(help="The bundled profiles, the effective keys of a profile, and the profile JSON Schema.",
                  no_args_is_help=True, rich_markup_mode=None)


def description(text: str) -> str:
    """The one-line description of a profile: the first comment line of its YAML ``text`` ("" if none)."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    return first.lstrip("#").strip() if first.startswith("#") else ""


@app.command("list")
def list_() -> None:
    """The bundled profiles, one a line: name and what it is for."""
    names = bundled_names()
    width = max(map(len, names), default=0)
    for name in names:
        print(f"{name:<{width}}  {description(bundled_text(name))}".rstrip())


@app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="A bundled profile name or a YAML file.", metavar="NAME|FILE",
                                          show_default=False)] = "default",
) -> None:
    """The effective profile as YAML: every key, defaults filled in, an extends chain merged.
    Exit 2 when the profile cannot be read or does not validate (file, line and key named)."""
    import yaml

    profile = load_profile(name)
    where = "bundled" if name in bundled_names() else name
    print(f"# effective profile {profile.name} ({where}): every key, defaults filled in")
    print(yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False, allow_unicode=True, width=100), end="")


@app.command("schema")
def schema() -> None:
    """The JSON Schema of a profile file (also shipped as 'ctxagent/profiles/profile.schema.json');
    for editors, e.g. '# yaml-language-server: $schema=PATH' on a profile's first line."""
    print(json_schema_text(), end="")
