"""The fork server's own set-up: the first module it preloads (batch/forkserver.py), imported by that
server only, for what its import does.

Why at import, in a module of its own: ``multiprocessing``'s public API lets a program tell its fork
server only which modules to import (``set_forkserver_preload``); no function of ours runs there
before them. So this set-up is this module's body, and it is first in the list, before the imports
that take seconds. It needs nothing but ``os`` and ``signal``: the packages above it
(``ctxagent/__init__.py``, ``ctxagent/batch/__init__.py``) import nothing, so it runs within
milliseconds of the server's start.

- SIGINT ignored: a Ctrl-C at the terminal reaches the whole process group, and the standard
  library's server ignores it only after its imports: it died, and the batch ended with exit 1 and
  no results.
- stdin, stdout and stderr on ``/dev/null``: every task holds the batch's end of the server's life
  line, so after a ``kill -9`` of the batch the server lives until the last task ends; it held the
  batch's stdout, and a reader of the batch's output waited that long.

Tasks forked from it set up their own signals and streams. Then the tokenizer of most models
(``o200k_base``) is built once, here, for every task forked after it (~0.25 s a task otherwise:
ctxagent.tokens).

Never import it anywhere else: in any other process it would detach that process's streams.
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
