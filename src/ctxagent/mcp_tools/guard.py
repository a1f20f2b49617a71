"""Run an MCP server so that it dies with ctxagent, even when ctxagent is killed with ``kill -9``.

Usage (by :mod:`ctxagent.mcp_tools.hub`, never by hand)::

    python -S guard.py PARENT_PID COMMAND [ARGS...]

The MCP SDK starts this script as the leader of a new process group (a session of its own, so
Ctrl-C at the terminal reaches ctxagent only, which cancels the call). It asks Linux for SIGTERM
when its parent dies (``prctl(PR_SET_PDEATHSIG)``: it comes when the *thread* that spawned it ends,
ctxagent's MCP event loop thread, alive as long as the servers are), starts the server in its group,
and on SIGTERM (a normal shutdown too) kills the whole group with SIGKILL, the server's children
included. Standard library only, run with ``-S``: it starts in a few milliseconds. Elsewhere than
Linux servers run without it (the SDK still kills the group on a normal exit).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _kill_group(signum: int, frame: object) -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)  # the server, its children and this guard


def main(argv: list[str]) -> int:
    parent, command = int(argv[1]), argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return 127
    signal.signal(signal.SIGTERM, _kill_group)
    if os.getppid() != parent:  # ctxagent died before the prctl: nothing would ever signal us
        return 1
    try:
        server = subprocess.Popen(command)  # same group, stdin/stdout/stderr inherited
    except OSError as err:
        print(f"ctxagent: cannot start the MCP server {command[0]!r}: {err}", file=sys.stderr)
        return 127
    return server.wait()  # an interrupted wait is retried (PEP 475)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
