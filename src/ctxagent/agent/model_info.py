"""What litellm's model map says of a model string: its context window, and the models it knows
that look like a misspelled one. Imports litellm on first use (agent/litellm_backend.py)."""

from __future__ import annotations

import difflib

from ctxagent.agent.litellm_backend import _litellm


def model_window(model: str) -> int | None:
    """The context window of ``model`` in tokens (litellm's ``max_input_tokens``), or None if unknown.

    Never raises: unmapped models (``openai/whatever``) give None; a profile can supply the window.
    """
    try:
        value = _litellm().get_model_info(model).get("max_input_tokens")
    except Exception:  # litellm raises assorted types for unmapped models
        return None
    return int(value) if isinstance(value, int | float) and value > 0 else None


def did_you_mean(model: str, n: int = 3) -> list[str]:
    """Model strings litellm knows that look like ``model`` (a typo: ``openai/gpt-4o-mnii`` gives
    ``openai/gpt-4o-mini``), best first; the provider prefix the user gave is kept. Never raises."""
    try:
        known = list(_litellm().model_cost)
    except Exception:  # the price map could not be loaded: no suggestion
        return []
    provider, _, name = model.rpartition("/")
    found = difflib.get_close_matches(name, known, n=n, cutoff=0.75) if provider else []
    found = [f"{provider}/{k}" if "/" not in k else k for k in found]
    found += difflib.get_close_matches(model, known, n=n, cutoff=0.75)
    return list(dict.fromkeys(m for m in found if m != model))[:n]
