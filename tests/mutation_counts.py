"""Per-module mutant counts of the last ``make mutation`` run (docs/mutation.md).

Reads mutmut 3's ``mutants/**/*.py.meta`` (run from the repository root) and prints one row per
mutated module: mutants, then how many of them each status has (killed, survived, no tests, timeout...).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code


def main() -> None:
    for meta in sorted(Path("mutants").rglob("*.py.meta")):
        codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
        counts = Counter(status_by_exit_code[code] for code in codes.values())
        module = str(meta.relative_to("mutants")).removesuffix(".meta")
        print(f"{module:45} {len(codes):5}  " + "  ".join(f"{k} {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
