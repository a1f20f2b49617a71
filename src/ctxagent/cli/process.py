"""What one ``ctxagent`` process shares between its entry point and its commands (kept import-free:
``ctxagent --help`` imports it)."""

from __future__ import annotations

STARTED: float | None = None  # set by cli.invoke for one command: its wall time (--max-wall-s) counts start-up too


class Interrupted(KeyboardInterrupt):
    """A signal that ends a run like Ctrl-C (SIGTERM, SIGHUP); ``signum`` is its number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """129 for SIGHUP (128 + 1, as shells report it); 130, Ctrl-C's, for the others."""
        return 129 if self.signum == 1 else 130


class StdoutClosed(Exception):
    """The reader of stdout left (EPIPE: ``ctxagent ... | head``); not an error of ours (exit 141)."""
