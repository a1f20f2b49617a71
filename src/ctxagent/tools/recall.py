"""recall: search everything the session has seen, as Letta's recall memory does.

Documents (tools/recall_index.py): every message record of the transcript and every stored text
output, in chunks with their line range; recall's own calls and results are not searched (they would
echo every query back). Ranking: BM25 (``bm25s``, imported on the first call) over lowercase words,
or with ``regex`` a Python regular expression (10 s budget), newest first; with an embedding model,
BM25 fused with the embedding ranking by reciprocal rank fusion, an embedding failure falling back to
BM25 with a note. See docs/tools.md ("Recall").
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from ctxagent.tokens import count_text
from ctxagent.tools.base import ToolContext, ToolError
from ctxagent.tools.patterns import Budget, Timed, compile_pattern, too_slow
from ctxagent.tools.recall_index import CONTROL, Doc, Index, index_for, words
from ctxagent.tools.signature import function_tool
from ctxagent.tools.values import import_numpy

MAX_TOP_K = 50
RESULT_MAX_TOKENS = 2500  # tokens of the whole result, at most
SNIPPET_CHARS = 300  # characters of one hit's snippet, at most
RRF_K = 60  # reciprocal rank fusion constant (Cormack et al.)
EMBED_BATCH = 64  # documents per embedding request
EMBED_CHARS = 4000  # characters of a document sent to the embedding model


def bm25_ranking(index: Index, terms: Sequence[str]) -> list[int]:
    """Documents holding any of ``terms``, best BM25 score first."""
    ids = sorted({index.vocab[t] for t in terms if t in index.vocab})
    if not ids or not index.docs:
        return []
    if index.bm25 is None:
        import bm25s

        index.bm25 = bm25s.BM25()
        index.bm25.index((index.ids, dict(index.vocab)), create_empty_token=False, show_progress=False)
    return _best_first(index.bm25.get_scores_from_ids(ids))


def regex_ranking(index: Index, pattern: Any) -> list[int]:
    """Documents ``pattern`` (:func:`~ctxagent.tools.patterns.compile_pattern`'s) matches, newest
    first. Raises ``ToolError`` for a too slow pattern."""
    budget = Budget()
    timed = Timed(pattern, budget)
    try:
        return [i for i in range(len(index.docs) - 1, -1, -1) if timed.search(index.docs[i].text)]
    except TimeoutError:
        raise too_slow("recall", pattern.pattern, "the transcript", budget) from None


def fuse(rankings: Sequence[Sequence[int]]) -> list[int]:
    """Reciprocal rank fusion: ``sum 1 / (60 + rank)`` over the rankings, best first."""
    score: dict[int, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, 1):
            score[doc] = score.get(doc, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(score, key=lambda d: -score[d])


Embed = Callable[[list[str]], list[list[float]]]


def embedding_ranking(index: Index, query: str, model: str, embed: Embed, limit: int) -> list[int]:
    """The ``limit`` documents nearest to ``query`` (positive cosine similarity of ``embed``'s vectors)
    (documents embedded once and cached). Raises whatever ``embed`` raises."""
    if index.vector_model != model:
        index.vectors, index.vector_model = {}, model
    missing = [i for i in range(len(index.docs)) if i not in index.vectors]
    for start in range(0, len(missing), EMBED_BATCH):
        batch = missing[start:start + EMBED_BATCH]
        vectors = embed([index.docs[i].text[:EMBED_CHARS] for i in batch])
        if len(vectors) != len(batch):
            raise ValueError(f"{len(vectors)} embeddings for {len(batch)} inputs")
        index.vectors.update(zip(batch, (_unit(v) for v in vectors), strict=True))
    if not index.docs:
        return []
    scores = import_numpy().stack([index.vectors[i] for i in range(len(index.docs))]) @ _unit(embed([query])[0])
    return _best_first(scores)[:limit]


def _best_first(scores: Any) -> list[int]:
    """The indexes of the positive ``scores`` (a numpy array), highest first, ties in index order."""
    np = import_numpy()
    found = np.flatnonzero(scores > 0)
    return [int(i) for i in found[np.argsort(-scores[found], kind="stable")]]


def _unit(values: Sequence[float]) -> Any:
    np = import_numpy()
    vector = np.asarray(values, dtype=np.float32)
    return vector / (np.linalg.norm(vector) or 1.0)


def snippet(text: str, terms: Sequence[str], weight: Callable[[str], float], pattern: Any = None) -> str:
    """At most 300 characters of ``text``, whitespace collapsed, centred on the best match: the
    regex ``pattern``'s first match, else the rarest of the query ``terms`` (``weight``: IDF)."""
    centre = 0
    if pattern is not None:
        with contextlib.suppress(TimeoutError):
            match = pattern.search(text, timeout=1.0)
            centre = match.start() if match else 0
    elif terms:
        centre = _best_centre(text, terms, weight)
    return _window(text, centre)


def _window(text: str, centre: int) -> str:
    """The text around ``centre``: whitespace collapsed, control characters dropped, at most 300
    characters with ``…`` where it was cut."""
    half, reach = SNIPPET_CHARS // 2, 2 * SNIPPET_CHARS
    raw_left, raw_right = text[max(0, centre - reach):centre], text[centre:centre + reach]
    left = " ".join(raw_left.split()) + (" " if raw_left[-1:].isspace() and raw_left.strip() else "")
    right = " ".join(raw_right.split())
    shown_left = left[-(half - 1):].lstrip()
    shown_right = right[:SNIPPET_CHARS - 2 - len(shown_left)].rstrip()
    cut_left = len(shown_left) < len(left.strip()) or bool(text[:max(0, centre - reach)].strip())
    cut_right = len(shown_right) < len(right) or bool(text[centre + reach:].strip())
    shown = ("…" if cut_left else "") + shown_left + shown_right + ("…" if cut_right else "")
    return CONTROL.sub("", shown)


def _best_centre(text: str, terms: Sequence[str], weight: Callable[[str], float]) -> int:
    """Where the query term of most ``weight`` (IDF) that ``text`` holds first occurs (0: none)."""
    found = [(weight(term), -m.start()) for term in set(terms)
             if (m := re.search(rf"(?<![^\W_]){re.escape(term)}(?![^\W_])", text, re.IGNORECASE))]
    return -max(found)[1] if found else 0


def describe(index: Index, doc: Doc) -> str:
    """``@h lines 1-35 (stored output, turn 4)``, ``@h (seq 12, tool, turn 5)`` or ``seq 3 (user, turn 0)``."""
    turn = doc.turn if doc.turn is not None else index.turns.get(doc.handle or "")
    when = f", turn {turn}" if turn is not None else ""
    if doc.lines is not None:
        first, last = doc.lines
        where = f"line {first}" if first == last else f"lines {first}-{last}"
        return f"{doc.handle} {where} (stored output{when})"
    if doc.handle:
        return f"{doc.handle} (seq {doc.seq}, {doc.role}{when})"
    return f"seq {doc.seq} ({doc.role}{when})"


def render(head: str, lines: list[str], notes: list[str]) -> str:
    """``head``, then as many hit lines as fit in 2,500 tokens, then ``notes``."""
    budget = RESULT_MAX_TOKENS - count_text(head + "\n".join(notes)) - 40  # 40: the "more hits" note
    shown: list[str] = []
    for line in lines:
        cost = count_text(line) + 1
        if cost > budget:
            break
        shown.append(line)
        budget -= cost
    if len(shown) < len(lines):
        notes = [f"[{len(lines) - len(shown)} more hits not shown (result kept under {RESULT_MAX_TOKENS:,} "
                 "tokens); narrow the query]", *notes]
    return "\n".join([head, *shown, *notes])


def recall(ctx: ToolContext, query: str, regex: bool = False, top_k: int | None = None) -> str:
    """Search the session's transcript and stored outputs for ``query`` (ranked as the module says).

    Returns at most ``top_k`` (default ``ctx.recall_top_k``) hit lines, each naming a handle and line
    range or a message's seq and turn, with a snippet of at most 300 characters; 2,500 tokens in all.
    Raises ``ToolError`` for an empty query, a ``top_k`` out of 1..50, an invalid or too slow regex.

    Args:
        query: words to look for (or a regex when regex is true)
        regex: treat query as a Python regular expression
        top_k: hits to return, 1-50 (default 8)
    """
    if not query.strip():
        raise ToolError("query is empty: give words to look for (or a regex with regex: true)")
    top_k = ctx.recall_top_k if top_k is None else top_k
    if not 1 <= top_k <= MAX_TOP_K:
        raise ToolError(f"top_k must be between 1 and {MAX_TOP_K}, not {top_k}")
    index = index_for(ctx)
    notes: list[str] = []
    pattern, terms = None, words(query)
    if regex:
        pattern, mode = compile_pattern(query), "regex"
        ranking = regex_ranking(index, pattern)
    else:
        ranking, mode = _ranked(index, query, terms, ctx, notes)
    ranking = [i for i in ranking if index.docs[i].lines is not None or index.docs[i].handle not in index.stored]
    n = len(index.docs)

    def weight(term: str) -> float:
        df = index.df.get(index.vocab.get(term, -1), 0)
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    hits = [f"{k}. {describe(index, index.docs[i])}: {snippet(index.docs[i].text, terms, weight, pattern)}"
            for k, i in enumerate(ranking[:top_k], 1)]
    notes += _coverage_notes(index)
    if not hits:
        return "\n".join([f"recall {query!r} ({mode}): no match in {n:,} documents (messages, output chunks)",
                          *notes])
    head = (f"recall {query!r} ({mode}): {len(hits)} of {len(ranking):,} matching documents, best first; "
            "read more with read_output/grep_output on a handle")
    return render(head, hits, notes)


def _coverage_notes(index: Index) -> list[str]:
    """What was not searched (binary outputs) or searched only in part (over 16 MiB)."""
    notes = []
    if index.skipped:
        notes.append(f"[binary outputs not searched: {_names(index.skipped)}]")
    if index.partial:
        notes.append(f"[outputs searched only in their first bytes (16 MiB each, 256 MiB a session): "
                     f"{_names(index.partial)}; grep_output searches them whole]")
    return notes


def _names(handles: set[str]) -> str:
    """Up to 10 of ``handles``, sorted, then how many more."""
    names = sorted(handles)
    more = f" and {len(names) - 10} more" if len(names) > 10 else ""
    return " ".join(names[:10]) + more


def _ranked(index: Index, query: str, terms: list[str], ctx: ToolContext, notes: list[str]) -> tuple[list[int], str]:
    """The BM25 ranking, fused with the embedding ranking when a model is set (errors noted)."""
    ranking = bm25_ranking(index, terms)
    if not ctx.recall_model:
        return ranking, "bm25"
    from ctxagent.agent import litellm_backend  # litellm itself: on the first embedding

    embed = functools.partial(litellm_backend.embed, model=ctx.recall_model, api_base=ctx.recall_api_base)
    try:
        semantic = embedding_ranking(index, query, ctx.recall_model, embed, MAX_TOP_K)
    except Exception as err:
        notes.append(f"[embedding with {ctx.recall_model} failed ({type(err).__name__}: {str(err)[:200]}); "
                     "ranked by BM25 only]")
        return ranking, "bm25"
    return fuse([ranking[:100], semantic]), "bm25+embeddings"


RECALL = function_tool(recall, kind="read", resolve_handles=False, description=(
    "Search everything this session has seen: all earlier messages (yours, the user's, tool calls and "
    "results) and every stored output, even those no longer in your context. Use it when a fact you saw "
    "earlier is not in your context any more (compaction notes say messages were dropped and name "
    "their handles). Keyword search ranked by BM25, or regex: true for a Python regular expression. "
    "Each hit names a handle with a line range (read it with read_output/grep_output) or a message's "
    "seq and turn, with a snippet. At most top_k hits (default 8, max 50), 2,500 tokens in all."
))
