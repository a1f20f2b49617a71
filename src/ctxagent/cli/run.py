"""``ctxagent run`` and ``ctxagent resume``: parse, open the session, render the runner's events."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

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


def _read_task(task: str | None) -> str | None:
    if task == "-":
        text = sys.stdin.read()
        if not text.strip():
            raise UsageError("the task read from stdin is empty")
        return text
    return task


def _is_batch(batch: bool, json_out: bool) -> bool:
    return batch or json_out or not sys.stdin.isatty()


def execute(session: Session, message: str | None, *, model: str | None, profile: str | None,
            api_base: str | None, max_turns: int | None, batch: bool, json_out: bool,
            workdir: Path | None, resuming: bool) -> None:
    """Open ``session``, run it (and, interactively, keep prompting), exit with the right code."""
    from ctxagent.agent.setup import open_runner

    path = "batch" if batch else "interactive"
    renderer: Renderer = BatchRenderer(json_out) if batch else InteractiveRenderer()
    result: dict[str, Any] = {"session": session.name, "status": "error", "answer": None, "turns": 0}
    code = 0
    try:
        with session.writer():
            runner = open_runner(session, profile_spec=profile, model_spec=model, api_base=api_base,
                                 path=path, workdir=(workdir or Path.cwd()).resolve())
            if message is None and runner.needs_input():
                raise UsageError(f"session {session.name!r} has nothing left to do; give a new message")
            renderer.start(session, runner)
            while True:
                for event in runner.run(message, max_turns=max_turns):
                    renderer.event(event)
                message = None if batch else renderer.ask()
                if message is None:
                    break
            result.update(status="answered", answer=renderer.answer, turns=runner.state.turn,
                          usage=runner.usage)
    except CtxagentError as err:
        code = err.exit_code
        result.update(status=getattr(err, "bound", None) or type(err).__name__, error=str(err))
        renderer.error(err)
    except KeyboardInterrupt:
        code = 130
        result.update(status="interrupted")
        renderer.interrupted(session)
    renderer.finish(result)
    raise typer.Exit(code)


def run(
    task: Annotated[str | None, typer.Argument(help="The task; '-' reads it from stdin.")] = None,
    session: SessionOpt = None, model: ModelOpt = None, profile: ProfileOpt = None,
    api_base: ApiBaseOpt = None, max_turns: MaxTurnsOpt = None, batch: BatchOpt = False,
    json_out: JsonOpt = False, workdir: WorkdirOpt = None,
) -> None:
    """Start (or continue) a session with TASK and run the agent until it answers."""
    text = _read_task(task)
    is_batch = _is_batch(batch, json_out)
    if text is None and (is_batch or task is not None):
        raise UsageError("give a task: ctxagent run \"TASK\" (or '-' to read it from stdin)")
    if text is None:
        text = typer.prompt("task")
    target = Session.at(session) if session else Session.at(new_name())
    execute(target, text, model=model, profile=profile, api_base=api_base, max_turns=max_turns,
            batch=is_batch, json_out=json_out, workdir=workdir, resuming=False)


def resume(
    message: Annotated[str | None, typer.Argument(help="A new user message; '-' reads stdin.")] = None,
    session: SessionOpt = None, model: ModelOpt = None, profile: ProfileOpt = None,
    api_base: ApiBaseOpt = None, max_turns: MaxTurnsOpt = None, batch: BatchOpt = False,
    json_out: JsonOpt = False, workdir: WorkdirOpt = None,
) -> None:
    """Continue a session (the most recent one by default) where it stopped."""
    target = (Session.at(session) if session else latest_session()).require()
    execute(target, _read_task(message), model=model, profile=profile, api_base=api_base,
            max_turns=max_turns, batch=_is_batch(batch, json_out), json_out=json_out, workdir=workdir,
            resuming=True)


def dump_json(obj: Any) -> str:
    """Compact JSON for machine-readable output (UTF-8, no ASCII escaping)."""
    return json.dumps(obj, ensure_ascii=False)
