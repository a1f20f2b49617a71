"""ctxagent: a command-line agent runner that never loses its context, and its public API.

The names of ``__all__`` are the public API (docs/api.md): importing ``ctxagent`` loads none of
them; each is imported on first use (PEP 562 ``__getattr__``), so ``ctxagent --help`` stays fast,
and none imports litellm until a model is called.
"""

import importlib as _importlib
import typing as _typing  # private names: the package's namespace is its public API (tests/test_api.py)

__version__ = "0.1.0"

_FROM = {
    "ctxagent.api": ("Context", "Offloaded", "Outputs", "Session", "View", "open_session"),
    "ctxagent.agent.events": ("Compacted", "Event", "Finished", "Replied", "Requesting", "ToolDone", "ToolStarted",
                              "Warned"),
    "ctxagent.errors": ("ContextOverflowError", "CtxagentError", "LimitReached", "ProfileError", "ProviderError",
                        "SessionBusyError", "UsageError"),
    "ctxagent.strategies.base": ("Compaction",),
    "ctxagent.tokens": ("count_messages", "count_text"),
}
_MODULE_OF = {name: module for module, names in _FROM.items() for name in names}

__all__ = [  # the public API: docs/api.md documents each name (tests/test_api.py checks both)
    "Compacted", "Compaction", "Context", "ContextOverflowError", "CtxagentError", "Event", "Finished",
    "LimitReached", "Offloaded", "Outputs", "ProfileError", "ProviderError", "Replied", "Requesting", "Session",
    "SessionBusyError", "ToolDone", "ToolStarted", "UsageError", "View", "Warned", "__version__", "count_messages",
    "count_text", "open_session",
]

if _typing.TYPE_CHECKING:
    from ctxagent.agent.events import (
        Compacted,
        Event,
        Finished,
        Replied,
        Requesting,
        ToolDone,
        ToolStarted,
        Warned,
    )
    from ctxagent.api import Context, Offloaded, Outputs, Session, View, open_session
    from ctxagent.errors import (
        ContextOverflowError,
        CtxagentError,
        LimitReached,
        ProfileError,
        ProviderError,
        SessionBusyError,
        UsageError,
    )
    from ctxagent.strategies.base import Compaction
    from ctxagent.tokens import count_messages, count_text


def __getattr__(name: str) -> _typing.Any:
    """A public name, imported from its module on first use (then kept here)."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxagent' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
