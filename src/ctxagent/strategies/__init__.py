"""Strategies: pure transforms of the view, registered by name, run as per-path pipelines."""

from ctxagent.strategies.base import Budget, Compaction, Entry, Outcome, Strategy, StrategyContext
from ctxagent.strategies.registry import get, names, register

__all__ = [
    "Budget",
    "Compaction",
    "Entry",
    "Outcome",
    "Strategy",
    "StrategyContext",
    "get",
    "names",
    "register",
]
