"""Command-line options shared by several commands, and the checks of what they name.

:class:`RunOptions` is the one definition of the options ``run`` and ``resume`` share. The bottom of
the CLI layer: the command modules import it, it imports none of them.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxagent.cli.permissions import AllowAllOpt, AllowOpt
from ctxagent.errors import UsageError
from ctxagent.sessions.session import Session, latest_session
from ctxagent.tools.clean import mend

STORE_ENV = "CTXAGENT_STORE"  # read here, at the command line's edge, and passed on: nothing below reads it


def use_store(url: str | None) -> str | None:
    """``--store URL``, else ``$CTXAGENT_STORE``, else None (local disk); ``typer.BadParameter`` when blank."""
    if url is not None and not url.strip():
        raise typer.BadParameter("give a URL, e.g. s3://bucket/prefix or file:///srv/ctxagent")
    url = url if url is not None else os.environ.get(STORE_ENV, "")
    return url.strip().rstrip("/") or None


StoreOpt = Annotated[str | None, typer.Option(
    "--store", callback=use_store, metavar="URL", help="Keep sessions in this object store (an fsspec URL: "
    "s3://bucket/prefix, gs://..., az://..., file:///...; default $CTXAGENT_STORE, else local disk).")]
SessionOpt = Annotated[str | None, typer.Option("--session", "-s", help="Session name (default: most recent).")]
ModelOpt = Annotated[str | None, typer.Option(
    "--model", "-m", help="litellm model string (openai/gpt-4o-mini, anthropic/..., ollama/...) "
    "or scripted:PATH for a scripted run.", show_default="configuration (ctxagent config show), else the "
    "profile's model: openai/gpt-4o-mini in the default profile; resume: the session's")]
ProfileOpt = Annotated[str | None, typer.Option("--profile", "-p", help="Bundled profile name or YAML path.",
                                                show_default="configuration, else default; resume: the session's")]
WindowOpt = Annotated[int | None, typer.Option(
    "--context-window", min=256, help="The model's context window in tokens (when litellm does not know it, "
    "e.g. a local server); kept in the session.", show_default="configuration, else the profile's, else "
    "litellm's model info")]
McpConfigOpt = Annotated[Path | None, typer.Option(
    "--mcp-config", help="MCP servers to add, from a JSON file in the mcpServers shape (Claude Code, Cursor); "
    "its path is kept for resume, its values (${NAME} references expanded) never recorded.")]


@dataclass(frozen=True)
class RunOptions:
    """The options ``run`` and ``resume`` share, as the command line gave them (in ``--help`` order);
    each field's annotation is its typer option."""

    session: Annotated[str | None, typer.Option("--session", "-s", help="Session name.", show_default=(
        "run: a new name, YYYYMMDD-HHMMSS-xxxx; resume: the newest session started in this directory"))] = None
    model: ModelOpt = None
    profile: ProfileOpt = None
    api_base: Annotated[str | None, typer.Option(
        "--api-base", help="Base URL of an OpenAI-compatible server.",
        show_default="configuration, else the provider's own")] = None
    max_turns: Annotated[int | None, typer.Option(
        "--max-turns", min=1, help="Model calls allowed in this run (interactively: in one turn, then the "
        "prompt comes back).", show_default="the profile's max_turns: 30 in the default profile")] = None
    batch: Annotated[bool, typer.Option(
        "--batch", help="No prompts; answer alone on stdout (implied when stdin is not a terminal).")] = False
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object: session, status, answer, turns, usage, permission_denials.")] = False
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the answer (or only the JSON): no progress, "
                                        "warnings or notes on stderr; errors are still said.")] = False
    workdir: Annotated[Path | None, typer.Option(
        "--workdir", help="Working directory of the tools.",
        show_default="the current directory; resume: the session's")] = None
    tools: Annotated[list[str] | None, typer.Option(
        "--tools", help="Add a tool: module:function, path/to/file.py:function, or the name of a built-in or "
        "installed (ctxagent.tools entry point) tool. Repeatable; kept for resume.")] = None
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write the answer's value to FILE: the value of an answer that is one handle "
        "(bytes exactly, arrays as .npy, JSON pretty), else the answer with its handles resolved.")] = None
    allow: AllowOpt = None
    allow_all: AllowAllOpt = False
    max_input_tokens: Annotated[int | None, typer.Option(
        "--max-input-tokens", min=1, help="Budget: prompt tokens this run may use (summed over calls).")] = None
    max_output_tokens_total: Annotated[int | None, typer.Option(
        "--max-output-tokens-total", min=1, help="Budget: reply tokens this run may use (summed over calls).")] = None
    max_cost_usd: Annotated[float | None, typer.Option(
        "--max-cost-usd", min=0.000001, help="Budget: US dollars this run may spend (litellm's prices).")] = None
    max_wall_s: Annotated[float | None, typer.Option(
        "--max-wall-s", min=0.001, help="Budget: seconds of wall time this run may take.")] = None
    session_limit: Annotated[list[str] | None, typer.Option(
        "--session-limit", help="Budget of the whole session, KEY=VALUE (max_input_tokens, "
        "max_output_tokens_total, max_cost_usd, max_wall_s; VALUE none removes one); kept in the session. "
        "Repeatable.")] = None
    context_window: WindowOpt = None
    max_output_tokens: Annotated[int | None, typer.Option(
        "--max-output-tokens", min=1, help="Tokens reserved for each reply, sent as max_tokens; kept in the "
        "session.", show_default="the profile's max_output_tokens, else an eighth of the window, 256 to 4096")] = None
    timeout: Annotated[float | None, typer.Option(
        "--timeout", min=0.1, help="Seconds one model request may take.",
        show_default="the profile's timeout_s: 120 in the default profile")] = None
    output_format: Annotated[str | None, typer.Option(
        "--output-format", help="text (the answer), json (one object, as --json) or stream-json (one JSON event "
        "per line as the run goes; schema: src/ctxagent/cli/events.schema.json).", show_default="text")] = None
    mcp_config: McpConfigOpt = None
    no_lessons: Annotated[bool, typer.Option(
        "--no-lessons", help="Run without lessons: a new session is shown none, and this run teaches none "
        "(ctxagent lessons --help).")] = False
    store: StoreOpt = None

    def is_batch(self) -> bool:
        """The batch path: ``--batch``, ``json`` output, or stdin not a terminal."""
        return self.batch or self.format() == "json" or not sys.stdin.isatty()

    def format(self) -> str:
        """``text``, ``json`` (also ``--json``) or ``stream-json``. Raises ``UsageError`` for another."""
        chosen = self.output_format or ("json" if self.json_out else "text")
        if chosen not in ("text", "json", "stream-json"):
            raise UsageError(f"--output-format {chosen}: give text, json or stream-json")
        if self.json_out and chosen != "json":
            raise UsageError(f"--json means --output-format json; it cannot go with --output-format {chosen}")
        return chosen

    def run_limits(self) -> dict[str, float]:
        """The run limits the command line sets (``--max-*``), by profile key."""
        from ctxagent.agent.budgets import FLAGS, check_limit  # imports no litellm

        given: dict[str, float] = {key: value for key in FLAGS if (value := getattr(self, key)) is not None}
        for key, value in given.items():
            check_limit(f"{FLAGS[key]} {value}", key, value)
        return given

    def session_limits(self) -> dict[str, float | None]:
        """The session limits ``--session-limit`` sets. Raises ``UsageError`` for a bad item."""
        from ctxagent.agent.budgets import parse_limits  # imports no litellm

        return parse_limits(self.session_limit)

    def check(self) -> None:
        """``UsageError`` (before the run) for an option that is not valid, cannot be recorded or written."""
        check_recordable(model=self.model, profile=self.profile, api_base=self.api_base, workdir=self.workdir,
                         tools=" ".join(self.tools or ()))
        check_output(self.output)
        if self.mcp_config is not None and not self.mcp_config.is_file():
            raise UsageError(f"--mcp-config {self.mcp_config}: no such file")
        self.session_limits()
        self.run_limits()
        self.format()


def with_run_options(*only: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Make ``command(opts, ...)`` a typer command: its own parameters but the first, then every
    :class:`RunOptions` field (``only``: those, in that order) as a keyword option; a call gathers them
    into ``opts`` (the fields left out keep their defaults)."""
    hints = typing.get_type_hints(RunOptions, include_extras=True)
    defaults = {f.name: f.default for f in fields(RunOptions)}
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=defaults[name], annotation=hints[name])
              for name in only or defaults]

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        own = list(inspect.signature(command, eval_str=True).parameters.values())[1:]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> None:
            command(RunOptions(**{p.name: kwargs.pop(p.name) for p in shared}), **kwargs)

        wrapper.__signature__ = inspect.Signature([*own, *shared])  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in (*own, *shared)}
        return wrapper

    return decorate


def keep_store(ctx: typer.Context, store: StoreOpt = None) -> None:
    """``--store URL`` before the command: the session store to read (default $CTXAGENT_STORE)."""
    ctx.obj = store  # the commands' ``ctx.obj``


def pick(name: str | None, store_url: str | None = None) -> Session:
    """The named session, or the most recent one, brought up to the store at ``store_url`` if any;
    ``UsageError`` if there is none."""
    return (Session.at(name, store_url) if name else latest_session(store_url)).pull().require()


def check_recordable(**options: str | Path | None) -> None:
    """``UsageError`` for an option the session header records that holds a byte that is not UTF-8: the
    transcript is UTF-8, and a path changed to make it fit would name another file on resume."""
    for name, value in options.items():
        text = os.fspath(value) if value is not None else ""
        if mend(text) != text:
            raise UsageError(f"--{name.replace('_', '-')} {mend(text)} holds bytes that are not UTF-8 (shown as "
                             "\\xNN); the session records it as text: rename it or give another")


def check_output(output: Path | None) -> None:
    """``UsageError`` (before the run) when ``--output`` cannot be written (a file created to test it is
    removed again)."""
    if output is None:
        return
    if output.is_dir():
        raise UsageError(f"--output {output} is a directory; give a file name")
    if not output.parent.is_dir():
        raise UsageError(f"--output {output}: the folder {output.parent} does not exist (ctxagent creates "
                         "no folders)" if not output.parent.exists() else f"--output {output}: {output.parent} "
                         "is not a folder")
    try:
        if output.exists():
            if not os.access(output, os.W_OK):
                raise PermissionError(13, "Permission denied")
        else:
            os.close(os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            output.unlink()
    except OSError as err:
        raise UsageError(f"--output {output} cannot be written: {err.strerror or err}") from err
