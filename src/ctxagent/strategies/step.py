"""A pipeline step: its strategy, its trigger, that strategy's parameters, and the strategy itself.

Each strategy is a frozen, typed subclass of :class:`StrategyConfig` whose ``strategy`` field is its
literal name and whose :meth:`~StrategyConfig.apply` is the strategy; declaring it registers it
(:func:`kinds`). A profile's pipeline is a pydantic union of them told apart by ``strategy``
(:data:`ctxagent.strategies.registry.Step`), so an unknown or ill-typed parameter is refused when the
profile loads (:func:`step_error` words it) and the profile's JSON Schema documents every one.

Only pydantic is imported here at run time: the profile's schema and every strategy module import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import ErrorDetails

from ctxagent.errors import UsageError

if TYPE_CHECKING:
    from ctxagent.strategies.base import Entry, Outcome, Scan, StrategyContext

COMMON = frozenset({"strategy", "trigger", "every_turns", "min_turns", "rule"})
"""The keys of a step that are not its strategy's parameters."""

# Parameter types: strict (a YAML "3" or true is not a count), with the unit in the description.
Count = Annotated[int, Field(ge=0, strict=True)]
"""A whole number, 0 or more (tokens, lines, results: the field's description says which)."""
Fraction = Annotated[float, Field(ge=0, strict=True)]
"""A number, 0 or more: a fraction of the context window unless the description says otherwise."""
KeepTurns = Annotated[int, Field(ge=1, strict=True, description=(
    "units (a call with its results, or one message) kept verbatim at the end; at least 1: the newest "
    "unit is the turn in flight, the call the model just made, and is always kept"))]
Target = Annotated[float | None, Field(strict=True, ge=0, description=(
    "fraction of the window at or under which nothing is done; null: the profile's target"))]
UseLlm = Annotated[bool, Field(strict=True, description="write it with the summarizer when one is given")]


class StrategyConfig(BaseModel):
    """One step of a pipeline: the strategy's registered name, when it runs, its parameters.

    The fields of :data:`COMMON` say when it runs (``min_turns``: seed 003, no management under 5
    turns); every other key is a parameter of the strategy, declared by its subclass. ``uses_llm``:
    the strategy may call the summarizer; ``llm_switch``: the boolean parameter that turns that off
    (``llm``, ``rolling``), if it has one; ``batched``: it edits old messages in batches, so the
    pipeline runs it again when another step broke the cached prefix (:mod:`ctxagent.strategies.pipeline`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    uses_llm: ClassVar[bool] = False
    llm_switch: ClassVar[str | None] = None
    batched: ClassVar[bool] = False
    _kinds: ClassVar[dict[str, type[StrategyConfig]]] = {}

    strategy: str
    trigger: float | None = Field(None, ge=0, le=1, description=(
        "fraction of the window the request must be over for the step to run (0: every request; "
        "null: the profile's trigger)"))
    every_turns: int | None = Field(None, ge=1, description="run every N turns instead of on a trigger")
    min_turns: int | None = Field(None, ge=1, description="never run before this turn")
    rule: str | None = Field(None, description="label `inspect context` shows when this step is the last that fires")

    def __new__(cls, *args: Any, **data: Any) -> Any:
        """Built from a name (``StrategyConfig(strategy=NAME, ...)``): the class NAME's strategy
        declares. Raises ``UsageError`` for an unknown name, listing the known ones."""
        if cls is StrategyConfig:
            name = str(data.get("strategy"))
            if name not in StrategyConfig._kinds:
                raise UsageError(f"unknown strategy {name!r}; known: {', '.join(known())}")
            cls = StrategyConfig._kinds[name]
        return super().__new__(cls)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Register a class that names its strategy (a subclass keeping its parent's name is a
        variant of it, not a new strategy). Raises ``TypeError`` for a name another class took."""
        name = cls.model_fields["strategy"].default
        if not isinstance(name, str):
            return
        taken = StrategyConfig._kinds.setdefault(name, cls)
        if not issubclass(cls, taken):
            raise TypeError(f"strategy {name!r} is declared twice: {taken.__qualname__} and {cls.__qualname__}")

    def apply(self, view: list[Entry], ctx: StrategyContext, scan: Scan | None = None) -> Outcome:
        """The strategy, pure: the new view and what to record (:class:`~ctxagent.strategies.base.Outcome`).
        ``view``: oldest first, never changed in place; ``scan``: this step's work for the session (None: afresh)."""
        raise NotImplementedError(f"{type(self).__name__} declares no strategy")

    def needs_llm(self) -> bool:
        """Whether the step may call the LLM (a strategy that uses one, not switched off)."""
        switch = self.llm_switch
        return self.uses_llm and (switch is None or bool(getattr(self, switch)))


def kinds() -> dict[str, type[StrategyConfig]]:
    """The step class of every strategy declared so far (the registry imports them all), sorted by name."""
    return dict(sorted(StrategyConfig._kinds.items()))


def known() -> list[str]:
    """The names of the strategies declared so far, sorted."""
    return list(kinds())


def step_error(error: ErrorDetails) -> tuple[list[str], str] | None:
    """The key path (the union's tag left out) and the message of a pydantic error inside
    ``pipelines``; None for an error elsewhere in the profile."""
    loc = [str(part) for part in error["loc"]]
    if len(loc) < 3 or loc[0] != "pipelines":
        return None
    where, rest = loc[:3], loc[3:]
    kinds = StrategyConfig._kinds
    if error["type"] == "union_tag_invalid":
        return [*where, "strategy"], f"unknown strategy {error['input'].get('strategy')!r}; known: {', '.join(known())}"
    if error["type"] == "union_tag_not_found":
        return [*where, "strategy"], f"a step names its strategy (strategy: NAME); known: {', '.join(known())}"
    if not rest or rest[0] not in kinds:
        return loc, error["msg"]
    name, kind, rest = rest[0], kinds[rest[0]], rest[1:]  # the union's tag is the strategy's name
    if not rest or rest[0] in COMMON:
        return [*where, *rest], error["msg"]
    if error["type"] == "extra_forbidden":
        accepted = ", ".join(sorted(set(kind.model_fields) - COMMON)) or "none"
        return [*where, *rest], f"strategy {name!r} has no parameter {rest[0]!r} (it accepts: {accepted})"
    field = kind.model_fields[rest[0]]
    what = f" ({rest[0]}: {field.description})" if field.description else ""
    message = error["msg"][:1].lower() + error["msg"][1:]
    return [*where, *rest], f"parameter {rest[0]!r} of {name!r}: {message}, not {error['input']!r}{what}"


FACTS_TOKENS = 400
"""Default cap of one facts block, tokens (the ``facts_tokens`` parameter)."""


class LlmStep(StrategyConfig):
    """The parameters of a step that may write its text with the summarizer (an LLM)."""

    uses_llm: ClassVar[bool] = True
    max_tokens: Count = Field(1000, description="tokens of the text the step writes at most")
    chunk_tokens: Count = Field(8000, description="tokens of rendered text per summarizer call (lowered to fit the "
                                "summarizer's window)")


class SummaryStep(LlmStep):
    """An LLM step whose summary is followed by the exact values it lacks; nothing done at or under ``target``."""

    facts_tokens: Count = Field(FACTS_TOKENS, description="tokens of the block of exact values appended to an LLM "
                                "summary (0: no block)")
    target: Target = None


