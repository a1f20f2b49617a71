"""Profile-load checks of the pipelines: known strategies, accepted parameters, no LLM on batch paths.

Source of the rule (DESIGN.md, "Knowledge"; issue 3): LLM summarization belongs to interactive
paths; on batch paths it adds latency and cost per compression and can invent tool results, so a
batch pipeline that names a strategy calling an LLM is rejected when the profile is loaded,
unless the profile sets ``allow_llm_in_batch: true``.

A strategy declares the parameters it accepts as ``params: dict[name, default]``; one whose use
of the LLM depends on them (``llm: false``, ``rolling: false``) has ``needs_llm(params) -> bool``,
else its ``uses_llm`` attribute decides.

Parameters named in :data:`MINIMUMS` have a floor whatever the strategy: ``keep_turns`` is at
least 1, because the newest unit is the turn in flight (the call the model just made and its
results); a range strategy that replaced it would answer the model with a summary of its own call.

Thrash guard (:func:`check_gaps`): the profile's ``target`` and every step that compacts to a
target at a trigger keep ``trigger - target >= MIN_GAP`` (see :data:`ctxagent.profile_schema.MIN_GAP`).
"""

from __future__ import annotations

from typing import Any

from ctxagent.errors import ProfileError
from ctxagent.profile_schema import Profile, StrategyConfig, thrash_problem
from ctxagent.strategies import registry
from ctxagent.strategies.base import Strategy

MINIMUMS: dict[str, tuple[int, str]] = {
    "keep_turns": (1, "the newest unit is the turn in flight, the call the model just made: it is always kept"),
}


def accepted_params(strategy: Strategy) -> dict[str, Any] | None:
    """The parameters ``strategy`` accepts with their defaults; None when unknown (not checked)."""
    declared = getattr(strategy, "params", None)
    return declared if isinstance(declared, dict) else None


def llm_needed(strategy: Strategy, params: dict[str, Any]) -> bool:
    """Whether a pipeline step of ``strategy`` with ``params`` may call the LLM."""
    needs = getattr(strategy, "needs_llm", None)
    return bool(needs(params)) if callable(needs) else bool(strategy.uses_llm)


def _type_problem(value: Any, default: Any) -> str | None:
    """Why ``value`` does not fit a parameter whose default is ``default``; None when it does."""
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "must be true or false"
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(default, int):
        return None if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
            else "must be a whole number, 0 or more"
    if isinstance(default, float) or default is None:
        if value is None and default is None:
            return None
        return None if number and value >= 0 else "must be a number, 0 or more"
    return None


def _minimum_problem(name: str, value: Any) -> str | None:
    """Why ``value`` is under the floor :data:`MINIMUMS` sets for parameter ``name``; None when it is not."""
    floor = MINIMUMS.get(name)
    if floor is None or not isinstance(value, int | float) or value >= floor[0]:
        return None
    return f"must be at least {floor[0]} ({floor[1]})"


def check_gaps(profile: Profile, source: str | None = None) -> None:
    """The thrash guard: ``ProfileError`` (key ``target``, ``trigger`` or the step's) when the profile's
    target, or a step's target (its ``target`` parameter, else the profile's) at its trigger (its
    ``at``, else its ``trigger``, else the profile's), is closer than ``MIN_GAP`` below it. Steps that
    run on every request (``trigger: 0``) or on a turn count (``every_turns``) have no trigger to keep."""
    where = source or f"<profile:{profile.name}>"
    problem = thrash_problem(profile.target, profile.trigger)
    if problem:
        key = "target" if "target" in profile.model_fields_set or "trigger" not in profile.model_fields_set \
            else "trigger"
        raise ProfileError(problem, path=where, key=key)
    for path, steps in profile.pipelines.items():
        for index, step in enumerate(steps):
            _check_step_gap(profile, step, f"pipelines.{path}.{index}", where)


def _check_step_gap(profile: Profile, step: StrategyConfig, key: str, where: str) -> None:
    """:func:`check_gaps` for one step of a strategy that has a ``target`` parameter."""
    accepted = accepted_params(registry.get(step.strategy)) if step.strategy in registry.names() else None
    if accepted is None or "target" not in accepted or step.every_turns:
        return
    params = step.params()
    at, target = params.get("at"), params.get("target")
    trigger = at if isinstance(at, int | float) and at > 0 else step.trigger
    trigger = profile.trigger if trigger is None else trigger
    if not trigger or not isinstance(target, int | float | None):
        return
    problem = thrash_problem(profile.target if target is None else float(target), float(trigger))
    if problem:
        name = "target" if target is not None else "at" if "at" in params else "trigger"
        raise ProfileError(f"{step.strategy!r}: {problem}", path=where, key=f"{key}.{name}")


def check_pipelines(profile: Profile, source: str | None = None) -> None:
    """Check every step of ``profile``'s pipelines.

    ``source`` names the profile in errors (its file or ``<bundled:NAME>``; default the profile's
    name). Raises ``ProfileError`` (key ``pipelines.PATH.INDEX[.PARAM]``) for an unknown strategy,
    a parameter the strategy does not accept or of the wrong type, or a batch step that may call
    an LLM while ``allow_llm_in_batch`` is false.
    """
    where = source or f"<profile:{profile.name}>"
    known = registry.names()
    for path, steps in profile.pipelines.items():
        for index, step in enumerate(steps):
            key = f"pipelines.{path}.{index}"
            if step.strategy not in known:
                raise ProfileError(f"unknown strategy {step.strategy!r}; known: {', '.join(known)}",
                                   path=where, key=f"{key}.strategy")
            strategy = registry.get(step.strategy)
            params = step.params()
            accepted = accepted_params(strategy)
            if accepted is not None:
                for name, value in params.items():
                    if name not in accepted:
                        names = ", ".join(sorted(accepted)) or "none"
                        raise ProfileError(f"strategy {step.strategy!r} has no parameter {name!r} "
                                           f"(it accepts: {names})", path=where, key=f"{key}.{name}")
                    problem = _type_problem(value, accepted[name]) or _minimum_problem(name, value)
                    if problem:
                        raise ProfileError(f"parameter {name!r} of {step.strategy!r} {problem}, not "
                                           f"{value!r}", path=where, key=f"{key}.{name}")
            if path == "batch" and not profile.allow_llm_in_batch and llm_needed(strategy, params):
                raise ProfileError(
                    f"the batch pipeline names {step.strategy!r}, which calls an LLM; batch paths never "
                    f"pay for compression calls. Use a deterministic strategy (truncate, "
                    f"mask_observations, prune, ...), turn its LLM off (llm: false / rolling: false "
                    f"where it has one) or set allow_llm_in_batch: true",
                    path=where, key=f"{key}.strategy")
