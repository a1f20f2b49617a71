"""Every strategy, by name: the step classes of the strategy modules, and their union.

The registry is the step classes themselves (:func:`ctxagent.strategies.step.kinds`: declaring one
registers it, a name declared twice is refused); this module imports every strategy module so that
all of them are declared, and derives :data:`Step` from them: what a profile's pipeline lists, a
pydantic discriminated union told apart by the ``strategy`` key (an unknown name is refused when the
profile loads).
"""

from __future__ import annotations

import operator
from functools import reduce
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from ctxagent.strategies import (  # noqa: F401 (each module declares its strategy's step class)
    checkpoint,
    dedupe,
    distill,
    mask_observations,
    prune,
    role_selective,
    settle,
    sliding_window,
    summarize,
    truncate,
)
from ctxagent.strategies.step import StrategyConfig, kinds, known

if TYPE_CHECKING:
    Step = StrategyConfig
else:
    Step = Annotated[reduce(operator.or_, kinds().values()), Field(discriminator="strategy")]
    """One pipeline step of any strategy: the union of every step class, by ``strategy``."""

names = known
"""The names of every strategy, sorted."""
