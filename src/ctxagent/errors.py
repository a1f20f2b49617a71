"""Every error ctxagent raises on purpose, in one place.

Hierarchy (the exit code the CLI maps each branch to is in brackets)::

    CtxagentError                      [1]  anything not listed below
    ├── UsageError                     [2]  a user mistake: bad argument, bad session name,
    │   │                                   unknown session, nothing to resume
    │   └── ProfileError               [2]  a profile that cannot be read or validated;
    │                                       names the file, line and key
    ├── SessionBusyError               [1]  another process holds the session's writer lock
    ├── LimitReached                   [3]  a bound (max_turns, ...) ended the run; resumable
    ├── ProviderError                  [4]  the model or its provider failed (HTTP, auth,
    │   │                                   rate limit, timeout, scripted model exhausted)
    │   ├── ProviderQuotaError         [4]  out of quota, credit or budget (not retried)
    │   └── ProviderContextError       [5]  the provider said the context is too long
    └── ContextOverflowError           [5]  the context cannot be made to fit the window

User mistakes (``UsageError``) are apart from run failures (the rest). Vendor exceptions never
cross the adapter that caught them: ``agent/litellm_backend.py`` translates litellm's errors with
``raise ... from err``. Errors never log when constructed; the CLI renders them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class CtxagentError(Exception):
    """Base of every error ctxagent raises on purpose.

    ``exit_code`` is the process exit status the CLI uses for it (see the exit-code table in docs/batch.md);
    ``status`` the word that names the outcome in end records and ``--json`` output.
    """

    exit_code = 1
    status = "error"


class UsageError(CtxagentError):
    """A user mistake: a bad argument, an invalid or unknown session name, nothing to resume."""

    exit_code = 2
    status = "usage_error"


class ProfileError(UsageError):
    """A profile that cannot be read or does not validate.

    Attributes:
        path: the profile file (or ``"<bundled:NAME>"``).
        line: 1-based line of the offending key, when known.
        key: dotted path of the offending key, when known (``"preview.head_lines"``).
    """

    status = "profile_error"

    def __init__(self, message: str, *, path: str, line: int | None = None, key: str | None = None):
        where = path if line is None else f"{path}:{line}"
        what = f" (key '{key}')" if key else ""
        super().__init__(f"{where}{what}: {message}")
        self.path, self.line, self.key = path, line, key


class SessionBusyError(CtxagentError):
    """Another process is writing this session (one writer per session)."""

    status = "session_busy"


class LimitReached(CtxagentError):
    """A bound ended the run. The session stays resumable. ``bound`` names it (``"max_turns"``,
    ``"budget"``); ``fields`` are extra fields for the end record (a budget stop's limit, spent, left)."""

    exit_code = 3

    def __init__(self, message: str, *, bound: str, fields: dict[str, object] | None = None):
        super().__init__(message)
        self.bound = self.status = bound
        self.fields = dict(fields or {})


class ProviderError(CtxagentError):
    """The model or its provider failed. ``http_status`` is the HTTP status when there was one."""

    exit_code = 4
    status = "provider_error"

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.http_status = status


class ProviderQuotaError(ProviderError):
    """The provider refused for quota, credit or billing reasons (OpenAI ``insufficient_quota``,
    Anthropic "credit balance is too low", ...): retrying cannot help until the account changes."""


class ProviderContextError(ProviderError):
    """The provider rejected the request because the context is longer than its window."""

    exit_code = 5
    status = "context_overflow"


class ContextOverflowError(CtxagentError):
    """The context cannot be made to fit: tokens needed and tokens available are in the message."""

    exit_code = 5
    status = "context_overflow"


def first_error(err: ValidationError, skip: int = 0) -> tuple[str, str]:
    """Where and what of pydantic's first error in ``err``: its location's parts after the first
    ``skip``, joined with dots (``""`` at the top level), and pydantic's message."""
    first = err.errors()[0]
    return ".".join(str(part) for part in first["loc"][skip:]), first["msg"]
