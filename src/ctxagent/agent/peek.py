"""What the next request of a session would send, without sending or writing anything (``inspect context``,
``sessions export``): the runner's own code on the folded state, with a sink that writes nothing and a model
never called, so it shows exactly what a resume would send (no litellm import)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ctxagent.agent.runner import Runner
from ctxagent.agent.setup import mcp_for, session_profile, toolset_for
from ctxagent.agent.sinks import MemorySink
from ctxagent.agent.state import fold
from ctxagent.agent.turns import NextRequest
from ctxagent.errors import UsageError
from ctxagent.profile import Path_
from ctxagent.sessions import records
from ctxagent.sessions.session import Session


class _NoModel:
    """The model of a read-only peek: never called."""

    name = "none"

    def complete(self, messages: Any, tools: Any) -> Any:
        raise AssertionError("a peek never calls the model")


def next_request(session: Session, path: Path_ | None = None, *, every_compaction: bool = False) -> NextRequest:
    """The exact view the next request would send (see the module doc; LLM strategies show their
    deterministic fallback). ``recorded`` holds the newest compaction records, or with ``every_compaction``
    all of them. Raises ``UsageError``/``ProfileError`` for a session without header or a bad profile.
    """
    recorded: list[records.CompactionRecord] = []

    def noting(items: Iterable[Any]) -> Iterator[Any]:  # the fold streams; the compactions are kept to show
        for item in items:
            if isinstance(item, records.CompactionRecord):
                recorded.append(item)
            yield item

    items = session.transcript.records()
    state = fold(noting(items) if every_compaction else items, transcript_path=str(session.transcript.path))
    if state.settings is None:
        raise UsageError(f"session {session.name!r} has no header record")
    if path is not None and path != state.settings.path:
        state.apply(records.SettingsRecord(path=path))
    profile = session_profile(state.settings)
    mcp = mcp_for(session, profile, state.settings, state.mcp_tools, connect=False)
    toolset = toolset_for(session, profile, state.settings, mcp)
    runner = Runner(session, state, profile, _NoModel(), toolset, sink=MemorySink())
    return runner.peek(recorded if every_compaction else None)
