"""The rich console of ctxagent's human-readable output (tables, the interactive screen).

rich's :class:`rich.console.Console` ends the process with exit status 1 when the reader of its
output leaves (``ctxagent sessions list | head``: ``on_broken_pipe``, rich's documented hook, raises
``SystemExit(1)``): a script could not tell that from a failure. Here the broken pipe is
:class:`~ctxagent.cli.process.StdoutClosed`, which the entry point turns into exit status 141
(128 + SIGPIPE), as for plain output and as shells report a command killed by SIGPIPE.
"""

from __future__ import annotations

import rich.console

from ctxagent.cli.process import StdoutClosed


class Console(rich.console.Console):
    """rich's console, whose broken pipe is :class:`StdoutClosed` (exit 141), not ``SystemExit(1)``."""

    def on_broken_pipe(self) -> None:
        """Called by rich when writing raised ``BrokenPipeError``: the reader of stdout left."""
        raise StdoutClosed
