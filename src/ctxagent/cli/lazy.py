"""Sub-commands imported only when they run: ``ctxagent --help`` costs little more than ``import typer``.

An eager Typer app imported every command module for ``--help`` (~0.15 s, 3.5x ``import typer``; issue
18 asks for at most 1.3x). :class:`LazyGroup` (click's "lazy loading of subcommands" pattern) lists
:data:`COMMANDS` and imports a command's module only when click asks for that command.
``tests/test_cli_lazy.py`` checks each summary is the first paragraph of the command's own help.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class Lazy:
    """A command of the root app: ``module:attr`` is a Typer app (a group of commands) or a command
    function; ``summary`` is the first paragraph of its help (shown by ``--help``)."""

    module: str
    attr: str
    summary: str

    def load(self, name: str) -> Any:
        """The click command ``name``: the module imported, the app or function turned into it."""
        target = getattr(importlib.import_module(self.module), self.attr)
        host = typer.Typer(add_completion=False, rich_markup_mode=None)  # the root's settings, as add_typer gave
        if isinstance(target, typer.Typer):
            host.add_typer(target, name=name)
            return typer.main.get_command(host).commands[name]  # type: ignore[attr-defined]
        host.command(name)(target)  # a command function: the host's one command
        return typer.main.get_command(host)


COMMANDS: dict[str, Lazy] = {
    "run": Lazy("ctxagent.cli.run", "run",
                "Start (or continue) a session with TASK and run the agent until it answers."),
    "resume": Lazy("ctxagent.cli.run", "resume",
                   "Continue a session (the newest one started in this directory by default) where it stopped."),
    "batch": Lazy("ctxagent.cli.batch", "batch",
                  "Run every task of a JSONL file, each in its own session, several at once (docs/batch.md). "
                  "Answered sessions are skipped on a re-run; the others resume."),
    "worker": Lazy("ctxagent.cli.batch", "worker",
                   "Run the sessions that `ctxagent batch --backend temporal` submits, until SIGTERM or Ctrl-C "
                   "(the running sessions then resume on another worker)."),
    "inspect": Lazy("ctxagent.cli.inspect", "app", "Look inside a session without changing it."),
    "sessions": Lazy("ctxagent.cli.sessions", "app", "List, show, delete, rename, fork and export sessions."),
    "profiles": Lazy("ctxagent.cli.profiles_cmd", "app",
                     "The bundled profiles, the effective keys of a profile, and the profile JSON Schema."),
    "config": Lazy("ctxagent.cli.config", "app", "Show where defaults come from; trust a project file."),
    "lessons": Lazy("ctxagent.cli.lessons_cmd", "app",
                    "List, show, forget, edit and export the lessons sessions learned."),
    "report": Lazy("ctxagent.cli.report", "report",
                   "Write one self-contained HTML file (no server, no network: it opens from disk) showing where a "
                   "session's tokens went: every request's tokens, cached and uncached, against the window and the "
                   "reply's reserve; each compaction and offload; the last request by category; the spend."),
    "mcp": Lazy("ctxagent.cli.mcp_cmd", "app",
                "MCP servers: the ones configured (profile mcp_servers, --mcp-config), their tools."),
}


class LazyGroup(TyperGroup):
    """The root group: the commands of :data:`COMMANDS`, each loaded on use."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.add_command(COMMANDS[cmd_name].load(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: Any) -> Any:
        """Run the command; a closed stdout raises :class:`StdoutClosed` (exit 141), not ``BrokenPipeError``,
        which typer's main turns into exit 1, the code of a real failure."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError as err:
            from ctxagent.cli.process import StdoutClosed

            raise StdoutClosed() from err

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The "Commands" section of ``--help`` from the summaries, shortened as click shortens a help."""
        limit = formatter.width - 6 - max(map(len, COMMANDS))
        rows = [(n, TyperCommand(n, help=c.summary).get_short_help_str(limit)) for n, c in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)
