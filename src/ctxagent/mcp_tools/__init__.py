"""MCP servers as mirrored tools (the ``ctxagent[mcp]`` extra): configuration, connections,
result conversion and deferred schemas. See docs/mcp.md."""
