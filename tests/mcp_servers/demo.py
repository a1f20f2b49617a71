"""A real MCP server for the tests, written with the SDK (mcp 2.x ``MCPServer``).

    python demo.py stdio                # over stdin/stdout
    python demo.py http PORT            # streamable HTTP on 127.0.0.1:PORT/mcp
    python demo.py stdio --many 60      # plus 60 tools with large schemas (schema budget tests)

``DEMO_PID_FILE``: a file the server writes its process id to when it starts (kill -9 tests);
``DEMO_CANCEL_FILE``: a file ``slow`` writes ``started`` to when it starts, ``cancelled`` when the
client cancels it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from pydantic import BaseModel

app = MCPServer("demo")


@app.tool()
def big(lines: int) -> str:
    """Return `lines` numbered log lines (about 60 bytes each)."""
    return "\n".join(f"2026-11-30T12:00:{i % 60:02d} INFO request {i} served in {i % 97} ms" for i in range(lines))


class Row(BaseModel):
    id: int
    city: str
    population: int


class Table(BaseModel):
    rows: list[Row]
    source: str


@app.tool()
def cities(count: int = 500) -> Table:
    """A table of `count` cities (structured content)."""
    return Table(rows=[Row(id=i, city=f"city{i}", population=1000 * i) for i in range(count)], source="demo")


@app.tool()
def digest(text: str) -> str:
    """Report the length and sha256 of `text` (to prove a handle arrived as the full value)."""
    return f"received {len(text)} characters, sha256 {hashlib.sha256(text.encode()).hexdigest()}"


@app.tool()
async def slow(seconds: float, ctx: Context) -> str:
    """Work for `seconds`, reporting progress every 0.2 s."""
    steps = max(1, int(seconds / 0.2))
    if cancel_file := os.environ.get("DEMO_CANCEL_FILE"):
        Path(cancel_file).write_text("started")
    try:
        for i in range(steps):
            await asyncio.sleep(0.2)
            await ctx.report_progress(i + 1, steps, "working")
    except BaseException:  # the client cancelled the call (notifications/cancelled)
        if cancel_file := os.environ.get("DEMO_CANCEL_FILE"):
            Path(cancel_file).write_text("cancelled")
        raise
    return f"finished after {seconds} s"


@app.tool()
async def silent(seconds: float) -> str:
    """Work for `seconds` without reporting progress."""
    await asyncio.sleep(seconds)
    return "finished silently"


@app.tool()
def crash() -> str:
    """Exit the server process at once (a crash)."""
    os._exit(3)


@app.tool()
def picture() -> Image:
    """A small PNG image."""
    return Image(data=b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, format="png")


@app.tool()
def refuse(reason: str) -> str:
    """Fail with `reason` (an isError result)."""
    raise ToolError(f"refused: {reason}")


@app.tool()
def whoami() -> str:
    """The server's process id and the environment variable DEMO_SECRET (set from the config)."""
    return f"pid {os.getpid()} secret {os.environ.get('DEMO_SECRET', '<unset>')}"


@app.tool()
def leak() -> str:
    """Print DEMO_SECRET to stderr (which ctxagent keeps in the server's log, redacted)."""
    print(f"debug: using {os.environ.get('DEMO_SECRET', '<unset>')}", file=sys.stderr, flush=True)
    return "logged"


@app.tool()
def b64len(data: str) -> str:
    """Decode base64 `data` and report its size and first bytes."""
    raw = base64.b64decode(data)
    return f"{len(raw)} bytes, starting {raw[:4].hex()}"


@app.tool(name="dot.name")
def dot_name_a() -> str:
    """A tool whose name has a dot (providers refuse it)."""
    return "dotted"


@app.tool(name="dot_name")
def dot_name_b() -> str:
    """A tool whose name only differs from dot.name by the dot."""
    return "underscored"


def _many(count: int) -> None:
    """`count` tools with large schemas: ten documented parameters each."""
    for n in range(count):
        params = ", ".join(f"p{k}: str = ''" for k in range(10))
        doc = f"Inventory operation number {n}: " + "adjust warehouse stock levels and audit trails. " * 3
        names = ", ".join(f"p{k}" for k in range(10))
        body = f"    return 'op{n} ran with ' + ','.join(v for v in ({names}) if v)"
        namespace: dict[str, object] = {}
        exec(f"def op{n}({params}) -> str:\n{body}", namespace)  # a real signature: the SDK makes the schema
        fn = namespace[f"op{n}"]
        app.add_tool(fn, name=f"inventory_op{n}", description=doc)


if __name__ == "__main__":
    if pid_file := os.environ.get("DEMO_PID_FILE"):
        Path(pid_file).write_text(str(os.getpid()))
    if "--many" in sys.argv:
        _many(int(sys.argv[sys.argv.index("--many") + 1]))
    if sys.argv[1] == "http":
        app.settings.log_level = "WARNING"
        asyncio.run(app.run_streamable_http_async(host="127.0.0.1", port=int(sys.argv[2])))
    else:
        app.run("stdio")
