"""How many examples a property test (hypothesis) tries in this run.

The suite loads the ``suite`` profile (tests/conftest.py): half of hypothesis' default 100 examples, so
``make test`` stays within its time budget on a busy 2-core machine (issue 17: "slow property tests
bounded"). ``pytest --hypothesis-profile=thorough`` tries five times hypothesis' default. A test that
asks for ``n`` examples writes ``max_examples=examples(n)``: ``n`` under hypothesis' default profile,
scaled by the loaded profile.
"""

from __future__ import annotations

from hypothesis import settings

DEFAULT = settings.get_profile("default").max_examples  # hypothesis' own (100)
settings.register_profile("suite", max_examples=DEFAULT // 2)
settings.register_profile("thorough", max_examples=DEFAULT * 5)


def examples(n: int) -> int:
    """``n`` examples scaled by the loaded profile (``n`` itself under hypothesis' default), at least 1."""
    return max(1, round(n * settings.default.max_examples / DEFAULT))
