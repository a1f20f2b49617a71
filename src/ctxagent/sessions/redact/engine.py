"""The matching engine of the secret scan: one combined regex of the exact values and the secret
shapes (:mod:`ctxagent.sessions.redact.rules`), tried only where an anchor allows.

With a prefilter (:mod:`ctxagent.sessions.redact.scan`), :meth:`Engine.windowed` narrows those positions
further, to the windows where a prefilter matched: the positions that can start a match are all in
a window, so :meth:`Engine.sub` replaces exactly what it replaces without one.
"""

from __future__ import annotations

import bisect
import json
import mmap
import re
from array import array
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxagent.sessions.redact.rules import ANCHOR_PATTERN, ANCHORS, LOWER_ANCHORS, NAMED_NEEDLES, SHAPES, looks_secret

MARKER = "[REDACTED:{}]"
BEFORE_BYTES = 64  # context kept before a window or a chunked copy's buffer: lookbehinds read it
AFTER_BYTES = 256  # and after it (plus the longest exact value): anchors and their lookaheads

Window = tuple[int, int]


class Windows:
    """Byte ranges ``[start, end)`` (absolute offsets) where a secret may start, kept sorted and
    disjoint in two arrays (16 bytes a window). :meth:`add` in any order, then :meth:`finish`."""

    def __init__(self) -> None:
        self.starts = array("q")
        self.ends = array("q")
        self._sorted = True

    def add(self, start: int, end: int) -> None:
        """Add ``[start, end)``, merged with the last window when they overlap."""
        if self.starts and start <= self.ends[-1] and end >= self.starts[-1]:
            self.starts[-1], self.ends[-1] = min(start, self.starts[-1]), max(end, self.ends[-1])
            return
        if self.starts and start < self.starts[-1]:
            self._sorted = False
        self.starts.append(start)
        self.ends.append(end)

    def finish(self) -> Windows:
        """Sorted and merged (returns self)."""
        if not self._sorted:
            pairs = sorted(zip(self.starts, self.ends, strict=True))
            self.starts, self.ends, self._sorted = array("q"), array("q"), True
            for start, end in pairs:
                self.add(start, end)
        return self

    def __len__(self) -> int:
        return len(self.starts)

    def __iter__(self) -> Iterator[Window]:
        return zip(self.starts, self.ends, strict=True)

    def within(self, lo: int, hi: int) -> Iterator[Window]:
        """The windows that overlap ``[lo, hi)``, in order."""
        for i in range(bisect.bisect_right(self.ends, lo), len(self.starts)):
            if self.starts[i] >= hi:
                return
            yield self.starts[i], self.ends[i]


_LOWER_RE = re.compile("|".join(LOWER_ANCHORS), re.IGNORECASE)


class Engine:
    """One combined regex (exact values first, then shapes) over ``str`` or ``bytes``, tried only
    at the positions its anchors allow. Bytes are matched as latin-1, so an exact value given as
    text matches its UTF-8 bytes.

    A shape's match counts only when its secret passes the shape's check (:func:`looks_secret`);
    when it does not, the shapes after it are tried at the same position, one by one. An exact value
    that starts inside a shape's match and runs past its end is replaced with it, whole: a shape
    stops at a space or a ``#`` the value holds (``DB_PASSWORD=This is#Strong99``).
    """

    def __init__(self, exact: Mapping[str, str], as_bytes: bool):
        self.as_bytes = as_bytes
        variants: dict[str, str] = {}
        for value, kind in exact.items():
            once = json.dumps(value, ensure_ascii=False)[1:-1]
            for variant in (value, once, json.dumps(value)[1:-1], json.dumps(once, ensure_ascii=False)[1:-1]):
                variants.setdefault(variant, kind)  # JSON-escaped, once or twice: as inside JSON text
        if as_bytes:
            variants = {v.encode("utf-8", "surrogateescape").decode("latin-1"): k for v, k in variants.items()}
        exacts = sorted(variants, key=len, reverse=True)
        self.exact_bytes = [value.encode("latin-1") for value in exacts] if as_bytes else []
        self.n_exact = len(exacts)
        self.longest = max((len(value) for value in exacts), default=0)
        self.after = AFTER_BYTES + self.longest
        shapes = [f"(?P<p{len(exacts) + i}>{prefix}){secret}" if prefix else secret
                  for i, (_, prefix, secret, _) in enumerate(SHAPES)]
        self.parts = [re.escape(value) for value in exacts] + shapes
        self.kinds = [variants[value] for value in exacts] + [kind for kind, _, _, _ in SHAPES]
        self.prefixed = [False] * len(exacts) + [bool(prefix) for _, prefix, _, _ in SHAPES]
        self.checks: list[str | None] = [*(None for _ in exacts), *(check for _, _, _, check in SHAPES)]
        source = "|".join(f"(?P<a{i}>{part})" for i, part in enumerate(self.parts))
        self.regex: re.Pattern[Any] = re.compile(self._raw(source))
        self.exact_re: re.Pattern[Any] | None = re.compile(self._raw("|".join(
            f"(?P<a{i}>{part})" for i, part in enumerate(self.parts[:self.n_exact])))) if exacts else None
        self._singles: dict[int, re.Pattern[Any]] = {}  # one shape alone, compiled when first needed
        self.anchors = [(self._raw(value), 0) for value in exacts]
        self.anchors += [(self._raw(needle), back) for needle, back in ANCHORS]
        # one alternation finds every anchor in a single pass (about twice as fast as one find each)
        backs = {needle: back for needle, back in reversed(self.anchors)}
        # the needle found at a position is the longest there; the others there are its prefixes
        self.backs = {needle: max(b for other, b in backs.items() if needle.startswith(other)) for needle in backs}
        longest_first = sorted(self.backs, key=len, reverse=True)
        self.anchor_re: re.Pattern[Any] = re.compile(self._raw("|").join(re.escape(n) for n in longest_first))
        self.scheme = self._raw("://")
        # where a URL's scheme can start before a "://" (a word's start, then scheme characters)
        self.scheme_re: re.Pattern[Any] = re.compile(self._raw(r"(?<![A-Za-z0-9_])[a-z][a-z0-9+.-]{1,20}://"))
        self.lower = [self._raw(needle) for needle in LOWER_ANCHORS]
        self.lower_re: re.Pattern[Any] = re.compile(self._raw(_LOWER_RE.pattern), re.IGNORECASE)
        self.named_re: re.Pattern[Any] = re.compile(self._raw(ANCHOR_PATTERN), re.IGNORECASE)
        self.named = [(self._raw(needle), backs) for needle, backs in NAMED_NEEDLES]

    def _raw(self, text: str) -> Any:
        return text.encode("latin-1") if self.as_bytes else text

    def _text(self, raw: Any) -> str:
        return raw.decode("latin-1") if self.as_bytes else str(raw)

    def candidates(self, buf: Any) -> list[int]:
        """Sorted positions of ``buf`` where a match may start."""
        starts: set[int] = set()
        found = self.anchor_re.search(buf)
        while found is not None:  # restarting one past each hit: anchors may overlap
            hit = found.start()
            needle = found.group()
            back = self.backs[needle]
            if needle == self.scheme:  # the first start of a scheme before it (a later one matches no more)
                starts.update(m.start() for m in self.scheme_re.finditer(buf, max(0, hit - back), hit + 3))
            elif back:
                starts.update(range(max(0, hit - back), hit + 1))
            else:
                starts.add(hit)
            found = self.anchor_re.search(buf, hit + 1)
        if self.as_bytes or buf.isascii():  # lower() keeps positions
            lowered = buf.lower()
            for needle in self.lower:
                hit = lowered.find(needle)
                while hit != -1:
                    starts.add(hit)
                    hit = lowered.find(needle, hit + 1)
            starts.update(self._named(buf, lowered))
        else:
            starts.update(m.start() for m in self.lower_re.finditer(buf))
            starts.update(m.start() for m in self.named_re.finditer(buf))
        return sorted(starts)

    def _named(self, buf: Any, lowered: Any) -> Iterator[int]:
        """Positions where a header, URL query or named-key shape may start (:data:`NAMED_NEEDLES`)."""
        for needle, backs in self.named:
            hit = lowered.find(needle)
            while hit != -1:
                yield from (hit - back for back in backs if hit >= back and self.named_re.match(buf, hit - back))
                hit = lowered.find(needle, hit + 1)

    def sub(self, buf: Any, limit: int | None = None, starts: Sequence[int] | None = None,
            begin: int = 0) -> tuple[Any, int]:
        """``(buf[begin:cut] redacted, cut)``: ``cut`` is ``len(buf)``, or with ``limit``, only matches
        starting before it are replaced and ``cut >= limit`` is never inside a match. ``buf[:begin]`` is
        context a lookbehind (``\\b``, ``(?<!Next)``) may read, never replaced nor returned. ``starts``:
        the positions to try (:meth:`windowed`), default :meth:`candidates`."""
        pieces: list[Any] = []
        pos = begin
        for start in self.candidates(buf) if starts is None else starts:
            if limit is not None and start >= limit:
                break
            if start < pos or (hit := self.hit(buf, start)) is None:
                continue
            end, text = hit
            pieces += [buf[pos:start], self._raw(text)]
            pos = end
        cut = len(buf) if limit is None else max(limit, pos)
        pieces.append(buf[pos:cut])
        return buf[:0].join(pieces), cut

    def search(self, buf: Any) -> bool:
        """Whether ``buf`` holds anything to replace."""
        return any(self.hit(buf, start) is not None for start in self.candidates(buf))

    def hit(self, buf: Any, pos: int, endpos: int | None = None) -> tuple[int, str] | None:
        """What replaces a secret starting at ``pos`` of ``buf[:endpos]``: ``(end, text)``, the text
        standing for ``buf[pos:end]`` (a kept prefix, then the marker); None: no secret starts there."""
        endpos = len(buf) if endpos is None else endpos
        match = self.regex.match(buf, pos, endpos)
        if match is None or match.end() == pos:
            return None
        index = int(str(match.lastgroup)[1:])  # "a<i>": the alternative that matched (it closes last)
        if not self._passes(match, index):
            found = self._after(buf, pos, endpos, index)
            if found is None:
                return None
            match, index = found
        return self._extended(buf, match, index, endpos)

    def _passes(self, match: re.Match[Any], index: int) -> bool:
        check = self.checks[index]
        if check is None:
            return True
        whole = match.group(f"a{index}")
        keep = match.group(f"p{index}") if self.prefixed[index] else whole[:0]
        return looks_secret(check, self._text(whole[len(keep):]), self._text(keep))

    def _after(self, buf: Any, pos: int, endpos: int, index: int) -> tuple[re.Match[Any], int] | None:
        """The first shape after ``index`` that matches at ``pos`` and passes its check."""
        for i in range(index + 1, len(self.parts)):
            single = self._singles.get(i)
            if single is None:
                single = self._singles[i] = re.compile(self._raw(f"(?P<a{i}>{self.parts[i]})"))
            match = single.match(buf, pos, endpos)
            if match is not None and match.end() > pos and self._passes(match, i):
                return match, i
        return None

    def _extended(self, buf: Any, match: re.Match[Any], index: int, endpos: int) -> tuple[int, str]:
        """``(end, text)`` of a match: the prefix it keeps, then the marker of its kind (the most specific
        one, for a prefixed shape); run on to the end of any exact value that starts inside it."""
        keep = match.group(f"p{index}") if self.prefixed[index] else None
        start, end = match.start(), match.end()
        kind = self.kinds[index]
        if keep is not None:
            kind = self._kind_of(self._text(match.group(f"a{index}")[len(keep):]), kind)
        if self.exact_re is not None and index >= self.n_exact:
            cut = start + (len(keep) if keep is not None else 0)
            for exact in self.exact_re.finditer(buf, cut, min(endpos, end + self.longest)):
                if exact.start() >= end:
                    break
                if exact.end() > end:
                    end, kind = exact.end(), self.kinds[int(str(exact.lastgroup)[1:])]
        return end, ("" if keep is None else self._text(keep)) + MARKER.format(kind)

    def _kind_of(self, secret: str, default: str) -> str:
        """The most specific kind of a secret found after a prefix (an env value, a key shape)."""
        whole = self.regex.fullmatch(self._raw(secret))
        if whole is None:
            return default
        index = int(str(whole.lastgroup)[1:])
        return default if self.prefixed[index] else self.kinds[index]

    def windowed(self, buf: bytes, windows: Windows, base: int = 0) -> list[int]:
        """The :meth:`candidates` of ``buf`` inside ``windows`` (absolute positions: ``buf`` starts
        at ``base``), sorted. Each window's candidates come from the text around it alone."""
        starts: list[int] = []
        for w0, w1 in windows.within(base, base + len(buf)):
            w0, w1 = max(0, w0 - base), min(len(buf), w1 - base)
            if w0 >= w1:
                continue
            lo, hi = max(0, w0 - BEFORE_BYTES), min(len(buf), w1 + self.after)
            starts += (lo + p for p in self.candidates(buf[lo:hi]) if w0 <= p + lo < w1)
        return sorted(set(starts))

    def found_in_file(self, path: Path, windows: Windows, chunk: int, overlap: int) -> bool:
        """Whether :meth:`sub`, run on the file at ``path`` as a chunked copy does (``chunk`` bytes
        read at a time, ``overlap`` kept back), would replace anything that starts in ``windows``.

        Each candidate is matched in the buffer that copy would try it in (the same text before
        and after it), without reading the rest of the file. Raises ``OSError``.
        """
        if not windows:
            return False
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            buffers = list(_buffers(len(mm), chunk, overlap))
            index = 0
            for w0, w1 in windows:
                lo, hi = max(0, w0 - BEFORE_BYTES), min(len(mm), w1 + self.after)
                for p in self.candidates(mm[lo:hi]):
                    p += lo
                    if not w0 <= p < w1:
                        continue
                    while buffers[index][1] <= p:
                        index += 1
                    end = buffers[index][2]
                    if self.hit(mm, p, end) is not None:  # the copy keeps BEFORE_BYTES of context too
                        return True
        return False


def _buffers(size: int, chunk: int, overlap: int) -> Iterator[tuple[int, int, int]]:
    """``(start, limit, end)`` of each buffer a chunked copy of a ``size``-byte file without
    replacements tries: positions in ``[start, limit)`` are tried in ``[start, end)``."""
    start = pos = 0
    while True:
        n = min(chunk, size - pos)
        end = pos + n
        limit = max(start, end - overlap) if n else end
        yield start, limit, end
        if not n:
            return
        start, pos = limit, end
