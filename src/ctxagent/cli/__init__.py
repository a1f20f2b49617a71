"""The ``ctxagent`` command line: parse, render, map errors to exit codes. No agent logic here.

Start-up stays fast: nothing imported here imports litellm (FIELD-NOTES: ~3.7 s).
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import signal
import sys
import time
import warnings
from typing import Annotated, Any, TextIO

import typer

from ctxagent.cli import process
from ctxagent.cli.lazy import LazyGroup
from ctxagent.cli.process import Interrupted, StdoutClosed
from ctxagent.errors import CtxagentError
from ctxagent.tools.clean import mend

app = typer.Typer(
    name="ctxagent",
    help="An agent runner that keeps its context: transcripts, compaction strategies, tool output offloading.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (typer's, for bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: typer's rich help formatter alone costs ~50 ms of imports
    cls=LazyGroup,  # the commands (cli/lazy.py COMMANDS) are imported when used, not for --help
)


def _version(value: bool) -> None:
    """``--version``: print the installed distribution's version and stop."""
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"ctxagent {version('ctxagent')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            print("ctxagent (version unknown: not installed)")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.", callback=_version,
                                          is_eager=True)] = False,
) -> None:
    """An agent runner that keeps its context: transcripts, compaction strategies, tool output offloading."""


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app on ``argv`` (default: the process's arguments); a
    ctxagent error prints one line and sets the exit code. Never returns: the process ends.

    SIGTERM (CI timeouts, ``timeout``, service managers) ends a run like Ctrl-C, and so does SIGHUP
    (the terminal closed; exit 129): the shell tool kills its process group, an interrupted end
    record is written and the session stays resumable. Warnings print as one ``ctxagent: warning:``
    line on stderr. With ``--json``, an error that ends the command before it printed its object
    (a usage error, a bad session name, an unknown session) prints one (:func:`failure_json`).

    The process ends with the interpreter's own teardown (``atexit`` handlers run: MCP servers
    close), after ``gc.freeze()``: the teardown's garbage collections walk every object still alive,
    and a fold of a long session leaves hundreds of thousands (a 10,000-message session's cold
    ``inspect context`` spent 0.46-0.78 s after its output in teardown here, 0.26-0.36 s frozen).
    Except in a process that loaded temporalio's Rust extension (:data:`TEMPORAL_BRIDGE`): its
    runtime's threads can call into an interpreter that is finalizing ("Fatal Python error:
    PyGILState_Release", exit -6 after a complete batch; seen in this suite; temporalio/sdk-python
    issue 300, open), so that process ends with ``os._exit`` once stdout and stderr are flushed, the
    workaround users of that SDK apply; its ``atexit`` handlers do not run (the Temporal commands
    start no MCP server: their sessions run in processes of their own).
    """
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    code = invoke(sys.argv[1:] if argv is None else argv)
    _flush()
    if TEMPORAL_BRIDGE in sys.modules:  # see the docstring of main
        os._exit(code)
    gc.freeze()
    sys.exit(code)


TEMPORAL_BRIDGE = "temporalio.bridge.temporal_sdk_bridge"
"""temporalio's Rust extension, loaded by the Temporal commands (``worker``, ``batch --backend temporal``)."""


def invoke(args: list[str]) -> int:
    """Run the command line ``args`` (without the program name) in this process and return its exit
    code: what :func:`main` does, short of installing signal handlers and ending the process. A
    ctxagent error, a usage error or an OS error prints its one line (and the ``--json`` object of the
    failure when asked for) and gives the error's exit code; nothing is raised but ``SystemExit``
    (a command that calls ``sys.exit``). The tests run most CLI commands through this."""
    process.STARTED = time.monotonic()  # a run's wall time counts from here (litellm's import included)
    try:
        return _invoke(args)
    finally:
        process.STARTED = None  # the next command in this process counts its own


def _invoke(args: list[str]) -> int:
    warnings.showwarning = _Warnings().show
    if isinstance(sys.stdout, io.TextIOWrapper):  # a lone surrogate prints as \udcff, never a traceback
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        code = app(args, prog_name="ctxagent", standalone_mode=False)
    except typer.TyperException as err:  # click's usage errors: bad option, --max-turns 0, ...
        _show(err)
        message = err.format_message() if hasattr(err, "format_message") else str(err)
        return _fail(args, getattr(err, "exit_code", 2), "usage_error", message)
    except typer.Abort:
        print("Aborted!", file=sys.stderr)
        return 1
    except CtxagentError as err:
        text = redacted(str(err))
        print(f"ctxagent: error: {text}", file=sys.stderr)
        return _fail(args, err.exit_code, err.status, text)
    except (BrokenPipeError, StdoutClosed):  # `ctxagent ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as err:  # e.g. CTXAGENT_DATA_DIR names a file, or a disk is full
        text = redacted(f"{err.strerror or err}: {err.filename or ''}".rstrip(": "))
        print(f"ctxagent: error: {text}", file=sys.stderr)
        return _fail(args, 1, "error", text)
    return code if isinstance(code, int) else 0


def _flush() -> None:
    """Flush stdout and stderr before the process ends. A stream whose reader left (``ctxagent ... |
    head``) is pointed at ``/dev/null``, the recipe of Python's ``signal`` documentation for SIGPIPE:
    else the interpreter's own flush at exit would fail too, print "Exception ignored" and end with
    status 120 instead of the command's exit code."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            with contextlib.suppress(OSError, ValueError):  # not a real file (a test's capture)
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


def _show(err: Exception) -> None:
    """A click error as click shows it (usage line, hint), else as one ``ctxagent: error:`` line."""
    if hasattr(err, "show"):
        err.show()
    else:
        print(f"ctxagent: error: {err}", file=sys.stderr)


def _fail(args: list[str], code: int, status: str, message: str) -> int:
    """``code``, after printing the ``--json`` object of the failure when it was asked for."""
    wanted = wants_json(args)
    if wanted:
        failure = failure_json(args, status, message)
        if wanted == "stream-json":  # the stream still ends with its error and result events
            print(json.dumps({"type": "error", "status": status, "message": failure["error"]}), flush=True)
            failure = {"type": "result", **failure}
        print(json.dumps(failure, ensure_ascii=False), flush=True)
    return code


def wants_json(args: list[str]) -> str | None:
    """``json`` when ``--json`` or ``--output-format json`` is among the options of the command line
    ``args`` (before a ``--``), ``stream-json`` for that format, else None."""
    options = args[: args.index("--")] if "--" in args else args
    for i, arg in enumerate(options):
        value = arg.split("=", 1)[1] if arg.startswith("--output-format=") else \
            options[i + 1] if arg == "--output-format" and i + 1 < len(options) else None
        if value in ("json", "stream-json"):
            return value
    return "json" if "--json" in options else None


def failure_json(args: list[str], status: str, message: str) -> dict[str, Any]:
    """The object ``--json`` prints for a command that failed before it could print its own: the
    shape of ``run``'s (session, status, answer, turns, error, permission_denials), the session as the command line
    names it (None when it names none), ``is_error`` true."""
    session = None
    for i, arg in enumerate(args):
        if arg in ("--session", "-s") and i + 1 < len(args):
            session = args[i + 1]
        elif arg.startswith("--session="):
            session = arg.split("=", 1)[1]
    return {"session": mend(session) if session else None, "status": status, "answer": None, "turns": 0,
            "error": mend(message), "is_error": True, "permission_denials": []}


def redacted(text: str) -> str:
    """``text`` (an error message) with secrets replaced (a URL's password, a key in a header)."""
    from ctxagent.sessions.redact import default

    return default().text(text)


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted(signum)


class _Warnings:
    """A command's warnings, each printed once as ``ctxagent: warning: ...`` (redacted). Python's
    own once-per-place rule printed a damaged transcript line twice on ``resume``: the command and
    the run read the transcript from two places."""

    def __init__(self) -> None:
        self.shown: set[str] = set()

    def show(self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        text = redacted(str(message))
        if text not in self.shown:
            self.shown.add(text)
            print(f"ctxagent: warning: {text}", file=sys.stderr)
