"""Your own agent loop, with ctxagent's context management (docs/api.md).

    python examples/api/own_loop.py                     # offline: a local fake OpenAI server plays the model
    python examples/api/own_loop.py --json              # the numbers as one JSON object
    python examples/api/own_loop.py --model openai/gpt-4o-mini        # a real model (OPENAI_API_KEY)
    python examples/api/own_loop.py --model openai/qwen --api-base http://127.0.0.1:8080/v1   # a local server

The loop is yours: it calls litellm and runs its one tool. ctxagent decides what each request holds:
``ctxagent.Context`` builds the view the ``default`` profile would send for the whole history (old
tool results masked to a stub naming their handle; past the trigger even so, truncated), and its
``outputs`` folder keeps every large tool output out of the context (a preview and a handle go in).
Offline, the model's side is scripted (``ctxagent.testing.FakeOpenAI``, real HTTP through litellm).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import ctxagent

TOOLS = [{"type": "function", "function": {
    "name": "read_log", "description": "The access log of one day of March 2025, one request a line.",
    "parameters": {"type": "object", "properties": {"day": {"type": "integer"}}, "required": ["day"]}}}]


def read_log(day: int) -> str:
    """The tool: a day's access log (day 3 was busy: 20 times the lines)."""
    lines = 2_000 if day == 3 else 100
    return "".join(f"2025-03-{day:02d}T{i % 24:02d}:{i % 60:02d} GET /api/items/{i} {500 if i % 97 == 0 else 200} "
                   f"{(i * 37 + day) % 900} ms\n" for i in range(lines))


def agent(task: str, model: str, api_base: str | None, outputs: Path) -> tuple[str, list[ctxagent.View]]:
    """Run ``task`` to an answer; returns it and the view of every request."""
    import litellm

    context = ctxagent.Context("default", model=model, context_window=16_000, tools=TOOLS, outputs=outputs)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You answer from the logs."},
                                      {"role": "user", "content": task}]
    views = []
    for _ in range(20):
        view = context.view(messages)  # what to send: the history as the profile manages it
        views.append(view)
        reply = litellm.completion(model=model, api_base=api_base, messages=view.messages, tools=TOOLS)
        message = reply.choices[0].message
        calls = message.tool_calls or []
        messages.append({"role": "assistant", "content": message.content, **({"tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in calls]} if calls else {})})
        if not calls:
            return str(message.content), views
        for call in calls:
            try:  # arguments may name stored values by handle ("@call_3"): resolved first
                value = read_log(**context.outputs.resolve_arguments(json.loads(call.function.arguments)))
            except (ctxagent.UsageError, ValueError, TypeError) as err:
                value = f"ERROR: {err}"  # errors go back to the model as the tool's result
            offloaded = context.outputs.offload(value, call_id=call.id, tool=call.function.name)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": offloaded.content})
    raise RuntimeError("no answer after 20 requests")


SCRIPT = [{"tool_calls": [{"id": f"call_{d}", "name": "read_log", "arguments": {"day": d}}]} for d in range(1, 9)] \
    + [{"content": "Day 3 had the most server errors (21 of 2,000 requests); its full log is @call_3."}]


def run(model: str | None, api_base: str | None) -> dict[str, Any]:
    """The loop on a real model (``model``), else offline against the scripted fake server."""
    task = "Which day of March 1-8 had the most HTTP 500 responses? Read each day's log."
    outputs = Path(tempfile.mkdtemp(prefix="ctxagent-own-loop-"))
    if model is None:
        from ctxagent.testing import FakeOpenAI

        os.environ.setdefault("OPENAI_API_KEY", "sk-local")  # the fake server checks no key
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm: no price list fetched
        with FakeOpenAI(SCRIPT) as server:
            answer, views = agent(task, "openai/gpt-4o-mini", server.base_url, outputs)
    else:
        answer, views = agent(task, model, api_base, outputs)
    store = ctxagent.Outputs(outputs)
    return {"answer": answer, "requests": len(views), "window": views[-1].window,
            "tokens": [v.tokens for v in views], "messages_sent": [len(v.messages) for v in views],
            "compactions": [f"{c.strategy} #{c.start}-{c.end}" for v in views for c in v.compactions],
            "handles": store.handles(), "day3_lines": len(str(store.resolve("@call_3")).splitlines())
            if "@call_3" in store.handles() else None, "outputs": str(outputs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a litellm model string (default: offline, scripted)")
    parser.add_argument("--api-base", help="an OpenAI-compatible server's URL")
    parser.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    args = parser.parse_args(argv)
    numbers = run(args.model, args.api_base)
    if args.json:
        print(json.dumps(numbers, indent=1))
        return 0
    for n, (tokens, sent) in enumerate(zip(numbers["tokens"], numbers["messages_sent"], strict=True), 1):
        print(f"request {n}: {sent} messages, {tokens:,} of {numbers['window']:,} tokens")
    print("compactions:", ", ".join(numbers["compactions"]) or "none")
    print(f"stored in {numbers['outputs']}: {', '.join(numbers['handles'])}")
    print("answer:", numbers["answer"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
