"""Budgets: a circuit breaker on tokens, money and wall time (law BOUNDED, DESIGN.md).

Before every model request, :meth:`Breaker.check` adds the request's worst case to the spend: its
estimated prompt, the whole reply reserve as output, both priced at the model's *uncached* prices, and
for wall time the time already spent. A request that would cross a limit is never sent (:class:`Crossing`).
Limits, scopes and what a stop writes: docs/agents.md, "Budgets".
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from ctxagent.agent.state import SessionState
from ctxagent.errors import LimitReached, UsageError
from ctxagent.profile_schema import Limits
from ctxagent.sessions.outcome import Usage

UNITS = {"max_input_tokens": "prompt_tokens", "max_output_tokens_total": "completion_tokens",
         "max_cost_usd": "cost_usd", "max_wall_s": "wall_s"}  # each limit key and the Spend field it bounds

FLAGS = {key: "--" + key.replace("_", "-") for key in UNITS}  # each limit's command-line flag for a run


@dataclass
class Spend(Usage):
    """What was spent (or what one request may spend): :class:`Usage` totals (tokens, US dollars, model
    calls) and the ``wall_s`` seconds they took. Treated as a value: never mutated."""

    wall_s: float = 0.0

    @classmethod
    def of(cls, usage: Usage, wall_s: float) -> Spend:
        return cls(**{f.name: getattr(usage, f.name) for f in fields(Usage)}, wall_s=wall_s)

    def amount(self, key: str) -> float:
        """The amount limit ``key`` (``max_cost_usd``...) bounds."""
        return float(getattr(self, UNITS[key]))

    def minus(self, other: Spend) -> Spend:
        """This spend less ``other`` (wall time kept: it is measured, not summed)."""
        less = {f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(Usage)}
        return Spend(**{**less, "cost_usd": round(less["cost_usd"], 9)}, wall_s=self.wall_s)

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` usage object: ``prompt_tokens``, ``completion_tokens``, ``cached_tokens``
        (tokens), ``cost_usd`` (None when no call had a known price), ``calls``, ``wall_s``."""
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "cached_tokens": self.cached_tokens, "cost_usd": round(self.cost_usd, 6) if self.priced else None,
                "calls": self.calls, "wall_s": round(self.wall_s, 3)}


def shown(key: str, amount: float) -> str:
    """``amount`` in the unit of limit ``key``: ``1,234 tokens``, ``$0.0123``, ``12.5 s``."""
    if key == "max_cost_usd":
        return f"${amount:.4f}"
    if key == "max_wall_s":
        return f"{amount:.1f} s"
    return f"{amount:,.0f} tokens"


@dataclass(frozen=True)
class Crossing:
    """The limit the next request would cross, what was ``spent`` and what the request ``needs`` (its worst case)."""

    scope: str
    key: str
    limit: float
    spent: float
    needs: float

    @property
    def left(self) -> float:
        return max(0.0, self.limit - self.spent)

    def error(self, session: str) -> LimitReached:
        """The ``LimitReached`` (status ``budget``) that ends the run, its message saying how to go on."""
        raise_it = (f"{FLAGS[self.key]} N" if self.scope == "run" else f"--session-limit {self.key}=N")
        need = "" if self.key == "max_wall_s" else \
            f", and the next request could need up to {shown(self.key, self.needs)}"
        return LimitReached(
            f"budget: the {self.scope}'s {self.key} is {shown(self.key, self.limit)}; spent "
            f"{shown(self.key, self.spent)}, {shown(self.key, self.left)} left{need}; the request was not sent. "
            f"'ctxagent resume --session {session}' continues ({raise_it} raises the limit)",
            bound="budget", fields=self.fields())

    def fields(self) -> dict[str, Any]:
        """The end record's fields naming this crossing."""
        return {"limit": f"{self.scope}.{self.key}", "spent": round(self.spent, 6), "left": round(self.left, 6)}


class Breaker:
    """The ``run`` and ``session`` limits in force for one run, and its clock; ``state``: the session
    state at the run's start (the base the run's spend is counted from)."""

    def __init__(self, run: Limits, session: Limits, state: SessionState, *, warn_at: float = 0.8,
                 clock: Callable[[], float] = time.monotonic, started: float | None = None):
        self.run, self.session, self.warn_at, self.clock = run.set(), session.set(), warn_at, clock
        self.started = self._lap = clock() if started is None else started  # the process start, from the CLI
        self.base = Spend.of(state.usage, state.wall_s)
        self.warned: set[str] = set()

    def lap(self) -> float:
        """Seconds since the run started or since the last lap (an end record's ``wall_s``)."""
        now = self.clock()
        seconds, self._lap = now - self._lap, now
        return round(seconds, 3)

    def session_spend(self, state: SessionState) -> Spend:
        """The session's spend so far, this run's time included."""
        return Spend.of(state.usage, state.wall_s + self.clock() - self._lap)

    def run_spend(self, state: SessionState) -> Spend:
        """This run's spend so far."""
        return replace(self.session_spend(state).minus(self.base), wall_s=self.clock() - self.started)

    def left(self, state: SessionState) -> dict[str, float]:
        """What is left of each limited amount, the smaller of the run's and the session's, by key."""
        left: dict[str, float] = {}
        for _, key, limit, spent in self._each(state):
            left[key] = min(left.get(key, limit), max(0.0, limit - spent))
        return left

    def limits(self) -> dict[str, dict[str, float]]:
        """The limits in force by scope: ``{"run": {...}, "session": {...}}``."""
        return {"run": dict(self.run), "session": dict(self.session)}

    def check(self, state: SessionState, tokens: int, output: int, price: float | None) -> Crossing | None:
        """The first limit a request of ``tokens`` prompt tokens, ``output`` reply tokens at most and
        ``price`` US dollars would cross, or None."""
        request = Spend(prompt_tokens=tokens, completion_tokens=output, cost_usd=price or 0.0)
        for scope, key, limit, spent in self._each(state):
            if spent + request.amount(key) > limit:
                return Crossing(scope, key, limit, spent, request.amount(key))
        return None

    def due(self, state: SessionState) -> list[str]:
        """Warnings of limits now spent to ``warn_at`` or more, each said once per run."""
        warnings: list[str] = []
        for scope, key, limit, spent in self._each(state):
            if spent >= self.warn_at * limit and f"{scope}.{key}" not in self.warned:
                self.warned.add(f"{scope}.{key}")
                warnings.append(f"the {scope} has spent {spent / limit:.0%} of its {key} "
                                f"({shown(key, spent)} of {shown(key, limit)})")
        return warnings

    def _each(self, state: SessionState) -> Iterator[tuple[str, str, float, float]]:
        """(scope, key, limit, amount spent) of every limit in force, the run's first."""
        for scope, limits, spend in (("run", self.run, self.run_spend(state)),
                                     ("session", self.session, self.session_spend(state))):
            for key, limit in limits.items():
                yield scope, key, limit, spend.amount(key)


def session_limits(profile: Limits, recorded: Mapping[str, float | None]) -> Limits:
    """The session limits in force: the profile's, with the ones the command line recorded instead
    (a recorded None removes the profile's)."""
    merged: dict[str, float | None] = {**profile.set(), **recorded}
    return Limits.model_validate({k: v for k, v in merged.items() if v is not None})


def parse_limits(items: list[str] | None, flag: str = "--session-limit") -> dict[str, float | None]:
    """``KEY=VALUE`` items (``max_cost_usd=2``) as limits, checked like the profile's keys; ``KEY=none``
    removes a limit the session recorded (value None). Raises ``UsageError`` naming the bad item."""
    out: dict[str, float | None] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in UNITS:
            raise UsageError(f"{flag} {item!r}: give KEY=VALUE with KEY one of {', '.join(UNITS)}")
        if value.strip().lower() in ("none", "off"):
            out[key] = None
            continue
        try:
            number = float(value)
        except ValueError:
            raise UsageError(f"{flag} {item!r}: {value!r} is not a number (or 'none' to remove the limit)") from None
        check_limit(f"{flag} {item}", key, number)
        out[key] = int(number) if key in ("max_input_tokens", "max_output_tokens_total") else number
    return out


def check_limit(where: str, key: str, value: float) -> None:
    """``UsageError`` unless ``value`` is a limit ``key`` can have: finite, above 0, whole for tokens."""
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{where}: a limit is a finite number above 0")
    if key in ("max_input_tokens", "max_output_tokens_total") and not float(value).is_integer():
        raise UsageError(f"{where}: {key} is a whole number of tokens")
