"""The rich console of ctxagent's human-readable output: the one module that imports rich (~40 ms;
ruff's banned-api rule keeps it so), so a batch run, a pipe and ``ctxagent --help`` never load it.

rich's console ends the process with exit status 1 when the reader of its output leaves
(``on_broken_pipe``); here that is :class:`~ctxagent.cli.process.StdoutClosed`, exit 141 (128 +
SIGPIPE), as for plain output.
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
    """The progress bar of ``ctxagent batch`` on stderr (results go to stdout: it redirects neither stream)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("batch"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                    TimeElapsedColumn(), console=Console(stderr=True), transient=True, redirect_stdout=False,
                    redirect_stderr=False)
