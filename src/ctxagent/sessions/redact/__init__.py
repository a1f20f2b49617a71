"""The secret scan: secrets replaced by typed markers before anything is written or printed.

What is a secret (:mod:`~ctxagent.sessions.redact.rules`, after gitleaks' and detect-secrets'
published rule sets): credentials recognisable by their format (provider and cloud keys, VCS and chat
tokens, JWTs, PEM private keys), values that are secrets because of where they stand (after
``Authorization: Bearer``, under a header, name or URL part that says so) when they look like one
(never a number, date, path, word or reference), and the exact values (8 characters or more) of the
environment variables whose names say KEY, TOKEN, SECRET, PASSWORD or PASSWD (names ending ``_DIR``,
``_PATH``, ``_FILE`` or ``_HOME`` excepted: those hold paths), plus any extra exact values given (the
keys a run uses); an exact value is replaced whole, also where a shape matched only its start. Each by
a marker naming what was there: ``[REDACTED:openai-key]``, ``[REDACTED:env:GITHUB_TOKEN]``. Markers
never match a pattern again, so redacting twice changes nothing.

The parts, each about one thing:

- :mod:`~ctxagent.sessions.redact.rules` — the shapes, the value tests, the anchors and prefilters;
- :mod:`~ctxagent.sessions.redact.engine` — one combined regex tried only where an anchor (or a
  prefilter window) allows;
- :mod:`~ctxagent.sessions.redact.scan` — one streaming pass over a file with a hyperscan prefilter
  (GB/s; the only module that imports hyperscan, lazily): its size, lines, sha256 and the windows
  where a secret may start; without hyperscan the patterns are tried everywhere, with the same result;
- :mod:`~ctxagent.sessions.redact.redactor` — applying them: :class:`Redactor` (text, bytes,
  JSON-like values, files), :func:`dumps` (a transcript record as one redacted JSON line),
  :func:`redact_file` (in place, 1 MiB chunks with a 64 KiB overlap: a 1 GB spool file costs a few
  MiB of memory, and a match is at most :data:`~ctxagent.sessions.redact.rules.MAX_MATCH` bytes, so
  one across two chunks is still found), :func:`clip` (redacted, then cut), :func:`default` (this
  process's redactor);
- :mod:`~ctxagent.sessions.redact.store` — the session's output store (:class:`RedactingStore`:
  every file it writes or adopts redacted first, numpy ``.npy`` files excepted, and owner-only) and
  :func:`private_dir` (directories 0700; the files the transcript and the store write are 0600).

See docs/security.md "Secrets".
"""

from ctxagent.sessions.redact.redactor import Redactor, clip, default, dumps, env_secrets, redact_file
from ctxagent.sessions.redact.store import RedactingStore, private_dir

__all__ = ["RedactingStore", "Redactor", "clip", "default", "dumps", "env_secrets", "private_dir", "redact_file"]
