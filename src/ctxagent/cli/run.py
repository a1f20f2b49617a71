"""``ctxagent run`` and ``ctxagent resume``: parse, open the session, render the runner's events."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxagent.cli.permissions import AllowAllOpt, AllowOpt, grant
from ctxagent.cli.render import BatchRenderer, InteractiveRenderer, Renderer
from ctxagent.errors import CtxagentError, UsageError
from ctxagent.sessions.session import Session, latest_session, new_name
from ctxagent.tools.clean import mend, plain

SessionOpt = Annotated[str | None, typer.Option("--session", "-s", help="Session name.")]
ModelOpt = Annotated[str | None, typer.Option(
    "--model", "-m", help="litellm model string (openai/gpt-4o-mini, anthropic/..., ollama/...) "
    "or scripted:PATH for a scripted run.")]
ProfileOpt = Annotated[str | None, typer.Option("--profile", "-p", help="Bundled profile name or YAML path.")]
ApiBaseOpt = Annotated[str | None, typer.Option("--api-base", help="Base URL of an OpenAI-compatible server.")]
MaxTurnsOpt = Annotated[int | None, typer.Option("--max-turns", min=1, help="Model calls allowed in this run.")]
BatchOpt = Annotated[bool, typer.Option("--batch", help="No prompts; answer alone on stdout (implied when "
                                        "stdin is not a terminal).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object: session, status, answer, "
                                       "turns, usage.")]
WorkdirOpt = Annotated[Path | None, typer.Option("--workdir", help="Working directory of the tools.")]
ToolsOpt = Annotated[list[str] | None, typer.Option(
    "--tools", help="Add a tool: module:function, path/to/file.py:function, or the name of a built-in or "
    "installed (ctxagent.tools entry point) tool. Repeatable; kept for resume.")]
OutputOpt = Annotated[Path | None, typer.Option(
    "--output", "-o", help="Write the answer's value to FILE: the value of an answer that is one handle "
    "(bytes exactly, arrays as .npy, JSON pretty), else the answer with its handles resolved.")]


class Interrupted(KeyboardInterrupt):
    """A signal that ends a run like Ctrl-C (SIGTERM, SIGHUP); ``signum`` is its number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """129 for SIGHUP (128 + 1, as shells report it); 130, Ctrl-C's, for the others."""
        return 129 if self.signum == 1 else 130


def _read_task(task: str | None) -> str | None:
    """The task or message: the argument, or stdin for ``-``, as text that can be written and sent
    (:func:`ctxagent.tools.clean.plain`: a byte that is not UTF-8 shown as ``\\xff``, NUL and
    other control characters dropped). ``UsageError`` when it is blank."""
    text = sys.stdin.buffer.read().decode("utf-8", "surrogateescape") if task == "-" else task
    text = None if text is None else plain(text)
    if text is not None and not text.strip():
        raise UsageError("the task is empty" + (" (read from stdin)" if task == "-" else ""))
    return text


def _check_recordable(**options: str | Path | None) -> None:
    """``UsageError`` for an option the session header records (model, profile, api_base, workdir,
    tools) that holds a byte that is not UTF-8: the transcript is UTF-8, and a path changed to make
    it fit would name another file on resume."""
    for name, value in options.items():
        text = os.fspath(value) if value is not None else ""
        if mend(text) != text:
            raise UsageError(f"--{name.replace('_', '-')} {mend(text)} holds bytes that are not UTF-8 (shown as "
                             "\\xNN); the session records it as text: rename it or give another")


def check_output(output: Path | None) -> None:
    """``UsageError`` (before the run) when ``--output`` cannot be written: a directory, a folder
    that does not exist (ctxagent creates none) or that is not one, or a file or folder that refuses
    writing. A file created to test it is removed again."""
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


def _session(name: str | None) -> Session:
    """The session ``--session`` names (a new name when it is not given; ``UsageError`` when blank)."""
    if name is None:
        return Session.at(new_name())
    return Session.at(name)


def _is_batch(batch: bool, json_out: bool) -> bool:
    return batch or json_out or not sys.stdin.isatty()


@dataclass(frozen=True)
class RunOptions:
    """What ``run`` and ``resume`` share: the command line's choices for one invocation."""

    model: str | None = None
    profile: str | None = None
    api_base: str | None = None
    max_turns: int | None = None
    batch: bool = True
    json_out: bool = False
    workdir: Path | None = None
    tools: tuple[str, ...] = ()
    output: Path | None = None
    allow: str | None = None
    allow_all: bool = False


def execute(session: Session, message: str | None, opts: RunOptions) -> None:
    """Open ``session``, run it (and, interactively, keep prompting), exit with the right code.

    An answer that is or contains handles is printed with their values (see ``outputs_cmd.deliver``).
    """
    from ctxagent.agent.setup import open_runner

    batch = opts.batch
    renderer: Renderer = BatchRenderer(opts.json_out) if batch else InteractiveRenderer()
    result: dict[str, Any] = {"session": session.name, "status": "error", "answer": None, "turns": 0}
    code = 0
    runner = None
    existed = session.root.exists()
    try:
        with session.writer():
            runner = open_runner(session, profile_spec=opts.profile, model_spec=opts.model, api_base=opts.api_base,
                                 path="batch" if batch else "interactive",
                                 workdir=opts.workdir.resolve() if opts.workdir else None, tools=opts.tools)
            grant(runner, opts.allow, opts.allow_all, interactive=not batch)  # --allow, --allow-all, the prompt
            if message is None and runner.needs_input():
                raise UsageError(f"session {session.name!r} has nothing left to do; give a new message")
            renderer.start(session, runner)
            while True:
                for event in runner.run(message, max_turns=opts.max_turns):
                    renderer.event(event)
                if not batch:
                    _show_answer(session, renderer.answer, opts.output)
                message = None if batch else renderer.ask()
                message = None if message is None else plain(message)  # typed: as a task
                if message is None:
                    break
            result.update(status="answered", answer=renderer.answer)
    except CtxagentError as err:
        code = err.exit_code
        result.update(status=err.status, error=_redacted(str(err)))
        renderer.error(CtxagentError(result["error"]))  # printed as redacted as it is recorded
    except KeyboardInterrupt as err:  # Ctrl-C, SIGTERM, SIGHUP (the terminal may be gone: no output then)
        code = err.exit_code if isinstance(err, Interrupted) else 130
        result.update(status="interrupted")
        _quietly(renderer.interrupted, session)
    if not existed:
        _discard_if_unstarted(session)
    if runner is not None:
        result.update(turns=runner.state.turn, usage=runner.usage)
    if code == 0 and batch and renderer.answer is not None:
        code = _deliver(session, renderer.answer, opts.output, result, opts.json_out)
    result.update({key: mend(result[key]) for key in ("answer", "error") if isinstance(result.get(key), str)})
    if code == 129:  # the terminal is gone: what cannot be shown is dropped, the exit code stays
        _quietly(renderer.finish, result)
    else:
        renderer.finish(result)
    raise typer.Exit(code)


def _quietly(show: Any, *args: Any) -> None:
    """Call ``show`` (it prints); when the terminal is gone (EIO), send stdout and stderr to
    /dev/null from then on, so that nothing left in a buffer fails the exit."""
    try:
        show(*args)
        sys.stdout.flush()
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.dup2(devnull, sys.stderr.fileno())


def _redacted(text: str) -> str:
    from ctxagent.sessions.redact import default  # error messages may quote a URL or a header

    return default().text(text)


HEADER_ONLY_MAX_BYTES = 1 << 20  # a transcript this size or more certainly holds more than its header


def _discard_if_unstarted(session: Session) -> None:
    """Remove the folder of a session this run created but never started (its setup failed: no
    transcript, or one with its header alone, e.g. a bad ``--allow``): the transcript, the lock
    file and the outputs folder, then the folder itself."""
    transcript = session.root / "transcript.jsonl"
    with contextlib.suppress(OSError):
        if transcript.stat().st_size >= HEADER_ONLY_MAX_BYTES or transcript.read_bytes().count(b"\n") > 1:
            return
    with contextlib.suppress(OSError):
        transcript.unlink(missing_ok=True)
        (session.root / ".lock").unlink(missing_ok=True)
        if (session.root / "outputs").is_dir():
            shutil.rmtree(session.root / "outputs")
        session.root.rmdir()


def _deliver(session: Session, answer: str, output: Path | None, result: dict[str, Any], json_out: bool) -> int:
    """Batch: the answer's handles resolved (what stdout shows, or ``handles`` with ``--json``).

    Returns the exit code: 0, or 1 when ``--output`` could not be written (``result`` says why)."""
    from ctxagent.cli.outputs_cmd import deliver

    try:
        shown = deliver(session.store, answer, output)
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
        result["answer"] = shown.text
    return 0


def _show_answer(session: Session, answer: str | None, output: Path | None) -> None:
    """Interactive: after the rendered answer, the values its handles name (or where they went)."""
    from ctxagent.cli.outputs_cmd import deliver

    if answer is None:
        return
    shown = deliver(session.store, answer, output)
    for note in shown.notes:
        print(f"ctxagent: {note}", file=sys.stderr)
    if shown.written is not None:
        print(f"wrote {shown.written:,} bytes to {output}")
    elif shown.handles and shown.text != answer:
        print(shown.text)


def run(
    task: Annotated[str | None, typer.Argument(help="The task; '-' reads it from stdin.")] = None,
    session: SessionOpt = None, model: ModelOpt = None, profile: ProfileOpt = None,
    api_base: ApiBaseOpt = None, max_turns: MaxTurnsOpt = None, batch: BatchOpt = False,
    json_out: JsonOpt = False, workdir: WorkdirOpt = None, tools: ToolsOpt = None, output: OutputOpt = None,
    allow: AllowOpt = None, allow_all: AllowAllOpt = False,
) -> None:
    """Start (or continue) a session with TASK and run the agent until it answers."""
    text = _read_task(task)
    is_batch = _is_batch(batch, json_out)
    if text is None and (is_batch or task is not None):
        raise UsageError("give a task: ctxagent run \"TASK\" (or '-' to read it from stdin)")
    if text is None:
        text = plain(typer.prompt("task"))
    _check_recordable(model=model, profile=profile, api_base=api_base, workdir=workdir, tools=" ".join(tools or ()))
    check_output(output)
    target = _session(session)
    execute(target, text, RunOptions(model, profile, api_base, max_turns, is_batch, json_out, workdir,
                                     tuple(tools or ()), output, allow, allow_all))


def resume(
    message: Annotated[str | None, typer.Argument(help="A new user message; '-' reads stdin.")] = None,
    session: SessionOpt = None, model: ModelOpt = None, profile: ProfileOpt = None,
    api_base: ApiBaseOpt = None, max_turns: MaxTurnsOpt = None, batch: BatchOpt = False,
    json_out: JsonOpt = False, workdir: WorkdirOpt = None, tools: ToolsOpt = None, output: OutputOpt = None,
    allow: AllowOpt = None, allow_all: AllowAllOpt = False,
) -> None:
    """Continue a session (the most recent one by default) where it stopped."""
    _check_recordable(model=model, profile=profile, api_base=api_base, workdir=workdir, tools=" ".join(tools or ()))
    check_output(output)
    target = (Session.at(session) if session is not None else latest_session()).require()  # --json: cli.main
    execute(target, _read_task(message), RunOptions(model, profile, api_base, max_turns, _is_batch(batch, json_out),
                                                    json_out, workdir, tuple(tools or ()), output, allow, allow_all))
