"""Sessions: the JSONL transcript, the output store of offloaded outputs, locks and listing."""

from ctxagent.sessions.session import Session, data_dir, latest_session, list_sessions
from ctxagent.sessions.store import OutputStore, handle_for
from ctxagent.sessions.transcript import Transcript

__all__ = [
    "OutputStore",
    "Session",
    "Transcript",
    "data_dir",
    "handle_for",
    "latest_session",
    "list_sessions",
]
