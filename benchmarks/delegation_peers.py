"""deepagents' sub-agents (the ``task`` tool) on the delegation workload of ``benchmarks/delegation.py``.

Run: ``python -m benchmarks.delegation_peers`` (prints one JSON dict).

What is measured: an orchestrator built with ``deepagents.create_deep_agent(model, subagents=[worker])``
delegates ``children`` subtasks (``children / per_reply`` replies of ``per_reply`` parallel ``task``
calls), then answers. Each child (the ``worker`` sub-agent, its own model) answers at once with one
text of about ``result_tokens`` tokens shaped like ``delegation.py``'s child results: its fact, a long
line of realistic report rows, its fact again. We record every request the orchestrator's model is
sent (system prompt included) and count it with ctxagent's tiktoken counts (``count_message`` on
``convert_to_openai_messages``, model ``benchmarks.harness.MODEL``); the ``*_with_tools`` fields add
what ctxagent's fake provider adds to its reported prompt tokens (3 a request, ``count_tools`` of the
tool schemas the model was bound with), for a like-for-like column with ``delegation.py``.

Offline and fair: both models are scripted ``BaseChatModel`` subclasses (no network, no key), so every
token difference comes from deepagents' own code paths. Nothing is configured beyond what a user
writes: default backend (``StateBackend``), default ``FilesystemMiddleware``
(``tool_token_limit_before_evict=20000``, i.e. results over 80,000 characters are written to
``/large_tool_results/<tool_call_id>`` and replaced by a head/tail preview, which wraps every tool
including ``task``), default summarization (``create_summarization_middleware``; the orchestrator's
fake model carries a gpt-4o-mini profile, ``max_input_tokens`` = ``window``, as a real
``ChatOpenAI("gpt-4o-mini")`` would, so the trigger is 85% of it). The ``task`` tool itself returns
the sub-agent's last AI text whole, as a ``ToolMessage``; only the middleware above shrinks it.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import threading
import time
from typing import Any

from benchmarks.harness import MODEL
from ctxagent.tokens import PER_REQUEST, count_message, count_text, count_tools

_CHILD = re.compile(r"subtask (\d+)")
_EVICTED = re.compile(r"Tool result too large|/large_tool_results/")
_PATH = re.compile(r"/large_tool_results/[A-Za-z0-9_.-]+")
SUMMARY = "Summary: the orchestrator delegated subtasks to the worker; their reports are in the history file."


def fact(i: int) -> str:
    """Child ``i``'s fact (the same format as ``benchmarks/delegation.py``)."""
    return f"child-{i:02d} fact=K{(i * 7919) % 100_000:05d}"


def _rows(i: int, n: int) -> str:
    return " ".join(f"host{(i * 31 + k) % 997}.example latency={k % 503}ms status={'ok' if k % 7 else 'slow'};"
                    for k in range(n))


def child_result(i: int, result_tokens: int) -> str:
    """Child ``i``'s raw result: its fact, ~``result_tokens`` tokens of report rows, its fact again."""
    probe = count_text(_rows(i, 500), MODEL) / 500
    n = max(1, round(result_tokens / probe))
    text = f"{fact(i)}\n{_rows(i, n)}\nend of report: {fact(i)}"
    n = max(1, round(n * result_tokens / count_text(text, MODEL)))  # one correction step
    return f"{fact(i)}\n{_rows(i, n)}\nend of report: {fact(i)}"


def _make_models(children: int, per_reply: int, texts: dict[int, str], window: int | None) -> tuple[Any, Any]:
    """The orchestrator's and the worker's scripted chat models (tool-binding, recording)."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from pydantic import PrivateAttr

    class Scripted(BaseChatModel):
        """Replies from ``reply(messages, n)``; records every call's messages; ``bind_tools`` is a no-op."""

        _calls: list[list[Any]] = PrivateAttr(default_factory=list)
        _tools: list[list[dict[str, Any]]] = PrivateAttr(default_factory=list)  # the schemas bound per call
        _bound: list[dict[str, Any]] = PrivateAttr(default_factory=list)
        _summaries: list[list[Any]] = PrivateAttr(default_factory=list)  # summarization calls, kept apart
        _lock: Any = PrivateAttr(default_factory=threading.Lock)

        @property
        def _llm_type(self) -> str:
            return "scripted-fake"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            from langchain_core.utils.function_calling import convert_to_openai_tool

            self._bound = [convert_to_openai_tool(t) for t in tools]
            return self

        def reply(self, messages: list[Any], n: int) -> AIMessage:
            raise NotImplementedError

        def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            first = messages[0] if len(messages) == 1 else None
            if isinstance(first, HumanMessage) and "<messages>" in str(first.content):  # deepagents' summarizer
                with self._lock:
                    self._summaries.append(list(messages))
                return ChatResult(generations=[ChatGeneration(message=AIMessage(content=SUMMARY))])
            with self._lock:
                self._calls.append(list(messages))
                self._tools.append(self._bound)
                n = len(self._calls) - 1
            return ChatResult(generations=[ChatGeneration(message=self.reply(list(messages), n))])

    class Orchestrator(Scripted):
        def reply(self, messages: list[Any], n: int) -> AIMessage:
            batch = range(n * per_reply, min(children, (n + 1) * per_reply))
            if n * per_reply >= children:
                return AIMessage(content=f"All {children} subtasks are done; their reports are above.")
            calls = [{"name": "task", "id": f"call_{i:02d}", "type": "tool_call",
                      "args": {"description": f"subtask {i}", "subagent_type": "worker"}} for i in batch]
            return AIMessage(content="", tool_calls=calls)

    class Worker(Scripted):
        def reply(self, messages: list[Any], n: int) -> AIMessage:
            asks = [m for m in messages if isinstance(m, HumanMessage)]
            found = _CHILD.search(str(asks[-1].content)) if asks else None
            return AIMessage(content=texts[int(found.group(1))] if found else "no subtask found")

    profile = {"max_input_tokens": window} if window else None
    return Orchestrator(profile=profile), Worker(profile=profile)


def _tokens(messages: list[Any]) -> int:
    from langchain_core.messages import convert_to_openai_messages

    return sum(count_message(m, MODEL) for m in convert_to_openai_messages(messages))


def deepagents_orchestrator(children: int = 20, result_tokens: int = 55_000, per_reply: int = 5,
                            window: int | None = 128_000) -> dict:
    """Run the delegation workload through ``create_deep_agent`` with its defaults; see the module doc."""
    try:
        from deepagents import create_deep_agent
        from langchain_core.messages import HumanMessage, ToolMessage, convert_to_openai_messages
    except ImportError as err:
        return {"peer": "deepagents", "skipped": f"import failed: {err}"}
    version = importlib.metadata.version("deepagents")
    start = time.perf_counter()
    texts = {i: child_result(i, result_tokens) for i in range(children)}
    raw_total = sum(count_text(t, MODEL) for t in texts.values())
    orchestrator, worker = _make_models(children, per_reply, texts, window)
    try:
        agent = create_deep_agent(
            model=orchestrator,
            system_prompt="You are an orchestrator. Delegate each subtask to the worker with the task tool.",
            subagents=[{"name": "worker", "description": "Does one subtask and reports back in full.",
                        "system_prompt": "Do the subtask and report every row you found.", "model": worker}],
        )
        state = agent.invoke({"messages": [HumanMessage(content=f"Run subtasks 0..{children - 1} and report.")]},
                             config={"recursion_limit": 1_000})
    except Exception as err:  # reported in the table, not raised: a peer's failure must not stop the suite
        return {"peer": "deepagents", "version": version, "skipped": f"run failed: {type(err).__name__}: {err}"}
    seconds = time.perf_counter() - start
    calls = orchestrator._calls
    if not calls:
        return {"peer": "deepagents", "version": version, "skipped": "the orchestrator model was never called"}
    sizes = [_tokens(c) for c in calls]
    # as ctxagent's fake provider reports prompt tokens: count_messages (+3 a request) + count_tools of the schemas
    prompts = [size + PER_REQUEST + count_tools(tools, MODEL) for size, tools in zip(sizes, orchestrator._tools,
                                                                                    strict=True)]
    last = calls[-1]
    last_text = json.dumps(convert_to_openai_messages(last), ensure_ascii=False)
    results = [m for m in last if isinstance(m, ToolMessage) and m.tool_call_id.startswith("call_")]
    evicted = sum(bool(_EVICTED.search(str(m.content))) for m in results)
    files = state.get("files") or {}

    def stored(path: str) -> str:
        entry = files.get(path)
        content = entry.get("content", "") if isinstance(entry, dict) else getattr(entry, "content", entry)
        return "\n".join(content) if isinstance(content, list) else str(content or "")

    reachable_text = last_text + "".join(stored(p) for p in set(_PATH.findall(last_text)))
    in_last = sum(fact(i) in last_text for i in range(children))
    ends_in_last = sum(f"end of report: {fact(i)}" in last_text for i in range(children))
    limit = 20_000
    notes = (
        f"task returns the worker's final AI text whole as a ToolMessage (SubAgentMiddleware); the orchestrator's "
        f"FilesystemMiddleware(tool_token_limit_before_evict={limit}, default) wraps every tool call incl. task and "
        f"evicts results over {4 * limit:,} characters (NUM_CHARS_PER_TOKEN=4) to /large_tool_results/<id> in the "
        f"default StateBackend, leaving a stub with a head/tail preview (5+5 lines, each clipped to 1,000 chars); "
        f"summarization: create_summarization_middleware defaults, "
        + (f"profile max_input_tokens={window:,} -> trigger 85%, keep 10%" if window
           else "no profile -> trigger 170,000 tokens, keep 6 messages")
        + f"; {len(results)} task results in the last request, {evicted} evicted."
    )
    return {
        "peer": "deepagents", "version": version, "children": children, "per_reply": per_reply,
        "raw_result_tokens_total": raw_total, "orchestrator_requests": len(calls),
        "peak_context_tokens": max(sizes), "total_input_tokens": sum(sizes),
        "per_request_tokens": sizes, "peak_prompt_tokens_with_tools": max(prompts),
        "total_prompt_tokens_with_tools": sum(prompts), "worker_requests": len(worker._calls),
        "summarizer_calls": len(orchestrator._summaries),
        "evicted_results": evicted, "facts_in_last_request": in_last, "end_facts_in_last_request": ends_in_last,
        "facts_reachable": sum(fact(i) in reachable_text for i in range(children)),
        "final_answer": str(state["messages"][-1].content), "seconds": round(seconds, 1), "notes": notes,
    }


if __name__ == "__main__":
    print(json.dumps(deepagents_orchestrator(), indent=2))
