"""Sessions on local disk vs in an S3 store (a local moto server): the cost of the store.

Run: ``python -m benchmarks.store [--messages 10000] [--steps 200] [--json]`` (needs the ``s3``
extra and ``moto[server]``, both in ``dev``). No model: records are appended the way a run appends
them, in process, through ``Session.writer()`` and ``Transcript.append``.

- **append**: milliseconds per appended step (one ``Transcript.append`` of an assistant message and
  a tool result, ~600 bytes; every 10th step also writes a 20 KB offloaded output): on disk it is a
  write and an fsync; with a store, also the output's upload and the segment's create-only PUT.
- **resume**: seconds to open the writer (lease, sync, fence) and fold the state of a session of
  ``--messages`` messages (two a step, so half as many segments): on disk; from the store on the
  machine that wrote it (its cache is current: one existence check); and on another machine (an
  empty cache: every segment and output downloaded).

The S3 server runs in this process on 127.0.0.1: the numbers are a floor (no network latency; a real
bucket adds ~10-30 ms per request, so per step and per resume, not per segment downloaded, which are
fetched concurrently).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.report import titled

OUTPUT_EVERY = 10
OUTPUT_BYTES = 20_000


@contextmanager
def environment(**values: str | None) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def s3_server() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 with the bucket ``bench``; yields its endpoint URL."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with environment(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                     AWS_DEFAULT_REGION="us-east-1"):
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
        try:
            yield endpoint
        finally:
            server.stop()


def step(seq: int) -> list[Any]:
    """One step's records: an assistant tool call and its result (two messages)."""
    from ctxagent.sessions import records

    call = {"id": f"c{seq}", "type": "function", "function": {"name": "shell", "arguments": '{"command": "ls"}'}}
    return [records.MessageRecord(seq=seq, turn=seq // 2 + 1, tokens=30,
                                  message={"role": "assistant", "content": None, "tool_calls": [call]}),
            records.MessageRecord(seq=seq + 1, turn=seq // 2 + 1, tokens=90,
                                  message={"role": "tool", "tool_call_id": f"c{seq}", "content": "x " * 200})]


def write_session(name: str, messages: int, timed: bool = False) -> list[float]:
    """A session of ``messages`` messages (header, then a step per 2 messages, an output every
    :data:`OUTPUT_EVERY` steps); returns the seconds of each step's append when ``timed``."""
    from ctxagent.sessions import records
    from ctxagent.sessions.session import Session

    times: list[float] = []
    with Session.at(name).writer() as session:
        transcript, store = session.transcript, session.store
        transcript.append([records.SessionHeader(name=name, model="scripted:x", profile="default",
                                                 context_window=128_000)])
        for n, seq in enumerate(range(0, messages, 2)):
            started = time.perf_counter()
            if n % OUTPUT_EVERY == 0:
                store.put_bytes(f"@o{n}", b"y" * OUTPUT_BYTES)
            transcript.append(step(seq))
            times.append(time.perf_counter() - started)
    return times if timed else []


def resume(name: str) -> float:
    """Seconds to open ``name``'s writer and fold its state (what resume does before the model)."""
    from ctxagent.agent.state import fold
    from ctxagent.sessions.session import Session

    started = time.perf_counter()
    with Session.at(name).writer() as session:
        state = fold(session.transcript.records(repair=True), transcript_path=str(session.transcript.path))
    assert state.settings is not None
    return time.perf_counter() - started


def measure(messages: int, steps: int) -> dict[str, Any]:
    """Every number of the module doc, for disk and the S3 store."""
    out: dict[str, Any] = {"messages": messages, "steps": steps, "rows": {}}
    with tempfile.TemporaryDirectory(prefix="ctxagent-bench-store-") as tmp, s3_server():
        for label, url in (("disk", None), ("s3 (moto, 127.0.0.1)", "s3://bench/team")):
            row: dict[str, Any] = {}
            with environment(CTXAGENT_DATA_DIR=f"{tmp}/{label[:4]}-a", CTXAGENT_STORE=url):
                times = write_session("appends", steps, timed=True)
                row["append_ms_p50"] = statistics.median(times) * 1000
                row["append_ms_p95"] = sorted(times)[int(len(times) * 0.95)] * 1000
                started = time.perf_counter()
                write_session("long", messages)
                row["write_long_s"] = time.perf_counter() - started
                row["resume_here_s"] = resume("long")
            if url is not None:
                with environment(CTXAGENT_DATA_DIR=f"{tmp}/{label[:4]}-b", CTXAGENT_STORE=url):
                    row["resume_elsewhere_s"] = resume("long")
                    row["resume_elsewhere_again_s"] = resume("long")
            out["rows"][label] = row
    return out


def render(result: dict[str, Any]) -> str:
    def cell(row: dict[str, Any], key: str, unit: str) -> str:
        return f"{row[key]:.2f} {unit}" if key in row else "-"

    rows = [[label, cell(r, "append_ms_p50", "ms"), cell(r, "append_ms_p95", "ms"), cell(r, "resume_here_s", "s"),
             cell(r, "resume_elsewhere_s", "s"), cell(r, "resume_elsewhere_again_s", "s")]
            for label, r in result["rows"].items()]
    segments = result["messages"] // 2 + 1
    return titled([(f"Session store: {result['steps']} appended steps; resume of {result['messages']:,} messages "
                    f"({segments:,} segments, {result['messages'] // 2 // OUTPUT_EVERY} outputs of "
                    f"{OUTPUT_BYTES // 1000} KB)",
                    ["store", "append p50", "append p95", "resume (same machine)", "resume (other machine)",
                     "resume there again"], rows)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.store", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000, help="messages of the resumed session")
    parser.add_argument("--steps", type=int, default=200, help="steps timed for the append cost")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = measure(args.messages, args.steps)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
