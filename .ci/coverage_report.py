"""Print the coverage of strategies/, sessions/ and agent/ (and the total) from the combined data
file of `make coverage`, and exit 2 when a package covers fewer than FLOOR % of its branches
(issue 17). One line each: statements covered, branches covered, branch % and coverage's own
"Cover" figure (statements and branches together). ``--floor``: check the floor (the whole suite
ran; a part of it covers less)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import coverage

PACKAGES = ("strategies", "sessions", "agent")
FLOOR = 90.0  # % of branches


def totals(cov: coverage.Coverage, include: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "coverage.json"
        cov.json_report(include=include, outfile=str(out))
        found: dict[str, float] = json.loads(out.read_text())["totals"]
        return found


def line(name: str, t: dict[str, float]) -> str:
    branches = 100.0 * t["covered_branches"] / t["num_branches"] if t["num_branches"] else 100.0
    return (f"{name:<12} statements {t['covered_lines']:>5}/{t['num_statements']:<5}  branches "
            f"{t['covered_branches']:>4}/{t['num_branches']:<4} {branches:5.1f}%  cover {t['percent_covered']:5.1f}%")


def main() -> int:
    cov = coverage.Coverage()
    cov.load()
    failed = []
    floor = "--floor" in sys.argv[1:]
    print(f"coverage (floor: {FLOOR:.0f}% of the branches of each of {', '.join(PACKAGES)})")
    for package in PACKAGES:
        t = totals(cov, f"*/ctxagent/{package}/*")
        print(line(package + "/", t))
        if floor and t["num_branches"] and 100.0 * t["covered_branches"] / t["num_branches"] < FLOOR:
            failed.append(package)
    print(line("total", totals(cov, None)))
    if failed:
        print(f"coverage: {', '.join(failed)} below {FLOOR:.0f}% of branches", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
