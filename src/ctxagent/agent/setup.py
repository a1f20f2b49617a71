"""Opening a session for a run: header, profile, model, toolset, runner.

Call :func:`open_runner` while holding the session's writer lock.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxagent.agent.activity import digest
from ctxagent.agent.budgets import session_limits as session_limits_of
from ctxagent.agent.config import RunConfig
from ctxagent.agent.model import Model, make_model
from ctxagent.agent.model_types import price_of
from ctxagent.agent.runner import Runner
from ctxagent.agent.state import SessionState, open_state
from ctxagent.agent.tool_calls import Delegates
from ctxagent.errors import ProfileError, UsageError
from ctxagent.profile import EXTENDS, Profile, bundled_names, load_profile, parse_profile, profile_files
from ctxagent.profile_schema import Limits
from ctxagent.sessions import records
from ctxagent.sessions.records import Settings
from ctxagent.sessions.session import Session
from ctxagent.tokens import count_tools
from ctxagent.tools.agent_tools import context_tools
from ctxagent.tools.base import Stop, ToolContext
from ctxagent.tools.guard import check_allowed
from ctxagent.tools.offload import OffloadPolicy
from ctxagent.tools.permissions import Grants
from ctxagent.tools.toolset import Toolset, make_toolset
from ctxagent.tools.user import absolute_spec, load_tools, spec_file

if TYPE_CHECKING:
    from ctxagent.lessons.hooks import Learner
    from ctxagent.mcp_tools.config import McpTools

SCRIPTED_WINDOW = 128_000  # tokens: the window a scripted model has when the profile sets none


def resolve_window(profile: Profile, model: str, api_base: str | None = None,
                   notes: list[str] | None = None) -> int:
    """The context window in tokens: the profile's, else litellm's model info, else what the model's
    server says (:mod:`ctxagent.agent.server_window`; then a line naming the request is appended to
    ``notes``). Raises ``UsageError`` when none of them knows it."""
    if profile.context_window:
        return profile.context_window
    if model.startswith("scripted:"):
        return SCRIPTED_WINDOW
    from ctxagent.agent.litellm_backend import did_you_mean, model_window

    if window := model_window(model):
        return window
    fix = "pass --context-window N (tokens) or set context_window in the profile"
    from ctxagent.agent.server_window import default_base, describe_missing, server_window

    base = api_base or default_base(model)
    if base:
        found, asked = server_window(base, model)
        if found is None:
            raise UsageError(f"{describe_missing(model, base, asked)}; {fix}")
        if notes is not None:
            notes.append(f"{found.tokens:,} tokens, as the server says ({found.source})")
        return found.tokens
    close = did_you_mean(model)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise UsageError(f"litellm does not know the context window of {model!r}{hint} (for a model it does not "
                     f"know, {fix}, or give the --api-base of the server that runs it)")


def session_profile(settings: Settings) -> Profile:
    """The profile the settings name; the copy the session kept (``profile_text``), with a warning, when
    the file is gone or changed on disk since. Raises ``ProfileError`` when neither can be read."""
    try:
        profile = load_profile(settings.profile)
    except ProfileError:
        if settings.profile_text is None:
            raise
        why = "cannot be read"
    else:
        if settings.profile_text is None or _profile_text(settings.profile, profile) == settings.profile_text:
            return profile
        why = (f"changed on disk since this session recorded it (give --profile {settings.profile} to run with it "
               "as it is now)")
    warnings.warn(f"profile {settings.profile} {why}; using the copy kept in the session header", stacklevel=2)
    return parse_profile(settings.profile_text, source=f"{settings.profile} (copy kept in the session)",
                         default_name=Path(settings.profile).stem)


def file_sha256(path: str | None) -> str | None:
    """The sha256 (hex) of the bytes of the file at ``path``; None for None or a file that cannot be read."""
    return (digest(Path(path)) or None) if path is not None else None


def _mcp_digest(current: Settings, given: str | None) -> str | None:
    """The sha256 of the MCP configuration a run uses: the given file's, else the recorded one's.
    Raises ``UsageError`` when the recorded file changed since (its servers are commands)."""
    if given is not None or current.mcp_config is None:
        return file_sha256(given)
    now = file_sha256(current.mcp_config)
    if now is not None and current.mcp_config_sha256 is not None and now != current.mcp_config_sha256:
        raise UsageError(f"the MCP configuration {current.mcp_config} changed on disk since this session recorded it "
                         f"(sha256 {current.mcp_config_sha256[:12]}... then, {now[:12]}... now); its servers are "
                         f"commands, so none starts: give --mcp-config {current.mcp_config} to use it as it is now")
    return current.mcp_config_sha256 or now


def absolute_model(spec: str) -> str:
    """``scripted:PATH`` with PATH made absolute (a resume may run from another directory)."""
    if spec.startswith("scripted:"):
        return "scripted:" + str(Path(spec.removeprefix("scripted:")).expanduser().resolve())
    return spec


def _profile_ref(spec: str) -> str:
    return spec if spec in bundled_names() else str(Path(spec).resolve())


def _profile_text(spec: str, profile: Profile) -> str | None:
    """The copy of a profile file the session keeps (resume survives the file's deletion): its YAML,
    or, for a file that ``extends`` another, the effective profile (its bases may go too)."""
    if spec in bundled_names():
        return None
    import yaml

    text = Path(spec).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    if not (isinstance(data, dict) and EXTENDS in data):
        return text
    return yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def wanted_settings(current: Settings | None, config: RunConfig,
                    notes: list[str] | None = None) -> tuple[Settings, Profile]:
    """The settings a run asks for, the session's (``current``; None: a new one) with what ``config``
    gives instead, and the profile they name. The context window (tokens) is resolved again only when
    the profile or model changes; ``notes``: see :func:`resolve_window`. Raises ``ProfileError`` /
    ``UsageError`` for a bad profile, a changed MCP configuration or a model whose window is unknown.
    """
    c = config
    spec = c.profile_spec or (None if current else "default")
    profile = load_profile(spec or "default") if spec or current is None else session_profile(current)
    base = current or Settings(model=absolute_model(profile.model), profile="", context_window=0)
    ref = _profile_ref(spec) if spec else base.profile
    model = absolute_model(c.model_spec) if c.model_spec else base.model
    window = c.context_window or base.context_window
    if not c.context_window and (ref != base.profile or model != base.model
                                 or (profile.context_window or window) != window):
        window = resolve_window(profile, model, c.api_base or base.api_base or profile.api_base, notes)
    return base.model_copy(update={
        "model": model, "profile": ref, "context_window": window, "path": c.path,
        "api_base": c.api_base or base.api_base, "workdir": str(c.workdir or base.workdir or Path.cwd()),
        "tools": tuple(absolute_spec(t) for t in c.tools) if c.tools else base.tools,
        "profile_text": _profile_text(spec, profile) if spec else base.profile_text,
        "limits": {**base.limits, **c.session_limits}, "mcp_config": c.mcp_config or base.mcp_config,
        "mcp_config_sha256": _mcp_digest(base, c.mcp_config),
        "max_output_tokens": c.max_output_tokens or base.max_output_tokens}), profile


def open_runner(session: Session, config: RunConfig) -> Runner:
    """A runner for ``session`` as ``config`` asks: its records folded into a state (ONE STATE), then
    the header or a ``settings`` record of what this run changes appended; MCP servers start now.

    Raises ``ProfileError``/``UsageError`` for a bad profile, model, script, working directory,
    tool or limit; nothing is written then.
    """
    state = open_state(session.transcript, repair=True)
    window_notes: list[str] = []
    settings, profile = wanted_settings(state.settings, config, window_notes)
    if not Path(str(settings.workdir)).is_dir():
        raise UsageError(f"the working directory {settings.workdir} does not exist (or is not a directory)"
                         + ("; give another with --workdir" if config.workdir is None else ""))
    reply_tokens = profile.reply_tokens(settings.context_window, settings.max_output_tokens)
    model = make_model(settings.model, api_base=settings.api_base or profile.api_base, replies_done=state.replies,
                       timeout_s=config.timeout_s or profile.timeout_s, retries=profile.retries,
                       max_output_tokens=reply_tokens, prompt_cache=profile.prompt_cache,
                       max_retry_wait_s=profile.max_retry_wait_s, send_tool_choice=profile.send_tool_choice,
                       temperature=profile.temperature)
    mcp = mcp_for(session, profile, settings, state.mcp_tools, connect=True)
    toolset = toolset_for(session, profile, settings, mcp, stop=config.stop)
    if config.grants is not None and config.grants.rules is None:  # a sub-agent's: checked with its parent
        check_allowed(config.grants, toolset)
    check_limits(model, reply_tokens, config.limits(profile), session_limits_of(profile.limits.session,
                                                                                settings.limits))
    window_before = state.settings.context_window if state.settings is not None else None
    _record_settings(session, state, settings, mcp.listed)  # only once all is checked: no half-made sessions
    notices = [*(("mcp", warning) for warning in mcp.warnings), *(("context window", n) for n in window_notes)]
    if settings.context_window != window_before and (share := schema_share(
            count_tools(toolset.specs(state.loaded_tools), settings.model), settings.context_window)):
        notices.append(("tool schemas", share))
    return Runner(session, state, profile, model, toolset, config, protected=configured_from(settings, profile),
                  summarizer_model=summarizer_factory(profile, settings, state.summaries), notices=notices,
                  delegates=_delegates(settings, profile) if "delegate" in toolset.tools else None,
                  learner=_learner(session, profile, settings) if config.lessons else None)


def _record_settings(session: Session, state: SessionState, settings: Settings,
                     listed: Mapping[str, list[dict[str, Any]]]) -> None:
    """Append and apply the header of a new session, or a ``settings`` record of what changed,
    then the tool lists of MCP servers ``listed`` for the first time."""
    items: list[Any] = []
    if state.settings is None:
        items.append(records.SessionHeader(name=session.name, **settings.model_dump()))
    elif changes := state.settings.differences(settings):
        items.append(records.SettingsRecord(**changes))
    items += [records.ToolsRecord(server=server, tools=tools) for server, tools in listed.items()]
    if items:
        session.transcript.append(items)
        for item in items:
            state.apply(item)


def _delegates(parent: Settings, profile: Profile) -> Callable[[Runner], Delegates]:
    """Makes the runner of a session's ``delegate`` calls (agent/delegate.py, imported only then). A
    sub-agent opens with the ``parent`` settings but the profile and model ``delegate`` names, its carved
    budget recorded as its session limits."""
    from ctxagent.agent.delegate import Delegator

    def open_child(session: Session, profile_spec: str | None, limits: dict[str, float], grants: Grants,
                   stop: Stop) -> Runner:
        return open_runner(session, RunConfig(
            profile_spec=profile_spec or parent.profile, model_spec=profile.delegate.model or parent.model,
            api_base=parent.api_base, path=parent.path, workdir=Path(parent.workdir) if parent.workdir else None,
            tools=parent.tools, session_limits=limits, mcp_config=parent.mcp_config, grants=grants, stop=stop))

    return partial(Delegator, opener=open_child, config=profile.delegate)


def _learner(session: Session, profile: Profile, settings: Settings) -> Learner | None:
    """The session's lessons when its profile has them on; sub-agents neither see nor teach (None)."""
    if not profile.lessons.enabled or "/" in session.name:
        return None
    from ctxagent.lessons.hooks import Learner

    assert settings.workdir is not None
    return Learner(session.name, profile.lessons, Path(settings.workdir), settings.model,
                   sessions_store=session.store_url)


def configured_from(settings: Settings, profile: Profile) -> list[Path]:
    """The files the session is configured from, which no tool may write (tools/permissions.py):
    its profile's files (the ``extends`` chain too; a bundled profile's YAML in the package), its
    sub-agents' ``delegate.profile``'s, the MCP configuration, the ``--tools`` files and the scripts
    of scripted models (the session's and ``delegate.model``)."""
    files = [*profile_files(settings.profile)]
    if profile.delegate.profile:
        files += profile_files(profile.delegate.profile)
    if settings.mcp_config:
        files.append(Path(settings.mcp_config))
    files += [found for found in map(spec_file, settings.tools) if found is not None]
    for model in (settings.model, profile.delegate.model or ""):
        if model.startswith("scripted:"):
            files.append(Path(model.removeprefix("scripted:")).expanduser())
    return files


SCHEMA_SHARE_NOTE = 0.2  # tool schemas over this share of the window are said at the start of a run


def schema_share(tool_tokens: int, window: int) -> str | None:
    """The note a run starts with when the tool schemas (``tool_tokens``) take more than
    :data:`SCHEMA_SHARE_NOTE` of the ``window`` (both tokens): they are sent with every request."""
    if tool_tokens <= window * SCHEMA_SHARE_NOTE:
        return None
    return (f"the tool schemas take {tool_tokens:,} tokens, {tool_tokens / window:.0%} of the {window:,}-token "
            "window, in every request; the profile's tools list names them (fewer tools leave more room)")


def check_limits(model: Model, reply_tokens: int, *limits: Limits) -> None:
    """``UsageError`` (before anything is written) for limits no request could keep: a cost limit on
    a model without a price (``--session-limit max_cost_usd=none`` removes a recorded one), or an
    output limit smaller than one reply's reserve (``reply_tokens``: ``max_output_tokens``)."""
    for lim in limits:
        if lim.max_output_tokens_total is not None and lim.max_output_tokens_total < reply_tokens:
            raise UsageError(f"max_output_tokens_total {lim.max_output_tokens_total} is smaller than one reply's "
                             f"reserve (max_output_tokens {reply_tokens}): no request could be sent; "
                             "raise it, or lower max_output_tokens (the profile's, or --max-output-tokens N)")
    if any(lim.max_cost_usd is not None for lim in limits) and price_of(model, 1000, 100) is None:
        raise UsageError(f"a cost limit (max_cost_usd) is set, but litellm has no price for {model.name}, so the "
                         "cost cannot be counted; remove the limit (a session's: --session-limit max_cost_usd=none) "
                         "or use a model with a known price")


def toolset_for(session: Session, profile: Profile, settings: Settings, mcp: McpTools | None = None, *,
                stop: Stop | None = None) -> Toolset:
    """The session's tools: the profile's, the user's, the context tools its pipelines need and the
    ``mcp`` tools (deferred behind ``find_tools`` over ``mcp.schema_budget`` of the window), stopped by
    ``stop`` (None: a new event). ``delegate`` is left out at ``delegate.max_depth``, else checked now."""
    names = list(profile.tools)
    if "delegate" in names and session.name.count("/") >= profile.delegate.max_depth:
        names.remove("delegate")
    elif "delegate" in names:
        _check_delegate(profile)
    steps = {step.strategy for path in profile.pipelines.values() for step in path}
    extra = [*load_tools(list(settings.tools)), *context_tools(sorted(steps))]
    tools = mcp.tools if mcp is not None else []
    policy = offload_policy(profile, settings.model, window=settings.context_window)
    workdir = Path(settings.workdir) if settings.workdir else Path.cwd()
    recall = profile.recall
    ctx = ToolContext(session.store, workdir, transcript=session.transcript.path,
                      recall_model=recall.embedding_model, recall_api_base=recall.api_base,
                      recall_top_k=recall.top_k, pass_env=tuple(profile.tool_environment.pass_through),
                      stop=stop or Stop())
    budget = profile.mcp.schema_budget * settings.context_window
    deferred = [t.name for t in tools] if tools and count_tools([t.spec() for t in tools], settings.model) > budget \
        else []
    return make_toolset(names, ctx, policy, [*extra, *tools], deferred, mcp.servers if mcp is not None else ())


def mcp_for(session: Session, profile: Profile, settings: Settings, recorded: Mapping[str, list[dict[str, Any]]],
            *, connect: bool) -> McpTools:
    """The MCP tools of a run: the profile's and ``--mcp-config``'s servers, plus recorded tools of
    servers no longer configured. ``connect``: start the servers (a run) or not (``inspect``).
    Raises ``UsageError`` for a config file that cannot be read or is invalid (a run only)."""
    from ctxagent.mcp_tools.config import McpTools, servers_of
    from ctxagent.tools.environment import passed_through

    gone = settings.mcp_config is not None and not Path(settings.mcp_config).is_file()
    try:
        servers = servers_of(profile.mcp_servers, None if gone else settings.mcp_config)
    except UsageError:
        if connect:
            raise
        servers = {}
    if not servers and not recorded:
        return McpTools()
    from ctxagent.mcp_tools.mirror import mcp_tools  # the client (asyncio, the MCP SDK): only with servers

    passed = passed_through(pass_through=profile.tool_environment.pass_through)
    if passed:  # a server's own env entries win
        servers = {name: config.model_copy(update={"env": {**passed, **config.env}})
                   for name, config in servers.items()}
    workdir = Path(settings.workdir) if settings.workdir else Path.cwd()
    found = mcp_tools(servers, recorded, log_dir=session.transcript.path.parent / "mcp", workdir=workdir,
                      connect=connect)
    if gone:
        found.warnings.insert(0, f"the MCP configuration {settings.mcp_config} this session recorded is gone: its "
                                 "servers' tools answer with errors (give --mcp-config FILE to replace it)")
    return found


def _check_delegate(profile: Profile) -> None:
    """``ProfileError``/``UsageError`` for a ``delegate.profile`` that does not load or a scripted
    ``delegate.model`` whose script is missing."""
    if profile.delegate.profile:
        load_profile(profile.delegate.profile)
    model = profile.delegate.model or ""
    if model.startswith("scripted:") and not Path(model.removeprefix("scripted:")).expanduser().is_file():
        raise UsageError(f"delegate.model {model}: the script does not exist")


PREVIEW_MIN_CHARS = 200  # the smallest preview.max_chars a profile may set


def offload_policy(profile: Profile, model_name: str, *, window: int | None = None) -> OffloadPolicy:
    """The profile's offload settings: the tool-result limit (tokens), the smaller of
    ``tool_result_limit`` and ``tool_result_fraction`` of ``window`` (tokens; None: the profile's), and
    the preview, at most a quarter of the window's tokens in characters (with 4,000, a 2 MB log's preview
    was a quarter of a 4K window and a 1.5B model answered from its lines: docs/local-models.md).
    """
    window = window or profile.context_window
    limit, max_chars = profile.tool_result_limit, profile.preview.max_chars
    if window:
        limit = min(limit, int(window * profile.tool_result_fraction))
        max_chars = min(max_chars, max(PREVIEW_MIN_CHARS, window // 4))
    return OffloadPolicy(limit_tokens=limit, head_lines=profile.preview.head_lines,
                         tail_lines=profile.preview.tail_lines, max_chars=max_chars, model=model_name)


def summarizer_factory(profile: Profile, settings: Settings, done: int) -> Callable[[], Model] | None:
    """Makes (once, on first use) the model LLM strategies call: ``profile.summarizer.model`` or
    the agent's. A scripted summarizer resumes after the ``done`` summaries the session holds.
    A scripted agent has no summarizer unless the profile names one (its script is its own)."""
    cfg = profile.summarizer
    if cfg.model is None and settings.model.startswith("scripted:"):
        return None

    @cache
    def make() -> Model:
        return make_model(cfg.model or settings.model, api_base=cfg.api_base or settings.api_base or profile.api_base,
                          replies_done=done, timeout_s=profile.timeout_s, retries=profile.retries,
                          max_output_tokens=cfg.max_tokens, prompt_cache=profile.prompt_cache,
                          max_retry_wait_s=profile.max_retry_wait_s)

    return make
