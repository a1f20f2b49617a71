"""The grammar of handles, in one place.

A *handle* is the short, stable name of a tool result's full value in the session's output store
(DESIGN.md "Terms"; the pointer paper's memory pointer). Grammar::

    handle     = "@" name [ "." copy ]        name: 1-32 of [A-Za-z0-9_-]; copy: digits >= 2
    sub-handle = handle ( "/" part )*         a key or index inside a structured value

``name`` is derived from the tool call id: every character outside ``[A-Za-z0-9_-]`` removed, cut
to its last 12 characters (``call_9f8XkQ2mZbL0aYv7`` gives ``@kQ2mZbL0aYv7``; an empty or missing id
gives ``@out``). When that name is already taken in the session (providers that send ``call_1``
every turn, or no id at all), the next free ``.2``, ``.3``... is appended. The handle is chosen
**once**, when the tool message record is written, and kept on the record and on the view entry
(``MessageRecord.handle``, ``Entry.handle``): nothing re-derives it from text.
"""

from __future__ import annotations

import re
from collections.abc import Container

_HANDLE = r"@[A-Za-z0-9_-]{1,32}(?:\.[0-9]+)?"  # the grammar's ``handle``
HANDLE_RE = re.compile(rf"^{_HANDLE}\Z")
"""A whole string that is exactly one handle (no sub-handle part)."""

REF_RE = re.compile(rf"^({_HANDLE})((?:/[^/\s]+)*)\Z")
"""A handle with an optional ``/part/part`` path into its value (group 1: handle, 2: path)."""

IN_TEXT_RE = re.compile(rf"(?<![\w@/.]){_HANDLE}(?:/[A-Za-z0-9_~%-]+(?:\.[A-Za-z0-9_~%-]+)*)*")
"""Handles and sub-handles as they appear inside free text (an answer, a view)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
NAME_CHARS = 12  # characters of the call id kept in a handle's name


def base_handle(call_id: str | None) -> str:
    """The handle call ``call_id`` would get if nothing else had taken it (``@out`` for no id)."""
    return "@" + (_UNSAFE.sub("", call_id or "")[-NAME_CHARS:] or "out")


def new_handle(call_id: str | None, taken: Container[str]) -> str:
    """A handle for call ``call_id`` that is not in ``taken``: :func:`base_handle`, else the first
    free ``.2``, ``.3``... copy of it."""
    base = base_handle(call_id)
    handle, n = base, 1
    while handle in taken:
        n += 1
        handle = f"{base}.{n}"
    return handle

