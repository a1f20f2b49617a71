"""The shapes of secrets :mod:`ctxagent.sessions.redact` replaces, and the anchors that find them.

Each shape is ``(kind, prefix kept as is, secret)`` as regex source text (used for both ``str``
and ``bytes``); every match is at most 16 KiB long (``redact.MAX_MATCH``). Where a value may stand
in quotes, the quotes may be JSON-escaped (``API_KEY=\\"...\\"`` inside a tool call's arguments,
which are JSON text), once or twice.

Kinds: provider keys by shape, ``bearer-token`` (``Authorization`` headers), ``private-key`` (PEM
blocks), ``header`` (API-key, token and cookie headers, any case: ``x-api-key``, ``api-key``,
``x-goog-api-key``, ``x-auth-token``, ``cookie``...), ``url-password`` and ``url-userinfo`` (the
userinfo of a URL), ``url-query`` (a query parameter named like a key, token, secret, password or
signature), ``secret`` (an assignment to an upper-case name that says KEY, TOKEN, SECRET,
PASSWORD or PASSWD) and ``password`` (a value under a password name of any case, JSON and YAML
keys included, and mysql's ``-pSECRET``).
"""

from __future__ import annotations

_QUOTE = r"(?:\\{0,3}[\"'])?"  # an optional quote, JSON-escaped or not
# the end of a header's name (``x-goog-api-key``, ``x-amz-security-token``, ``ocp-apim-subscription-key``)
_HEADER_NAMES = r"(?:api-?key|token|subscription-key|authorization)"
_QUERY_NAMES = (r"(?:[a-z0-9_.-]{0,40}[_.-])?(?:api[_-]?key|apikey|key|token|secret|password|passwd|pwd|sig|"
                r"signature|credential|auth)")

SHAPES: tuple[tuple[str, str, str], ...] = (
    ("private-key", "",  # a whole block; without its END line, up to 16,000 characters of it
     r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:[A-Za-z0-9+/=\s\\:,.()_-]{0,16000}?"
     r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s\\:,.()_-]{0,16000})"),
    ("anthropic-key", "", r"\bsk-ant-[A-Za-z0-9_-]{20,1000}"),
    ("openai-key", "", r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,1000}"),
    ("aws-access-key", "", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("github-token", "", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{22,255})"),
    ("google-api-key", "", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("slack-token", "", r"\bxox[abposre]-[A-Za-z0-9-]{10,250}"),
    ("jwt", "", r"\beyJ[A-Za-z0-9_-]{8,4000}\.eyJ[A-Za-z0-9_-]{8,4000}\.[A-Za-z0-9_-]{8,4000}"),
    ("bearer-token", r"(?i:\bauthorization\\{0,3}[\"']?\s{0,4}[:=]\s{0,4}" + _QUOTE + r"(?:bearer|basic|token)\s{1,4})",
     r"(?!\[REDACTED)[A-Za-z0-9._~+/=-]{8,2000}"),
    ("bearer-token", r"(?i:\bbearer\s{1,4})", r"(?!\[REDACTED)[A-Za-z0-9._~+/-]{16,2000}=*"),
    ("header", r"(?i:" + _HEADER_NAMES + r"\\{0,3}[\"']?\s{0,4}:\s{0,4}" + _QUOTE + ")",
     # a credential's characters only (not code: `bad token: {request!r}`), with a digit, or 12+ long
     # with a capital and no "_" (not prose, `the token: expired`, nor code, `'token': config_count`)
     r"(?!\[REDACTED)(?!(?i:bearer|basic|token)\s)"
     r"(?=[A-Za-z._~+/=-]{0,2000}\d|(?=[a-z.~+/=-]{0,2000}[A-Z])[A-Za-z0-9.~+/=-]{12})"
     r"[A-Za-z0-9._~+/=-]{8,2000}"),
    ("header", r"(?i:cookie\\{0,3}[\"']?\s{0,4}:\s{0,4}" + _QUOTE + ")",
     r"(?![ \t]{0,4}\[REDACTED)[^\r\n\"'\\]{8,4000}"),  # spaces: a marker is not redacted again
    ("url-password", r"\b[a-z][a-z0-9+.-]{1,20}://[^/\s:@\"'\[]{1,200}:", r"[^/\s:@\"']{3,200}(?=@)"),
    ("url-userinfo", r"\b[a-z][a-z0-9+.-]{1,20}://", r"(?!\[REDACTED)[^/\s:@\"'\\]{16,200}(?=@)"),
    ("url-query", r"(?i:[?&]" + _QUERY_NAMES + "=)", r"(?!\[REDACTED)[^&#\s\"'<>\\]{6,2000}"),
    ("secret", r"(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)[A-Z0-9_]{0,60}" + _QUOTE + r"\s{0,4}[=:]\s{0,4}" + _QUOTE,
     r"(?!\[REDACTED)[A-Za-z0-9_+/=.~!@$%^&*-]{8,1000}(?![A-Za-z0-9_+/=.~!@$%^&*(-])"),
    # a password under a name of any case: JSON `"password": "..."`, YAML, `password=...`, `--password=...`;
    # a value with a digit or a symbol, or 8+ long with a capital (not code: `password = get_password()`)
    ("password", r"(?i:passw(?:or)?d\\{0,3}[\"']?\s{0,4}[:=]\s{0,4}" + _QUOTE + ")",
     r"(?!\[REDACTED)(?=[A-Za-z_.~-]{0,1000}[0-9+/=!@#$%^&*]|(?=[a-z_.~-]{0,1000}[A-Z])[A-Za-z0-9_.~-]{8})"
     r"[A-Za-z0-9_+/=.~!@#$%^&*-]{4,1000}(?![A-Za-z0-9_+/=.~!@#$%^&*(-])"),
    # mysql's password glued to its flag: `mysql -u root -pSECRET db` (mysqldump, mysqladmin, mariadb too)
    ("password", r"\b(?:mysql|mariadb)[a-z-]{0,10}[ \t][^\n]{0,200}?[ \t]-p",
     r"(?!\[REDACTED)[^\s'\"\\]{3,200}"),
)

# Every match of a shape holds one of these at its start (``back``: or up to that many characters
# before it), so only positions near an anchor are tried: a few fast passes instead of the regex at
# every position. Lower-case anchors are searched case-insensitively, a match starting at them.
ANCHORS: tuple[tuple[str, int], ...] = (
    ("-----BEGIN", 0), ("sk-", 0), ("AKIA", 0), ("ASIA", 0), ("gh", 0), ("github_pat_", 0), ("AIza", 0),
    ("xox", 0), ("eyJ", 0), ("://", 21), ("KEY", 0), ("TOKEN", 0), ("SECRET", 0), ("PASSW", 0),
)
LOWER_ANCHORS: tuple[str, ...] = ("bearer", "authorization", "passw", "mysql", "mariadb")
# Where a header or URL query shape may start (case-insensitive; a match starts where this does):
# the name followed by its separator. Tried only ``back`` characters before each hit of a needle
# (searched in lower-cased text), so that the word "token" in prose costs one failed match.
ANCHOR_PATTERN = (_HEADER_NAMES + r"(?=\\{0,3}[\"']?\s{0,4}:)|cookie(?=\\{0,3}[\"']?\s{0,4}:)"
                  r"|[?&](?=" + _QUERY_NAMES + "=)")
NAMED_NEEDLES: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("key", (13, 4, 3, 0)), ("token", (0,)), ("authorization", (0,)), ("cookie", (0,)), ("?", (0,)), ("&", (0,)),
)

# The prefilter (:mod:`ctxagent.sessions.scan`): regexes for hyperscan, one or more per shape, each a
# necessary condition: every match of the shape starts with a match of one of them. They keep the
# distinctive start of each shape (prefix and the first characters of the secret) and drop what
# hyperscan cannot run or what depends on text outside the match (``\b``, lookarounds), so they may
# fire where the shape does not (the Python patterns verify) but never miss. ``\s`` is spelled out:
# Python's bytes ``\s`` is exactly these six bytes. ``(flags, pattern, width)``: "i" is case-insensitive;
# ``width`` bounds how far after the start of the shape's match the prefilter's match can end (None: the
# pattern's own longest match; given where the pattern is unbounded, which hyperscan compiles faster).
_WS = r"[ \t\n\r\x0b\x0c]"
_PQ = r"(?:\\{0,3}[\"'])?"  # the optional quote, as in _QUOTE
PREFILTERS: tuple[tuple[str, str, int | None], ...] = (
    ("", r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY", None),
    ("", r"sk-[A-Za-z0-9_-]{20}", None),  # anthropic-key and openai-key ("ant-", "proj-" are of the class)
    ("", r"(?:AKIA|ASIA)[0-9A-Z]{16}", None),
    ("", r"gh[pousr]_[A-Za-z0-9]{30}|github_pat_[A-Za-z0-9_]{22}", None),
    ("", r"AIza[0-9A-Za-z_-]{35}", None),
    ("", r"xox[abposre]-[A-Za-z0-9-]{10}", None),
    ("", r"eyJ[A-Za-z0-9_-]{8,}\.eyJ", 3 + 4000 + 4),  # the shape's first segment is at most 4,000 long
    ("i", r"authorization\\{0,3}[\"']?" + _WS + "{0,4}[:=]" + _WS + "{0,4}" + _PQ + "(?:bearer|basic|token)"
     + _WS + "{1,4}[A-Za-z0-9._~+/=-]{8}", None),
    ("i", r"bearer" + _WS + r"{1,4}[A-Za-z0-9._~+/-]{16}", None),
    ("i", _HEADER_NAMES + r"\\{0,3}[\"']?" + _WS + "{0,4}:" + _WS + "{0,4}" + _PQ + r"[A-Za-z0-9._~+/=-]{8}", None),
    ("i", r"cookie\\{0,3}[\"']?" + _WS + "{0,4}:" + _WS + "{0,4}" + _PQ + r"[^\r\n\"'\\]{8}", None),
    ("", r"[a-z][a-z0-9+.-]{1,20}://[^/ \t\n\r\x0b\x0c:@\"'\[]{1,200}:[^/ \t\n\r\x0b\x0c:@\"']{3,200}@", None),
    ("", r"[a-z][a-z0-9+.-]{1,20}://[^/ \t\n\r\x0b\x0c:@\"'\\]{16,200}@", None),
    ("i", r"[?&]" + _QUERY_NAMES + r"=[^&# \t\n\r\x0b\x0c\"'<>\\]{6}", None),
    ("", r"(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)[A-Z0-9_]{0,60}" + _PQ + _WS + "{0,4}[=:]" + _WS + "{0,4}" + _PQ
     + r"[A-Za-z0-9_+/=.~!@$%^&*-]{8}", None),
    ("i", r"passw(?:or)?d\\{0,3}[\"']?" + _WS + "{0,4}[:=]" + _WS + "{0,4}" + _PQ
     + r"[A-Za-z0-9_+/=.~!@#$%^&*-]{4}", None),
    ("", r"(?:mysql|mariadb)[a-z-]{0,10}[ \t][^\n]{0,200}[ \t]-p[^ \t\n\r\x0b\x0c'\"\\]{3}", None),
)
