"""Issue 12 numbers: an orchestrator delegating 20 subtasks whose raw results total over 1M tokens.

Run: ``python -m benchmarks.delegation [--json]`` (also part of ``python -m benchmarks``).

The real runner and the real ``delegate`` tool, talking through real litellm HTTP calls to a local
OpenAI-compatible server (``ctxagent.testing.FakeOpenAI``) that plays the model: the orchestrator
makes 4 replies of 5 parallel delegate calls, then greps one child's result for its fact and
answers; each child (routed by its marker) answers at once with a ~55,000-token result that starts
and ends with its own fact. Window 128,000 tokens (gpt-4o-mini), default profile, batch path.

Two configurations, same workload:

- **contracts**: the default ``delegate.result_max_tokens`` (1,000): each result over it is stored
  in the orchestrator's output store and reaches it as a preview and a handle.
- **inline**: ``result_max_tokens`` raised to 10,000,000, so each result enters the orchestrator's
  context whole (what a harness without contracts does); the profile's compaction keeps the
  requests inside the window (BUDGET), at a price.

Reported per configuration: the orchestrator's own requests, their peak and total prompt tokens
(provider-reported, children excluded), its compactions, and of the 20 children's facts how many
are in its last request and how many are reachable (in the last request, or in a stored output
whose handle it names). The deepagents peer (its ``task`` tool, same sizes, its defaults: the
``FilesystemMiddleware`` evicts a tool result over 80,000 characters to a file and leaves a preview)
comes from ``benchmarks/delegation_peers.py``; its prompt tokens count the tool schemas as ours do.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import report

CHILDREN, PER_REPLY, RESULT_ROWS = 20, 5, 5_000  # ~55,000 tokens per result
INLINE = "tool_result_limit: 10000000\ntool_result_fraction: 0.9\ndelegate:\n  result_max_tokens: 10000000\n"
CONFIGS = {  # name: (profile YAML added, delegate calls per orchestrator reply)
    "contracts": ("", PER_REPLY),
    "inline": (INLINE, PER_REPLY),
    "inline, one at a time": (INLINE, 1),
}


def fact(i: int) -> str:
    return f"child-{i:02d} fact=K{(i * 7919) % 100_000:05d}"


def result_text(i: int) -> str:
    """Child ``i``'s raw result: its fact, ~55K tokens of a realistic report, its fact again."""
    rows = " ".join(f"host{(i * 31 + n) % 997}.example latency={n % 503}ms status={'ok' if n % 7 else 'slow'};"
                    for n in range(RESULT_ROWS))
    return f"{fact(i)}\n{rows}\nend of report: {fact(i)}"


def script(per_reply: int) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """The orchestrator's replies (``per_reply`` delegate calls each) and each child's (routed by its marker)."""
    replies: list[dict[str, Any]] = []
    for start in range(0, CHILDREN, per_reply):
        replies.append({"tool_calls": [{"id": f"d{i:02d}", "name": "delegate",
                                        "arguments": {"task": f"subtask-{i:02d}: survey region {i} and report"}}
                                       for i in range(start, start + per_reply)]})
    replies.append({"tool_calls": [{"id": "g1", "name": "grep_output",
                                    "arguments": {"handle": "@d07", "pattern": "fact="}}]})
    replies.append({"content": "surveyed 20 regions"})
    routes = {f"subtask-{i:02d}": [{"content": result_text(i)}] for i in range(CHILDREN)}
    return replies, routes


def run_config(name: str, extra: str, per_reply: int, root: Path) -> dict[str, Any]:
    """Run the workload with ``extra`` profile YAML, ``per_reply`` delegate calls per orchestrator
    reply; the measured numbers (a run that stops says why in ``status``)."""
    import ctxagent
    from ctxagent.sessions import records
    from ctxagent.sessions.transcript import Transcript
    from ctxagent.testing import FakeOpenAI

    slug = re.sub(r"\W+", "-", name)
    os.environ["CTXAGENT_DATA_DIR"] = str(root / slug)
    profile = root / f"{slug}.yaml"
    profile.write_text(f"context_window: 128000\nmax_output_tokens: 1000\nretries: 0\n"
                       f"tools: [read_output, grep_output, delegate]\n{extra}", encoding="utf-8")
    replies, routes = script(per_reply)
    started = time.perf_counter()
    status, answer = "answered", None
    with FakeOpenAI(replies, routes=routes) as server, ctxagent.open_session(
            "orchestrator", profile=str(profile), model="openai/gpt-4o-mini", api_base=server.base_url,
            lessons=False) as session:
        try:
            answer = session.run("Survey the 20 regions and report.").answer
        except ctxagent.CtxagentError as err:
            status = f"{err.status}: {str(err)[:160]}"
        last = server.requests[-1]["messages"]
    seconds = time.perf_counter() - started
    recs = list(Transcript(session.directory / "transcript.jsonl").records())
    own = [r for r in recs if isinstance(r, records.UsageRecord) and not r.model.startswith("agent:")]
    children = [r for r in recs if isinstance(r, records.UsageRecord) and r.model.startswith("agent:")]
    text = json.dumps(last)
    in_request = sum(fact(i) in text for i in range(CHILDREN))
    stored = {h: str(session.outputs.resolve(h)) for h in set(re.findall(r"@d\d\d", text))
              if h in session.outputs.handles()}
    reachable = sum(fact(i) in text or fact(i) in stored.get(f"@d{i:02d}", "") for i in range(CHILDREN))
    return {"config": name, "status": status, "answer": answer,
            "orchestrator_requests": len(own), "peak_context_tokens": max(r.prompt_tokens for r in own),
            "total_input_tokens": sum(r.prompt_tokens for r in own),
            "raw_result_tokens_total": sum(r.completion_tokens for r in children),
            "compactions": sum(isinstance(r, records.CompactionRecord) for r in recs),
            "facts_in_last_request": in_request, "facts_reachable": reachable, "seconds": round(seconds, 1)}


def run(quick: bool = False) -> dict[str, Any]:
    """Both configurations and the deepagents peer (when ``benchmarks.delegation_peers`` exists)."""
    os.environ.setdefault("OPENAI_API_KEY", "sk-local-benchmark")  # the local server checks none
    saved = os.environ.get("CTXAGENT_DATA_DIR")
    try:
        with tempfile.TemporaryDirectory(prefix="ctxagent-delegation-") as tmp:
            rows = [run_config(name, extra, per_reply, Path(tmp)) for name, (extra, per_reply) in CONFIGS.items()]
    finally:
        if saved is None:
            os.environ.pop("CTXAGENT_DATA_DIR", None)
        else:
            os.environ["CTXAGENT_DATA_DIR"] = saved
    out: dict[str, Any] = {"children": CHILDREN, "rows": rows}
    try:
        from benchmarks.delegation_peers import deepagents_orchestrator
    except ImportError as err:
        out["peer"] = {"peer": "deepagents", "skipped": f"benchmarks/delegation_peers.py: {err}"}
    else:
        out["peer"] = deepagents_orchestrator(children=CHILDREN, per_reply=PER_REPLY)
    return out


HEADER = ["configuration", "status", "orchestrator requests", "peak context (tokens)", "total input (tokens)",
          "compactions", "facts in last request", "facts reachable"]


def tables(data: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The results as ``(title, header, rows of cells)`` (``python -m benchmarks``' tables)."""
    n = data["children"]
    rows = [[f"ctxagent, {r['config']}", r["status"].split(":")[0], str(r["orchestrator_requests"]),
             f"{r['peak_context_tokens']:,}", f"{r['total_input_tokens']:,}", str(r["compactions"]),
             f"{r['facts_in_last_request']}/{n}", f"{r['facts_reachable']}/{n}"] for r in data["rows"]]
    peer = data.get("peer") or {}
    if "peak_context_tokens" in peer:  # prompt tokens with the tool schemas, as the provider counts ours
        rows.append([f"deepagents {peer.get('version', '')} task tool (defaults)", "answered",
                     str(peer["orchestrator_requests"]),
                     f"{peer.get('peak_prompt_tokens_with_tools', peer['peak_context_tokens']):,}",
                     f"{peer.get('total_prompt_tokens_with_tools', peer['total_input_tokens']):,}",
                     str(peer.get("summarizer_calls", "-")), f"{peer.get('facts_in_last_request', '-')}/{n}",
                     f"{peer.get('facts_reachable', '-')}/{n}"])
    elif peer:
        rows.append(["deepagents", f"skipped: {peer.get('skipped')}", *["-"] * 6])
    raw = data["rows"][0]["raw_result_tokens_total"]
    title = (f"Issue 12: an orchestrator delegating {n} subtasks ({raw:,} tokens of raw results), 128K window, "
             "default profile, batch path")
    return [(title, HEADER, rows)]


def markdown(data: dict[str, Any]) -> str:
    """The results as a Markdown table."""
    return report.titled(tables(data))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.delegation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    data = run()
    print(json.dumps(data, indent=1) if args.json else markdown(data))


if __name__ == "__main__":
    main()
