"""Timing ratios measured in pairs: A B A B ... in one run, medians reported.

A loaded machine slows both sides of a pair alike, so ``median(b) / median(a)`` stays close to the
quiet-machine ratio where two separate runs would not (issue 18: a loaded run once reported
``--help`` at 3.4x and offload at 20x). Every floor in the benchmark table is measured this way.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Paired:
    """Medians (seconds) of ``n`` alternating runs of a floor ``a`` and a measured ``b``."""

    a_s: float
    b_s: float
    n: int

    @property
    def ratio(self) -> float:
        """``b / a`` (inf when the floor took no measurable time)."""
        return self.b_s / self.a_s if self.a_s > 0 else float("inf")

    def row(self, what: str, floor: str, target: float | None) -> list[str]:
        """A table row: what, figure, floor, ratio, target, met."""
        met = "–" if target is None else ("met" if self.ratio <= target else "not met")
        goal = "–" if target is None else f"≤ {target:g}x"
        return [what, f"{self.b_s:.3f} s", f"{floor} {self.a_s:.3f} s", f"{self.ratio:.2f}x", goal, met]


HEADER = ["what", "figure", "floor (same run)", "ratio", "target", ""]


def paired(a: Callable[[], float | None], b: Callable[[], float | None], n: int = 5) -> Paired:
    """Run ``a`` then ``b``, ``n`` times, and return their medians.

    Each callable does one run; it returns the seconds to count, or None to count its wall time.
    """
    firsts: list[float] = []
    seconds: list[float] = []
    for _ in range(n):
        for fn, into in ((a, firsts), (b, seconds)):
            start = time.perf_counter()
            got = fn()
            into.append(time.perf_counter() - start if got is None else got)
    return Paired(statistics.median(firsts), statistics.median(seconds), n)


def cpu_command(args: Sequence[str], env: dict[str, str] | None = None) -> Callable[[], float | None]:
    """A callable that runs ``args`` to completion (output discarded) and returns the CPU time (user +
    system seconds) the process used: on a busy machine, closer to what a quiet machine's wall time
    would be than its wall time is (a single-threaded process that waits for nothing)."""
    import os

    def run() -> float:
        proc = subprocess.Popen(list(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise subprocess.CalledProcessError(os.waitstatus_to_exitcode(status), list(args))
        return usage.ru_utime + usage.ru_stime

    return run


def command(args: Sequence[str], **kwargs: object) -> Callable[[], float | None]:
    """A callable that runs ``args`` to completion (output discarded) and lets :func:`paired` time it."""

    def run() -> None:
        subprocess.run(list(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                       **kwargs)  # type: ignore[call-overload]

    return run


def main(argv: list[str] | None, *, prog: str, doc: str | None, run: Callable[[bool, int | None], dict[str, Any]],
         tables: Callable[[dict[str, Any]], list[Any]], quick_help: str) -> None:
    """The command line of a floor benchmark: ``--quick``, ``--pairs N``, ``--json``; prints the JSON
    of ``run(quick, pairs)`` or its ``tables`` rendered as Markdown."""
    import argparse
    import json

    from benchmarks import report

    parser = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--pairs", type=int)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    data = run(args.quick, args.pairs)
    print(json.dumps(data, indent=1) if args.json else report.titled(tables(data)))
