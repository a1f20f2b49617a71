"""Workload 6, scale: reuses :mod:`benchmarks.spine` (start-up, resume, ``inspect transcript``, offloading
a large shell output against the shell writing the same bytes to a file) and adds the peak memory of
a resume, measured in a fresh process. Sizes: 10,000 and 100,000 messages and 1 GB in the full run;
2,000 and 10,000 messages and 50 MB with ``quick``.

It runs in its own small interpreter (:func:`run_isolated`): on Linux a process's ``ru_maxrss``
survives ``exec``, so a child started by the big benchmark process would report the parent's peak.
The offload runs first, before the in-process resumes grow this interpreter. Run alone:
``python -m benchmarks.scale [--quick]`` prints the JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import spine

RESUME_CHILD = r"""
import json, os, resource, sys, time
os.environ["CTXAGENT_DATA_DIR"] = sys.argv[1]
from ctxagent.agent.peek import next_request
from ctxagent.sessions.session import Session
def hwm():
    # VmHWM: this process's peak RSS (kB), reset at exec unlike ru_maxrss
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
before = hwm()
session = Session.at(sys.argv[2])
start = time.perf_counter()
view = next_request(session)
elapsed = time.perf_counter() - start
after = hwm()
print(json.dumps({"cold_resume_ms": elapsed * 1000, "rss_before_mb": before / 1024, "rss_peak_mb": after / 1024,
                  "view_messages": len(view.view)}))
"""


def resume_memory(data_dir: Path, session: str) -> dict[str, Any]:
    """Peak RSS and time of one cold resume (``next_request``) in a fresh process."""
    out = subprocess.run([sys.executable, "-c", RESUME_CHILD, str(data_dir), session], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool, log: Any = print) -> dict[str, Any]:
    runs = 3 if quick else 7
    sizes = (2_000, 10_000) if quick else (10_000, 100_000)
    offload_bytes = 50_000_000 if quick else spine.ONE_GB
    root = Path(tempfile.mkdtemp(prefix="ctxagent-bench-scale-"))
    saved = os.environ.get("CTXAGENT_DATA_DIR")
    results: dict[str, Any] = {}
    try:
        log(f"  offload {offload_bytes / 1e6:,.0f} MB")
        results["offload"] = spine.offload(offload_bytes, root / "offload")
        log("  start-up")
        results["startup_s"] = spine.startup(runs)
        results["resume"] = []
        for messages in sizes:
            log(f"  resume {messages:,} messages")
            data = root / f"data{messages}"
            row = spine.resume_time(messages, data, runs)
            row.update(resume_memory(data, f"big{messages}"))
            results["resume"].append(row)
    finally:
        if saved is None:
            os.environ.pop("CTXAGENT_DATA_DIR", None)
        else:
            os.environ["CTXAGENT_DATA_DIR"] = saved
        shutil.rmtree(root, ignore_errors=True)
    return results


def run_isolated(quick: bool) -> dict[str, Any]:
    """:func:`run` in a fresh interpreter (see the module docstring); its progress goes to stderr."""
    cmd = [sys.executable, "-m", "benchmarks.scale", *(["--quick"] if quick else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env,
                         cwd=Path(__file__).resolve().parent.parent)
    return json.loads(out.stdout)


def main() -> None:
    quick = "--quick" in sys.argv[1:]
    print(json.dumps(run(quick, log=lambda m: print(m, file=sys.stderr))))


if __name__ == "__main__":
    main()
