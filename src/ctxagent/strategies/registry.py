"""The one registry of strategies, by name, with a duplicate check, and the union of their step classes.

:data:`Step` is what a profile's pipeline lists: a pydantic discriminated union of every strategy's
step class, told apart by its ``strategy`` key (an unknown name is refused when the profile loads).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ctxagent.errors import UsageError
from ctxagent.strategies.base import Strategy
from ctxagent.strategies.checkpoint import Checkpoint, CheckpointStep
from ctxagent.strategies.dedupe import Dedupe, DedupeStep
from ctxagent.strategies.distill import Distill, DistillStep
from ctxagent.strategies.mask_observations import MaskObservations, MaskObservationsStep
from ctxagent.strategies.prune import Prune, PruneStep
from ctxagent.strategies.role_selective import RoleSelective, RoleSelectiveStep
from ctxagent.strategies.settle import Settle, SettleStep
from ctxagent.strategies.sliding_window import SlidingWindow, SlidingWindowStep
from ctxagent.strategies.summarize import Summarize, SummarizeStep
from ctxagent.strategies.truncate import Truncate, TruncateStep

Step = Annotated[
    TruncateStep | MaskObservationsStep | SummarizeStep | SlidingWindowStep | CheckpointStep | DistillStep
    | PruneStep | DedupeStep | RoleSelectiveStep | SettleStep,
    Field(discriminator="strategy"),
]
"""One pipeline step of any registered strategy (every ``Params`` of :data:`_REGISTRY`, a test checks)."""

_REGISTRY: dict[str, Strategy] = {}


def register(strategy: Strategy) -> Strategy:
    """Add ``strategy`` under its ``name``. Raises ``ValueError`` if the name is taken or is not the
    ``strategy`` of its ``Params``."""
    if strategy.name in _REGISTRY:
        raise ValueError(f"strategy {strategy.name!r} is registered twice")
    if strategy.Params.model_fields["strategy"].default != strategy.name:
        raise ValueError(f"strategy {strategy.name!r} declares the parameters of another strategy")
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
                  Prune(), Dedupe(), RoleSelective(), Settle()):
    register(_strategy)
