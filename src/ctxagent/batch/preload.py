"""The fork server's own set-up (batch/forkserver.py), done by importing this module, in that server only.

A module because ``multiprocessing``'s public API lets a program name only the modules its fork
server imports (``set_forkserver_preload``); this one is first, and the packages above it import only
``typing`` and ``importlib``, so it runs before the imports that take seconds:

- SIGINT ignored: a Ctrl-C at the terminal reaches the whole process group, and the standard
  library's server ignores it only after its imports: it died, and the batch ended with exit 1 and
  no results;
- stdin, stdout and stderr on ``/dev/null``: every task holds the batch's end of the server's life
  line, so after a ``kill -9`` of the batch the server lives until its last task ends; holding the
  batch's stdout, it made a reader of the batch's output wait that long.

Then the tokenizer of most models (``o200k_base``) is built once for every task (~0.25 s a task
otherwise). Tasks set up their own signals and streams. Never import this module elsewhere: it would
detach that process's streams.
"""

import os
import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
_null = os.open(os.devnull, os.O_RDWR)
for _fd in (0, 1, 2):
    os.dup2(_null, _fd)
os.close(_null)

from ctxagent import tokens  # noqa: E402 (after the set-up above, which must come first)

tokens.encoding("o200k_base")
