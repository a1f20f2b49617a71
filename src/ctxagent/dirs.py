"""Where ctxagent keeps its files: the user data, config and cache dirs (platformdirs), each
overridable by an environment variable. A leaf module (it imports nothing of ctxagent), so the
tokenizer caches and the sessions find the same folders without importing each other."""

from __future__ import annotations

import os
from pathlib import Path


def user_dir(kind: str = "data") -> Path:
    """``$CTXAGENT_<KIND>_DIR`` if set, else platformdirs' user ``kind`` dir (``data``, ``config``,
    ``cache``) for ``ctxagent``."""
    env = os.environ.get(f"CTXAGENT_{kind.upper()}_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(getattr(platformdirs, f"user_{kind}_dir")("ctxagent", appauthor=False))


def data_dir() -> Path:
    """``$CTXAGENT_DATA_DIR`` if set, else platformdirs' user data dir for ``ctxagent``."""
    return user_dir("data")


def own_dirs() -> list[Path]:
    """ctxagent's data, config and cache dirs (:func:`user_dir`): no tool writes into them
    (a session's state, its trusted configuration, its caches)."""
    return [user_dir(kind) for kind in ("data", "config", "cache")]
