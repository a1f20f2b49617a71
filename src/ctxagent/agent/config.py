"""What a run is opened with: one frozen object, built by the CLI (a sub-agent's by its parent)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ctxagent.profile import Path_, Profile
from ctxagent.profile_schema import Limits
from ctxagent.tools.base import Stop
from ctxagent.tools.guard import Grants


@dataclass(frozen=True)
class RunConfig:
    """The options of one run of a session (agent/setup.py ``open_runner``); a resumed session keeps
    its recorded settings where these leave one None or empty.

    ``model_spec``: a litellm model or ``scripted:PATH``; ``context_window``, ``max_output_tokens`` (the
    reply reserve): tokens; ``mcp_config``: a file (absolute). ``run_limits`` (over the profile's) bound
    this run, ``session_limits`` are recorded (None removes one). ``timeout_s``: seconds per model request;
    ``started``: ``time.monotonic()`` when the wall time starts (None: now). ``grants``: beyond the
    profile's permissions (None: nothing); ``stop``: the stop event to share (None: a new one).
    """

    profile_spec: str | None = None
    model_spec: str | None = None
    api_base: str | None = None
    path: Path_ = "batch"
    workdir: Path | None = None
    tools: tuple[str, ...] = ()
    run_limits: Mapping[str, float] = field(default_factory=dict)
    session_limits: Mapping[str, float | None] = field(default_factory=dict)
    context_window: int | None = None
    max_output_tokens: int | None = None
    mcp_config: str | None = None
    timeout_s: float | None = None
    started: float | None = None
    lessons: bool = True
    grants: Grants | None = None
    stop: Stop | None = None

    def limits(self, profile: Profile) -> Limits:
        """This run's limits: ``profile``'s ``limits.run`` with :attr:`run_limits` over them."""
        return Limits.model_validate({**profile.limits.run.set(), **self.run_limits})
