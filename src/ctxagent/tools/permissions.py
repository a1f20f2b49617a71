"""Tool permissions: which calls run, which ask first, which are refused, and where file tools may go.

The profile's ``permissions`` key (:class:`PermissionsConfig`) gives each tool a policy (``allow``,
``ask`` or ``deny``) by name, else by its MCP server's name, else by kind, else :data:`DEFAULT_KINDS`.
:class:`Gate` applies it to one call before the tool runs, in this order:

1. confinement: file tools' paths (:data:`FILE_ARGS`), resolved once (:func:`~ctxagent.tools.paths.real_path`),
   must lead inside the working directory (read tools: or the output store), and never into ``protected``;
2. policy ``deny``;
3. a write to an exec path (:func:`exec_reason`) needs the exec permission as well;
4. ``shell`` patterns: a ``deny`` regex searched anywhere refuses; an ``allow`` regex matched in full, on a
   command without chaining or expansion (:data:`SHELL_CHAINING`), runs without asking;
5. policy ``ask``: granted (``--allow``, ``--allow-all``, an earlier ``always``), else asked on the
   interactive path and refused on the batch path.

A refusal is an error tool result naming the policy; every answer becomes a
:class:`~ctxagent.sessions.records.PermissionRecord` (:meth:`Gate.take_decisions`). See docs/security.md.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from ctxagent.tools.base import Tool, ToolKind
from ctxagent.tools.paths import real_path

Policy = Literal["allow", "ask", "deny"]
Answer = Literal["yes", "no", "always"]
Ask = Callable[[str, dict[str, Any], Path], Answer]
"""``ask(tool_name, arguments, workdir)``: the user's answer to one call."""

KINDS: tuple[ToolKind, ...] = ("read", "write", "exec", "network", "mcp")
DEFAULT_KINDS: dict[ToolKind, Policy] = {"read": "allow", "write": "ask", "exec": "ask", "network": "ask",
                                         "mcp": "ask"}
FILE_ARGS: dict[str, tuple[str, ...]] = {"read_file": ("path",), "write_file": ("path",), "list_dir": ("path",)}
SHELL_TOOL, SHELL_ARG = "shell", "command"
SHELL_CHAINING = re.compile(r"[;&|`<>\n$]")  # an allow pattern never lets these (or any $ expansion) through
ARGUMENTS_KEPT = 500  # characters of a call's arguments kept in a permission record
WHY_KEY = "(ctxagent) why ask"  # shown with the arguments at the prompt when a write is exec
GIT_DIR = ".git"
GIT_CONFIGS = ("config", "config.worktree")


def _check_glob(pattern: str) -> str:
    """An ``exec_paths`` glob, checked: not empty, ``**`` only as a whole name, no ``..``."""
    if not pattern.strip():
        raise ValueError("an exec path glob cannot be empty")
    for part in pattern.split("/"):
        if "**" in part and part != "**":
            raise ValueError(f"{pattern!r}: '**' stands alone between slashes (e.g. 'deploy/**/*.sh')")
        if part == "..":
            raise ValueError(f"{pattern!r}: '..' never matches (paths are matched resolved)")
    return pattern


ExecGlob = Annotated[str, AfterValidator(_check_glob)]


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
    ``exec_paths``: globs of files whose writes are exec (besides the built-in git rule, which
    always holds; see :func:`exec_reason`).
    """

    model_config = ConfigDict(extra="forbid")
    kinds: dict[ToolKind, Policy] = Field(default_factory=dict)
    tools: dict[str, Policy] = Field(default_factory=dict)
    workdir: str | None = None
    confine: bool = True
    shell: ShellPatterns = Field(default_factory=ShellPatterns)
    exec_paths: list[ExecGlob] = Field(default_factory=list)

    def policy(self, tool: Tool) -> tuple[Policy, str]:
        """``(policy, where it comes from)`` for ``tool``, e.g. ``("ask", "permissions.kinds.exec")``."""
        if tool.name in self.tools:
            return self.tools[tool.name], f"permissions.tools.{tool.name}"
        if tool.group is not None and tool.group in self.tools:
            return self.tools[tool.group], f"permissions.tools.{tool.group}"
        return self.kind_policy(tool.kind)

    def kind_policy(self, kind: ToolKind) -> tuple[Policy, str]:
        """``(policy, where it comes from)`` of ``kind`` (a write to an exec path needs ``exec``'s)."""
        if kind in self.kinds:
            return self.kinds[kind], f"permissions.kinds.{kind}"
        return DEFAULT_KINDS.get(kind, "ask"), f"the default for {kind} tools"


@dataclass(frozen=True)
class Grants:
    """What a run is granted beyond its profile's permissions (``deny`` and confinement always hold).

    Args:
        allow: names from ``--allow``: tools, kinds, MCP servers, ``server__tool`` names (checked
            against the toolset by :func:`~ctxagent.tools.guard.check_allowed`).
        allow_all: ``--allow-all``: every ``ask`` is granted.
        ask: the prompt of the interactive path (``ask(tool, arguments, workdir)`` returns ``yes``,
            ``no`` or ``always``); None: never asks (a call that would ask is refused).
        rules: the permissions that replace the profile's: a sub-agent keeps its parent's, whatever
            its own profile says; None: the profile's.
        always: tools already answered ``always`` (a sub-agent inherits its parent's answers).
        protected: paths no tool may write beyond the run's own (a sub-agent keeps its parent's:
            the files the parent is configured from).
    """

    allow: frozenset[str] = frozenset()
    allow_all: bool = False
    ask: Ask | None = None
    rules: PermissionsConfig | None = None
    always: frozenset[str] = frozenset()
    protected: frozenset[Path] = frozenset()

    @classmethod
    def of(cls, allow: str | None, allow_all: bool = False, ask: Ask | None = None) -> Grants:
        """The grants of a command line: ``allow`` as given to ``--allow`` (``"shell, write_file"``;
        None: none), unchecked."""
        return cls(frozenset(part.strip() for part in (allow or "").split(",") if part.strip()), allow_all, ask)


class Gate:
    """Decides, call by call, whether a tool may run (see the module doc).

    Args:
        config: the profile's permissions (``grants.rules`` replace them).
        path: ``batch`` (never asks: ``ask`` means refused unless granted) or ``interactive``.
        grants: what the run is granted beyond them (default: nothing; its ``always`` answers hold
            here too, its ``protected`` paths join ``protected``).
        workdir: the run's working directory (file tools' relative paths start there).
        readable: more folders read tools may read (the session's output store).
        protected: folders nothing may write into (ctxagent's data folder).
    """

    def __init__(self, config: PermissionsConfig, path: Literal["batch", "interactive"], grants: Grants = Grants(),
                 *, workdir: Path | None = None, readable: Iterable[Path] = (), protected: Iterable[Path] = ()):
        self.config, self.path, self.grants = grants.rules or config, path, grants
        self.workdir = Path(os.path.realpath(workdir or Path.cwd()))
        self.root = Path(os.path.realpath(self.workdir / Path(self.config.workdir).expanduser())) \
            if self.config.workdir else self.workdir
        self.readable = [Path(os.path.realpath(p)) for p in readable]
        self.protected = [Path(os.path.realpath(p)) for p in [*protected, *grants.protected]]
        self.always = set(grants.always)  # tools the user allowed for the rest of this run
        self._decisions: list[Any] = []

    # -- the decision -------------------------------------------------------------------------
    def decide(self, tool: Tool, arguments: Mapping[str, Any], *, call_id: str = "",
               turn: int = 0) -> tuple[str | None, dict[str, Path]]:
        """``(refusal, checked)``: None when the call may run, else the message the model reads
        (naming the policy); and the resolved path of each file-tool path argument (argument name ->
        absolute path, :func:`~ctxagent.tools.paths.real_path`) that the tool opens (``ToolContext.checked``).

        Never raises for a bad call (an exception while asking counts as "no"); Ctrl-C
        (``KeyboardInterrupt``) at the prompt propagates. Raises ``ValueError`` for a path holding a
        NUL byte (the guard answers it as a refusal).
        """
        checked = self._resolved(tool, arguments)
        refusal = self._confinement(tool, arguments, checked)
        if refusal:
            return refusal, checked
        policy, where = self.config.policy(tool)
        if policy == "deny":
            return f"denied by profile permissions: {tool.name} is 'deny' ({where})", checked
        found = self._exec_path(tool, arguments, checked)
        if found:
            return self._exec_write(tool, arguments, found, policy == "allow", call_id, turn), checked
        command = arguments.get(SHELL_ARG) if tool.name == SHELL_TOOL else None
        refusal, allowed = self._shell(command) if isinstance(command, str) else (None, False)
        if refusal or allowed or policy == "allow" or self._granted(tool):
            return refusal, checked
        return self._asked(tool, arguments, where, call_id, turn), checked

    def _resolved(self, tool: Tool, arguments: Mapping[str, Any]) -> dict[str, Path]:
        """The resolved path of each path argument of a file tool (``list_dir()``: the workdir)."""
        return {name: real_path(self.workdir, value) for name in FILE_ARGS.get(tool.name, ())
                if isinstance(value := arguments.get(name, "."), str)}

    def take_decisions(self) -> list[Any]:
        """The permission records made since the last call (for the transcript), oldest first."""
        taken, self._decisions = self._decisions, []
        return taken

    # -- the steps ----------------------------------------------------------------------------
    def _granted(self, tool: Tool) -> bool:
        allow = self.grants.allow
        return (self.grants.allow_all or tool.name in allow or tool.kind in allow or tool.group in allow
                or tool.name in self.always)

    def _asked(self, tool: Tool, arguments: Mapping[str, Any], where: str, call_id: str, turn: int, *,
               why: str = "", always: str = "") -> str | None:
        """Ask the user, or the refusal when this run cannot ask. ``why``: shown with the arguments
        (under :data:`WHY_KEY`) and recorded as an exec path; ``always``: what an ``always``
        answer grants for the rest of the run (default: the tool)."""
        if self.path == "batch" or self.grants.ask is None:
            return (f"denied by profile permissions: {tool.name} is 'ask' ({where}) and {self._cannot()}; "
                    f"rerun with --allow {tool.name} (or --allow {tool.kind}, or --allow-all), "
                    "or allow it in the profile")
        shown = {**arguments, WHY_KEY: why} if why else dict(arguments)
        try:
            answer = self.grants.ask(tool.name, shown, self.workdir)
        except (EOFError, OSError, ValueError):
            answer = "no"
        if answer not in ("yes", "no", "always"):
            answer = "no"
        self._record(tool, arguments, f"{where} (exec path)" if why else where, answer, call_id, turn)
        if answer == "always":
            self.always.add(always or tool.name)
        if answer == "no":
            return f"denied by the user: {tool.name} was refused at the permission prompt ({where}: ask)"
        return None

    def _cannot(self) -> str:
        return "batch runs never prompt" if self.path == "batch" else "this run cannot prompt"

    def _exec_path(self, tool: Tool, arguments: Mapping[str, Any], checked: Mapping[str, Path]) -> str | None:
        """Why a write tool's call writes a file that runs later (``<tool> path '...' ...``), or None."""
        if tool.kind != "write":
            return None
        for name, target in checked.items():
            value = arguments.get(name, ".")
            reason = exec_reason(target, self.config.exec_paths, self.workdir)
            if reason:
                return f"{tool.name} {name} {value!r} resolves to {target}: {reason}"
        return None

    def _exec_write(self, tool: Tool, arguments: Mapping[str, Any], why: str, write_allowed: bool,
                    call_id: str, turn: int) -> str | None:
        """The decision on a write to an exec path: it needs the exec permission and the write's;
        one question (saying ``why``) asks for both."""
        policy, where = self.config.kind_policy("exec")
        if policy == "deny":
            return f"denied by profile permissions: {why}; it needs the exec permission, which is 'deny' ({where})"
        key = f"{tool.name}:exec"
        write_ok = write_allowed or self._granted(tool)
        if policy == "allow" or self.grants.allow_all or "exec" in self.grants.allow or key in self.always:
            return None if write_ok else self._asked(tool, arguments, self.config.policy(tool)[1], call_id, turn)
        if self.path == "batch" or self.grants.ask is None:
            grants = "exec" if write_ok else f"exec,{tool.name}"
            return (f"denied by profile permissions: {why}; it needs the exec permission, which is 'ask' ({where}), "
                    f"and {self._cannot()}; rerun with --allow {grants} (or --allow-all), or set "
                    "permissions.kinds.exec: allow in the profile")
        refusal = self._asked(tool, arguments, where, call_id, turn, why=why, always=key)
        if refusal is None and key in self.always:
            self.always.add(tool.name)  # 'always' to writing a hook covers this tool's ordinary writes too
        return refusal

    def _record(self, tool: Tool, arguments: Mapping[str, Any], where: str, answer: Answer, call_id: str,
                turn: int) -> None:
        from ctxagent.sessions.records import PermissionRecord
        from ctxagent.sessions.redact import clip  # redact, then cut: a cut key is no key's shape

        text = json.dumps(dict(arguments), ensure_ascii=False)
        self._decisions.append(PermissionRecord(call_id=call_id, tool=tool.name, turn=turn,
                                                arguments=clip(text, ARGUMENTS_KEPT), policy=f"{where}: ask",
                                                decision=answer))

    def _shell(self, command: str) -> tuple[str | None, bool]:
        """``(refusal, allowed without asking)`` from the shell patterns."""
        for pattern in self.config.shell.deny:
            if re.search(pattern, command):
                return (f"denied by profile permissions: the command matches the shell deny pattern "
                        f"{pattern!r} (permissions.shell.deny)"), False
        unchained = not SHELL_CHAINING.search(command)
        return None, unchained and any(re.fullmatch(pattern, command) for pattern in self.config.shell.allow)

    def _confinement(self, tool: Tool, arguments: Mapping[str, Any], checked: Mapping[str, Path]) -> str | None:
        """The refusal of a file tool path outside where it may go, or None."""
        for name, target in checked.items():
            value = arguments.get(name, ".")  # list_dir() lists the working directory
            mine = next((p for p in self.protected if _inside(target, p)), None)
            if tool.kind != "read" and mine is not None:
                return (f"denied: {tool.name} {name} {value!r} resolves to {target}, inside {mine}: ctxagent's own "
                        "files (its data, config and cache folders, its package, and the profile, MCP configuration "
                        "and --tools files this session is configured from) are never written by tools, whatever "
                        "the permissions")
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


def exec_reason(path: Path, globs: Sequence[str] = (), workdir: Path | None = None) -> str | None:
    """Why writing the resolved ``path`` is exec (a file something runs later), or None.

    Built in (always): a ``.git`` entry and everything under a ``.git`` folder, at any depth
    (nested repositories, submodules, worktrees; ``commondir``, ``gitdir`` files and
    ``worktrees/*`` choose which config git reads, ``config`` and ``hooks/`` name what it runs). Not
    built in: ``.gitattributes`` (it names drivers; only config defines their commands) and
    ``.gitmodules`` (git refuses ``update = !command`` from it since 2.24.1).
    Then each glob of ``globs`` (``permissions.exec_paths``): one without a slash matches a name at
    any depth (``.envrc``); one with a slash is relative to ``workdir`` (``deploy/*.sh``) unless it
    starts with ``/`` or ``~``; ``**`` matches any number of folders, ``*`` and ``?`` stay within one name.
    """
    reason = _git_reason(path.parts)
    if reason:
        return reason
    for pattern in globs:
        if _glob_match(path.parts, _segments(pattern, workdir)):
            return f"it matches {pattern!r} (permissions.exec_paths: writes there are exec)"
    return None


def _git_reason(parts: Sequence[str]) -> str | None:
    """The built-in git rule of :func:`exec_reason` on a resolved path's parts."""
    if GIT_DIR not in parts:
        return None
    tail = parts[len(parts) - list(reversed(parts)).index(GIT_DIR):]
    if not tail:
        return ("a .git entry decides which repository (and so which config and hooks) git uses there: "
                "writing it is exec, not write")
    if "hooks" in tail:
        return "git runs the scripts of a repository's hooks folder (commit, checkout, merge...): writing one is exec"
    if tail[-1] in GIT_CONFIGS:
        return ("git runs commands a repository's config names (core.fsmonitor on the next git status, core.pager, "
                "aliases, filter drivers): writing it is exec, not write")
    return ("everything under a .git folder is git's own: commondir, gitdir files and worktrees/* choose the config "
            "git reads (and so the commands it runs on the next git status): writing there is exec, not write")


def _segments(pattern: str, workdir: Path | None) -> list[str]:
    """The names of an ``exec_paths`` glob, made absolute (see :func:`exec_reason`)."""
    if "/" not in pattern:
        return ["**", pattern]
    if pattern.startswith("~"):
        pattern = os.path.expanduser(pattern)
    if pattern.startswith("/"):
        return ["/", *[p for p in pattern.split("/") if p]]
    base = [glob.escape(part) for part in (workdir or Path.cwd()).parts]
    return [*base, *[p for p in pattern.split("/") if p and p != "."]]


def _glob_match(parts: Sequence[str], segments: Sequence[str]) -> bool:
    """Whether path ``parts`` match glob ``segments`` (``**``: any number of names)."""
    if not segments:
        return not parts
    if segments[0] == "**":
        return any(_glob_match(parts[i:], segments[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], segments[0]) and _glob_match(parts[1:], segments[1:])


def check_grants(names: Iterable[str], known: Iterable[str]) -> set[str]:
    """``names`` granted (tool names, kinds or ``known`` names). Raises ``UsageError`` for an unknown one."""
    from ctxagent.errors import UsageError

    asked, tools = set(names), set(known)
    unknown = sorted(asked - tools - set(KINDS))
    if unknown:
        raise UsageError(f"--allow: unknown tool or kind {', '.join(map(repr, unknown))}; "
                         f"tools: {', '.join(sorted(tools))}; kinds: {', '.join(KINDS)}")
    return asked
