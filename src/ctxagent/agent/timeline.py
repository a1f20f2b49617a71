"""A session's requests over time, read from its transcript records only: what ``ctxagent report``
draws (docs/usage.md, "Where the tokens went"). Reads the transcript once; never imports litellm.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ctxagent.agent.setup import session_profile
from ctxagent.errors import ProfileError
from ctxagent.sessions import records
from ctxagent.sessions.outcome import Usage
from ctxagent.sessions.records import Settings


@dataclass(frozen=True)
class Request:
    """One model call of the agent; all counts are tokens."""

    index: int  # from 1
    turn: int
    prompt: int  # the provider's count, of which cached were served by its prompt cache
    cached: int
    completion: int
    estimated: int  # ours, before the call
    cost_usd: float | None  # None: unpriced
    window: int  # in force then
    reserved: int  # the reply's reserve in force then

    @property
    def uncached(self) -> int:
        return self.prompt - self.cached


@dataclass(frozen=True)
class Mark:
    """A compaction or an offload, before request ``before`` (1-based; one past the last request
    when no request came after it). ``name``: the strategy, or the handle; ``detail``: one line."""

    kind: Literal["compaction", "offload"]
    before: int
    name: str
    detail: str


@dataclass
class Timeline:
    """A session's requests, marks and spend, in transcript order (see the module docstring)."""

    session: str
    model: str = ""
    requests: list[Request] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    spend: dict[str, Usage] = field(default_factory=dict)  # by model
    runs: list[str] = field(default_factory=list)  # the end records' reasons, in order

    @property
    def cost_usd(self) -> float | None:
        priced = [s.cost_usd for s in self.spend.values() if s.priced]
        return sum(priced) if priced else None


def timeline(name: str, items: Iterable[Any]) -> Timeline:
    """The :class:`Timeline` of session ``name`` from its transcript records ``items`` (oldest first).
    Raises ``ProfileError`` when no profile a session names can be read (the reserve comes from it)."""
    out = Timeline(name)
    settings: Settings | None = None
    reserved = 0
    for record in items:
        if isinstance(record, records.SessionHeader | records.SettingsRecord):
            settings = Settings.of(record) if isinstance(record, records.SessionHeader) else \
                settings.changed(record) if settings is not None else None
            if settings is not None:
                out.model, reserved = settings.model, _reserve(settings, reserved)
        elif isinstance(record, records.UsageRecord):
            out.spend.setdefault(record.model, Usage()).add(record)
            if settings is not None and not record.model.startswith(("summarizer:", "agent:")):  # the agent's own
                out.requests.append(Request(len(out.requests) + 1, record.turn, record.prompt_tokens,
                                            record.cached_tokens, record.completion_tokens,
                                            record.estimated_prompt_tokens, record.cost_usd,
                                            settings.context_window, reserved))
        elif isinstance(record, records.CompactionRecord):
            out.marks.append(Mark("compaction", len(out.requests) + 1, record.strategy,
                                  f"{record.strategy}: messages #{record.start}-#{record.end}, "
                                  f"{record.tokens_before:,} -> {record.tokens:,} tokens"))
        elif isinstance(record, records.OutputRecord):
            source = f"output of {record.tool}" if record.tool else "stored when compacted"
            out.marks.append(Mark("offload", len(out.requests) + 1, record.handle,
                                  f"{record.handle}: {source}, {record.bytes:,} bytes, {record.tokens:,} tokens"))
        elif isinstance(record, records.EndRecord):
            out.runs.append(record.reason)
    return out


def _reserve(settings: Settings, before: int) -> int:
    """The reply's reserve (tokens) under ``settings``' profile; ``before`` when it cannot be read."""
    try:
        profile = session_profile(settings)
    except ProfileError:
        return before
    return profile.reply_tokens(settings.context_window, settings.max_output_tokens) + profile.margin_tokens
