"""Run a session's ``ctxagent run`` so that it stops when its worker dies, even by ``kill -9``.

Usage (by :mod:`ctxagent.cluster.temporal_activity`, never by hand)::

    python -S guard.py PARENT_PID COMMAND [ARGS...]

Started as the leader of a new process group, it asks Linux to send it SIGTERM when its parent
(the worker's event loop thread) dies (``prctl(PR_SET_PDEATHSIG)``) and passes that SIGTERM on to
the command, which a run handles as Ctrl-C: it records an ``interrupted`` end and releases the
session's writer lock. A command still running :data:`GRACE_S` seconds later is killed with the
whole group. Exit status: the command's (128 + N when signal N ended it). Standard library only,
run with ``-S``: it starts in a few milliseconds. Unlike ``ctxagent.mcp_tools.guard`` (an MCP
server has nothing to record) the command gets its chance to stop cleanly.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1  # linux/prctl.h
GRACE_S = 10.0  # seconds a stopped run gets to record its end before the group is killed


def main(argv: list[str]) -> int:
    parent, command = int(argv[1]), argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return 127
    stopped: list[float] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(time.monotonic()))
    if os.getppid() != parent:  # the worker died before the prctl: nothing would ever signal us
        return 1
    try:
        child = subprocess.Popen(command)  # same group; stdin, stdout and stderr inherited
    except OSError as err:
        print(f"ctxagent: cannot start {command[0]!r}: {err}", file=sys.stderr)
        return 127
    told = False
    while True:
        try:
            code = child.wait(timeout=0.2)
            return code if code >= 0 else 128 - code
        except subprocess.TimeoutExpired:
            pass
        if stopped and not told:
            child.send_signal(signal.SIGTERM)
            told = True
        if stopped and time.monotonic() - stopped[0] > GRACE_S:
            os.killpg(os.getpgrp(), signal.SIGKILL)  # the run, its children and this guard


if __name__ == "__main__":
    sys.exit(main(sys.argv))
