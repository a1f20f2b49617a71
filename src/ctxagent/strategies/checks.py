"""Profile-load checks of the pipelines beyond the step types: no LLM on batch paths, no thrashing.

Source of the rule (DESIGN.md, "Knowledge"; issue 3): LLM summarization belongs to interactive
paths; on batch paths it adds latency and cost per compression and can invent tool results, so a
batch step that may call an LLM (:meth:`~ctxagent.strategies.step.StrategyConfig.needs_llm`) is
refused unless the profile sets ``allow_llm_in_batch: true``. The thrash guard (:func:`check_gaps`)
keeps ``trigger - target >= MIN_GAP`` (:data:`ctxagent.profile_schema.MIN_GAP`) for the profile and
every step that compacts to a target at a trigger.
"""

from __future__ import annotations

from ctxagent.errors import ProfileError
from ctxagent.profile_schema import Profile, thrash_problem
from ctxagent.strategies.step import StrategyConfig


def check_gaps(profile: Profile, source: str | None = None) -> None:
    """The thrash guard: ``ProfileError`` (key ``target``, ``trigger`` or the step's) when the profile's
    target, or a step's target (its ``target`` parameter, else the profile's) at its trigger (its
    ``at``, else its ``trigger``, else the profile's), is closer than ``MIN_GAP`` below it. Steps that
    run on every request (``trigger: 0``) or on a turn count (``every_turns``) have no trigger to keep."""
    where = source or f"<profile:{profile.name}>"
    problem = thrash_problem(profile.target, profile.trigger)
    if problem:
        fields = profile.model_fields_set
        key = "target" if "target" in fields or "trigger" not in fields else "trigger"
        raise ProfileError(problem, path=where, key=key)
    for path, steps in profile.pipelines.items():
        for index, step in enumerate(steps):
            _check_step_gap(profile, step, f"pipelines.{path}.{index}", where)


def _check_step_gap(profile: Profile, step: StrategyConfig, key: str, where: str) -> None:
    """:func:`check_gaps` for one step of a strategy that has a ``target`` parameter."""
    if "target" not in type(step).model_fields or step.every_turns:
        return
    at: float | None = getattr(step, "at", None)
    target: float | None = getattr(step, "target", None)
    trigger = at or (profile.trigger if step.trigger is None else step.trigger)
    if not trigger:
        return
    problem = thrash_problem(profile.target if target is None else target, trigger)
    if problem:
        name = "target" if target is not None else "at" if "at" in step.model_fields_set else "trigger"
        raise ProfileError(f"{step.strategy!r}: {problem}", path=where, key=f"{key}.{name}")


def check_pipelines(profile: Profile, source: str | None = None) -> None:
    """Check that no batch step of ``profile`` may call an LLM unless ``allow_llm_in_batch`` is set. Raises
    ``ProfileError`` (key ``pipelines.batch.INDEX.strategy``; ``source`` names the file, default the profile)."""
    where = source or f"<profile:{profile.name}>"
    for index, step in enumerate(profile.pipeline("batch")):
        if not profile.allow_llm_in_batch and step.needs_llm():
            raise ProfileError(
                f"the batch pipeline names {step.strategy!r}, which calls an LLM; batch paths never "
                f"pay for compression calls. Use a deterministic strategy (truncate, "
                f"mask_observations, prune, ...), turn its LLM off (llm: false / rolling: false "
                f"where it has one) or set allow_llm_in_batch: true",
                path=where, key=f"pipelines.batch.{index}.strategy")
