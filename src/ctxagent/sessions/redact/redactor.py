"""Applying the secret scan: :class:`Redactor` (text, bytes, JSON-like values, files) and what the
transcript, the output store and the command line call (:func:`dumps`, :func:`redact_file`, :func:`clip`,
:func:`default`). Large bytes and files go through the prefilter (:mod:`.scan`) first; the patterns
are then tried only in its windows, which replaces exactly what trying them everywhere replaces.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from ctxagent.sessions.files import replacing
from ctxagent.sessions.redact import scan
from ctxagent.sessions.redact.engine import BEFORE_BYTES, Engine, Windows
from ctxagent.tools.clean import mend
from ctxagent.tools.preview import FileStats

CHUNK_BYTES = 1024 * 1024  # streaming reads of a file being redacted
OVERLAP_BYTES = 64 * 1024  # kept back from each chunk so a match across two chunks is seen whole (> MAX_MATCH)
MIN_SECRET_CHARS = 8  # shorter environment values are not treated as secrets
ENV_NAME_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")
ENV_NAME_EXCLUDED = re.compile(r"_(?:DIR|PATH|FILE|HOME)$")
FAST_MIN_BYTES = 256 * 1024  # bytes redacted in memory go through the prefilter from this size on
SHORT_CHARS = 256  # texts up to this many characters are redacted once per redactor and remembered
SHORT_KEPT = 4096  # how many such texts a redactor remembers (least recently used dropped first)


def env_secrets(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{value: name}`` of the environment variables that hold secrets: values of 8+ characters under
    names that say KEY, TOKEN, SECRET, PASSWORD or PASSWD (``_DIR``, ``_PATH``, ``_FILE``, ``_HOME`` excepted)."""
    environ = os.environ if environ is None else environ
    found: dict[str, str] = {}
    for name, raw in sorted(environ.items()):
        upper, value = name.upper(), raw.strip()
        if (len(value) >= MIN_SECRET_CHARS and any(word in upper for word in ENV_NAME_WORDS)
                and not ENV_NAME_EXCLUDED.search(upper)):
            found.setdefault(value, name)
    return found


class Redactor:
    """Replaces secrets in text, bytes, JSON-like data and files. ``exact``: ``{secret value: kind}``
    replaced wherever they occur (``kind`` names the marker, ``"env:OPENAI_API_KEY"``); values shorter
    than 8 characters are ignored. ``prefilter=False``: never the hyperscan prefilter."""

    def __init__(self, exact: Mapping[str, str] | None = None, prefilter: bool = True):
        self.exact = {v: k for v, k in (exact or {}).items() if len(v) >= MIN_SECRET_CHARS}
        self._text = Engine(self.exact, as_bytes=False)
        self._use_prefilter = prefilter
        # a record repeats its keys, roles, tool names and ids: each costs ~10 us to scan, ~0.1 us to look up
        self._short = lru_cache(maxsize=SHORT_KEPT)(self._text_of)

    @cached_property
    def _bytes(self) -> Engine:
        """The engine over bytes (data, files), compiled on first use (~5 ms: a run that stores no
        output never needs it)."""
        return Engine(self.exact, as_bytes=True)

    @property
    def prefilter(self) -> scan.Prefilter | None:
        """The hyperscan prefilter of this redactor's patterns (:func:`.scan.prefilter`), or None: the
        Python patterns scan everything."""
        return scan.prefilter(self._bytes.exact_bytes) if self._use_prefilter else None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> Redactor:
        """A redactor for the secrets of ``environ`` (default ``os.environ``) plus ``extra`` values."""
        env = {value: f"env:{name}" for value, name in env_secrets(environ).items()}
        return cls({**dict.fromkeys(extra, "api-key"), **env})  # a value in both: its variable's kind

    # -- text -------------------------------------------------------------------------------
    def text(self, text: str) -> str:
        """``text`` with every secret replaced by its marker, and every lone surrogate (which UTF-8
        cannot hold) made visible (:func:`ctxagent.tools.clean.mend`), so that it can be written and
        sent. Texts of up to :data:`SHORT_CHARS` characters are scanned once per redactor."""
        if not text:
            return text
        return self._short(text) if len(text) <= SHORT_CHARS else self._text_of(text)

    def _text_of(self, text: str) -> str:
        return mend(self._text.sub(text)[0])

    def data(self, data: bytes) -> bytes:
        """``data`` (any bytes, text or not) with every secret replaced by its marker (UTF-8)."""
        pre = self.prefilter if len(data) >= FAST_MIN_BYTES else None
        windows = None if pre is None else pre.windows(data)
        if not data or (windows is not None and not windows):
            return data
        out: bytes = self._bytes.sub(data, starts=None if windows is None else self._bytes.windowed(data, windows))[0]
        return out

    def value(self, obj: Any) -> Any:
        """JSON-like ``obj`` (dicts, lists, strings, numbers) with every string redacted."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.value(v) for v in obj]
        return obj

    def found(self, text: str) -> bool:
        """Whether ``text`` holds anything this redactor would replace."""
        return self._text.search(text)

    # -- files ------------------------------------------------------------------------------
    def scan_file(self, path: Path) -> bool:
        """Whether the file at ``path`` holds a secret (streamed; memory stays a few MiB)."""
        return self.secret_windows(path)[0]

    def secret_windows(self, path: Path, measured: scan.Measured | None = None) -> tuple[bool, Windows | None]:
        """Whether the file at ``path`` holds a secret, and the windows it can start in (None:
        anywhere). ``measured``: the file measured already with the prefilter (used when it has the
        size it saw). Raises ``OSError``."""
        pre = self.prefilter
        if pre is not None and (measured is None or measured.stats.bytes != path.stat().st_size):
            measured = scan.measure(path, pre)
        windows = None if pre is None or measured is None else measured.windows
        if windows is None:  # no prefilter, or too many of its matches to list
            return self._search_file(path), None
        return self._bytes.found_in_file(path, windows, CHUNK_BYTES, OVERLAP_BYTES), windows

    def _search_file(self, path: Path) -> bool:
        with open(path, "rb") as fh:
            carry = b""
            while chunk := fh.read(CHUNK_BYTES):
                buf = carry + chunk
                if self._bytes.search(buf):
                    return True
                carry = buf[-OVERLAP_BYTES:]
        return False

    def copy_file(self, source: Path, target: Path) -> bool:
        """Write ``source`` redacted to ``target`` (created 0600, fsynced), streaming in chunks.
        Returns whether anything was replaced. Raises ``OSError``."""
        pre = self.prefilter
        return self.copy_windows(source, target, None if pre is None else scan.measure(source, pre).windows)[0]

    def copy_windows(self, source: Path, target: Path, windows: Windows | None) -> tuple[bool, FileStats]:
        """:meth:`copy_file`, trying only the positions in ``windows`` (None: all of them); returns
        whether anything was replaced and the stats of what it wrote."""
        changed = False
        digest = scan.Digester(threaded=source.stat().st_size >= scan.THREAD_MIN_BYTES)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(source, "rb") as src, os.fdopen(fd, "wb") as dst:
            context, carry, base = b"", b"", 0  # base: where buf starts in the file
            while True:
                chunk = src.read(CHUNK_BYTES)
                buf = context + carry + chunk
                limit = max(len(context), len(buf) - OVERLAP_BYTES) if chunk else None
                starts = None if windows is None else self._bytes.windowed(buf, windows, base)
                out, cut = self._bytes.sub(buf, limit, starts, begin=len(context))
                changed |= out != buf[len(context):cut]
                dst.write(out)
                digest.update(out)
                keep = max(0, cut - BEFORE_BYTES)
                context, carry, base = buf[keep:cut], buf[cut:], base + keep
                if not chunk:
                    break
            dst.flush()
            os.fsync(dst.fileno())
        return changed, digest.stats()


def redact_file(path: Path, redactor: Redactor | None = None,
                measured: scan.Measured | None = None) -> tuple[bool, FileStats | None]:
    """Redact the file at ``path`` in place (rewritten beside it, then renamed, only when it holds a
    secret). Returns whether it changed, and the stats of the file as it now is when a pass measured
    them (None: read it to know them). ``measured``: the file already measured with this redactor's
    prefilter (while it was written): then a file without secrets is read only where one may start."""
    redactor = redactor or default()
    if redactor.prefilter is not None and (measured is None or measured.stats.bytes != path.stat().st_size):
        measured = scan.measure(path, redactor.prefilter)
    found, windows = redactor.secret_windows(path, measured)
    if not found:
        return False, None if measured is None else measured.stats
    with replacing(path) as temp:
        stats = redactor.copy_windows(path, temp, windows)[1]
    return True, stats


def default() -> Redactor:
    """The redactor of this process: shapes plus the secrets of the environment as it is now (read
    through ``os.environ`` on each call, ~35 us; a key set at run time or by a test is picked up), one
    :class:`Redactor` kept per set of secret values. A session's sink takes one when it opens."""
    return _for_env(tuple(sorted(env_secrets().items())))


@lru_cache(maxsize=4)
def _for_env(secrets: tuple[tuple[str, str], ...]) -> Redactor:
    return Redactor({value: f"env:{name}" for value, name in secrets})


def clip(text: str, limit: int, redactor: Redactor | None = None) -> str:
    """``text`` redacted, then cut to at most ``limit`` characters (a marker the limit would split is
    left out whole). Redact first: cut first, a key's first characters are no longer a key's shape and
    would be written as they are (issue 31)."""
    out = (redactor or default()).text(text)
    if len(out) <= limit:
        return out
    marker = out.rfind("[REDACTED:", 0, limit)
    end = out.find("]", marker) if marker != -1 else -1
    return out[:marker] if marker != -1 and end >= limit else out[:limit]


def dumps(record: Any, redactor: Redactor | None = None) -> str:
    """A transcript record as one line of JSON with every string in it redacted (the same line as
    :func:`ctxagent.sessions.records.dumps` when nothing is secret)."""
    data = record.model_dump(mode="json")
    return json.dumps((redactor or default()).value(data), ensure_ascii=False, separators=(",", ":"))
