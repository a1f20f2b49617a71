"""The secret scan: secrets replaced by typed markers (``[REDACTED:openai-key]``,
``[REDACTED:env:GITHUB_TOKEN]``) before anything is written or printed; markers never match again,
so redacting twice changes nothing. docs/security.md "Secrets".

- :mod:`.rules` — what a secret looks like (after gitleaks' and detect-secrets' rule sets): formats,
  values a keyword makes secret when they look like one, the anchors and prefilters that find them;
- :mod:`.engine` — one combined regex, tried only where an anchor (or a prefilter window) allows;
- :mod:`.scan` — one streaming pass over a file with a hyperscan prefilter (GB/s; the one module that
  imports hyperscan, lazily): size, lines, sha256 and the windows where a secret may start; without
  hyperscan the patterns are tried everywhere, with the same result;
- :mod:`.redactor` — applying them: :class:`Redactor` (text, bytes, JSON-like values, files; plus the
  exact values, 8+ characters, of environment variables whose names say KEY, TOKEN, SECRET, PASSWORD
  or PASSWD, ``_DIR``/``_PATH``/``_FILE``/``_HOME`` names excepted), :func:`dumps` (a transcript
  record as one redacted JSON line), :func:`redact_file` (in place, 1 MiB chunks overlapping by 64 KiB,
  more than the longest match), :func:`clip` (redacted, then cut), :func:`default`;
- :mod:`.store` — :class:`RedactingStore`, the session's output store (every file redacted, numpy
  ``.npy`` excepted, 0600), and :func:`private_dir` (0700 folders).
"""

from ctxagent.sessions.redact.redactor import Redactor, clip, default, dumps, env_secrets, redact_file
from ctxagent.sessions.redact.store import RedactingStore
from ctxagent.sessions.transcript import private_dir

__all__ = ["RedactingStore", "Redactor", "clip", "default", "dumps", "env_secrets", "private_dir", "redact_file"]
