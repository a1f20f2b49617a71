"""Run a command so that it stops with its parent, even when the parent is killed with ``kill -9``.

Usage (by :mod:`ctxagent.mcp_tools.hub` for a stdio MCP server and by
:mod:`ctxagent.cluster.temporal_activity` for a session's ``ctxagent run``, never by hand)::

    python -S guard.py PARENT_PID GRACE_S COMMAND [ARGS...]

Started as the leader of a new process group (a session of its own, so Ctrl-C at the terminal
reaches the parent only), it asks Linux for SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``:
it comes when the *thread* that spawned it ends, the parent's event loop thread) and starts the
command in its group. On SIGTERM (a normal shutdown too) it passes the signal on to the command and
kills the whole group with SIGKILL, the command's children included, ``GRACE_S`` seconds later; at
once when ``GRACE_S`` is 0 (an MCP server has nothing to record; a run handles SIGTERM as Ctrl-C,
records an ``interrupted`` end and releases the session's writer lock). Exit status: the command's
(128 + N when signal N ended it). Standard library only, run with ``-S``: it starts in a few
milliseconds. Elsewhere than Linux MCP servers run without it (the SDK still kills the group on a
normal exit).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _kill_group(signum: int = 0, frame: object = None) -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)  # the command, its children and this guard


def main(argv: list[str]) -> int:
    parent, grace, command = int(argv[1]), float(argv[2]), argv[3:]
    child: subprocess.Popen[bytes] | None = None

    def stop(signum: int, frame: object) -> None:
        if child is None or not grace:
            _kill_group()
        else:  # once: the grace counts from the first SIGTERM
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            child.send_signal(signal.SIGTERM)
            signal.setitimer(signal.ITIMER_REAL, grace)

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return 127
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGALRM, _kill_group)
    if os.getppid() != parent:  # the parent died before the prctl: nothing would ever signal us
        return 1
    try:
        child = subprocess.Popen(command)  # same group; stdin, stdout and stderr inherited
    except OSError as err:
        print(f"ctxagent: cannot start {command[0]!r}: {err}", file=sys.stderr)
        return 127
    code = child.wait()  # an interrupted wait is retried (PEP 475)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
