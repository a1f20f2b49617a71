"""MCP server configuration: the profile's ``mcp_servers:`` key and ``--mcp-config FILE``, both in
the ``mcpServers`` shape Claude Code, Cursor and deepagents use (docs/mcp.md). ``${NAME}`` and
``${NAME:-default}`` in ``command``, ``args``, ``env``, ``headers``, ``url`` and ``cwd`` are expanded
when the server starts, never written to the transcript (a session records the file's *path*).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ctxagent.errors import UsageError, first_error

if TYPE_CHECKING:
    from ctxagent.tools.base import Tool

SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}\Z")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ServerConfig(BaseModel):
    """One MCP server: ``command``/``args``/``env``/``cwd`` (stdio) or ``url``/``headers`` (HTTP)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    type: Literal["stdio", "http", "streamable-http", "streamable_http"] | None = Field(None, alias="transport")
    timeout_s: float = Field(60.0, gt=0, description="seconds a call may go without a result or progress")
    startup_timeout_s: float = Field(30.0, gt=0, description="seconds to spawn, initialize and list tools")
    disabled: bool = False

    @field_validator("type", mode="before")
    @classmethod
    def _no_sse(cls, value: Any) -> Any:
        if value == "sse":
            raise ValueError("the sse transport is not supported (deprecated in the MCP spec); use the server's "
                             "streamable HTTP endpoint (type: http)")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> ServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either 'command' (a stdio server) or 'url' (a streamable HTTP server)")
        if (self.type == "stdio" and self.command is None) or (self.type not in (None, "stdio") and self.url is None):
            raise ValueError(f"type {self.type!r} does not match the keys given")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    def expanded(self) -> ServerConfig:
        """This config with every ``${NAME}`` reference replaced from ``os.environ``.

        Raises ``UsageError`` naming the variable when one is unset and has no default."""
        data = self.model_dump(by_alias=False)
        for key in ("env", "headers"):
            data[key] = {k: expand(v) for k, v in data[key].items()}
        data["args"] = [expand(a) for a in data["args"]]
        for key in ("command", "url", "cwd"):
            data[key] = expand(data[key]) if data[key] is not None else None
        return ServerConfig.model_validate(data)

    def shown(self) -> dict[str, Any]:
        """The config for display: env and header values that are not ``${...}`` references masked."""
        data = self.model_dump(by_alias=False, exclude_defaults=True)
        for key in ("env", "headers"):
            if key in data:
                data[key] = {k: v if _REFERENCE.fullmatch(v) else "***" for k, v in data[key].items()}
        return data


def expand(text: str) -> str:
    """``text`` with ``${NAME}`` / ``${NAME:-default}`` replaced from the environment.

    Raises ``UsageError`` for a variable that is unset and has no default."""
    def one(match: re.Match[str]) -> str:
        name, default = match.groups()
        value = os.environ.get(name, default)  # default: None without ":-"
        if value is None:
            raise UsageError(f"the MCP configuration references ${{{name}}}, but the environment variable {name} "
                             "is not set")
        return value
    return _REFERENCE.sub(one, text)


def parse_servers(data: Any, *, source: str) -> dict[str, ServerConfig]:
    """The servers of ``data``: an ``{"mcpServers": {...}}`` object or the inner mapping itself.

    Disabled servers are left out. Raises ``UsageError`` naming ``source``, the server and the key
    for anything that does not validate."""
    if isinstance(data, dict) and "mcpServers" in data:
        data = data["mcpServers"]
    elif isinstance(data, dict) and not all(isinstance(v, dict) and {"command", "url"} & v.keys()
                                            for v in data.values()):
        raise UsageError(f"{source}: expected {{\"mcpServers\": {{NAME: {{\"command\": ...}} or {{\"url\": ...}}}}}}, "
                         f"found the keys {', '.join(map(str, data)) or '(none)'}")
    if not isinstance(data, dict):
        raise UsageError(f"{source}: the MCP servers must be a mapping of names to servers (the 'mcpServers' "
                         "object)")
    servers: dict[str, ServerConfig] = {}
    for name, entry in data.items():
        if not isinstance(name, str) or not SERVER_NAME.match(name) or "__" in name:
            raise UsageError(f"{source}: MCP server name {name!r}: 1-32 letters, digits, '_' or '-', starting "
                             "with a letter or digit, without '__' (it prefixes the server's tool names)")
        try:
            server = ServerConfig.model_validate(entry)
        except ValidationError as err:
            where, what = first_error(err)
            raise UsageError(f"{source}: mcpServers.{name}{'.' if where else ''}{where}: {what}") from err
        if not server.disabled:
            servers[name] = server
    return servers


def load_file(path: Path) -> dict[str, ServerConfig]:
    """The servers of an ``--mcp-config`` file: JSON (YAML when its name ends in ``.yaml``/``.yml``).

    Raises ``UsageError`` for a missing or unreadable file, bad JSON/YAML (with its line and
    column), or a bad server."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read the MCP configuration {path}: {err}") from err
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise UsageError(f"{path}: not valid YAML: {err}") from err
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise UsageError(f"{path}:{err.lineno}:{err.colno}: not valid JSON: {err.msg}") from err
    return parse_servers(data, source=str(path))


def servers_of(profile_servers: dict[str, ServerConfig], config_path: str | None) -> dict[str, ServerConfig]:
    """The servers of a run: the profile's ``mcp_servers``, then those of the ``--mcp-config`` file
    (which win for a name both give). Raises ``UsageError`` as :func:`load_file`."""
    from_file = load_file(Path(config_path)) if config_path else {}
    return {**{k: v for k, v in profile_servers.items() if not v.disabled}, **from_file}


@dataclass
class McpTools:
    """The MCP part of a run's toolset: the mirrored tools, the new tool lists to record
    (``{server: [tool dicts]}``) and what could not start (one warning line each)."""

    tools: list[Tool] = field(default_factory=list)
    listed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)  # configured or recorded, whether they started or not
