"""Issue 36 numbers: what confinement costs and what it holds, on this machine's filesystem.

Run: ``python -m benchmarks.confinement [--mb N] [--reads N] [--json]``.

- **read_file of a large file**: a fresh interpreter calls ``read_file`` on an N MB file (default
  1,024; two bytes a line) through the toolset, as a run does: peak memory growth (``VmHWM``, KiB)
  during the call, its wall time, and the bytes offloaded. Before issue 36 the lines were held, then
  joined, then decoded: 6.4 GB of memory for a 3 GB file.
- **A symlink flipped while read_file runs**: a thread flips ``d`` between a folder inside the
  working directory and one outside, as fast as it can, while the guarded toolset reads ``d/f.txt``
  N times (default 400): reads that returned the outside file (81 of 400 before issue 36), reads of
  the inside file, and reads refused (a link met after the check).
- **Cost of a guarded file call**: median microseconds of ``read_file`` of a small file eight
  folders deep through the permission gate (the path resolved once, then opened one folder at a
  time without following links), over 500 calls.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from ctxagent.messages import ToolCall
    from ctxagent.sessions.store import OutputStore
    from ctxagent.tools.base import ToolContext
    from ctxagent.tools.offload import OffloadPolicy
    from ctxagent.tools.toolset import make_toolset

    def peak_kib():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])

    root = Path(sys.argv[1])
    tools = make_toolset(["read_file"], ToolContext(OutputStore(root / "outputs"), root), OffloadPolicy(2000))
    (root / "small.txt").write_text("warm\\n" * 10_000)
    tools.call(ToolCall("warm", "read_file", json.dumps({"path": "small.txt"})))
    before, start = peak_kib(), time.monotonic()
    outcome = tools.call(ToolCall("big", "read_file", json.dumps({"path": "big.txt"})))
    print(json.dumps({"growth_kib": peak_kib() - before, "seconds": round(time.monotonic() - start, 2),
                      "offloaded_bytes": outcome.output.bytes if outcome.output else 0}))
    """
)


def big_read(megabytes: int) -> dict[str, Any]:
    """``read_file`` of a ``megabytes`` MB file in a fresh interpreter (see the module doc)."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        block = b"y\n" * (512 * 1024)  # 1 MiB
        with open(root / "big.txt", "wb") as fh:
            for _ in range(megabytes):
                fh.write(block)
        src = str(Path(__file__).resolve().parents[1] / "src")
        out = subprocess.run([sys.executable, "-c", _CHILD, str(root)], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": src}, timeout=3600)
    return {"file_bytes": megabytes * len(block), **json.loads(out.stdout)}


def _guarded(work: Path, store: Path) -> Any:
    from ctxagent.sessions.store import OutputStore
    from ctxagent.tools.base import ToolContext
    from ctxagent.tools.guard import Grants, guard
    from ctxagent.tools.offload import OffloadPolicy
    from ctxagent.tools.permissions import PermissionsConfig
    from ctxagent.tools.toolset import make_toolset

    toolset = make_toolset(["read_file"], ToolContext(OutputStore(store), work), OffloadPolicy(10_000))
    return guard(toolset, PermissionsConfig(), "batch", Grants())


def flip_race(reads: int) -> dict[str, int]:
    """Reads through a symlink a thread flips in and out of the working directory (module doc)."""
    from ctxagent.messages import ToolCall

    with tempfile.TemporaryDirectory() as folder:
        work, outside = Path(folder) / "work", Path(folder) / "outside"
        (work / "in").mkdir(parents=True)
        outside.mkdir()
        (work / "in" / "f.txt").write_text("inside\n")
        (outside / "f.txt").write_text("OUTSIDE\n")
        (work / "d").symlink_to(work / "in")
        tools = _guarded(work, Path(folder) / "store")
        stop = threading.Event()

        def flip() -> None:
            while not stop.is_set():
                for goal in (outside, work / "in"):
                    temp = work / "d.new"
                    temp.unlink(missing_ok=True)
                    temp.symlink_to(goal)
                    temp.replace(work / "d")

        flipper = threading.Thread(target=flip, daemon=True)
        flipper.start()
        try:
            contents = [tools.call(ToolCall(f"c{i}", "read_file", '{"path": "d/f.txt"}')).content
                        for i in range(reads)]
        finally:
            stop.set()
            flipper.join()
    return {"reads": reads, "outside": sum("OUTSIDE" in c for c in contents),
            "inside": sum(c == "inside\n" for c in contents), "refused": sum(c.startswith("ERROR") for c in contents)}


def call_cost(calls: int = 500) -> dict[str, float]:
    """Median microseconds of a guarded ``read_file`` of a small file eight folders deep."""
    from ctxagent.messages import ToolCall

    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder) / "work"
        deep = work.joinpath(*"abcdefgh")
        deep.mkdir(parents=True)
        (deep / "f.txt").write_text("hello\n")
        tools = _guarded(work, Path(folder) / "store")
        call = ToolCall("c", "read_file", json.dumps({"path": "a/b/c/d/e/f/g/h/f.txt"}))
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            tools.call(call)
            times.append(time.perf_counter() - start)
    return {"calls": calls, "median_us": round(statistics.median(times) * 1e6, 1)}


def run(megabytes: int = 1024, reads: int = 400) -> dict[str, Any]:
    """All three measurements (see the module doc)."""
    return {"read_file": big_read(megabytes), "flip_race": flip_race(reads), "guarded_call": call_cost()}


def render(results: dict[str, Any]) -> str:
    """The results as three lines of text."""
    big, race, cost = results["read_file"], results["flip_race"], results["guarded_call"]
    return "\n".join([
        f"read_file of {big['file_bytes']:,} bytes: peak memory +{big['growth_kib']:,} KiB, {big['seconds']} s, "
        f"{big['offloaded_bytes']:,} bytes offloaded",
        f"symlink flipped during {race['reads']} reads: {race['outside']} outside, {race['inside']} inside, "
        f"{race['refused']} refused",
        f"guarded read_file, 8 folders deep: median {cost['median_us']} us over {cost['calls']} calls"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.confinement", description=__doc__.splitlines()[0])
    for flag, default, text in (("--mb", 1024, "size of the file read_file reads, MB"),
                                ("--reads", 400, "reads during the symlink flips")):
        parser.add_argument(flag, type=int, default=default, help=text)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    results = run(args.mb, args.reads)
    print(json.dumps(results, indent=2) if args.json else render(results))


if __name__ == "__main__":
    main()
