"""The ``ctxagent`` command line: parse, render, map errors to exit codes. No agent logic here.

Start-up stays fast: nothing imported here imports litellm (FIELD-NOTES: ~3.7 s).
"""

from __future__ import annotations

import os
import signal
import sys
import warnings
from typing import TextIO

import typer

from ctxagent.cli import context_cmd, inspect, run, sessions
from ctxagent.errors import CtxagentError

app = typer.Typer(
    name="ctxagent",
    help="An agent runner that keeps its context: transcripts, compaction strategies, tool output offloading.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: typer's rich help formatter alone costs ~50 ms of imports
)
app.command("run")(run.run)
app.command("resume")(run.resume)
context_cmd.register(inspect.app)
app.add_typer(inspect.app, name="inspect")
app.add_typer(sessions.app, name="sessions")


def main() -> None:
    """Console-script entry point: run the app; a ctxagent error prints one line and sets the exit code.

    SIGTERM (CI timeouts, ``timeout``, service managers) ends a run like Ctrl-C: the shell tool kills
    its process group and the session stays resumable. Warnings print as one ``ctxagent: warning:``
    line on stderr.
    """
    signal.signal(signal.SIGTERM, _interrupt)
    warnings.showwarning = _warning
    try:
        app()
    except CtxagentError as err:
        print(f"ctxagent: error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except BrokenPipeError:  # `ctxagent ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    except OSError as err:  # e.g. CTXAGENT_DATA_DIR names a file, or a disk is full
        print(f"ctxagent: error: {err.strerror or err}: {err.filename or ''}".rstrip(": "), file=sys.stderr)
        sys.exit(1)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
    print(f"ctxagent: warning: {message}", file=sys.stderr)
