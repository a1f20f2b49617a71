"""Opening a session for a run: header, profile, model, toolset, runner.

Call :func:`open_runner` while holding the session's writer lock.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxagent.agent.context import ContextState
from ctxagent.agent.model import Model, make_model
from ctxagent.agent.runner import INTERRUPTED, Runner, make_budget, scan
from ctxagent.errors import ProfileError, UsageError
from ctxagent.profile import Path_, Profile, bundled_names, load_profile, parse_profile
from ctxagent.sessions import records
from ctxagent.sessions.session import Session
from ctxagent.strategies.base import Budget, Compaction, Entry
from ctxagent.tokens import count_tools
from ctxagent.tools.agent_tools import context_tools
from ctxagent.tools.base import ToolContext
from ctxagent.tools.offload import OffloadPolicy
from ctxagent.tools.toolset import Toolset, make_toolset
from ctxagent.tools.user import absolute_spec, load_tools

SCRIPTED_WINDOW = 128_000  # tokens: the window a scripted model has when the profile sets none


def resolve_window(profile: Profile, model: str) -> int:
    """The context window in tokens: the profile's, else litellm's model info.

    Raises ``UsageError`` when neither knows it (an unmapped model with no ``context_window``).
    """
    if profile.context_window:
        return profile.context_window
    if model.startswith("scripted:"):
        return SCRIPTED_WINDOW
    from ctxagent.agent.litellm_backend import model_window

    window = model_window(model)
    if not window:
        raise UsageError(
            f"litellm does not know the context window of {model!r}; "
            "set context_window (tokens) in the profile"
        )
    return window


def session_profile(spec: str, header: records.SessionHeader | None) -> Profile:
    """The profile ``spec`` names; for a resumed session whose profile file is gone, the copy its
    header kept (with a warning). Raises ``ProfileError`` when neither can be read."""
    try:
        return load_profile(spec)
    except ProfileError:
        text = (header.model_extra or {}).get("profile_text") if header is not None else None
        if not isinstance(text, str):
            raise
    warnings.warn(f"profile {spec} cannot be read; using the copy kept in the session header", stacklevel=2)
    return parse_profile(text, source=f"{spec} (copy kept in the session)", default_name=Path(spec).stem)


def absolute_model(spec: str) -> str:
    """``scripted:PATH`` with PATH made absolute (a resume may run from another directory)."""
    if spec.startswith("scripted:"):
        return "scripted:" + str(Path(spec.removeprefix("scripted:")).expanduser().resolve())
    return spec


def _profile_ref(spec: str) -> str:
    return spec if spec in bundled_names() else str(Path(spec).resolve())


def open_runner(session: Session, *, profile_spec: str | None, model_spec: str | None,
                api_base: str | None, path: Path_, workdir: Path,
                tools: Sequence[str] = ()) -> Runner:
    """A runner for ``session``, creating its header when the session is new.

    A resumed session keeps its profile, model, context window and user tools (``tools``: the
    ``--tools`` specs, kept in the header) unless new ones are given. Raises
    ``ProfileError``/``UsageError`` for a bad profile, model, script or tool.
    """
    if not workdir.is_dir():
        raise UsageError(f"the working directory {workdir} does not exist (or is not a directory)")
    items = session.transcript.load(repair=True)
    header = next((r for r in items if isinstance(r, records.SessionHeader)), None)
    spec = profile_spec or (header.profile if header else "default")
    profile = session_profile(spec, None if profile_spec else header)
    model_name = absolute_model(model_spec or (header.model if header else profile.model))
    new = header is None
    if header is None:  # written only once everything below has been checked: no half-made sessions
        header = records.SessionHeader(name=session.name, model=model_name, profile=_profile_ref(spec),
                                       context_window=resolve_window(profile, model_name), path=path,
                                       **({"tools": [absolute_spec(t) for t in tools]} if tools else {}),
                                       **({"profile_text": Path(spec).read_text(encoding="utf-8")}
                                          if spec not in bundled_names() else {}))
        items = [header]
    replies = sum(1 for r in items if isinstance(r, records.MessageRecord)
                  and r.message.get("role") == "assistant")
    model = make_model(model_name, api_base=api_base or profile.api_base, replies_done=replies,
                       timeout_s=profile.timeout_s, retries=profile.retries,
                       max_output_tokens=profile.max_output_tokens)
    toolset = toolset_for(session, profile, header, workdir, tools)
    summarizer = summarizer_factory(profile, model_name, api_base, items)
    if new:
        session.transcript.append([header])
    return Runner(session, profile, model, toolset, items, header, path, summarizer)


def user_tools(header: records.SessionHeader, specs: Sequence[str] = ()) -> list[Any]:
    """The tools of ``--tools`` ``specs``, else of the specs the session header keeps."""
    return load_tools(list(specs) or list((header.model_extra or {}).get("tools") or []))


def toolset_for(session: Session, profile: Profile, header: records.SessionHeader, workdir: Path,
                tools: Sequence[str] = ()) -> Toolset:
    """The session's tools: the profile's, the user's (``--tools`` now or in the header), and the
    context tools its pipelines need (``checkpoint``)."""
    steps = {step.strategy for path in profile.pipelines.values() for step in path}
    extra = [*user_tools(header, tools), *context_tools(sorted(steps))]
    policy = offload_policy(profile, header.model)
    return make_toolset(profile.tools, ToolContext(session.store, workdir), policy, extra)


def offload_policy(profile: Profile, model_name: str) -> OffloadPolicy:
    """The profile's offload settings (tool-result limit in tokens, preview lines and characters)."""
    return OffloadPolicy(limit_tokens=profile.tool_result_limit, head_lines=profile.preview.head_lines,
                         tail_lines=profile.preview.tail_lines, max_chars=profile.preview.max_chars,
                         model=model_name)


@dataclass(frozen=True)
class NextRequest:
    """What the next request of a session would hold, computed without writing or calling anything."""

    view: list[Entry]
    budget: Budget
    compactions: list[Compaction]
    recorded: list[records.CompactionRecord]
    path: Path_
    profile: Profile


def next_request(session: Session, path: Path_ | None = None) -> NextRequest:
    """The exact view the next request would send (read-only; no model call, no litellm import).

    LLM strategies run without a summarizer here, so they show their deterministic fallback.
    Raises ``UsageError``/``ProfileError`` for a session without header or a bad profile.
    """
    items = session.transcript.load()
    header = next((r for r in items if isinstance(r, records.SessionHeader)), None)
    if header is None:
        raise UsageError(f"session {session.name!r} has no header record")
    profile = session_profile(header.profile, header)
    path = path or header.path
    toolset = toolset_for(session, profile, header, Path.cwd())
    state = scan(items, header)
    context = ContextState.from_records(items, transcript_path=str(session.transcript.path), model=header.model)
    for call_id in state.open_calls:
        context.view.append(Entry({"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED}, 0,
                                  state.next_seq, state.next_seq, state.turn, kind="interrupted"))
    budget = make_budget(profile, header.context_window, count_tools(toolset.specs(), header.model), state.scale)
    pins = list(dict.fromkeys([*profile.pins, *state.pins]))
    built = context.build(profile.pipeline(path), budget, turn=state.turn + 1, pins=pins)
    recorded = [r for r in items if isinstance(r, records.CompactionRecord)]
    return NextRequest(built.view, budget, built.compactions, recorded, path, profile)


def summarizer_factory(profile: Profile, model_name: str, api_base: str | None,
                       items: list[Any]) -> Callable[[], Model] | None:
    """Makes (once, on first use) the model LLM strategies call: ``profile.summarizer.model`` or
    the agent's. A scripted summarizer resumes after the summaries the session already holds.
    A scripted agent has no summarizer unless the profile names one (its script is its own)."""
    cfg = profile.summarizer
    if cfg.model is None and model_name.startswith("scripted:"):
        return None
    name = cfg.model or model_name
    done = sum(1 for r in items if isinstance(r, records.UsageRecord) and r.model.startswith("summarizer:"))
    made: list[Model] = []

    def make() -> Model:
        if not made:
            made.append(make_model(name, api_base=cfg.api_base or api_base or profile.api_base,
                                   replies_done=done, timeout_s=profile.timeout_s,
                                   retries=profile.retries, max_output_tokens=cfg.max_tokens))
        return made[0]

    return make
