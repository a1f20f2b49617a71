"""``--live --model M``: the retention task against a real model, with its provider-reported tokens and cost.

For a few configurations, at sampled probes of the long session, the exact view ctxagent (or a peer)
would send is sent to model ``M`` with one question: the current value of a planted fact. The model
gets ctxagent's ``read_output`` and ``grep_output`` tools over that run's real output store (at most
3 tool rounds), so a fact kept "through a handle" can actually be fetched. Success: the exact value
is in the final answer. Usage and cost are what the provider reports through litellm.

Without a key for ``M`` in the environment nothing is sent: :func:`key_problem` says why, and the
caller prints ``skipped: no key for M``. Tests never reach this module's network path.
"""

from __future__ import annotations

import json
import os
import random
import warnings
from collections.abc import Sequence
from typing import Any

MAX_TOOL_ROUNDS = 3
QUESTION = ("Quick check before you continue: what is the current value of the {key} mentioned earlier in this "
            "session? If it is only in an offloaded output, read it with read_output or grep_output by its "
            "handle. Answer with the exact value only.")


KEYS = {"openai": ("OPENAI_API_KEY",), "anthropic": ("ANTHROPIC_API_KEY",),
        "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"), "mistral": ("MISTRAL_API_KEY",), "groq": ("GROQ_API_KEY",),
        "openrouter": ("OPENROUTER_API_KEY",),
        "deepseek": ("DEEPSEEK_API_KEY",), "together_ai": ("TOGETHERAI_API_KEY",), "cohere": ("COHERE_API_KEY",),
        "xai": ("XAI_API_KEY",), "azure": ("AZURE_API_KEY", "AZURE_OPENAI_API_KEY")}


def provider_of(model: str) -> str:
    if "/" in model:
        return model.split("/", 1)[0]
    if model.startswith(("gpt-", "o1", "o3", "o4", "chatgpt")):
        return "openai"
    if model.startswith("claude"):
        return "anthropic"
    return ""


def key_problem(model: str) -> str | None:
    """None when the provider key for ``model`` is in the environment, else what is missing. Known
    providers are checked by their usual variable (no import); others through litellm's own check."""
    if model.startswith("scripted:"):
        return "a scripted model is not a live model"
    names = KEYS.get(provider_of(model))
    if names is not None:
        return None if any(os.environ.get(n) for n in names) else f"missing {' or '.join(names)}"
    from ctxagent.agent.litellm_backend import _litellm  # offline-safe, quiet import (3-4 s, ~200 MB)

    litellm = _litellm()
    try:
        with warnings.catch_warnings():  # provider modules it imports warn (pydantic ReadOnly TypedDicts)
            warnings.simplefilter("ignore")
            check = litellm.validate_environment(model=model)
    except Exception as err:
        return f"litellm cannot check the environment for {model}: {err}"
    if check.get("keys_in_environment"):
        return None
    missing = ", ".join(check.get("missing_keys") or []) or "provider key"
    return f"missing {missing}"


def run(model: str, captured: dict[str, Any], per_config: int = 8, seed: int = 5,
        api_base: str | None = None) -> dict[str, Any]:
    """Ask ``model`` the probe questions for each captured configuration; ``captured`` maps a
    configuration name to ``{"store": OutputStore, "probes": [(turn, fact, messages)], "policy": ...}``."""
    from ctxagent.agent.model import ToolCall, make_model
    from ctxagent.tools.base import ToolContext
    from ctxagent.tools.toolset import make_toolset

    backend = make_model(model, api_base=api_base, timeout_s=120, retries=2, max_output_tokens=200)
    rng = random.Random(seed)
    out: dict[str, Any] = {"model": model, "configs": []}
    for name, data in captured.items():
        probes = data["probes"]
        sample = rng.sample(probes, min(per_config, len(probes)))
        toolset = make_toolset(["read_output", "grep_output"], ToolContext(data["store"], data["store"].root),
                               data["policy"])
        ok = prompt = completion = 0
        cost = 0.0
        answers = []
        for turn, fact, messages in sample:
            convo: list[dict[str, Any]] = [*messages, {"role": "user", "content": QUESTION.format(key=fact.key)}]
            answer = ""
            for _ in range(MAX_TOOL_ROUNDS + 1):
                reply = backend.complete(convo, toolset.specs())
                if reply.usage:
                    prompt += reply.usage.prompt_tokens
                    completion += reply.usage.completion_tokens
                    cost += reply.usage.cost_usd or 0.0
                convo.append(reply.message())
                if not reply.tool_calls:
                    answer = reply.content or ""
                    break
                for call in reply.tool_calls:
                    result = toolset.call(ToolCall(call.id, call.name, call.arguments))
                    convo.append({"role": "tool", "tool_call_id": call.id, "content": result.content})
            expected = fact.expected(turn)
            ok += expected in answer
            answers.append({"turn": turn, "fact": fact.key, "expected": expected, "answer": answer[:200]})
        out["configs"].append({"name": name, "asked": len(sample), "correct": ok,
                               "success_pct": 100.0 * ok / len(sample) if sample else None,
                               "prompt_tokens": prompt, "completion_tokens": completion, "cost_usd": cost,
                               "answers": answers})
    return out


def rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["configuration", "asked", "correct", "provider prompt tokens", "completion tokens", "cost USD"]
    return header, [[c["name"], str(c["asked"]), f"{c['correct']} ({c['success_pct'] or 0:.0f}%)",
                     f"{c['prompt_tokens']:,}", f"{c['completion_tokens']:,}", f"{c['cost_usd']:.4f}"]
                    for c in data.get("configs", [])]


def capture_hook(store: Any, policy: Any, probe_turns: Sequence[tuple[int, Any, int]]) -> tuple[dict[str, Any], Any]:
    """A ``drive`` hook that keeps the view at each probe turn (the messages, not copies)."""
    wanted: dict[int, list[Any]] = {}
    for turn, fact, _ in probe_turns:
        wanted.setdefault(turn, []).append(fact)
    data: dict[str, Any] = {"store": store, "policy": policy, "probes": []}

    def hook(turn: int, view: Any) -> None:
        for fact in wanted.get(turn, []):
            data["probes"].append((turn, fact, list(view.messages)))

    return data, hook


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2)
