"""Permissions as a wrapper around the toolset: every call passes the gate before a tool runs.

:func:`guard` wraps a :class:`~ctxagent.tools.toolset.Toolset` in a :class:`GuardedToolset` whose calls
ask the :class:`~ctxagent.tools.permissions.Gate` first, a refusal being the call's error outcome.
:class:`~ctxagent.tools.permissions.Grants`, what the person running ctxagent grants beyond the profile,
is given when a run opens; a sub-agent opens with :meth:`GuardedToolset.inherited`: its parent's, never a prompt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ctxagent.messages import ToolCall
from ctxagent.sessions.records import PermissionRecord
from ctxagent.tools.arguments import parse_arguments
from ctxagent.tools.base import ERROR_PREFIX, ToolError
from ctxagent.tools.permissions import Gate, Grants, PermissionsConfig, check_grants
from ctxagent.tools.toolset import ToolOutcome, Toolset


def check_allowed(grants: Grants, toolset: Toolset) -> None:
    """Raise ``UsageError`` when ``grants.allow`` names no tool, kind or MCP server of ``toolset``
    (an MCP server that did not start counts, and so do ``server__tool`` names of its)."""
    servers = toolset.servers  # MCP servers configured, even one that did not start (its tools may come)
    mcp_names = [name for name in grants.allow if name.split("__")[0] in servers]
    check_grants(grants.allow, [*toolset.tools, *toolset.groups(), *servers, *mcp_names])


@dataclass(frozen=True)
class Verdict:
    """The gate's decision on one call (:meth:`GuardedToolset.check`).

    ``refusal``: the error outcome the model reads, naming the policy (None: the call may run).
    ``decisions``: the permission records of the user's answers, oldest first, for the transcript.
    ``checked``: the resolved path the gate checked for each path argument of a file tool (argument
    name -> path): the tool opens exactly these (``ToolContext.checked``). ``arguments``: the call's
    arguments, parsed once (tools/arguments.py), or why they are no JSON object (the toolset answers
    it, no tool runs); None for an unknown tool.
    """

    call_id: str
    refusal: ToolOutcome | None
    decisions: tuple[PermissionRecord, ...] = ()
    checked: Mapping[str, Path] = field(default_factory=dict)
    arguments: dict[str, Any] | ToolError | None = None


class GuardedToolset:
    """A toolset whose calls pass a permission gate first (see the module doc).

    Everything but :meth:`check`, :meth:`call` and :meth:`inherited` is the wrapped toolset's:
    ``tools``, ``ctx``, ``policy`` and :meth:`specs` (the rest: ``toolset``).
    """

    def __init__(self, toolset: Toolset, gate: Gate):
        self.toolset, self.gate = toolset, gate
        self.tools, self.ctx, self.policy = toolset.tools, toolset.ctx, toolset.policy  # set once, never replaced
        self.specs = toolset.specs

    def check(self, call: ToolCall, *, turn: int = 0) -> Verdict:
        """The gate's verdict on ``call`` (``turn``: recorded with the user's answers). May ask the
        user (interactive path). An unknown tool, or arguments that do not parse to an object, are
        let through: the toolset answers them with its own error and no tool runs. Never raises for a
        bad call; Ctrl-C (``KeyboardInterrupt``) at the prompt propagates."""
        tool = self.toolset.tools.get(call.name)
        if tool is None:
            return Verdict(call.id, None)
        try:
            arguments = parse_arguments(tool.name, call.arguments)
        except ToolError as err:
            return Verdict(call.id, None, arguments=err)
        checked: dict[str, Path] = {}
        try:
            refusal, checked = self.gate.decide(tool, arguments, call_id=call.id, turn=turn)
        except (ValueError, OSError) as err:  # e.g. a NUL byte in a path: the model's mistake, not ours
            refusal = f"{call.name} refused: its arguments cannot be checked ({err})"
        decisions = tuple(self.gate.take_decisions())
        return Verdict(call.id, None if refusal is None else ToolOutcome(ERROR_PREFIX + refusal, True), decisions,
                       checked, arguments)

    def call(self, call: ToolCall, handle: str | None = None, *, verdict: Verdict | None = None,
             turn: int = 0) -> ToolOutcome:
        """Run ``call`` through the wrapped toolset if the gate allows it, else its refusal as the
        outcome; never raises for a bad call (see :meth:`Toolset.call`).

        ``verdict``: this call's :meth:`check`, already made (the runner checks before it announces
        a call), so the user is not asked twice; None, or another call's: checked now, and the
        records of the answers given now are the outcome's ``decisions``."""
        decided: tuple[PermissionRecord, ...] = ()
        if verdict is None or verdict.call_id != call.id:
            verdict = self.check(call, turn=turn)
            decided = verdict.decisions
        if verdict.refusal is not None:
            return replace(verdict.refusal, decisions=decided)
        ctx = replace(self.toolset.ctx, checked=verdict.checked, confined=self.gate.config.confine)
        outcome = self.toolset.call(call, handle, ctx=ctx, arguments=verdict.arguments)  # opens the paths checked
        return replace(outcome, decisions=decided) if decided else outcome

    def inherited(self) -> Grants:
        """The grants a sub-agent opens with: this gate's rules, grants and protected paths and the
        tools answered ``always`` so far; it never asks."""
        gate = self.gate
        return replace(gate.grants, ask=None, rules=gate.config, always=frozenset(gate.always),
                       protected=frozenset(gate.protected))


def guard(toolset: Toolset, permissions: PermissionsConfig, path: Literal["batch", "interactive"],
          grants: Grants | None = None, *, readable: Iterable[Path] = (),
          protected: Iterable[Path] = ()) -> GuardedToolset:
    """``toolset`` behind a gate of ``permissions`` (``grants.rules`` instead when set) on ``path``
    with ``grants``, in the toolset's working directory. ``readable``: more folders read tools may
    read (the session's output store); ``protected``: folders and files nothing may write into
    (ctxagent's own, the files the session is configured from), with ``grants.protected``.
    ``grants``: None grants nothing; ``grants.allow`` is not checked here (:func:`check_allowed` does)."""
    return GuardedToolset(toolset, Gate(permissions, path, grants or Grants(), workdir=toolset.ctx.workdir,
                                        readable=readable, protected=protected))
