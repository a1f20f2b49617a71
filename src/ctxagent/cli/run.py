"""``ctxagent run`` and ``ctxagent resume``: parse, open the session, render the runner's events."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from ctxagent.agent.config import RunConfig
from ctxagent.agent.events import Finished
from ctxagent.agent.setup import open_runner
from ctxagent.cli import config, process, redacted, tracing
from ctxagent.cli.options import RunOptions, with_run_options
from ctxagent.cli.outputs_cmd import deliver
from ctxagent.cli.permissions import ALLOW_ALL_WARNING, grants
from ctxagent.cli.process import Interrupted
from ctxagent.cli.render import BatchRenderer, Renderer
from ctxagent.cli.stdin import piped, wait_s
from ctxagent.cli.stream import StreamRenderer
from ctxagent.errors import CtxagentError, LimitReached, UsageError
from ctxagent.sessions.outcome import recorded_answer
from ctxagent.sessions.session import (
    Session,
    discard_if_unstarted,
    list_sessions,
    new_name,
    newest,
    sessions_root,
    started_in,
)
from ctxagent.tools.clean import mend, plain
from ctxagent.tools.preview import preview_bytes

if TYPE_CHECKING:
    from ctxagent.agent.events import Event


def _read_task(task: str | None) -> str | None:
    """The argument, or stdin for ``-`` (read to its end), as :func:`plain` text; ``UsageError`` when blank."""
    text = _text(sys.stdin.buffer.read()) if task == "-" else task
    text = None if text is None else plain(text)
    if text is not None and not text.strip():
        raise UsageError("the task is empty" + (" (read from stdin)" if task == "-" else ""))
    return text


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _piped() -> str | None:
    """What is piped into stdin and ours to read (cli/stdin.py), as :func:`plain` text; None when nothing is."""
    data = piped()
    text = None if data is None else plain(_text(data)).rstrip("\n")
    return text if text and text.strip() else None


def execute(session: Session, message: str | None, opts: RunOptions, stdin: str | None = None) -> None:
    """Open ``session``, run it (interactively, keep prompting), exit with the right code. ``stdin``: piped
    text attached to the first message. Lessons are learned after the answer was shown, never before it:
    with an LLM lessons step that is a model call."""
    batch = opts.is_batch()
    renderer = _renderer(opts.format(), batch, quiet=opts.quiet)
    result: dict[str, Any] = {"session": session.name, "status": "error", "answer": None, "turns": 0}
    code = 0
    runner = None
    shown = False  # the result was printed (inside the writer lock, before lessons were learned)
    started = time.monotonic()
    trace = tracing.Tracing(tracing.make_provider() if tracing.enabled() else None)
    existed = session.root.exists()
    try:
        opts = _with_defaults(opts, existed)
        with session.writer():
            runner = open_runner(session, _run_config(opts, batch))
            if opts.allow_all:
                print(ALLOW_ALL_WARNING, file=sys.stderr, flush=True)
            if stdin is not None and message is not None:
                message = f"{message}\n\n{runner.attach(stdin, 'stdin')}"
            if message is None and runner.state.needs_input() and not runner.state.users:  # no task recorded
                raise UsageError(f"session {session.name!r} has nothing left to do; give a new message")
            renderer.start(session, runner)
            trace.start(session.name, runner.model_name)
            _converse(session, runner, renderer, message, opts, trace, batch)
            result.update(status="answered", answer=renderer.answer)
            if batch:  # the answer first, then the lessons (still holding the lock: they append notes)
                code, shown = _report(session, runner, renderer, result, code, opts, started, trace), True
            _learn(runner, renderer)
    except CtxagentError as err:
        code = err.exit_code
        result.update(status=err.status, error=redacted(str(err)))
        renderer.error(CtxagentError(result["error"]))  # printed as redacted as it is recorded
    except KeyboardInterrupt as err:  # Ctrl-C, SIGTERM, SIGHUP (the terminal may be gone: no output then)
        code = err.exit_code if isinstance(err, Interrupted) else 130
        result.update(status="interrupted")
        _quietly(renderer.interrupted, session)
    if not existed:
        discard_if_unstarted(session)
    if not shown:
        code = _report(session, runner, renderer, result, code, opts, started, trace)
    raise typer.Exit(code)


def _run_config(opts: RunOptions, batch: bool) -> RunConfig:
    """The run configuration the command line asks for (the permission prompt only for text output)."""
    return RunConfig(
        profile_spec=opts.profile, model_spec=opts.model, api_base=opts.api_base,
        path="batch" if batch else "interactive", workdir=opts.workdir.resolve() if opts.workdir else None,
        tools=tuple(opts.tools or ()), run_limits=opts.run_limits(), session_limits=opts.session_limits(),
        context_window=opts.context_window, timeout_s=opts.timeout, started=process.STARTED,
        mcp_config=str(opts.mcp_config.resolve()) if opts.mcp_config else None,
        max_output_tokens=opts.max_output_tokens, lessons=not opts.no_lessons,
        grants=grants(opts.allow, opts.allow_all, interactive=not batch and opts.format() == "text"))


def _converse(session: Session, runner: Any, renderer: Renderer, message: str | None, opts: RunOptions,
              trace: tracing.Tracing, batch: bool) -> None:
    """The turn of ``message``; interactively, then a turn per message typed until the session ends."""
    while True:
        if _turn(session, runner, renderer, message, opts, trace) and not batch:
            _show_answer(session, renderer.answer, opts.output)
        message = None if batch else _next_message(renderer, runner)
        if message is None:
            return


def _turn(session: Session, runner: Any, renderer: Renderer, message: str | None, opts: RunOptions,
          trace: tracing.Tracing) -> bool:
    """Run one turn, rendering its events; True when it answered. Interactively, a first Ctrl-C and
    ``--max-turns`` end the turn, not the session (:meth:`Renderer.goes_on`)."""
    try:
        for event in _events(session, runner, message, opts.max_turns):
            renderer.event(event)
            trace.event(event)
        return True
    except KeyboardInterrupt as err:
        if not renderer.goes_on(err):
            raise
        runner.cancel()
    except LimitReached as err:
        if err.bound != "max_turns" or not renderer.goes_on(err):
            raise
    return False


def _learn(runner: Any, renderer: Renderer) -> None:
    """Learn the session's lessons (``Runner.learn``) after the answer was shown; Ctrl-C skips them."""
    if not runner.unlearned:
        return
    try:
        with renderer.learning(runner.learn_asks_model):
            for event in runner.learn():
                renderer.event(event)
    except KeyboardInterrupt:
        renderer.note("lessons skipped (interrupted)")


def _report(session: Session, runner: Any, renderer: Renderer, result: dict[str, Any], code: int, opts: RunOptions,
            started: float, trace: tracing.Tracing) -> int:
    """Complete ``result`` (spend, delivered handles, ``is_error``), print it, return the exit code."""
    if runner is not None:
        result.update(_spend(runner, started))
    if code == 0 and opts.is_batch() and renderer.answer is not None:
        code = _deliver(session, renderer.answer, opts.output, result, opts.format() != "text")
    result.update({key: mend(result[key]) for key in ("answer", "error") if isinstance(result.get(key), str)})
    result["is_error"] = code != 0
    trace.finish(result)
    if code == 129:  # the terminal is gone: what cannot be shown is dropped, the exit code stays
        _quietly(renderer.finish, result)
    else:
        renderer.finish(result)
    return code


def _events(session: Session, runner: Any, message: str | None, max_turns: int | None) -> Iterable[Event]:
    """``runner.run``'s events; for an answered session and no new ``message``, its recorded answer
    alone (one ``Finished``: no model call, nothing written)."""
    if message is None and runner.state.needs_input():  # answered: execute refused a session without a task
        return [Finished("answered", recorded_answer(session.transcript) or "", runner.state.turn)]
    return cast("Iterable[Event]", runner.run(message, max_turns=max_turns))


def _next_message(renderer: Renderer, runner: Any) -> str | None:
    """The next message typed interactively, after any slash commands (cli/slash.py); None ends."""
    from ctxagent.cli import slash  # rich: only for people

    while True:
        line = renderer.ask()
        if line is None:
            return None
        message = slash.handle(plain(line), runner, renderer)  # typed: as a task
        if message is slash.EXIT:
            return None
        if isinstance(message, str):
            return message


def _with_defaults(opts: RunOptions, existed: bool) -> RunOptions:
    """``opts`` with what the command line left unset taken from configuration (cli/config.py); for a
    session that exists only ``allow`` (it keeps what it recorded)."""
    start = opts.workdir.resolve() if opts.workdir else None
    given = {key: getattr(opts, key) for key in config.KEYS}
    values = config.effective(given, start=start)
    note = config.untrusted_note(start)
    if note and any(v is None for v in given.values()):
        print(f"ctxagent: note: {note}", file=sys.stderr)
    keys = ("allow",) if existed else config.KEYS
    return replace(opts, **{key: values[key].value for key in keys if given[key] is None})


def _renderer(output_format: str, batch: bool, quiet: bool = False) -> Renderer:
    """The renderer of ``--output-format`` on the batch or interactive path."""
    if output_format == "stream-json":
        return StreamRenderer(interactive=not batch, quiet=quiet)
    if batch:
        return BatchRenderer(output_format == "json", quiet=quiet)
    from ctxagent.cli.interactive import InteractiveRenderer  # rich: only for people

    return InteractiveRenderer(quiet=quiet)


def _spend(runner: Any, started: float) -> dict[str, Any]:
    """The ``--json`` fields of what was spent, this run's and the session's (docs/batch.md lists them)."""
    spend = runner.spend()
    return {"turns": runner.state.turn, "run_turns": runner.state.replies - runner.replies_at_start,
            "usage": spend["run"], "session_usage": spend["session"], "model": runner.model_name,
            "duration_s": round(time.monotonic() - started, 3), "cost_usd": spend["run"]["cost_usd"],
            "limits": runner.breaker.limits()}


def _quietly(show: Any, *args: Any) -> None:
    """Call ``show``; when the terminal is gone (EIO), send stdout and stderr to /dev/null from then on,
    so that nothing left in a buffer fails the exit."""
    try:
        show(*args)
        sys.stdout.flush()
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.dup2(devnull, sys.stderr.fileno())


def _deliver(session: Session, answer: str, output: Path | None, result: dict[str, Any], json_out: bool) -> int:
    """Batch: the (redacted) answer's handles resolved into ``result``; the exit code, 1 when ``--output``
    could not be written."""
    try:
        shown = deliver(session.store, redacted(answer), output)
    except OSError as err:
        message = f"cannot write --output {output}: {err.strerror or err}"
        print(f"ctxagent: error: {message}", file=sys.stderr)
        result.update(status="error", error=message)
        return 1
    for note in shown.notes:
        print(f"ctxagent: {note}", file=sys.stderr)
    if shown.written is not None:
        print(f"ctxagent: wrote {shown.written:,} bytes to {output}", file=sys.stderr)
    if json_out:
        result["handles"] = shown.handles
        if output is not None:
            result["output"] = str(output)
    else:
        result["answer"] = for_terminal(shown.text, session.name) if sys.stdout.isatty() else shown.text
    return 0


TERMINAL_MAX_CHARS = 20_000  # characters of an answer's resolved value printed on a terminal at most


def for_terminal(text: str, session: str) -> str:
    """``text`` as a terminal shows it: whole up to :data:`TERMINAL_MAX_CHARS` characters, else the middle-out
    preview offloaded outputs get (first 40 and last 20 lines) with how to get the whole value."""
    if len(text) <= TERMINAL_MAX_CHARS:
        return text
    shown = preview_bytes(text.encode("utf-8", "surrogateescape"), head_lines=40, tail_lines=20,
                          max_chars=TERMINAL_MAX_CHARS)
    how = (f"{len(text):,} characters in all, {text.count(chr(10)) + 1:,} lines; not all printed on a terminal: "
           f"--output FILE writes the whole value, or pipe the output ('ctxagent inspect outputs --session "
           f"{session}' lists the stored values)")
    return shown.text.replace(shown.marker, f"{shown.marker.rstrip()}\n[{how}]\n", 1)


def _show_answer(session: Session, answer: str | None, output: Path | None) -> None:
    """Interactive: after the rendered answer, the values its handles name (or where they went)."""
    if answer is None:
        return
    shown = deliver(session.store, answer, output)
    for note in shown.notes:
        print(f"ctxagent: {note}", file=sys.stderr)
    if shown.written is not None:
        print(f"wrote {shown.written:,} bytes to {output}")
    elif shown.handles and shown.text != answer:
        print(for_terminal(shown.text, session.name))


@with_run_options()
def run(opts: RunOptions,
        task: Annotated[str | None, typer.Argument(help="The task; '-' reads it from stdin.")] = None) -> None:
    """Start (or continue) a session with TASK and run the agent until it answers.

    Examples (a terminal: a conversation; a script: the answer alone on stdout, or --json):

    \b
      ctxagent run --model openai/gpt-4o-mini "Why does tests/test_io.py fail?"
      git diff | ctxagent run --batch --quiet --model openai/gpt-4o-mini "Review this diff" > review.md
    """
    text = _read_task(task) if task is not None or sys.stdin.isatty() else _piped()  # no task: stdin's
    if text is None and opts.is_batch():
        raise UsageError("give a task: ctxagent run \"TASK\"" + ("" if sys.stdin.isatty() else
                         f", or pipe it in (stdin had nothing within {wait_s():g} s of the start; '-' waits for "
                         "stdin's end)"))
    if text is None:
        text = plain(typer.prompt("task"))
    opts.check()
    session = Session.at(new_name() if opts.session is None else opts.session, opts.store)
    if opts.session is not None:
        session.pull()  # with a session store: the cache brought up to it
    execute(session, text, opts, stdin=_piped() if task not in (None, "-") else None)


@with_run_options()
def resume(opts: RunOptions,
           message: Annotated[str | None, typer.Argument(help="A new user message; '-' reads stdin.")] = None,
           last: Annotated[bool, typer.Option("--last", help="Without --session: the newest session of all, "
                                              "wherever it was started.")] = False) -> None:
    """Continue a session (the newest one started in this directory by default) where it stopped."""
    opts.check()
    target = (Session.at(opts.session, opts.store) if opts.session is not None
              else _newest(last, opts.store, quiet=opts.quiet))
    execute(target.pull().require(), _read_task(message), opts,
            stdin=_piped() if message not in (None, "-") else None)


def _newest(everywhere: bool, store_url: str | None, quiet: bool = False) -> Session:
    """The session ``resume`` continues without ``--session``: the newest (:func:`newest`) started in the
    current directory, or of all with ``--last``; said on stderr. ``UsageError`` when there is none."""
    every, here = list_sessions(store_url), Path(os.path.realpath(Path.cwd()))
    target, skipped = newest(every if everywhere else [s for s in every if started_in(s) == here])
    if target is None:
        anywhere, _ = newest(every)
        if anywhere is None:
            raise UsageError(f"no sessions yet under {sessions_root(store_url)}; start one with 'ctxagent run'")
        raise UsageError(f"no session was started in {here}; 'ctxagent resume --last' continues the newest of all "
                         f"({anywhere.name}, started in {started_in(anywhere) or 'an unrecorded directory'}), and "
                         "--session NAME any ('ctxagent sessions list')")
    if not quiet:
        passed = f"; passed over {len(skipped)} newer one(s) the model never replied in: " \
                 f"{', '.join(s.name for s in skipped)}" if skipped else ""
        print(f"ctxagent: resuming session {target.name}, started in {started_in(target) or '(not recorded)'}"
              f"{passed}", file=sys.stderr)
    return target
