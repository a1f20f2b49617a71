"""The environment a tool's process gets: ctxagent's own, without the run's credentials (issue 31).

A model that can run ``printenv OPENAI_API_KEY | base64`` would otherwise send the run's key to the
provider (and an encoded copy, which no redaction recognises, to the transcript). Withheld: a name that
says it holds a credential (:data:`CREDENTIAL_WORDS` in any case, as Codex's ``shell_environment_policy``
excludes ``*KEY*``, ``*SECRET*`` and ``*TOKEN*``; names ending ``_DIR``, ``_PATH`` or ``_HOME`` are places
and pass), :data:`PROVIDER_VARIABLES`, and a value that is a credential by its form or the value of a
withheld variable. ``pass_through`` names (or ``fnmatch`` patterns) pass anyway. See docs/security.md.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable

CREDENTIAL_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
PLACE = re.compile(r"_(?:DIR|PATH|HOME)$")
# credentials litellm (and the clients it wraps) read from the environment under names without the words
PROVIDER_VARIABLES = frozenset({"SNOWFLAKE_JWT", "LITELLM_LICENSE", "MYSQL_PWD"})
MIN_VALUE_CHARS = 8  # a shorter value is not looked for under other names


def _named_credential(name: str) -> bool:
    upper = name.upper()
    return upper in PROVIDER_VARIABLES or (any(word in upper for word in CREDENTIAL_WORDS) and not PLACE.search(upper))


def _passes(name: str, pass_through: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in pass_through)


def withheld(pass_through: Iterable[str]) -> list[str]:
    """The names of ``os.environ`` a tool's process does not get, sorted."""
    from ctxagent.sessions.redact import default  # the shapes of credentials (a value's form)

    keep = tuple(pass_through)
    by_name = {name for name in os.environ if _named_credential(name)}
    values = {os.environ[name] for name in by_name if len(os.environ[name]) >= MIN_VALUE_CHARS}
    redactor = default()
    found = {name for name, value in os.environ.items()
             if name not in by_name and (value in values or redactor.found(value))}
    return sorted(name for name in by_name | found if not _passes(name, keep))


def tool_environment(pass_through: Iterable[str]) -> dict[str, str]:
    """``os.environ`` without the names :func:`withheld` gives."""
    drop = set(withheld(pass_through))
    return {name: value for name, value in os.environ.items() if name not in drop}


def passed_through(pass_through: Iterable[str]) -> dict[str, str]:
    """The variables of ``os.environ`` that ``pass_through`` names: what an MCP server gets on top of
    the SDK's minimal environment (``HOME``, ``PATH``, ``USER``...) and its own ``env:`` entries."""
    keep = tuple(pass_through)
    return {name: value for name, value in os.environ.items() if _passes(name, keep)}
