"""Tool permissions: which calls run, which ask first, which are refused, and where file tools may go.

Every tool declares its kind (``Tool.kind``): ``read``, ``write``, ``exec`` or ``network``. The
profile's ``permissions`` key (:class:`PermissionsConfig`) gives each tool a policy — ``allow``,
``ask`` or ``deny`` — by name (``tools``), else by kind (``kinds``), else by the safe default
(:data:`DEFAULT_KINDS`: read allowed; write, exec and network ask). :class:`Gate` applies it to one
call before the tool runs, in this order:

1. **confinement** — the path arguments of the file tools (:data:`FILE_ARGS`) must resolve inside the
   working directory (``permissions.workdir``; default: the run's ``--workdir``), symlinks and
   ``..`` resolved (``os.path.realpath``) — so ``..`` escapes, absolute paths elsewhere and symlinks
   pointing out are refused. Read tools may also read the session's own output store (previews
   name those files); nothing may write inside ctxagent's data folder. ``confine: false`` lifts it.
2. **policy ``deny``** — refused, whatever the command line grants.
3. **shell patterns** (``shell`` only) — a command matching a ``permissions.shell.deny`` regex
   (searched anywhere) is refused; one that matches an ``allow`` regex in full and holds none of
   ``; & | ` $ < >`` or a newline runs without asking.
4. **policy ``ask``** — runs when the command line granted it (``--allow NAME|KIND``,
   ``--allow-all``) or the user answered ``always`` earlier in this run; otherwise the interactive
   path asks (``yes`` / ``no`` / ``always`` for the rest of this run) and the batch path refuses
   (a batch run never prompts).

A refused call becomes an error tool result the model reads, naming the policy that refused it;
it never ends the run. Every decision that involved asking is handed back as a
:class:`~ctxagent.sessions.records.PermissionRecord` (:meth:`Gate.take_decisions`) for the
transcript.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ctxagent.tools.base import Tool, ToolKind

Policy = Literal["allow", "ask", "deny"]
Answer = Literal["yes", "no", "always"]
Ask = Callable[[str, dict[str, Any], Path], Answer]
"""``ask(tool_name, arguments, workdir)``: the user's answer to one call."""

KINDS: tuple[ToolKind, ...] = ("read", "write", "exec", "network")
DEFAULT_KINDS: dict[ToolKind, Policy] = {"read": "allow", "write": "ask", "exec": "ask", "network": "ask"}
FILE_ARGS: dict[str, tuple[str, ...]] = {"read_file": ("path",), "write_file": ("path",), "list_dir": ("path",)}
SHELL_TOOL, SHELL_ARG = "shell", "command"
SHELL_CHAINING = re.compile(r"[;&|`<>\n$]")  # an allow pattern never lets these (or any $ expansion) through
ARGUMENTS_KEPT = 500  # characters of a call's arguments kept in a permission record


class ShellPatterns(BaseModel):
    """Regexes (Python syntax) for ``shell`` commands: ``deny`` searched anywhere, ``allow`` matched
    against the whole command (see the module doc)."""

    model_config = ConfigDict(extra="forbid")
    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)

    @field_validator("allow", "deny")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"invalid regex {pattern!r}: {err}") from err
        return patterns


class PermissionsConfig(BaseModel):
    """The ``permissions`` key of a profile (every sub-key optional; see the module doc).

    ``kinds`` and ``tools`` map a kind or a tool name to ``allow``, ``ask`` or ``deny``; kinds not
    given keep :data:`DEFAULT_KINDS`. ``workdir``: the folder file tools are confined to (relative
    to the run's working directory; default: that directory); ``confine: false`` turns it off.
    """

    model_config = ConfigDict(extra="forbid")
    kinds: dict[ToolKind, Policy] = Field(default_factory=dict)
    tools: dict[str, Policy] = Field(default_factory=dict)
    workdir: str | None = None
    confine: bool = True
    shell: ShellPatterns = Field(default_factory=ShellPatterns)

    def policy(self, tool: Tool) -> tuple[Policy, str]:
        """``(policy, where it comes from)`` for ``tool``, e.g. ``("ask", "permissions.kinds.exec")``."""
        if tool.name in self.tools:
            return self.tools[tool.name], f"permissions.tools.{tool.name}"
        if tool.kind in self.kinds:
            return self.kinds[tool.kind], f"permissions.kinds.{tool.kind}"
        return DEFAULT_KINDS.get(tool.kind, "ask"), f"the default for {tool.kind} tools"


class Gate:
    """Decides, call by call, whether a tool may run (see the module doc).

    Args:
        config: the profile's permissions.
        path: ``batch`` (never asks: ``ask`` means refused unless granted) or ``interactive``.
        granted: tool names and kinds the command line granted (``--allow``).
        allow_all: ``--allow-all``: every ``ask`` is granted (``deny`` and confinement still hold).
        ask: how to ask the user on the interactive path; None: cannot ask (refused).
        workdir: the run's working directory (file tools' relative paths start there).
        readable: more folders read tools may read (the session's output store).
        protected: folders nothing may write into (ctxagent's data folder).
    """

    def __init__(self, config: PermissionsConfig, path: Literal["batch", "interactive"],
                 granted: Iterable[str] = (), allow_all: bool = False, ask: Ask | None = None, *,
                 workdir: Path | None = None, readable: Iterable[Path] = (), protected: Iterable[Path] = ()):
        self.config, self.path = config, path
        self.granted = set(granted)
        self.allow_all = allow_all
        self.ask = ask
        self.workdir = Path(os.path.realpath(workdir or Path.cwd()))
        self.root = Path(os.path.realpath(self.workdir / Path(config.workdir).expanduser())) \
            if config.workdir else self.workdir
        self.readable = [Path(os.path.realpath(p)) for p in readable]
        self.protected = [Path(os.path.realpath(p)) for p in protected]
        self.always: set[str] = set()  # tools the user allowed for the rest of this run
        self._decisions: list[Any] = []

    # -- the decision -------------------------------------------------------------------------
    def check(self, tool: Tool, arguments: Mapping[str, Any], *, call_id: str = "", turn: int = 0) -> str | None:
        """None when the call may run, else the message the model reads (naming the policy).

        Never raises for a bad call (an exception while asking counts as "no"); Ctrl-C
        (``KeyboardInterrupt``) at the prompt propagates.
        """
        refusal = self._confinement(tool, arguments)
        if refusal:
            return refusal
        policy, where = self.config.policy(tool)
        if policy == "deny":
            return f"denied by profile permissions: {tool.name} is 'deny' ({where})"
        if tool.name == SHELL_TOOL:
            command = arguments.get(SHELL_ARG)
            if isinstance(command, str):
                refusal, allowed = self._shell(command)
                if refusal:
                    return refusal
                if allowed:
                    return None
        if policy == "allow" or self._granted(tool):
            return None
        return self._asked(tool, arguments, where, call_id, turn)

    def check_call(self, tool: Tool, raw_arguments: str, *, call_id: str = "", turn: int = 0) -> str | None:
        """:meth:`check` on a call's raw JSON arguments. Arguments that do not parse to an object
        are let through: the toolset answers them with its own error, and no tool runs."""
        try:
            arguments = json.loads(raw_arguments) if raw_arguments.strip() else {}
        except ValueError:
            return None
        if not isinstance(arguments, dict):
            return None
        return self.check(tool, arguments, call_id=call_id, turn=turn)

    def take_decisions(self) -> list[Any]:
        """The permission records made since the last call (for the transcript), oldest first."""
        taken, self._decisions = self._decisions, []
        return taken

    # -- the steps ----------------------------------------------------------------------------
    def _granted(self, tool: Tool) -> bool:
        return (self.allow_all or tool.name in self.granted or tool.kind in self.granted
                or tool.name in self.always)

    def _asked(self, tool: Tool, arguments: Mapping[str, Any], where: str, call_id: str, turn: int) -> str | None:
        if self.path == "batch" or self.ask is None:
            why = "batch runs never prompt" if self.path == "batch" else "this run cannot prompt"
            return (f"denied by profile permissions: {tool.name} is 'ask' ({where}) and {why}; "
                    f"rerun with --allow {tool.name} (or --allow {tool.kind}, or --allow-all), "
                    "or allow it in the profile")
        try:
            answer = self.ask(tool.name, dict(arguments), self.workdir)
        except (EOFError, OSError, ValueError):
            answer = "no"
        if answer not in ("yes", "no", "always"):
            answer = "no"
        self._record(tool, arguments, where, answer, call_id, turn)
        if answer == "always":
            self.always.add(tool.name)
        if answer == "no":
            return f"denied by the user: {tool.name} was refused at the permission prompt ({where}: ask)"
        return None

    def _record(self, tool: Tool, arguments: Mapping[str, Any], where: str, answer: str, call_id: str,
                turn: int) -> None:
        from ctxagent.sessions.records import PermissionRecord

        text = json.dumps(dict(arguments), ensure_ascii=False)
        self._decisions.append(PermissionRecord(call_id=call_id, tool=tool.name, turn=turn,
                                                arguments=text[:ARGUMENTS_KEPT], policy=f"{where}: ask",
                                                decision=answer))

    def _shell(self, command: str) -> tuple[str | None, bool]:
        """``(refusal, allowed without asking)`` from the shell patterns."""
        for pattern in self.config.shell.deny:
            if re.search(pattern, command):
                return (f"denied by profile permissions: the command matches the shell deny pattern "
                        f"{pattern!r} (permissions.shell.deny)"), False
        if SHELL_CHAINING.search(command):
            return None, False
        return None, any(re.fullmatch(pattern, command) for pattern in self.config.shell.allow)

    def _confinement(self, tool: Tool, arguments: Mapping[str, Any]) -> str | None:
        """The refusal of a file tool path outside where it may go, or None."""
        for name in FILE_ARGS.get(tool.name, ()):
            value = arguments.get(name, ".")  # list_dir() lists the working directory
            if not isinstance(value, str):
                continue
            target = Path(os.path.realpath(self.workdir / Path(value).expanduser()))
            if tool.kind != "read" and any(_inside(target, folder) for folder in self.protected):
                return (f"denied: {tool.name} {name} {value!r} resolves to {target}, inside ctxagent's own "
                        "data folder (sessions, transcripts and stored outputs are not written by tools)")
            if not self.config.confine or _inside(target, self.root):
                continue
            if tool.kind == "read" and any(_inside(target, folder) for folder in self.readable):
                continue
            return (f"denied by profile permissions: {tool.name} {name} {value!r} resolves to {target}, "
                    f"outside the working directory {self.root} that file tools are confined to "
                    "(permissions.workdir; '..' escapes, absolute paths and symlinks out of it are refused)")
        return None


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def parse_grants(text: str | None, known: Iterable[str]) -> set[str]:
    """The names of ``--allow a,b`` (tool names or kinds). Raises ``UsageError`` for an unknown one."""
    from ctxagent.errors import UsageError

    names = {part.strip() for part in (text or "").split(",") if part.strip()}
    valid = set(known) | set(KINDS)
    unknown = sorted(names - valid)
    if unknown:
        raise UsageError(f"--allow: unknown tool or kind {', '.join(map(repr, unknown))}; "
                         f"tools: {', '.join(sorted(set(known)))}; kinds: {', '.join(KINDS)}")
    return names
