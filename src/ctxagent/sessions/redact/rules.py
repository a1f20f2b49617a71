"""The rules of the secret scan: the shapes of the secrets it replaces, what a value must look like to
count, and the anchors and prefilters that find them fast. What they catch and why: docs/security.md
"Secrets" (after gitleaks' and detect-secrets' public rule sets; learnt from, not copied).

Each shape is ``(kind, prefix kept as is, secret, check)`` as regex source text (used for both
``str`` and ``bytes``; every match is at most :data:`MAX_MATCH` bytes long); ``check`` names
the :data:`CHECKS` test the secret must pass (None: the regex says it all). Where a value may stand in
quotes, the quotes may be JSON-escaped (``API_KEY=\\"...\\"`` inside a tool call's arguments, which
are JSON text), once or twice.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Callable

_QUOTE = r"(?:\\{0,3}[\"'])?"  # an optional quote, JSON-escaped or not
_SEP = r"\\{0,3}[\"']?\s{0,4}"  # after a name: a closing quote (JSON-escaped or not), spaces
# "token" names that are no credential: a page of results, an idempotency key, a sync point (checked
# after the word, so that a position without it fails at once)
_TOKEN = "token" + "".join(f"(?<!{name}token)" for name in (
    "next", "next_", "nextpage", "page", "page_", "continuation", "pagination", "client", "client_", "sync",
    "idempotency", "cursor", "resume", "input_", "output_", "max_", "num_"))

# the end of a header's name (``x-goog-api-key``, ``x-amz-security-token``, ``ocp-apim-subscription-key``)
_HEADER_NAMES = r"(?:api-?key|" + _TOKEN + r"|subscription-key|authorization)"
_QUERY_NAMES = (r"(?:[a-z0-9_.-]{0,40}[_.-])?(?:api[_-]?key|apikey|key|token|secret|password|passwd|pwd|sig|"
                r"signature|credential|auth)")
# names of any case that hold a secret: ``client_secret``, ``access_token``, ``aws_secret_access_key``,
# ``"apiKey"``, ``signing-key``; a match starts at the word (what is before it stays as it is)
_KEY_WORDS = (r"(?:key(?:" + "|".join(f"(?<={name}key)" for name in (
    "api", "api_", "api.", "api-", "access_", "access-", "private_", "private-", "signing_", "signing-", "master_",
    "master-", "encryption_", "encryption-")) + r")|secret|credentials?|" + _TOKEN + ")")
# a value under a name: in quotes, up to the closing quote (JSON-escaped or not); else up to a space, a
# quote, a comma or a bracket, and whole (not the start of a call: ``get_key()``)
_VALUE_CHARS = "A-Za-z0-9_+/=.~!@#$%^&*-"  # a bare value's characters (the "-" last: a literal)


def _value(least: int, chars: str = _VALUE_CHARS) -> str:
    """A value of at least ``least`` characters of ``chars`` (bare), or any in quotes (see above)."""
    count = "{" + str(least) + ",1000}"
    return (r"(?!\[REDACTED)(?:(?<=[\"'])[^\"'\\\r\n]" + count + r"(?=\\{0,3}[\"'])"
            + r"|(?<![\"'])[" + chars + "]" + count + "(?![" + chars[:-1] + "(-]))")


SHAPES: tuple[tuple[str, str, str, str | None], ...] = (
    # a whole block, holding key material (32 base64 characters in a row); without its END line, up
    # to 16,000 characters of it
    ("private-key", "",
     r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?=[A-Za-z0-9+/=\s\\:,.()_-]{0,400}?[A-Za-z0-9+/]{32})"
     r"(?:[A-Za-z0-9+/=\s\\:,.()_-]{0,16000}?-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
     r"|[A-Za-z0-9+/=\s\\:,.()_-]{0,16000})", None),
    ("anthropic-key", "", r"\bsk-ant-[A-Za-z0-9_-]{20,1000}", None),
    # random text has a capital: ``sk-kogpt2-base-model-v1`` (a model name) is no key
    ("openai-key", "", r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-)?(?=[a-z0-9_-]{0,1000}[A-Z])[A-Za-z0-9_-]{20,1000}",
     None),
    ("aws-access-key", "", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b(?<!EXAMPLE)", None),  # AWS's documented examples end so
    ("github-token", "", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{22,255})", None),
    ("gitlab-token", "", r"\bglpat-[A-Za-z0-9_-]{20,255}", None),
    ("google-api-key", "", r"\bAIza[0-9A-Za-z_-]{35}", None),
    ("slack-token", "", r"\bxox[abposre]-[A-Za-z0-9-]{10,250}", None),
    ("stripe-key", "", r"\b[sr]k_live_[A-Za-z0-9]{20,255}", None),
    ("huggingface-token", "", r"\bhf_(?=[a-z]{0,33}[A-Z])(?=[A-Z]{0,33}[a-z])[A-Za-z]{34}\b", None),
    ("npm-token", "", r"\bnpm_[A-Za-z0-9]{36}\b", None),
    ("sendgrid-key", "", r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}\b", None),
    ("jwt", "", r"\beyJ[A-Za-z0-9_-]{8,4000}\.eyJ[A-Za-z0-9_-]{8,4000}\.[A-Za-z0-9_-]{8,4000}", None),
    ("bearer-token", r"(?i:\bauthorization" + _SEP + r"[:=]\s{0,4}" + _QUOTE + r"(?:bearer|basic|token)\s{1,4})",
     r"(?!\[REDACTED)[A-Za-z0-9._~+/=-]{8,2000}", "token"),
    ("bearer-token", r"(?i:\bbearer\s{1,4})", r"(?!\[REDACTED)[A-Za-z0-9._~+/-]{16,2000}=*", "token"),
    ("header", r"(?i:" + _HEADER_NAMES + _SEP + ":\\s{0,4}" + _QUOTE + ")",
     r"(?!\[REDACTED)(?!(?i:bearer|basic|token)\s)[A-Za-z0-9._~+/=-]{8,2000}", "token"),
    ("header", r"(?i:cookie" + _SEP + r":\s{0,4}" + _QUOTE + ")",
     r"(?![ \t]{0,4}\[REDACTED)[^\r\n\"'\\]{8,4000}", "cookie"),  # spaces: a marker is not redacted again
    ("url-password", r"\b[a-z][a-z0-9+.-]{1,20}://[^/\s:@\"'\[]{0,200}:", r"[^/\s:@\"']{3,200}(?=@)", "password"),
    ("url-userinfo", r"\b[a-z][a-z0-9+.-]{1,20}://", r"(?!\[REDACTED)[^/\s:@\"'\\]{16,200}(?=@)", "token"),
    ("url-query", r"(?i:[?&]" + _QUERY_NAMES + "=)", r"(?!\[REDACTED)[^&#\s\"'<>\\]{4,2000}", "named"),
    ("secret", r"(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)[A-Z0-9_]{0,60}" + _SEP + r"[=:]\s{0,4}" + _QUOTE,
     _value(4), "named"),
    # a password under a name of any case: JSON `"password": "..."`, YAML, `password=...`, `--password=...`
    ("password", r"(?i:passw(?:or)?d" + _SEP + r"[:=]\s{0,4}" + _QUOTE + ")",
     _value(4), "password"),
    # a ":" ends a name when a quote or a space is next to it (``"secret": "..."``, ``secret: ...``; not an
    # ARN's ``:secret:name`` or ``secretsmanager:us-east-1``)
    ("secret", r"(?i:" + _KEY_WORDS + r"[a-z0-9_.-]{0,30}?(?:" + _SEP + r"(?:=>|:=|=)|"
     r"\\{0,3}[\"']\s{0,4}:|\s{0,4}:(?=\s|\\{0,3}[\"']))\s{0,4}" + _QUOTE + ")",
     _value(8, "A-Za-z0-9_+/=.~!@#$%^*-"), "token"),  # a "&" ends it (a form body, a query)
    # mysql's password glued to its flag: `mysql -u root -pSECRET db` (mysqldump, mysqladmin, mariadb too)
    ("password", r"\b(?:mysql|mariadb)[a-z-]{0,10}[ \t][^\n]{0,200}?[ \t]-p",
     r"(?!\[REDACTED)[^\s'\"\\]{3,200}", "password"),
)

# --- what a value must look like ---------------------------------------------------------------

MAX_MATCH = 16 * 1024  # the longest match any shape can make (PEM blocks): what makes chunked scans safe
MIN_TOKEN_CHARS = 8
MIN_PASSWORD_CHARS = 4
_REFERENCE = re.compile(  # a value that names where the secret is, not the secret
    r"^\$|\$\{|\$\(|\{\{|^%[A-Za-z_]+%|^<|>$|^[\[({]|environ|getenv|process\.env|secretKeyRef|^\[REDACTED",
    re.IGNORECASE)
_PLACEHOLDER = re.compile(r"example|x{4}|\*{3}|\.{3}|placeholder|changeme|redacted|your[_-]|dummy|sample",
                          re.IGNORECASE)
_NAMED_PLACE = re.compile(r"^[a-z][a-z0-9+.-]{1,20}://|^arn:|^[A-Za-z]:[\\/]|\.(?:pem|key|crt|cer|json|ya?ml|txt|env|"
                          r"p12|pfx|jks|ini|cfg|conf|toml|py|sh|js)$", re.IGNORECASE)  # a URL, an ARN, a file
_PATH_START = re.compile(r"(?:~|\.{1,2})?/")


def _path(value: str) -> bool:
    """A URL, an ARN, a file by its extension, or a path: ``/``, ``~/``, ``./`` then names (a segment
    over 24 characters must read as an identifier: base64 text may start with ``/`` too)."""
    if _NAMED_PLACE.search(value):
        return True
    return _PATH_START.match(value) is not None and all(
        len(part) <= 24 or _identifier(part) for part in value.split("/"))
_NUMBER = re.compile(  # integers, decimals, exponents (``1.25e-05``), hex, versions, dates and times
    r"[-+]?(?:0x[0-9a-f]+|[0-9][0-9_,.]*(?:e[-+]?[0-9]+)?|\.[0-9]+(?:e[-+]?[0-9]+)?)"
    r"|[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[t ][0-9:.]{5,15}(?:z|[-+][0-9:]{4,5})?)?", re.IGNORECASE)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)  # an id
_LETTER = re.compile(r"[A-Za-z]")
_RUNS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")  # words of snake_case, kebab-case, camelCase, digits


def entropy(value: str) -> float:
    """Shannon entropy of ``value``'s characters, bits per character (random base62 text: ~5.2 at
    length 40; a word: ~2.5; ``"aaaaaaaa"``: 0)."""
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


_VOWELS = frozenset("aeiouyAEIOUY")
_CONSONANTS = re.compile(r"[^aeiouyAEIOUY]{5}")  # five consonants in a row: no word has them ("strength" 4)


def _wordy(value: str) -> bool:
    """Words and an identifier's parts, not random text: letters (and separators) only, in runs of 3+
    on average, pronounceable: a quarter of the letters vowels, never five consonants in a row within
    a run (``the_token``, ``getAuthHeader``, ``your-api-key``, ``Hunter``; not ``xKcdQpLm`` nor
    ``PwhZNlwsekkq``: random letters are a fifth vowels)."""
    if not value.isascii() or any(c.isdigit() for c in value):
        return False
    runs = _RUNS.findall(value)
    letters = sum(map(len, runs))
    return (bool(runs) and letters / len(runs) >= 3 and sum(c in _VOWELS for c in value) * 4 >= letters
            and not any(_CONSONANTS.search(run) for run in runs))


_NUMERIC_PART = re.compile(r"[0-9]+|[0-9]{1,4}[a-z]{1,2}")  # 2024, 4o, 24h
_WORD_PART = re.compile(r"([A-Za-z]+)[0-9]{0,4}")  # a word, then a number: v2, utf8, Secret1


def _identifier(value: str) -> bool:
    """Words, numbers and short codes joined by separators: a name, a version, a model id, a date or an
    expression (``user_id_2024``, ``MyTestDatabaseSecret1``, ``token-efficient-tools-2025-02-19``,
    ``us-east-1``, ``h*w*24/1024``), not random text (``abc123xyz``, ``YJl5Fu5FYx``)."""
    parts = [part for part in re.split(r"[-_.:/*+=, ]+", value) if part]
    return bool(parts) and all(_NUMERIC_PART.fullmatch(part) or _word(part) for part in parts)


def _word(part: str) -> bool:
    found = _WORD_PART.fullmatch(part)
    return found is not None and (len(found.group(1)) <= 3 or _wordy(found.group(1)))


def _sequential(value: str) -> bool:
    """Made of runs of consecutive characters, as test and documentation keys are (``abc123def456``,
    ``abcdefg123``): half the neighbours or more (detect-secrets' sequential-string filter)."""
    pairs = list(itertools.pairwise(value))
    return bool(pairs) and sum(ord(b) - ord(a) == 1 for a, b in pairs) * 2 >= len(pairs)


def _plausible(value: str) -> bool:
    """Not a reference, a placeholder, a path, a number or date, a UUID (an id, as detect-secrets'
    filters hold), a word or identifier."""
    return not (_REFERENCE.search(value) or _PLACEHOLDER.search(value) or _path(value)
                or not _LETTER.search(value) or _NUMBER.fullmatch(value) or _UUID.fullmatch(value) or _wordy(value))


def looks_password(value: str) -> bool:
    """Whether ``value`` (found where a password stands) can be one: 4+ characters, 3 distinct, no
    space (that is prose), and not a reference, placeholder, path, number, date, word or identifier."""
    return (len(value) >= MIN_PASSWORD_CHARS and len(set(value)) >= 3 and not any(c.isspace() for c in value)
            and _plausible(value))


def looks_token(value: str) -> bool:
    """Whether ``value`` (found where a key or token stands) can be one: :func:`looks_password`,
    8+ characters, not an identifier nor a sequential test value, and the entropy of random text
    (at least ``log2(len) - 0.5`` bits a character, 3.0 from 12 characters on: 8 distinct characters
    pass, ``aaaabbbb`` not)."""
    if len(value) < MIN_TOKEN_CHARS or not looks_password(value) or _identifier(value) or _sequential(value):
        return False
    return entropy(value) >= min(3.0, math.log2(len(value)) - 0.5)


def _cookie(value: str) -> bool:
    """A cookie header holds a session id or token among its ``name=value`` pairs."""
    return any(looks_token(part.partition("=")[2]) for part in re.split(r";\s*", value.strip()))


def looks_secret(check: str | None, secret: str, prefix: str = "") -> bool:
    """Whether ``secret`` (found after ``prefix``) passes the ``check`` of its shape (:data:`CHECKS`).
    ``named``: a password test when the name says PASS or PWD, else a token test."""
    if check is None:
        return True
    if check == "named":
        check = "password" if re.search(r"pass|pwd", prefix, re.IGNORECASE) else "token"
    return CHECKS[check](secret)


CHECKS: dict[str, Callable[[str], bool]] = {"token": looks_token, "password": looks_password, "cookie": _cookie}

# Every match of a shape holds one of these at its start (``back``: or up to that many characters
# before it), so only positions near an anchor are tried: a few fast passes instead of the regex at
# every position. Lower-case anchors are searched case-insensitively, a match starting at them.
ANCHORS: tuple[tuple[str, int], ...] = (
    ("-----BEGIN", 0), ("sk-", 0), ("AKIA", 0), ("ASIA", 0), ("gh", 0), ("github_pat_", 0), ("glpat-", 0),
    ("AIza", 0), ("xox", 0), ("k_live_", 1), ("hf_", 0), ("npm_", 0), ("SG.", 0), ("eyJ", 0), ("://", 21),
    ("KEY", 0), ("TOKEN", 0), ("SECRET", 0), ("PASSW", 0),
)
LOWER_ANCHORS: tuple[str, ...] = ("bearer", "authorization", "passw", "mysql", "mariadb", "secret", "credential")
# Where a header, URL query or named-key shape may start (case-insensitive; a match starts where this
# does): the name followed by its separator. Tried only ``back`` characters before each hit of a
# needle (searched in lower-cased text), so that the word "token" in prose costs one failed match.
ANCHOR_PATTERN = (_HEADER_NAMES + r"(?=\\{0,3}[\"']?\s{0,4}:)|cookie(?=\\{0,3}[\"']?\s{0,4}:)"
                  r"|[?&](?=" + _QUERY_NAMES + "=)|(?:key|token)(?=[a-z0-9_.-]{0,30}?" + _SEP + "(?:=>|:=|[:=]))")
NAMED_NEEDLES: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("key", (13, 4, 3, 0)), ("token", (0,)), ("authorization", (0,)), ("cookie", (0,)), ("?", (0,)), ("&", (0,)),
)

# The prefilter (:mod:`ctxagent.sessions.redact.scan`): regexes for hyperscan, one or more per shape, each a
# necessary condition: every match of the shape starts with a match of one of them. They keep the
# distinctive start of each shape (prefix and the first characters of the secret) and drop what
# hyperscan cannot run or what depends on text outside the match (``\b``, lookarounds), so they may
# fire where the shape does not (the Python patterns verify) but never miss. ``\s`` is spelled out:
# Python's bytes ``\s`` is exactly these six bytes. ``(flags, pattern, width)``: "i" is case-insensitive;
# ``width`` bounds how far after the start of the shape's match the prefilter's match can end (None: the
# pattern's own longest match; given where the pattern is unbounded, which hyperscan compiles faster).
_WS = r"[ \t\n\r\x0b\x0c]"
_PSEP = r"\\{0,3}[\"']?" + _WS + "{0,4}"  # as _SEP
_PVALUE = r"[^\"'\\\r\n]"  # a value's characters, quoted or not (a superset of _VALUE_CHARS)
PREFILTERS: tuple[tuple[str, str, int | None], ...] = (
    ("", r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY", None),
    ("", r"sk-[A-Za-z0-9_-]{20}", None),  # anthropic-key and openai-key ("ant-", "proj-" are of the class)
    ("", r"(?:AKIA|ASIA)[0-9A-Z]{16}", None),
    ("", r"gh[pousr]_[A-Za-z0-9]{30}|github_pat_[A-Za-z0-9_]{22}|glpat-[A-Za-z0-9_-]{20}", None),
    ("", r"AIza[0-9A-Za-z_-]{35}", None),
    ("", r"xox[abposre]-[A-Za-z0-9-]{10}", None),
    ("", r"[sr]k_live_[A-Za-z0-9]{20}|hf_[A-Za-z]{34}|npm_[A-Za-z0-9]{36}|SG\.[A-Za-z0-9_-]{22}\.", None),
    ("", r"eyJ[A-Za-z0-9_-]{8,}\.eyJ", 3 + 4000 + 4),  # the shape's first segment is at most 4,000 long
    ("i", r"authorization" + _PSEP + "[:=]" + _WS + "{0,4}" + _QUOTE + "(?:bearer|basic|token)"
     + _WS + "{1,4}[A-Za-z0-9._~+/=-]{8}", None),
    ("i", r"bearer" + _WS + r"{1,4}[A-Za-z0-9._~+/-]{16}", None),
    ("i", r"(?:api-?key|token|subscription-key|authorization)" + _PSEP + ":" + _WS + "{0,4}" + _QUOTE
     + r"[A-Za-z0-9._~+/=-]{8}", None),
    ("i", r"cookie" + _PSEP + ":" + _WS + "{0,4}" + _QUOTE + r"[^\r\n\"'\\]{8}", None),
    ("", r"[a-z][a-z0-9+.-]{1,20}://[^/ \t\n\r\x0b\x0c:@\"'\[]{0,200}:[^/ \t\n\r\x0b\x0c:@\"']{3,200}@", None),
    ("", r"[a-z][a-z0-9+.-]{1,20}://[^/ \t\n\r\x0b\x0c:@\"'\\]{16,200}@", None),
    ("i", r"[?&]" + _QUERY_NAMES + r"=[^&# \t\n\r\x0b\x0c\"'<>\\]{4}", None),
    ("", r"(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)[A-Z0-9_]{0,60}" + _PSEP + "[=:]" + _WS + "{0,4}" + _QUOTE
     + _PVALUE + "{4}", None),
    ("i", r"passw(?:or)?d" + _PSEP + "[:=]" + _WS + "{0,4}" + _QUOTE + _PVALUE + "{4}", None),
    ("i", r"(?:key|secret|credentials?|token)[a-z0-9_.-]{0,30}" + _PSEP + "(?:=>|:=|[:=])" + _WS + "{0,4}" + _QUOTE
     + _PVALUE + "{8}", None),
    ("", r"(?:mysql|mariadb)[a-z-]{0,10}[ \t][^\n]{0,200}[ \t]-p[^ \t\n\r\x0b\x0c'\"\\]{3}", None),
)
