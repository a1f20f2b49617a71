"""Calling the summarizer safely: chunking, prompts, and the checks every LLM output must pass.

The summarizer (``ctx.summarizer(text, max_tokens) -> str``) is an LLM call the runner gives to
strategies on paths that allow it. It receives the whole prompt as ``text`` and ``max_tokens`` as
the cap of its reply (tokens). Its output is checked (not empty, at most ``max_tokens`` tokens,
every pinned fact of its input present verbatim); a failed check or any exception raises
:class:`SummaryFailed`, and the calling strategy falls back to a deterministic path. Summarization
can invent tool results the tool never returned (DESIGN.md, "Knowledge"): the prompts ask for
exact values and forbid inventions; the pin check catches dropped facts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctxagent.strategies.base import Summarizer
from ctxagent.tokens import count_text

MAX_COMBINE_ROUNDS = 4  # bound on summaries of summaries when the chunks' summaries are still long

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
    """``value`` cut at line ends into pieces of at most about ``chunk_tokens`` tokens each (a
    single longer line is cut by characters)."""
    if count_text(value, model) <= chunk_tokens:
        return [value]
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for line in value.splitlines():
        tokens = count_text(line, model) + 1
        if tokens > chunk_tokens:
            step = max(1, int(len(line) * chunk_tokens / tokens * 0.9))
            parts = [line[i : i + step] for i in range(0, len(line), step)]
        else:
            parts = [line]
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
    return "\nCopy each of these pinned facts verbatim into your answer:\n" + "\n".join(
        f"- {p}" for p in pins
    )


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
    """``output`` if it is not empty, at most ``max_tokens`` tokens and holds every pin verbatim;
    else raises :class:`SummaryFailed` naming the failed check."""
    if not output.strip():
        raise SummaryFailed("the summary is empty")
    tokens = count_text(output, model)
    if tokens > max_tokens:
        raise SummaryFailed(f"the summary has {tokens} tokens, over its limit of {max_tokens}")
    missing = [p for p in pins if p not in output]
    if missing:
        raise SummaryFailed(f"the summary dropped pinned facts: {missing}")
    return output


def condense(
    material: str,
    *,
    summarizer: Summarizer,
    final_prompt: str,
    max_tokens: int,
    chunk_tokens: int,
    pins: Sequence[str] = (),
    model: str = "",
    finish: Callable[[str], str] = lambda reply: reply,
) -> str:
    """The checked result of asking ``final_prompt`` about ``material``.

    ``material`` over ``chunk_tokens`` tokens is first cut into chunks, each summarized with
    :data:`CHUNK_PROMPT`; their summaries are joined (and condensed again, at most
    :data:`MAX_COMBINE_ROUNDS` times, while still over ``chunk_tokens``) and given to
    ``final_prompt``. ``finish`` turns the final reply into the text to check (it may raise
    ``ValueError``, e.g. for invalid JSON). Raises :class:`SummaryFailed`.
    """
    chunk_tokens = max(chunk_tokens, 4 * max_tokens)
    rounds = 0
    while len(pieces := chunks(material, chunk_tokens, model)) > 1:
        if rounds == MAX_COMBINE_ROUNDS:
            raise SummaryFailed(f"still over {chunk_tokens} tokens after {rounds} rounds of summaries")
        rounds += 1
        partials = []
        for number, piece in enumerate(pieces, 1):
            prompt = CHUNK_PROMPT.format(part=number, parts=len(pieces), max_tokens=max_tokens)
            reply = call(summarizer, f"{prompt}{pins_block([p for p in pins if p in piece])}\n\n{piece}",
                         max_tokens)
            partials.append(check(reply, max_tokens, [], model))
        material = "\n\n".join(f"[part {n}] {p}" for n, p in enumerate(partials, 1))
    reply = call(summarizer, f"{final_prompt}{pins_block(pins)}\n\n{material}", max_tokens)
    try:
        output = finish(reply)
    except ValueError as err:
        raise SummaryFailed(f"the summarizer's reply is not usable: {err}") from err
    return check(output, max_tokens, pins, model)
