"""The rich console of ctxagent's human-readable output (tables, the interactive screen).

rich's :class:`rich.console.Console` ends the process with exit status 1 when the reader of its
output leaves (``ctxagent sessions list | head``: ``on_broken_pipe``, rich's documented hook, raises
``SystemExit(1)``): a script could not tell that from a failure. Here the broken pipe is
:class:`~ctxagent.cli.process.StdoutClosed`, which the entry point turns into exit status 141
(128 + SIGPIPE), as for plain output and as shells report a command killed by SIGPIPE.

This is the one module of ctxagent that imports rich (~40 ms with its console; ruff's banned-api
rule keeps it so): the commands import it when they draw for a person, so a batch run, a pipe and
``ctxagent --help`` never load rich. What they use of it is here: :class:`Console`, ``escape``,
``Table``, ``Text``, ``Status``, ``decimal`` (~6 ms more than the console), and, imported when
called, :func:`markdown` (~25 ms) and :func:`progress_bar`.
"""

from __future__ import annotations

from typing import Any

import rich.console
from rich.filesize import decimal
from rich.markup import escape
from rich.status import Status
from rich.table import Table
from rich.text import Text

from ctxagent.cli.process import StdoutClosed

__all__ = ["Console", "Status", "Table", "Text", "decimal", "escape", "markdown", "progress_bar"]


class Console(rich.console.Console):
    """rich's console, whose broken pipe is :class:`StdoutClosed` (exit 141), not ``SystemExit(1)``."""

    def on_broken_pipe(self) -> None:
        """Called by rich when writing raised ``BrokenPipeError``: the reader of stdout left."""
        raise StdoutClosed


def markdown(text: str) -> Any:
    """``text`` as rich Markdown (its 25 ms of imports only when an answer is rendered)."""
    from rich.markdown import Markdown

    return Markdown(text)


def progress_bar() -> Any:
    """The progress bar of ``ctxagent batch`` on a terminal (done / total, the tally, time), on stderr;
    results go to stdout, whole, so it redirects neither stream."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("batch"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                    TimeElapsedColumn(), console=Console(stderr=True), transient=True, redirect_stdout=False,
                    redirect_stderr=False)
