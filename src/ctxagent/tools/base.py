"""The tool contract: what a tool is, what it may return, and what it may use.

A tool is a Python callable ``fn(ctx, **arguments)`` with a JSON schema for its arguments. It returns
``str``; ``bytes`` (binary or non-UTF-8 is stored exactly, never dumped in the context); a
:class:`Spooled` file (output the tool streamed to the store, so a 1 GB output never sits in memory);
a ``dict``, ``list``, ``tuple`` or numpy array (always stored under a handle other tools can take); or
a JSON scalar (shown as its JSON text): see :func:`ctxagent.tools.offload.settle`. Handle arguments
are replaced by their stored values before it runs, unless ``resolve_handles=False``. A failure the
model should read is raised as :class:`ToolError` (or any exception): the toolset turns it into an
error tool result; a tool never crashes the run.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ctxagent.sessions.store import OutputStore

if TYPE_CHECKING:
    from pydantic import BaseModel

ToolKind = Literal["read", "write", "exec", "network", "mcp"]
ERROR_PREFIX = "ERROR: "  # starts every error tool result (the model reads it; strategies and notes test it)


class ToolError(Exception):
    """A failure to report to the model as an error tool result (message shown as is)."""


class Stop(threading.Event):
    """A run's stop event (``ToolContext.stop``), shared with its sub-agents and their tools, and the
    shell commands they run now (``running``: a sub-agent's tools run in its parent's process, in
    their own threads), which :func:`kill_running` kills. Another run's commands are not its own."""

    def __init__(self) -> None:
        super().__init__()
        self.running: set[subprocess.Popen[bytes]] = set()
        self.starting = threading.Lock()


@dataclass(frozen=True)
class ToolContext:
    """What a tool may use: the session's output store and the working directory.

    ``transcript``: the session's JSONL transcript (read by ``recall``; None when there is none).
    ``recall_model``/``recall_api_base``: the embedding model ``recall`` also ranks with (litellm
    model string; None: BM25 only); ``recall_top_k``: the hits it returns by default. ``state``: what
    the session's tools keep between calls (``recall``'s index), by tool; a copy made with
    ``dataclasses.replace`` shares it.
    ``checked``: for one call that passed the permission gate, the resolved path it checked for each
    path argument (argument name -> absolute path, no link in it): the file tool opens exactly that
    (tools/paths.py); empty: the tool resolves the path itself. ``confined``: that gate confines file
    tools (a write never goes through a file with more than one hard link).
    """

    store: OutputStore
    workdir: Path
    transcript: Path | None = None
    recall_model: str | None = None
    recall_api_base: str | None = None
    recall_top_k: int = 8
    stop: Stop = field(default_factory=Stop, repr=False, compare=False)  # set when the run is stopped (kill_running)
    # variables the shell's commands get although they look like credentials (tools/environment.py)
    pass_env: tuple[str, ...] = ()
    state: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    checked: Mapping[str, Path] = field(default_factory=dict)
    confined: bool = False


@dataclass(frozen=True)
class Spooled:
    """An output already written to ``path`` (a spool file of the store), bytes as produced.

    ``note`` is a short line kept in the context outside the preview (e.g. ``"exit code: 0"``).
    """

    path: Path
    note: str = ""


@dataclass(frozen=True)
class Tool:
    """One tool: name, description for the model, JSON schema of its arguments, the function.

    ``kind`` says what it does: ``read`` (read-only), ``write`` (writes files), ``exec`` (runs
    commands), ``network`` (reaches the network), ``mcp`` (a tool of an MCP server: whatever the
    server does). ``resolve_handles``: whether handle arguments are replaced by their stored values
    before the call (see the module docstring). ``group``: the MCP server a tool comes from (a
    permission or ``--allow`` grant for the group covers its tools); None for other tools.
    ``validator``: the pydantic model that checks the arguments (:mod:`ctxagent.tools.signature`,
    which also made ``parameters`` from the same signature); None for an MCP tool, whose server
    gave the schema.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    fn: Callable[..., Any]
    kind: ToolKind = "read"
    resolve_handles: bool = True
    group: str | None = None
    validator: type[BaseModel] | None = None

    def spec(self) -> dict[str, Any]:
        """The OpenAI-format tool schema sent with each request."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


def schema(properties: Mapping[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A JSON-schema object with ``properties`` and the ``required`` names."""
    return {"type": "object", "properties": dict(properties), "required": list(required)}
