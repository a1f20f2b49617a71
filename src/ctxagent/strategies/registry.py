"""Every strategy, by name: this module imports every strategy module, so that all step classes are
declared (:func:`ctxagent.strategies.step.kinds`), and derives :data:`Step` from them: what a
profile's pipeline lists, a pydantic union told apart by the ``strategy`` key.
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
from ctxagent.strategies.step import StrategyConfig, kinds

if TYPE_CHECKING:
    Step = StrategyConfig
else:
    Step = Annotated[reduce(operator.or_, kinds().values()), Field(discriminator="strategy")]
    """One pipeline step of any strategy: the union of every step class, by ``strategy``."""
