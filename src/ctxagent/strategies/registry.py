"""The one registry of strategies, by name, with a duplicate check."""

from __future__ import annotations

from ctxagent.errors import UsageError
from ctxagent.strategies.base import Strategy
from ctxagent.strategies.checkpoint import Checkpoint
from ctxagent.strategies.dedupe import Dedupe
from ctxagent.strategies.distill import Distill
from ctxagent.strategies.mask_observations import MaskObservations
from ctxagent.strategies.prune import Prune
from ctxagent.strategies.role_selective import RoleSelective
from ctxagent.strategies.sliding_window import SlidingWindow
from ctxagent.strategies.summarize import Summarize
from ctxagent.strategies.truncate import Truncate

_REGISTRY: dict[str, Strategy] = {}


def register(strategy: Strategy) -> Strategy:
    """Add ``strategy`` under its ``name``. Raises ``ValueError`` if the name is taken."""
    if strategy.name in _REGISTRY:
        raise ValueError(f"strategy {strategy.name!r} is registered twice")
    _REGISTRY[strategy.name] = strategy
    return strategy


def get(name: str) -> Strategy:
    """The strategy called ``name``. Raises ``UsageError`` listing the known names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown strategy {name!r}; known: {', '.join(names())}") from None


def names() -> list[str]:
    """Registered strategy names, sorted."""
    return sorted(_REGISTRY)


for _strategy in (Truncate(), MaskObservations(), Summarize(), SlidingWindow(), Checkpoint(), Distill(),
                  Prune(), Dedupe(), RoleSelective()):
    register(_strategy)
