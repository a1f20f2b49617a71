"""Connections to MCP servers (docs/mcp.md): one asyncio loop in a daemon thread per process
(:func:`submit`: the runner is synchronous, the SDK async) and one connection per server, shared by
the runners of a process working in the same directory (a sub-agent uses its parent's servers; a
session elsewhere never gets a server started in another's folder). A call waits on its future in
short slices (:func:`wait`), so a progress notification extends its deadline (peers kill a slow tool
that reports progress, users complain) and Ctrl-C or the run's stop cancels it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import sys
import threading
import time
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from ctxagent.mcp_tools.config import ServerConfig

POLL_S = 0.05  # how often a waiting call looks at its deadline and the stop event
CLOSE_WAIT_S = 6.0  # at exit, for every server to shut down (the SDK's grace + kill steps are ~4 s)
MAX_RESTARTS = 1
HTTP_TIMEOUT_S, HTTP_READ_TIMEOUT_S = 30.0, 300.0  # an HTTP server's: the MCP SDK's defaults (a stream stays open)
LOG_MARK = "--- ctxagent: starting the MCP server"  # a line of the server log before each start


class McpUnavailable(Exception):
    """A server could not be reached, did not answer in time, or crashed, or the ``mcp`` package is
    not installed (message for the model)."""


logging.getLogger("mcp").addHandler(logging.NullHandler())  # the SDK's tracebacks about a server's bad
logging.getLogger("mcp").propagate = False  # output belong to the server's log, not the user's terminal

_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def submit(coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
    """Run ``coro`` on the MCP event loop thread (started on first use)."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="ctxagent-mcp", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coro, _loop)


def wait(future: concurrent.futures.Future[Any], *, timeout_s: float, stop: threading.Event | None = None,
         progress: list[float] | None = None, what: str = "the call") -> Any:
    """The result of ``future``, waited for in slices of :data:`POLL_S`.

    ``progress[0]`` (a ``time.monotonic()`` the caller's progress callback moves forward) restarts
    the ``timeout_s`` clock. On timeout, on ``stop`` or on Ctrl-C the future is cancelled (the SDK
    then sends ``notifications/cancelled``). Raises ``McpUnavailable`` on timeout or stop,
    ``KeyboardInterrupt`` as it came, and whatever the coroutine raised."""
    started = progress if progress is not None else [time.monotonic()]
    while True:
        try:
            return future.result(timeout=POLL_S)
        except concurrent.futures.TimeoutError:
            pass
        except KeyboardInterrupt:
            future.cancel()
            raise
        if stop is not None and stop.is_set():
            future.cancel()
            raise McpUnavailable(f"{what} was cancelled: the run was stopped")
        if time.monotonic() - started[0] > timeout_s:
            future.cancel()
            raise McpUnavailable(f"{what} timed out: no result and no progress for {timeout_s:g} s")


class Connection:
    """One server: connected on first use; after a crash (``CONNECTION_CLOSED`` during a call)
    restarted once for later calls, then down for the process."""

    def __init__(self, name: str, config: ServerConfig, log_path: Path, workdir: Path):
        self.name, self.config, self.log_path, self.workdir = name, config, log_path, workdir
        self.restarts = 0
        self.down: str | None = None  # why the server is down for good (crashed twice, cannot start)
        self._lock = threading.Lock()
        self._ready: concurrent.futures.Future[Any] | None = None
        self._session: Any = None
        self._closing: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._log_from: int | None = None  # offset of this start in the log (None: no log, an HTTP server)
        self._log_thread: threading.Thread | None = None  # copies the server's stderr to the log, redacted

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> concurrent.futures.Future[Any]:
        """Begin connecting unless connected or connecting; the future gives the tool list."""
        with self._lock:
            if self._ready is None:
                self._ready = submit(self._connect())
            return self._ready

    def tools(self) -> list[dict[str, Any]]:
        """The server's tools (connecting first), as a session records them: ``name``,
        ``description``, ``input_schema`` (a JSON schema). Raises ``McpUnavailable``."""
        if self.down:
            raise McpUnavailable(self.down)
        # _connect gives up after startup_timeout_s with its own message; this bound is a safety net
        return list(wait(self.start(), timeout_s=self.config.startup_timeout_s + CLOSE_WAIT_S + 1,
                         what=f"starting the MCP server {self.name!r}"))

    def close(self) -> concurrent.futures.Future[Any]:
        """Shut the server down (the SDK closes stdin, then kills the process group)."""
        return submit(self._close())

    async def _connect(self) -> list[dict[str, Any]]:
        ready: asyncio.Future[list[dict[str, Any]]] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._task = asyncio.create_task(self._serve(ready, self._closing))
        try:  # on timeout wait_for cancels ready, so _serve does not set it
            return await asyncio.wait_for(ready, self.config.startup_timeout_s)
        except TimeoutError:
            await self._close()
            raise McpUnavailable(f"the MCP server {self.name!r} did not start within "
                                 f"{self.config.startup_timeout_s:g} s (startup_timeout_s){self._see()}") from None

    async def _serve(self, ready: asyncio.Future[list[dict[str, Any]]], closing: asyncio.Event) -> None:
        try:
            from mcp import ClientSession
        except ImportError:
            ready.set_exception(McpUnavailable("MCP servers need the mcp package: pip install 'ctxagent[mcp]'"))
            return
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(stack))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                tools = await _list_tools(session)
                self._session = session
                if not ready.done():
                    ready.set_result(tools)
                await closing.wait()
        except BaseException as err:  # the SDK raises ExceptionGroups; a cancellation ends the task too
            if not ready.done():
                ready.set_exception(McpUnavailable(f"the MCP server {self.name!r} could not start: "
                                                   f"{self._log_tail() or describe(err)}{self._see()}"))
            if isinstance(err, asyncio.CancelledError):
                raise
        finally:
            self._session = None

    def _see(self) -> str:
        """``; see LOG`` when this start wrote the server's stderr to a log (a stdio server)."""
        return f"; see {self.log_path}" if self._log_from is not None and self.log_path.exists() else ""

    def _log_tail(self) -> str:
        """The last non-empty line the server wrote to its log (stderr) since this start, "" if none."""
        if self._log_from is None:
            return ""
        if self._log_thread is not None:  # a server that failed at start: its last lines are on their way
            self._log_thread.join(timeout=1.0)
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_from)
                lines = [line for line in log.read().decode("utf-8", "replace").splitlines()
                         if line.strip() and not line.startswith(LOG_MARK)]
        except OSError:
            return ""
        return lines[-1].strip()[:300] if lines else ""

    def _transport(self, stack: AsyncExitStack) -> Any:
        config = self.config.expanded()
        if config.transport == "http":
            import httpx2  # the client type the SDK's transport takes (the MCP SDK depends on it)
            from mcp.client.streamable_http import streamable_http_client

            assert config.url is not None
            self._log_from = None
            client = httpx2.AsyncClient(headers=config.headers,
                                       timeout=httpx2.Timeout(HTTP_TIMEOUT_S, read=HTTP_READ_TIMEOUT_S))
            stack.push_async_callback(client.aclose)  # the SDK leaves a client it was given open (its sockets)
            return streamable_http_client(config.url, http_client=client,
                                          max_sse_event_size=None)  # a result's size is ctxagent's to manage
        from mcp import StdioServerParameters, stdio_client

        assert config.command is not None
        command, args = config.command, list(config.args)
        if sys.platform.startswith("linux"):
            command, args = sys.executable, ["-S", str(Path(__file__).with_name("guard.py")), str(os.getpid()), "0",
                                             config.command, *args]  # grace 0: a server has nothing to record
        errlog = stack.enter_context(self._errlog())
        return stdio_client(StdioServerParameters(command=command, args=args, env=config.env or None,
                                                  cwd=self.workdir / (config.cwd or "")), errlog=errlog)

    def _errlog(self) -> Any:
        """The server's stderr: a pipe whose lines a thread appends, redacted, to the log (0600 in
        a 0700 folder; secrets of the environment and known shapes replaced, as in transcripts)."""
        from ctxagent.sessions.files import private_dir
        from ctxagent.sessions.redact import default

        private_dir(self.log_path.parent)
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._log_from = os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, f"{LOG_MARK} {time.strftime('%Y-%m-%dT%H:%M:%S')} {self.name}\n".encode())
        read, write = os.pipe()
        redactor = default()

        def copy() -> None:
            with os.fdopen(read, "r", encoding="utf-8", errors="replace") as lines, os.fdopen(fd, "ab") as log:
                for line in lines:
                    log.write(redactor.text(line).encode())
                    log.flush()

        self._log_thread = threading.Thread(target=copy, name=f"ctxagent-mcp-log-{self.name}", daemon=True)
        self._log_thread.start()
        return os.fdopen(write, "w", encoding="utf-8")

    async def _close(self) -> None:
        if self._closing is not None:
            self._closing.set()
        if (task := self._task) is not None:
            if self._session is None:  # never initialized: no grace
                task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_WAIT_S)  # raises nothing: not the task's cancellation either
            task.cancel()  # still running after the grace (nothing for one that has ended)

    # -- calls --------------------------------------------------------------------------------
    def call(self, tool: str, arguments: dict[str, Any], *, stop: threading.Event | None = None) -> Any:
        """Call ``tool`` and return the SDK's ``CallToolResult``.

        Raises ``McpUnavailable`` when the server is down, cannot start, times out (no result or
        progress for ``timeout_s``), crashes during the call, or the run is stopped; the SDK's
        ``MCPError`` for an error the server answered (unknown tool, invalid arguments)."""
        self.tools()
        from mcp import MCPError  # after tools(), which reports a missing mcp package
        from mcp_types import CONNECTION_CLOSED

        session = self._session
        if session is None:  # it ended between the start and now
            self._crashed("it stopped")
            raise McpUnavailable(self.down or f"the MCP server {self.name!r} stopped; it is restarted for the next "
                                              "call")
        progress = [time.monotonic()]

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress[0] = time.monotonic()

        future = submit(session.call_tool(tool, arguments, progress_callback=on_progress))
        try:
            return wait(future, timeout_s=self.config.timeout_s, stop=stop, progress=progress,
                        what=f"{self.name}__{tool}")
        except MCPError as err:
            if err.code != CONNECTION_CLOSED:
                raise
            self._crashed(describe(err))
            raise McpUnavailable(self.down or f"the MCP server {self.name!r} stopped during the call "
                                 f"({describe(err)}); it is restarted for the next call{self._see()}") from err

    def _crashed(self, why: str) -> None:
        """Forget the dead connection: restart on the next call, unless it was restarted already."""
        with self._lock:
            old, self._ready = self._ready, None
            if self.restarts >= MAX_RESTARTS:
                self.down = (f"the MCP server {self.name!r} crashed again ({why}) after a restart; its tools are "
                             f"unavailable for the rest of this run{self._see()}")
            self.restarts += 1
        if old is not None:
            self.close()


async def _list_tools(session: Any) -> list[dict[str, Any]]:
    """Every tool of the server, following pagination cursors."""
    from mcp import types

    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        result = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools += [{"name": t.name, "description": t.description or "", "input_schema": dict(t.input_schema or {})}
                  for t in result.tools]
        if not (cursor := result.next_cursor):
            return tools


def describe(err: BaseException) -> str:
    """A one-line description of ``err``, unwrapping the SDK's exception groups."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    text = str(err) or type(err).__name__
    return f"{type(err).__name__}: {text}" if not isinstance(err, McpUnavailable) else text


_connections: dict[tuple[str, str, str], Connection] = {}
_registry_lock = threading.Lock()


def connection(name: str, config: ServerConfig, *, log_dir: Path, workdir: Path) -> Connection:
    """The process's connection to server ``name`` with ``config`` run in ``workdir`` (one per
    distinct config and working directory; its log in the ``log_dir`` of the first to ask)."""
    key = (name, config.model_dump_json(), str(workdir))
    with _registry_lock:
        if key not in _connections:
            _connections[key] = Connection(name, config, log_dir / f"{name}.log", workdir)
        return _connections[key]


def close_all() -> None:
    """Shut every server of the process down (at exit), waiting at most :data:`CLOSE_WAIT_S`."""
    with _registry_lock:
        connections = list(_connections.values())
        _connections.clear()
    futures = [c.close() for c in connections if c._ready is not None]
    concurrent.futures.wait(futures, timeout=CLOSE_WAIT_S)


atexit.register(close_all)
