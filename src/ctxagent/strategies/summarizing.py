"""Calling the summarizer safely: chunking, prompts, and the checks every LLM output must pass.

The summarizer (``ctx.summarizer(text, max_tokens) -> str``: the whole prompt, the cap of its reply in
tokens) is an LLM call the runner gives to strategies on paths that allow it. When its window is known
(``ctx.summarizer_window``, tokens), every request fits it: prompt + ``max_tokens`` + :data:`MARGIN_TOKENS`
≤ window. Its output is checked (not empty, at most ``max_tokens``, every pinned fact of its input
verbatim); a failed check, a request the window cannot hold, or any exception raises
:class:`SummaryFailed`, and the strategy falls back to a deterministic path, reported in
``Outcome.warnings``. Summarization can invent tool results (DESIGN.md, "Knowledge"): the prompts ask
for exact values and forbid inventions, the pin check catches dropped facts, and the strategies append
the exact values of the range by code (:mod:`ctxagent.strategies.facts`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctxagent.strategies.base import Summarizer
from ctxagent.tokens import count_text

MAX_COMBINE_ROUNDS = 4  # bound on summaries of summaries when the chunks' summaries are still long
MARGIN_TOKENS = 256  # of every summarizer request, tokens: its framing (system message, roles) and slack
ESTIMATE_SLACK = 0.98  # chunk sizes are estimated line by line: keep 2% below the room left

CHUNK_PROMPT = (
    "You are compressing part {part} of {parts} of an AI agent's working session so the agent can "
    "continue without the original messages. Write a dense plain-text summary of this part: what "
    "was asked, what was done, what was found, what failed and why. Keep exact values verbatim: "
    "file paths, numbers, ids, handles (like @abc123), commands, URLs and error messages. Never "
    "invent a result the messages do not show. At most {max_tokens} tokens, no preamble."
)


class SummaryFailed(Exception):
    """The summarizer raised, or its output failed a check; the message says which."""


def chunks(value: str, chunk_tokens: int, model: str = "") -> list[str]:
    """``value`` cut at line ends into pieces of about ``chunk_tokens`` tokens at most (a longer line by characters)."""
    if count_text(value, model) <= chunk_tokens:
        return [value]
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for line in value.splitlines():
        tokens = count_text(line, model) + 1
        step = max(1, int(len(line) * chunk_tokens / tokens * 0.9))  # characters, when the line alone is over
        parts = [line[i : i + step] for i in range(0, len(line), step)] if tokens > chunk_tokens else [line]
        for part in parts:
            cost = tokens if len(parts) == 1 else count_text(part, model) + 1
            if current and size + cost > chunk_tokens:
                pieces.append("\n".join(current))
                current, size = [], 0
            current.append(part)
            size += cost
    if current:
        pieces.append("\n".join(current))
    return pieces


def pins_block(pins: Sequence[str]) -> str:
    """The prompt lines that ask for each pinned fact verbatim ("" when there is none)."""
    if not pins:
        return ""
    return "\nCopy each of these pinned facts verbatim into your answer:\n" + "\n".join(f"- {p}" for p in pins)


def call(summarizer: Summarizer, prompt: str, max_tokens: int) -> str:
    """One summarizer call; any exception or a non-string reply raises :class:`SummaryFailed`."""
    try:
        reply = summarizer(prompt, max_tokens)
    except Exception as err:  # the summarizer is an LLM call: anything can go wrong
        raise SummaryFailed(f"the summarizer raised {type(err).__name__}: {err}") from err
    if not isinstance(reply, str):
        raise SummaryFailed(f"the summarizer returned {type(reply).__name__}, not text")
    return reply.strip()


def check(output: str, max_tokens: int, pins: Sequence[str], model: str = "") -> str:
    """``output`` if not empty, at most ``max_tokens`` tokens and holding every pin; else :class:`SummaryFailed`."""
    if not output.strip():
        raise SummaryFailed("the summary is empty")
    tokens = count_text(output, model)
    if tokens > max_tokens:
        raise SummaryFailed(f"the summary has {tokens} tokens, over its limit of {max_tokens}")
    missing = [p for p in pins if p not in output]
    if missing:
        raise SummaryFailed(f"the summary dropped pinned facts: {missing}")
    return output


def fits(prompt: str, max_tokens: int, window: int | None, model: str = "") -> None:
    """Raise :class:`SummaryFailed` unless ``prompt`` + ``max_tokens`` + :data:`MARGIN_TOKENS`
    tokens fit the summarizer's ``window`` (tokens; None: unknown, anything fits)."""
    if window is None:
        return
    tokens = count_text(prompt, model)
    if tokens + max_tokens + MARGIN_TOKENS > window:
        raise SummaryFailed(f"a summarizer request of {tokens} prompt tokens + {max_tokens} reply tokens + "
                            f"{MARGIN_TOKENS} margin does not fit the summarizer's {window}-token window")


def room(window: int | None, max_tokens: int, prompts: Sequence[str], chunk_tokens: int, model: str = "") -> int:
    """Tokens of material one summarizer request may carry: ``chunk_tokens``, lowered so that the
    longest of ``prompts`` + the material + ``max_tokens`` + :data:`MARGIN_TOKENS` fit ``window``
    (tokens; None: no clamp). Raises :class:`SummaryFailed` when no material fits at all."""
    if window is None:
        return chunk_tokens
    overhead = max(count_text(p, model) for p in prompts) + 2  # the prompt, then a blank line
    left = int((window - overhead - max_tokens - MARGIN_TOKENS) * ESTIMATE_SLACK)
    if left <= 0:
        raise SummaryFailed(f"the summarizer's {window}-token window cannot hold a request: prompt {overhead} + "
                            f"reply {max_tokens} + margin {MARGIN_TOKENS} tokens leave {max(left, 0)} for the material")
    return min(chunk_tokens, left)


def condense(material: str, *, summarizer: Summarizer, final_prompt: str, max_tokens: int, chunk_tokens: int,
             pins: Sequence[str] = (), model: str = "", finish: Callable[[str], str] = lambda reply: reply,
             window: int | None = None) -> str:
    """The checked result of asking ``final_prompt`` about ``material``: over ``chunk_tokens`` tokens it is
    first cut into chunks summarized with :data:`CHUNK_PROMPT`, whose summaries are joined (condensed
    again while over, :data:`MAX_COMBINE_ROUNDS` at most) and given to ``final_prompt``. Every request
    fits ``window`` (the summarizer's, tokens; None: unknown) with its reply (``max_tokens``) and
    :data:`MARGIN_TOKENS`. ``finish`` turns the final reply into the text to check (it may raise
    ``ValueError``, e.g. for invalid JSON). Raises :class:`SummaryFailed`.
    """
    widest_chunk_prompt = CHUNK_PROMPT.format(part=999, parts=999, max_tokens=max_tokens) + pins_block(pins)
    chunk_tokens = room(window, max_tokens, [widest_chunk_prompt, final_prompt + pins_block(pins)],
                        max(chunk_tokens, 4 * max_tokens), model)
    rounds = 0
    while len(pieces := chunks(material, chunk_tokens, model)) > 1:
        if rounds == MAX_COMBINE_ROUNDS:
            raise SummaryFailed(f"still over {chunk_tokens} tokens after {rounds} rounds of summaries")
        if chunk_tokens <= max_tokens:
            raise SummaryFailed(f"chunks of {chunk_tokens} tokens (the most the summarizer's {window}-token "
                                f"window leaves) cannot be condensed into replies of {max_tokens} tokens")
        rounds += 1
        partials = []
        for number, piece in enumerate(pieces, 1):
            prompt = CHUNK_PROMPT.format(part=number, parts=len(pieces), max_tokens=max_tokens)
            request = f"{prompt}{pins_block([p for p in pins if p in piece])}\n\n{piece}"
            fits(request, max_tokens, window, model)
            partials.append(check(call(summarizer, request, max_tokens), max_tokens, [], model))
        material = "\n\n".join(f"[part {n}] {p}" for n, p in enumerate(partials, 1))
    request = f"{final_prompt}{pins_block(pins)}\n\n{material}"
    fits(request, max_tokens, window, model)
    reply = call(summarizer, request, max_tokens)
    try:
        output = finish(reply)
    except ValueError as err:
        raise SummaryFailed(f"the summarizer's reply is not usable: {err}") from err
    return check(output, max_tokens, pins, model)
