"""The root app loads its commands lazily (cli/lazy.py): --help imports none of them, help is unchanged."""

from __future__ import annotations

import json
import subprocess
import sys

import typer

from ctxagent.cli import lazy

HEAVY = ("pydantic", "rich", "yaml", "litellm", "ctxagent.cli.run", "ctxagent.cli.batch", "ctxagent.cli.inspect",
         "ctxagent.cli.sessions", "ctxagent.sessions.session", "ctxagent.agent.runner", "ctxagent.profile")


def test_root_help_imports_no_command_module():
    code = ("import sys; from ctxagent.cli import app; app(['--help'], standalone_mode=False); "
            f"import json; print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    listing, loaded = out.stdout.rsplit("\n", 2)[0], json.loads(out.stdout.splitlines()[-1])
    assert loaded == []
    for name in lazy.COMMANDS:
        assert f"\n  {name} " in listing


def test_each_summary_is_the_first_paragraph_of_the_commands_help():
    for name, entry in lazy.COMMANDS.items():
        command = entry.load(name)
        first = (command.help or "").split("\n\n")[0]
        assert " ".join(entry.summary.split()) == " ".join(first.split()), name


def test_help_listing_is_the_same_once_commands_are_loaded():
    group = typer.main.get_command(__import__("ctxagent.cli", fromlist=["app"]).app)
    ctx = group.make_context("ctxagent", [], resilient_parsing=True)
    lazily = group.get_help(ctx)
    for name in lazy.COMMANDS:
        assert group.get_command(ctx, name) is not None  # imported and registered now
    assert group.get_help(ctx) == lazily
    assert group.get_command(ctx, "no-such-command") is None
