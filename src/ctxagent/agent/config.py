"""What a run is opened with: one frozen object, built by the CLI (a sub-agent's by its parent)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ctxagent.profile import Path_, Profile
from ctxagent.profile_schema import Limits
from ctxagent.tools.base import Stop
from ctxagent.tools.permissions import Grants


@dataclass(frozen=True)
class RunConfig:
    """The options of one run of a session (agent/setup.py ``open_runner``); a resumed session keeps
    its recorded settings where these leave one None or empty."""

    profile_spec: str | None = None  # a bundled profile or a file
    model_spec: str | None = None  # a litellm model or scripted:PATH
    api_base: str | None = None
    path: Path_ = "batch"  # the profile's pipeline that runs
    workdir: Path | None = None
    tools: tuple[str, ...] = ()  # --tools specs
    run_limits: Mapping[str, float] = field(default_factory=dict)  # over the profile's limits.run
    session_limits: Mapping[str, float | None] = field(default_factory=dict)  # recorded (None removes one)
    context_window: int | None = None  # tokens
    max_output_tokens: int | None = None  # tokens: the reply reserve
    mcp_config: str | None = None  # a file (absolute)
    timeout_s: float | None = None  # seconds per model request
    started: float | None = None  # time.monotonic() when the wall time starts (None: now)
    lessons: bool = True  # False: no lessons shown nor learned
    grants: Grants | None = None  # beyond the profile's permissions (None: nothing)
    stop: Stop | None = None  # the stop event to share (None: a new one)

    def limits(self, profile: Profile) -> Limits:
        """This run's limits: ``profile``'s ``limits.run`` with :attr:`run_limits` over them."""
        return Limits.model_validate({**profile.limits.run.set(), **self.run_limits})
