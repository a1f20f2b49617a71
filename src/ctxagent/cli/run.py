"""``ctxagent run`` and ``ctxagent resume``: parse, open the session, render the runner's events."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxagent.cli.permissions import AllowAllOpt, AllowOpt, grant
from ctxagent.cli.render import BatchRenderer, InteractiveRenderer, Renderer
from ctxagent.errors import CtxagentError, UsageError
from ctxagent.sessions.session import Session, latest_session, new_name

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


def _read_task(task: str | None) -> str | None:
    """The task or message: the argument, or stdin for ``-``. ``UsageError`` when it is blank."""
    text = sys.stdin.read() if task == "-" else task
    if text is not None and not text.strip():
        raise UsageError("the task is empty" + (" (read from stdin)" if task == "-" else ""))
    return text


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
                if message is None:
                    break
            result.update(status="answered", answer=renderer.answer)
    except CtxagentError as err:
        code = err.exit_code
        result.update(status=err.status, error=str(err))
        renderer.error(err)
    except KeyboardInterrupt:
        code = 130
        result.update(status="interrupted")
        renderer.interrupted(session)
    if runner is not None:
        result.update(turns=runner.state.turn, usage=runner.usage)
    if code == 0 and batch and renderer.answer is not None:
        _deliver(session, renderer.answer, opts.output, result, opts.json_out)
    renderer.finish(result)
    raise typer.Exit(code)


def _deliver(session: Session, answer: str, output: Path | None, result: dict[str, Any], json_out: bool) -> None:
    """Batch: the answer's handles resolved (what stdout shows, or ``handles`` with ``--json``)."""
    from ctxagent.cli.outputs_cmd import deliver

    shown = deliver(session.store, answer, output)
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
        text = typer.prompt("task")
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
    try:
        target = (Session.at(session) if session is not None else latest_session()).require()
    except CtxagentError as err:  # --json prints its object for these too
        if json_out:
            renderer = BatchRenderer(True)
            renderer.error(err)
            renderer.finish({"session": session, "status": err.status, "answer": None, "turns": 0, "error": str(err)})
            raise typer.Exit(err.exit_code) from None
        raise
    execute(target, _read_task(message), RunOptions(model, profile, api_base, max_turns, _is_batch(batch, json_out),
                                                    json_out, workdir, tuple(tools or ()), output, allow, allow_all))
