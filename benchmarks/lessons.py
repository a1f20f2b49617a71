"""Issue 15 numbers: 10 related tasks in one project, run in sequence, with and without lessons.

Run: ``python -m benchmarks.lessons [--json]``.

The project is a folder with ``.git`` and ``./tool``, whose subcommands each need a flag nobody
wrote down: ``build`` needs ``--legacy-ssl``, ``test`` ``--no-network``, ``deploy`` ``--region
eu-west-1``; without it a subcommand fails (exit 2) and says which flag it needs. The 10 tasks are
builds, tests and deploys of four apps, interleaved. Each task is a new session (the real runner,
real shell subprocesses, the real lessons store, default profile, batch path, ``--allow shell``).

The model is a *policy*, not a script: it reads its request as a model would. If the pins message
holds a lesson naming the task's subcommand (```./tool build` needs `--legacy-ssl```), its first
call passes that flag; otherwise it runs the bare command, reads the flag from the error and runs
again; after a success it answers. Usage is our own token count of each request (messages and
tool schemas), as the scripted backend reports it. So the numbers measure what the lessons
machinery changes (extraction, ranking, the block, the pins message), not how well a real model
follows a lesson: a real model may ignore one, or need more turns to find a flag.

Two configurations, same tasks: **no lessons** (``--no-lessons`` on every run) and **lessons**.
Reported per configuration: model calls, tasks right on the first call, prompt tokens summed over
every request, the tokens of the lessons blocks shown, and the lessons stored at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import report

TOOL = """#!/bin/sh
sub=$1; target=$2; shift 2
case $sub in
  build) need="--legacy-ssl";;
  test) need="--no-network";;
  deploy) need="--region eu-west-1";;
  *) echo "error: unknown subcommand $sub"; exit 64;;
esac
case " $* " in *" $need "*) echo "$sub $target: ok"; exit 0;; esac
echo "error: $sub of $target failed: this project needs $need"; exit 2
"""
TASKS = [("build", "app1"), ("test", "app1"), ("build", "app2"), ("deploy", "app1"), ("test", "app2"),
         ("build", "app3"), ("deploy", "app2"), ("test", "app3"), ("build", "app4"), ("deploy", "app3")]
LESSON = re.compile(r"`\./tool (\w+)` needs `([^`]+)`")
NEEDS = re.compile(r"needs (--[\w-]+(?: [\w.-]+)?)")


class Policy:
    """A model that reads its request (see the module docstring); ``complete`` as in agent/model.py."""

    name = "policy"

    def __init__(self, sub: str, target: str):
        self.sub, self.target, self.calls = sub, target, 0

    def price(self, prompt_tokens: int, completion_tokens: int) -> float:
        return 0.0

    def complete(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> Any:
        from ctxagent.agent.model_types import Reply, ToolCall, Usage
        from ctxagent.tokens import count_messages, count_text, count_tools

        self.calls += 1
        last = messages[-1]
        if last["role"] == "tool" and str(last.get("content", "")).startswith("exit code: 0"):
            content, calls = f"{self.sub} {self.target}: done", ()
        else:
            flag = self._flag(messages)
            command = f"./tool {self.sub} {self.target}" + (f" {flag}" if flag else "")
            content, calls = None, (ToolCall(f"c{self.calls}", "shell", json.dumps({"command": command})),)
        usage = Usage(prompt_tokens=count_messages(messages) + count_tools(tools),
                      completion_tokens=count_text(content or json.dumps([c.arguments for c in calls])), cost_usd=0.0)
        return Reply(content, calls, usage, "tool_calls" if calls else "stop")

    def _flag(self, messages: Sequence[dict[str, Any]]) -> str:
        """The flag the last error names, else the one a lesson in the pins message names, else none."""
        last = str(messages[-1].get("content") or "")
        if messages[-1]["role"] == "tool" and (found := NEEDS.search(last)):
            return found.group(1)
        pins = next((str(m["content"]) for m in messages[1:2] if m["role"] == "system"), "")
        return next((flag for sub, flag in LESSON.findall(pins) if sub == self.sub), "")


def run_task(project: Path, n: int, sub: str, target: str, lessons: bool) -> dict[str, Any]:
    """One task as a new session; its calls, first-call success, prompt tokens and lessons shown."""
    from ctxagent import count_text
    from ctxagent.agent.config import RunConfig
    from ctxagent.agent.setup import open_runner
    from ctxagent.sessions import records
    from ctxagent.sessions.session import Session
    from ctxagent.tools.guard import Grants

    session = Session.at(f"task-{n:02d}")
    empty = project.parent / "empty.yaml"
    empty.write_text("[]\n", encoding="utf-8")
    with session.writer():
        runner = open_runner(session, RunConfig(profile_spec=None, model_spec=f"scripted:{empty}", api_base=None,
                             path="batch", workdir=project, lessons=lessons, grants=Grants.of("shell")))
        runner.model = Policy(sub, target)
        finished = [e for e in runner.run(f"{sub} {target} with ./tool") if type(e).__name__ == "Finished"][-1]
        list(runner.learn())  # what the CLI does once the answer is shown
    recs = list(session.transcript.records())
    usage = [r for r in recs if isinstance(r, records.UsageRecord)]
    results = [r.message for r in recs if isinstance(r, records.MessageRecord) and r.message["role"] == "tool"]
    shown = next((r for r in recs if isinstance(r, records.LessonsRecord)), None)
    return {"task": f"{sub} {target}", "status": finished.status, "calls": len(usage),
            "first_call_ok": bool(results) and str(results[0]["content"]).startswith("exit code: 0"),
            "prompt_tokens": sum(r.prompt_tokens for r in usage), "lessons_shown": len(shown.ids) if shown else 0,
            "block_tokens": count_text(shown.text) if shown else 0}


def run_config(root: Path, lessons: bool) -> dict[str, Any]:
    """The 10 tasks in sequence in a fresh data dir and project."""
    from ctxagent.lessons.store import LessonStore

    os.environ["CTXAGENT_DATA_DIR"] = str(root / "data")
    project = root / "proj"
    (project / ".git").mkdir(parents=True)
    (project / "tool").write_text(TOOL, encoding="utf-8")
    (project / "tool").chmod(0o755)
    tasks = [run_task(project, n, sub, target, lessons) for n, (sub, target) in enumerate(TASKS, 1)]
    return {"config": "lessons" if lessons else "no lessons", "tasks": tasks,
            "calls": sum(t["calls"] for t in tasks), "first_call_ok": sum(t["first_call_ok"] for t in tasks),
            "answered": sum(t["status"] == "answered" for t in tasks),
            "prompt_tokens": sum(t["prompt_tokens"] for t in tasks),
            "block_tokens": sum(t["block_tokens"] for t in tasks), "stored": len(LessonStore().all())}


def run(quick: bool = False) -> dict[str, Any]:
    """Both configurations (``quick`` changes nothing: the workload takes seconds)."""
    saved = os.environ.get("CTXAGENT_DATA_DIR")
    try:
        with tempfile.TemporaryDirectory(prefix="ctxagent-lessons-") as tmp:
            rows = [run_config(Path(tmp) / name, lessons) for name, lessons in (("off", False), ("on", True))]
    finally:
        if saved is None:
            os.environ.pop("CTXAGENT_DATA_DIR", None)
        else:
            os.environ["CTXAGENT_DATA_DIR"] = saved
    off, on = rows
    return {"tasks": len(TASKS), "rows": rows,
            "saved": {"calls": off["calls"] - on["calls"], "prompt_tokens": off["prompt_tokens"] - on["prompt_tokens"],
                      "prompt_tokens_pct": round(100 * (1 - on["prompt_tokens"] / off["prompt_tokens"]), 1)}}


HEADER = ["configuration", "answered", "model calls", "right on the first call", "prompt tokens",
          "lessons block tokens (sum)", "lessons stored"]


def tables(data: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The results as ``(title, header, rows of cells)``."""
    n = data["tasks"]
    rows = [[r["config"], f"{r['answered']}/{n}", str(r["calls"]), f"{r['first_call_ok']}/{n}",
             f"{r['prompt_tokens']:,}", f"{r['block_tokens']:,}", str(r["stored"])] for r in data["rows"]]
    title = (f"Issue 15: {n} related tasks in one project, in sequence (3 subcommands that each need an unwritten "
             "flag), default profile, batch path, a policy model")
    return [(title, HEADER, rows)]


def markdown(data: dict[str, Any]) -> str:
    """The results as a Markdown table, and per task the calls of each configuration."""
    lines = [report.titled(tables(data)), ""]
    off, on = data["rows"]
    lines += ["| task | calls, no lessons | calls, lessons | lessons shown |", "|---|---|---|---|"]
    lines += [f"| {a['task']} | {a['calls']} | {b['calls']} | {b['lessons_shown']} |"
              for a, b in zip(off["tasks"], on["tasks"], strict=True)]
    s = data["saved"]
    lines += ["", f"Lessons saved {s['calls']} model calls and {s['prompt_tokens']:,} prompt tokens "
              f"({s['prompt_tokens_pct']}%)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lessons", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    data = run()
    print(json.dumps(data, indent=1) if args.json else markdown(data))


if __name__ == "__main__":
    main()
