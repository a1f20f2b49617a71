"""``--allow`` / ``--allow-all`` and the permission prompt: the CLI side of ``tools/permissions.py``.

Imported by ``cli/run.py`` at start-up, so it imports only typer; the gate and rich load when a
run opens.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

AllowOpt = Annotated[str | None, typer.Option(
    "--allow", help="Grant tools (or kinds: read, write, exec, network) whose profile policy is 'ask', "
    "comma-separated: --allow shell,write_file. Batch runs never prompt, so 'ask' is refused without it.")]
AllowAllOpt = Annotated[bool, typer.Option(
    "--allow-all", help="Grant every tool whose policy is 'ask' (not 'deny'; file tools stay confined). "
    "The model can then run any command: use it only in a sandbox.")]

ALLOW_ALL_WARNING = ("ctxagent: warning: --allow-all: every tool whose profile policy is 'ask' runs without "
                     "asking, including shell commands and file writes chosen by the model; use it only in a "
                     "sandbox or a throwaway checkout")
PROMPT_ARGUMENT_CHARS = 400  # of one argument value shown at the prompt


def grant(runner: Any, allow: str | None, allow_all: bool, *, interactive: bool) -> None:
    """Apply the command line's grants to ``runner.gate`` and, on the interactive path, the prompt.

    ``--allow-all`` prints a warning on stderr. Raises ``UsageError`` for an unknown name in
    ``--allow``.
    """
    from ctxagent.tools.permissions import parse_grants

    gate = runner.gate
    servers = runner.toolset.servers  # MCP servers configured, even one that did not start (its tools may come)
    asked = [name.strip() for name in (allow or "").split(",")]
    mcp_names = [name for name in asked if name.split("__")[0] in servers]
    gate.granted |= parse_grants(allow, [*runner.toolset.tools, *runner.toolset.groups(), *servers, *mcp_names])
    if allow_all:
        gate.allow_all = True
        print(ALLOW_ALL_WARNING, file=sys.stderr, flush=True)
    if interactive:
        gate.ask = prompt


ANSWERS = {"y": "yes", "yes": "yes", "n": "no", "no": "no", "": "no", "a": "always", "always": "always"}
ASK_TIMES = 3


def prompt(tool: str, arguments: dict[str, Any], workdir: Path) -> str:
    """Show a call (tool, arguments, working directory) and read yes / no / always on the terminal.

    Enter alone is "no"; an unclear reply is asked again (at most :data:`ASK_TIMES` times in all, then
    "no"); end of input is "no".
    """
    from rich.console import Console
    from rich.markup import escape

    from ctxagent.tools.permissions import WHY_KEY

    console = Console(highlight=False)
    console.print(f"[bold yellow]permission:[/bold yellow] the model wants to run [bold]{escape(tool)}[/bold] "
                  f"in {escape(str(workdir))}")
    arguments = dict(arguments)
    why = arguments.pop(WHY_KEY, None)
    if why:  # why a call of this tool asks although its kind was granted (a write that runs code later)
        console.print(f"[bold]why:[/bold] {escape(str(why))}")
    for name, value in arguments.items():
        text = value if isinstance(value, str) else repr(value)
        if len(text) > PROMPT_ARGUMENT_CHARS:
            text = text[:PROMPT_ARGUMENT_CHARS] + f"… ({len(text):,} characters)"
        console.print(f"  {escape(name)}: {escape(text)}")
    for _ in range(ASK_TIMES):
        try:
            answer = console.input("allow? [bold]\\[y][/bold]es / [bold]\\[n][/bold]o / "
                                   "[bold]\\[a][/bold]lways for this session: ").strip().lower()
        except EOFError:
            return "no"
        if answer in ANSWERS:
            return ANSWERS[answer]
        console.print(f"please answer y (yes), n (no) or a (always), not {escape(answer)!r}")
    return "no"
    if answer in ("y", "yes"):
        return "yes"
    if answer in ("a", "always"):
        return "always"
    return "no"
