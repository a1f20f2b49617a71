"""The toolset: the tools of a run, called with the model's raw arguments, outputs settled.

:meth:`Toolset.call` never raises for what the model or a tool did wrong: each becomes an error outcome
starting ``ERROR: ``. Handle arguments are resolved first (:mod:`ctxagent.tools.values`); every value
goes through :func:`ctxagent.tools.offload.settle`, whatever tool produced it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxagent.errors import UsageError
from ctxagent.messages import ToolCall
from ctxagent.sessions.records import OutputRecord, PermissionRecord
from ctxagent.tools import clean, deferral, permissions, user, values
from ctxagent.tools.arguments import parse_arguments, validate_arguments, without_nulls
from ctxagent.tools.base import ERROR_PREFIX, Spooled, Tool, ToolContext, ToolError
from ctxagent.tools.catalog import BUILTIN, registry
from ctxagent.tools.offload import RETURNS, OffloadPolicy, settle

ERROR_MAX_CHARS = 2000  # of an error message kept in the tool message

# Arguments the permission gate inspects before a call (file tools' paths, the shell command) are
# taken literally: a handle there would let a stored value slip past the policy that checked "@x".
LITERAL_ARGUMENTS: dict[str, tuple[str, ...]] = {
    **permissions.FILE_ARGS, permissions.SHELL_TOOL: (permissions.SHELL_ARG,),
}


@dataclass(frozen=True)
class ToolOutcome:
    """The result of one tool call: the tool message content, whether it reports an error, the
    record of the offloaded output (None when the content holds the whole output), the
    deferred tools a ``find_tools`` call loaded (the runner records them), and the permission
    records of the user's answers made during the call (:mod:`ctxagent.tools.guard`; written first)."""

    content: str
    is_error: bool
    output: OutputRecord | None = None
    loaded: tuple[str, ...] = ()
    decisions: tuple[PermissionRecord, ...] = ()


class Toolset:
    """The tools one run offers the model, with the context they run in and the offload policy.

    ``deferred``: names of tools whose schemas are left out of requests until a ``find_tools``
    call loads them (:mod:`ctxagent.tools.deferral`); the toolset then offers ``find_tools``
    and answers its calls. ``servers``: the MCP servers of the run, started or not. Raises
    ``ValueError`` when two tools share a name.
    """

    def __init__(self, tools: Sequence[Tool], ctx: ToolContext, policy: OffloadPolicy,
                 deferred: Sequence[str] = (), servers: Sequence[str] = ()):
        self.deferred = [name for name in deferred if any(tool.name == name for tool in tools)]
        finder = [deferral.find_tools_tool([t for t in tools if t.name in self.deferred])] if self.deferred else []
        self.tools = registry([*tools, *finder])
        self.ctx = ctx
        self.policy = policy
        self.servers = list(servers)

    def specs(self, loaded: Sequence[str] = ()) -> list[dict[str, Any]]:
        """The OpenAI-format schemas sent with each request: every tool not deferred, in order,
        then the deferred ones ``loaded`` by ``find_tools`` calls, in the order they were loaded."""
        deferred = set(self.deferred)
        shown = [tool.spec() for tool in self.tools.values() if tool.name not in deferred]
        return shown + [self.tools[name].spec() for name in loaded if name in deferred]

    def groups(self) -> list[str]:
        """The MCP servers the tools come from (names ``--allow`` accepts besides tools and kinds)."""
        return list(dict.fromkeys(tool.group for tool in self.tools.values() if tool.group))

    def call(self, call: ToolCall, handle: str | None = None, *, ctx: ToolContext | None = None,
             arguments: dict[str, Any] | ToolError | None = None) -> ToolOutcome:
        """Run ``call`` and settle its value; every failure is an error outcome, never raised.

        ``handle``: the name a stored value gets (the runner chooses it once, from the session
        state; :mod:`ctxagent.handles`); None picks one free in the store. ``ctx``: the context of
        this call alone (the permission guard's, with the paths it checked); None: :attr:`ctx`.
        ``arguments``: the call's arguments already parsed (by the guard,
        :func:`~ctxagent.tools.arguments.parse_arguments`), or why they could not be; None: parsed here."""
        tool = self.tools.get(call.name)
        if tool is None:
            return _error(f"unknown tool {call.name!r}; the tools are: {', '.join(self.tools)}")
        try:
            if isinstance(arguments, ToolError):
                raise arguments
            arguments = self._arguments(tool, parse_arguments(tool.name, call.arguments) if arguments is None
                                        else arguments)
            if tool.name == deferral.FIND_TOOLS and self.deferred:
                return self._find(arguments["query"])
            value = tool.fn(ctx or self.ctx, **arguments)
        except ToolError as err:
            return _error(str(err))
        except Exception as err:
            return _error(f"tool {tool.name} failed: {type(err).__name__}: {err}")
        return self._settle(tool, call, value, handle)

    def _arguments(self, tool: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments with handles resolved to values (unless the tool takes handles; those
        of :data:`LITERAL_ARGUMENTS` take none), validated once. Raises ``ToolError``."""
        arguments = without_nulls(arguments, tool.parameters)
        if not tool.resolve_handles:
            return validate_arguments(tool, arguments, {})
        handles = {name: value for name, value in arguments.items()
                   if isinstance(value, str) and values.looks_like_handle(value)}
        for name in LITERAL_ARGUMENTS.get(tool.name, ()):
            if name in handles:
                raise ToolError(f"argument {name!r} of {tool.name} is checked by the permission policy before the "
                                f"call, so it takes no handle ({handles[name]}); give the value itself (write "
                                f"@{handles[name]} for text that starts with @)")
        return validate_arguments(tool, values.resolve_arguments(arguments, self.ctx.store), handles)

    def _find(self, query: str) -> ToolOutcome:
        """A ``find_tools`` call: the selected deferred tools' schemas, and their names to record."""
        selected = deferral.select([self.tools[name] for name in self.deferred], query)
        return ToolOutcome(deferral.loaded_text(selected), False, loaded=tuple(tool.name for tool in selected))

    def _settle(self, tool: Tool, call: ToolCall, value: Any, handle: str | None = None) -> ToolOutcome:
        """The outcome of a successful call: its value inline, offloaded or stored under a handle."""
        if not (isinstance(value, str | bytes | Spooled) or values.is_structured(value) or values.is_scalar(value)):
            return _error(f"tool {tool.name} failed: it returned {type(value).__name__}; {RETURNS}")
        try:
            content, record = settle(value, call=call, tool_name=tool.name, store=self.ctx.store,
                                     policy=self.policy, handle=handle)
        except Exception as err:
            if isinstance(value, Spooled):
                value.path.unlink(missing_ok=True)
            return _error(f"tool {tool.name} ran, but its output could not be stored: "
                          f"{type(err).__name__}: {err}")
        return ToolOutcome(content, False, record)


def make_toolset(names: Sequence[str], ctx: ToolContext, policy: OffloadPolicy,
                 extra: Sequence[Tool] = (), deferred: Sequence[str] = (), servers: Sequence[str] = ()) -> Toolset:
    """A toolset of the tools ``names`` (built-in, else installed under the ``ctxagent.tools``
    entry point group), in that order, then the ``extra`` tools (user tools from ``--tools``, MCP
    tools), ``deferred`` ones behind ``find_tools``, from MCP ``servers`` (see :class:`Toolset`).

    An extra tool that is the very same object as a named one is not added twice. Raises
    ``UsageError`` for an unknown or repeated name, or an entry point that cannot be loaded.
    """
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise UsageError(f"tool(s) named more than once: {', '.join(repeated)}")
    installed = user.installed_names() if any(name not in BUILTIN for name in names) else []
    unknown = [name for name in names if name not in BUILTIN and name not in installed]
    if unknown:
        plugins = f"; installed ({user.ENTRY_POINT_GROUP} entry points): {', '.join(installed)}" if installed else ""
        raise UsageError(f"unknown tool(s) {', '.join(map(repr, unknown))}; "
                         f"built-in tools: {', '.join(BUILTIN)}{plugins}")
    tools = [BUILTIN[name] if name in BUILTIN else user.installed_tool(name) for name in names]
    tools += [tool for tool in extra if not any(tool is known for known in tools)]
    names_seen = [tool.name for tool in tools]
    clash = sorted({name for name in names_seen if names_seen.count(name) > 1})
    if clash:
        raise UsageError(f"two tools are named {', '.join(map(repr, clash))}; give each tool one name")
    return Toolset(tools, ctx, policy, deferred, servers)


def _error(message: str) -> ToolOutcome:
    message = clean.mend(message)  # an error quoting a lone surrogate must still be sendable and writable
    if len(message) > ERROR_MAX_CHARS:
        from ctxagent.sessions.redact import clip  # redact, then cut

        message = clip(message, ERROR_MAX_CHARS) + f" [... {len(message) - ERROR_MAX_CHARS:,} characters cut]"
    return ToolOutcome(ERROR_PREFIX + message, True, None)
