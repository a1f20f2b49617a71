"""The secret scan: secrets replaced by typed markers (``[REDACTED:openai-key]``,
``[REDACTED:env:GITHUB_TOKEN]``) before anything is written or printed; markers never match again,
so redacting twice changes nothing. What it replaces, and how well: docs/security.md "Secrets".

:mod:`.rules` says what a secret looks like, :mod:`.engine` finds them, :mod:`.scan` prefilters large
data with hyperscan (when it is installed), :mod:`.redactor` applies them, and :mod:`.store` keeps them
out of a session's stored outputs.
"""

from ctxagent.sessions.redact.redactor import Redactor, clip, default, dumps, env_secrets, redact_file
from ctxagent.sessions.redact.store import RedactingStore

__all__ = ["RedactingStore", "Redactor", "clip", "default", "dumps", "env_secrets", "redact_file"]
