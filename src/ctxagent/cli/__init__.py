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
    """Console-script entry point: :func:`invoke` on ``argv`` (default: the process's arguments), then
    end the process with its exit code. SIGTERM and SIGHUP (exit 129) end a run like Ctrl-C: an
    interrupted end record is written and the session stays resumable.

    ``gc.freeze()`` first: the teardown's collections walk every object still alive (a 10,000-message
    session's cold ``inspect context`` spent 0.46-0.78 s in teardown, 0.26-0.36 s frozen). A process
    that loaded temporalio's Rust extension ends with ``os._exit`` instead: its threads can call into a
    finalizing interpreter ("Fatal Python error: PyGILState_Release"; temporalio/sdk-python issue 300),
    and the Temporal commands start no MCP server whose ``atexit`` handler would be skipped.
    """
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    code = invoke(sys.argv[1:] if argv is None else argv)
    _flush()
    if TEMPORAL_BRIDGE in sys.modules:
        os._exit(code)
    gc.freeze()
    sys.exit(code)


TEMPORAL_BRIDGE = "temporalio.bridge.temporal_sdk_bridge"
"""temporalio's Rust extension, loaded by the Temporal commands (``worker``, ``batch --backend temporal``)."""


def invoke(args: list[str]) -> int:
    """Run the command line ``args`` (without the program name) in this process; its exit code. A
    ctxagent, usage or OS error prints one line (and, with ``--json``, the :func:`failure_json` object)
    and gives the error's exit code; nothing is raised but ``SystemExit``."""
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
        if hasattr(err, "show"):  # a click error as click shows it (usage line, hint)
            err.show()
        else:
            print(f"ctxagent: error: {err}", file=sys.stderr)
        return _fail(args, getattr(err, "exit_code", 2), "usage_error", err.format_message())
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
    """Flush stdout and stderr. A stream whose reader left is pointed at ``/dev/null`` (the SIGPIPE recipe of
    Python's ``signal`` docs): else the interpreter's flush at exit fails too and ends with status 120."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            with contextlib.suppress(OSError, ValueError):  # not a real file (a test's capture)
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


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
    """``json`` for ``--json`` or ``--output-format json`` among the options of ``args`` (before a ``--``),
    ``stream-json`` for that format, else None."""
    options = args[: args.index("--")] if "--" in args else args
    for i, arg in enumerate(options):
        value = arg.split("=", 1)[1] if arg.startswith("--output-format=") else \
            options[i + 1] if arg == "--output-format" and i + 1 < len(options) else None
        if value in ("json", "stream-json"):
            return value
    return "json" if "--json" in options else None


def failure_json(args: list[str], status: str, message: str) -> dict[str, Any]:
    """The object ``--json`` prints for a command that failed before it could print its own, in the shape
    of ``run``'s; the session as ``args`` names it (None when they do not)."""
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
    """A command's warnings, each printed once as ``ctxagent: warning: ...`` (redacted): Python's
    once-per-place rule printed a damaged transcript line twice on ``resume`` (read from two places)."""

    def __init__(self) -> None:
        self.shown: set[str] = set()

    def show(self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        text = redacted(str(message))
        if text not in self.shown:
            self.shown.add(text)
            print(f"ctxagent: warning: {text}", file=sys.stderr)
