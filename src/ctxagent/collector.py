"""Pausing CPython's cyclic garbage collector around work that makes many long-lived objects and no
garbage cycles (a fold of a transcript, litellm's import). The collector otherwise walks the growing
heap again and again as the objects pile up: a third of a 10,000-message resume, and ~1 s of a plain
``import litellm`` here. A leaf module (standard library only)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused(*, freeze: bool = False) -> Iterator[None]:
    """Disable the cyclic collector inside the block; after it, with ``freeze``, move every object
    alive to the permanent generation (``gc.freeze``: no later collection walks them), then leave
    the collector as it was (re-entrant)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if was:
            gc.enable()
