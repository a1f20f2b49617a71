"""A pipeline step: its strategy, its trigger, and that strategy's parameters, as one typed model.

Each strategy declares its parameters as a subclass of :class:`StrategyConfig` (``TruncateStep``,
``SummarizeStep``, ...) whose ``strategy`` field is the literal name it is registered under; a
profile's pipeline is a list of those, told apart by ``strategy`` (a pydantic discriminated union,
:data:`ctxagent.strategies.registry.Step`). So a parameter is checked, typed and documented where it
is declared: an unknown one, or one of the wrong type, is refused when the profile is loaded (with
its file, line and key; :func:`step_error` words the message), and the profile's JSON Schema
describes every strategy's parameters.

``StrategyConfig(strategy=NAME, **params)`` builds the step class of NAME (for code that builds a
step from a name); the classes themselves (``TruncateStep(target=0.3)``) are the typed way.

Only pydantic is imported here: the profile's schema and every strategy module import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import ErrorDetails

S = TypeVar("S", bound="StrategyConfig")

COMMON = frozenset({"strategy", "trigger", "every_turns", "min_turns", "rule"})
"""The keys of a step that are not its strategy's parameters."""

# Parameter types: strict (a YAML "3" or true is not a count), with the unit in the description.
Count = Annotated[int, Field(ge=0, strict=True)]
"""A whole number, 0 or more (tokens, lines, results: the field's description says which)."""
Fraction = Annotated[float, Field(ge=0, strict=True)]
"""A number, 0 or more: a fraction of the context window unless the description says otherwise."""
Switch = Annotated[bool, Field(strict=True)]
KeepTurns = Annotated[int, Field(ge=1, strict=True, description=(
    "units (a call with its results, or one message) kept verbatim at the end; at least 1: the newest "
    "unit is the turn in flight, the call the model just made, and is always kept"))]
Target = Annotated[float | None, Field(strict=True, ge=0, description=(
    "fraction of the window at or under which nothing is done; null: the profile's target"))]
MaxTokens = Annotated[int, Field(ge=0, strict=True, description="tokens of the text the step writes at most")]
ChunkTokens = Annotated[int, Field(ge=0, strict=True, description=(
    "tokens of rendered text per summarizer call (lowered to fit the summarizer's window)"))]
FactsTokens = Annotated[int, Field(ge=0, strict=True, description=(
    "tokens of the block of exact values appended to an LLM summary (0: no block)"))]
UseLlm = Annotated[bool, Field(strict=True, description="write it with the summarizer when one is given")]


class StrategyConfig(BaseModel):
    """One step of a pipeline: the strategy's registered name, when it runs, its parameters.

    ``trigger`` is a fraction of the context window; the step runs only when the request is over
    it (``None``: the profile's ``trigger``; ``0``: on every request). ``every_turns`` runs it on a
    turn count instead. ``min_turns``: the step never runs before that turn (seed 003: no management
    under 5 turns). ``rule``: a label ``inspect context`` shows for the step when it is the last one
    that fires (the selection rule in force, e.g. the ``adaptive`` profile's). Every other key is a
    parameter of the strategy, declared by its subclass.

    ``uses_llm``: the strategy may call the summarizer; ``llm_switch``: the boolean parameter that
    turns that off (``llm``, ``rolling``), if it has one.
    """

    model_config = ConfigDict(extra="forbid")
    uses_llm: ClassVar[bool] = False
    llm_switch: ClassVar[str | None] = None
    _kinds: ClassVar[dict[str, type[StrategyConfig]]] = {}

    strategy: str
    trigger: float | None = Field(None, ge=0, le=1, description=(
        "fraction of the window the request must be over for the step to run (0: every request; "
        "null: the profile's trigger)"))
    every_turns: int | None = Field(None, ge=1, description="run every N turns instead of on a trigger")
    min_turns: int | None = Field(None, ge=1, description="never run before this turn")
    rule: str | None = Field(None, description="label `inspect context` shows when this step is the last that fires")

    def __new__(cls, *args: Any, **data: Any) -> Any:
        if cls is StrategyConfig:  # built from a name: the class that name's strategy declares
            cls = StrategyConfig._kinds.get(str(data.get("strategy")), cls)
        return super().__new__(cls)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        name = cls.model_fields["strategy"].default
        if isinstance(name, str):
            StrategyConfig._kinds[name] = cls

    @classmethod
    def of(cls: type[S], params: StrategyConfig | Mapping[str, Any]) -> S:
        """``params`` as this step class: itself when it is one, else validated from a mapping of
        parameters (defaults for the missing ones). Raises ``pydantic.ValidationError`` for a bad
        mapping and ``TypeError`` for a step of another strategy."""
        if isinstance(params, cls):
            return params
        if isinstance(params, StrategyConfig):
            raise TypeError(f"a {params.strategy!r} step is not a {cls.__name__}")
        return cls.model_validate(dict(params))

    def params(self) -> dict[str, Any]:
        """The strategy's parameters the step sets (every key but ``strategy``, ``trigger``,
        ``every_turns``, ``min_turns``, ``rule``; defaults left out)."""
        return {key: getattr(self, key) for key in sorted(self.model_fields_set - COMMON)}

    def needs_llm(self) -> bool:
        """Whether the step may call the LLM (a strategy that uses one, not switched off)."""
        switch = self.llm_switch
        return self.uses_llm and (switch is None or bool(getattr(self, switch)))


def known() -> list[str]:
    """The names of the strategies that declared a step class, sorted."""
    return sorted(StrategyConfig._kinds)


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
    kind, rest = kinds[rest[0]], rest[1:]
    name = kind.model_fields["strategy"].default
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
    max_tokens: MaxTokens = 1000
    chunk_tokens: ChunkTokens = 8000


class SummaryStep(LlmStep):
    """An LLM step whose summary is followed by the exact values it lacks, and which does nothing
    at or under its target."""

    facts_tokens: FactsTokens = FACTS_TOKENS
    target: Target = None


class Declared:
    """Base of a strategy class: ``class Truncate(Declared, params=TruncateStep)`` sets ``Params``
    (its step class) and ``name`` (that class's ``strategy``), so the name is written once."""

    Params: ClassVar[type[StrategyConfig]]
    name: ClassVar[str]

    def __init_subclass__(cls, params: type[StrategyConfig] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if params is not None:
            cls.Params, cls.name = params, str(params.model_fields["strategy"].default)
