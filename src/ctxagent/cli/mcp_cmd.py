"""``ctxagent mcp list``: the configured MCP servers, their tools, and what their schemas cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxagent.cli.options import McpConfigOpt, ModelOpt, ProfileOpt, WindowOpt
from ctxagent.dirs import user_dir
from ctxagent.tokens import count_tools

app = typer.Typer(help="MCP servers: the ones configured (profile mcp_servers, --mcp-config), their tools.",
                  no_args_is_help=True, rich_markup_mode=None)


@app.command("list")
def list_(
    profile: ProfileOpt = None,
    mcp_config: McpConfigOpt = None,
    model: ModelOpt = None,
    context_window: WindowOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="One line per tool too.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per server.")] = False,
) -> None:
    """Start each configured server, list its tools and count their schemas' tokens (what they take
    of every request), against the profile's schema budget. Exit 0 even when a server fails to start
    (its line says why); exit 2 for a bad profile or configuration."""
    from ctxagent.agent.setup import absolute_model, resolve_window
    from ctxagent.mcp_tools import hub
    from ctxagent.mcp_tools.config import servers_of
    from ctxagent.mcp_tools.mirror import mirror, unique_names
    from ctxagent.profile import load_profile

    prof = load_profile(profile or "default")
    servers = servers_of(prof.mcp_servers, str(mcp_config) if mcp_config else None)
    name = absolute_model(model or prof.model)
    window = context_window or resolve_window(prof, name, prof.api_base)
    log_dir = user_dir() / "mcp-logs"
    conns = {s: hub.connection(s, config, log_dir=log_dir, workdir=Path.cwd()) for s, config in servers.items()}
    for conn in conns.values():
        conn.start()
    rows: list[dict[str, Any]] = []
    for server, conn in conns.items():
        row: dict[str, Any] = {"server": server, "transport": conn.config.transport, "config": conn.config.shown()}
        try:
            tools = unique_names([mirror(server, t, conn) for t in conn.tools()])
        except hub.McpUnavailable as err:
            rows.append({**row, "status": "failed", "error": str(err), "tools": [], "schema_tokens": 0})
            continue
        per_tool = [{"name": t.name, "tokens": count_tools([t.spec()], name)} for t in tools]
        rows.append({**row, "status": "ok", "tools": per_tool, "schema_tokens": count_tools([t.spec() for t in tools],
                                                                                            name)})
    total = sum(row["schema_tokens"] for row in rows)
    budget = int(prof.mcp.schema_budget * window)
    if json_out:
        for row in rows:
            print(json.dumps(row))
        print(json.dumps({"total_schema_tokens": total, "budget_tokens": budget, "deferred": total > budget}))
        return
    _print(rows, verbose, total, budget, window)


def _print(rows: list[dict[str, Any]], verbose: bool, total: int, budget: int, window: int) -> None:
    if not rows:
        print("no MCP servers configured (profile mcp_servers, --mcp-config FILE)")
        return
    for row in rows:
        if row["status"] != "ok":
            print(f"{row['server']}  {row['transport']}  FAILED: {row['error']}")
            continue
        print(f"{row['server']}  {row['transport']}  {len(row['tools'])} tools  {row['schema_tokens']:,} schema tokens")
        for tool in row["tools"] if verbose else []:
            print(f"  {tool['name']}  {tool['tokens']:,} tokens")
    state = "deferred behind find_tools" if total > budget else "sent in full"
    print(f"total: {total:,} schema tokens ({total / window:.1%} of a {window:,}-token window); budget "
          f"{budget:,} (mcp.schema_budget): {state}")
