"""ctxagent's own agent loop from Python: open a session, run turns, resolve handles (docs/api.md).

    python examples/api/session.py           # a scripted model (script.yaml): offline, deterministic
    python examples/api/session.py --json    # the numbers as one JSON object

The session is a real one: its transcript and outputs live where the CLI keeps them
(``$CTXAGENT_DATA_DIR``), so ``ctxagent inspect context --session NAME`` and ``ctxagent resume``
work on it. The tools (read_file, grep_output, read_output) are ctxagent's own and run for real on
a 2,000-line log; only the model's replies are scripted. Pass ``--model`` (a litellm model string)
and ``--api-base`` to run the same turns on a real model.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import ctxagent

HERE = Path(__file__).resolve().parent


def write_log(folder: Path) -> Path:
    """The log the agent reads: 2,000 requests, one in 97 failing with HTTP 500."""
    path = folder / "access.log"
    path.write_text("".join(f"2025-03-03T{i % 24:02d}:{i % 60:02d} GET /api/items/{i} {500 if i % 97 == 0 else 200}\n"
                            for i in range(2_000)), encoding="utf-8")
    return path


def run(model: str, api_base: str | None) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="ctxagent-session-"))
    log = write_log(workdir)
    tools = []
    with ctxagent.open_session(model=model, api_base=api_base, workdir=workdir) as session:
        for event in session.stream("How many requests in access.log failed with HTTP 500?"):
            if isinstance(event, ctxagent.ToolDone):
                tools.append(f"{event.call.name} -> {event.handle or 'inline'} "
                             f"({'stored, previewed' if event.handle else 'in the context'})")
            elif isinstance(event, ctxagent.Finished):
                first = event.answer
        full = session.outputs.resolve("@log")  # the whole file the tool read, kept outside the context
        name = session.name
    with ctxagent.open_session(name) as session:  # reopened by name: its model, tools and history resume
        second = session.run("When was the first request?").answer
    return {"session": name, "tools": tools, "answer": first, "second_answer": second,
            "log_is_exact": full == log.read_text(encoding="utf-8"),
            "errors_in_log": sum(" 500" in line for line in full.splitlines())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=f"scripted:{HERE / 'script.yaml'}", help="a litellm model string")
    parser.add_argument("--api-base", help="an OpenAI-compatible server's URL")
    parser.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    args = parser.parse_args(argv)
    numbers = run(args.model, args.api_base)
    if args.json:
        print(json.dumps(numbers, indent=1))
    else:
        print("\n".join(numbers["tools"]))
        print(f"answer: {numbers['answer']}\nsecond turn: {numbers['second_answer']}")
        print(f"@log resolves to the exact file: {numbers['log_is_exact']} ({numbers['errors_in_log']} errors in it)")
        print(f"see it: ctxagent inspect context --session {numbers['session']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
