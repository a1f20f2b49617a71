"""``--allow`` / ``--allow-all`` and the permission prompt: the CLI side of ``tools/permissions.py``.

Imported by ``cli/run.py`` at start-up, so it imports only typer; the guard (tools/guard.py) and
rich load when a run opens. The grants are given to ``open_runner``, which puts the toolset behind
the permission gate; nothing is changed on the runner afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from ctxagent.tools.permissions import Answer, Grants

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


def grants(allow: str | None, allow_all: bool, *, interactive: bool) -> Grants:
    """The command line's grants for ``open_runner``: ``--allow``, ``--allow-all`` and, on the interactive
    path only, the permission :func:`prompt`."""
    from ctxagent.tools.permissions import Grants

    return Grants.of(allow, allow_all, prompt if interactive else None)


ANSWERS: dict[str, Answer] = {"y": "yes", "yes": "yes", "n": "no", "no": "no", "": "no",
                              "a": "always", "always": "always"}
ASK_TIMES = 3


def prompt(tool: str, arguments: dict[str, Any], workdir: Path) -> Answer:
    """Show a call and read yes / no / always on the terminal. Enter alone, end of input and
    :data:`ASK_TIMES` unclear replies are "no"."""
    from ctxagent.cli.console import Console, escape
    from ctxagent.tools.permissions import WHY_KEY

    console = Console(highlight=False)
    console.print(f"[bold yellow]permission:[/bold yellow] the model wants to run [bold]{escape(tool)}[/bold] "
                  f"in {escape(str(workdir))}")
    arguments = dict(arguments)
    why = arguments.pop(WHY_KEY, None)
    if why:  # why a call of this tool asks although its kind was granted (a write that runs code later)
        console.print(f"[bold]why:[/bold] {escape(str(why))}")
    from ctxagent.sessions.redact import clip  # what is printed is redacted as what is written

    for name, value in arguments.items():
        text = value if isinstance(value, str) else repr(value)
        shown = clip(text, PROMPT_ARGUMENT_CHARS)
        text = shown if len(text) <= PROMPT_ARGUMENT_CHARS else shown + f"… ({len(text):,} characters)"
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
