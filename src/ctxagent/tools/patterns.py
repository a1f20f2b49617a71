"""Regular expressions a tool runs on the model's behalf, bounded in time.

A pattern from the model can backtrack without end (``(a+)+b`` on forty ``a``): one such search hung a
``query_output`` call for over 300 s. So every tool that matches a model's pattern compiles it with the
``regex`` package (Python ``re`` syntax, imported on a first search) and runs it as :class:`Timed`, whose
searches share one :class:`Budget` of seconds per call and raise ``TimeoutError`` when it runs out.
"""

from __future__ import annotations

import time
from typing import Any

from ctxagent.tools.base import ToolError

SECONDS = 10.0  # the time budget of one tool call's pattern matching


def compile_pattern(pattern: str) -> Any:
    """``pattern`` compiled by the ``regex`` package (Python ``re`` syntax). Raises ``ToolError``
    naming the problem."""
    import regex

    try:
        return regex.compile(pattern)
    except (regex.error, OverflowError, RecursionError) as err:
        raise ToolError(f"invalid regex {pattern!r}: {err}") from err


class Budget:
    """:data:`SECONDS` a tool call's pattern matching may take in all, from now."""

    def __init__(self) -> None:
        self.seconds, self.end = SECONDS, time.monotonic() + SECONDS

    def left(self) -> float:
        """Seconds left (> 0); ``TimeoutError`` once there are none."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left


class Timed:
    """A compiled ``regex`` pattern whose searches and substitutions spend ``budget``; each raises
    ``TimeoutError`` when it runs out."""

    def __init__(self, pattern: Any, budget: Budget):
        self.pattern, self.budget = pattern, budget

    def search(self, text: str) -> Any:
        return self.pattern.search(text, timeout=self.budget.left())

    def sub(self, repl: str, text: str) -> str:
        return self.pattern.sub(repl, text, timeout=self.budget.left())  # type: ignore[no-any-return]


def too_slow(tool: str, pattern: str, where: str, budget: Budget) -> ToolError:
    """The error a tool answers with when ``pattern`` used up ``budget`` on ``where``."""
    return ToolError(f"{tool} gave up after {budget.seconds:g} s: the pattern {pattern!r} is too slow on {where} "
                     "(nested repetition like (a+)+ backtracks without end); simplify it")
