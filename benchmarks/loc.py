"""``python -m benchmarks.loc``: the lines of ``src/`` at two commits, by package and by kind, and what
each commit between them on main's first-parent line added or removed (issue 35: "the line count of
``src/`` goes down").

Kinds: ``code``, ``doc`` (docstrings of modules, classes and functions), ``comment`` (lines that are
only a comment) and ``blank``. Lines are physical lines of the ``.py`` files git tracks under ``src/``,
read from git's object store (``git cat-file --batch``), so the working tree is never touched and any
two commits compare. ``--steps`` lists each first-parent commit after ``--since`` with its change in
lines, so a change a feature made and one a simplification made can be told apart.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from collections import Counter
from pathlib import Path

KINDS = ("code", "doc", "comment", "blank")
ROOT = Path(__file__).resolve().parent.parent


def git(*args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, input=data, capture_output=True, check=True).stdout


def sources(ref: str) -> dict[str, str]:
    """The text of every tracked ``src/**/*.py`` at ``ref``, by path."""
    paths = [p for p in git("ls-tree", "-r", "--name-only", ref, "src").decode().split() if p.endswith(".py")]
    out = git("cat-file", "--batch", data="".join(f"{ref}:{p}\n" for p in paths).encode())
    texts, pos = {}, 0
    for path in paths:
        header_end = out.index(b"\n", pos)
        size = int(out[pos:header_end].split()[2])
        texts[path] = out[header_end + 1 : header_end + 1 + size].decode()
        pos = header_end + 1 + size + 1
    return texts


def kinds(text: str) -> Counter[str]:
    """How many lines of ``text`` (Python source) are of each of :data:`KINDS`."""
    lines = text.splitlines()
    kind = ["blank" if not line.strip() else "comment" if line.strip().startswith("#") else "code" for line in lines]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                end = first.end_lineno or first.lineno
                kind[first.lineno - 1 : end] = ["doc"] * (end - first.lineno + 1)
    return Counter(kind)


def package(path: str) -> str:
    """``src/ctxagent/tools/offload.py`` -> ``tools``; a top-level module -> ``(top level)``."""
    parts = Path(path).parts
    return parts[2] if len(parts) > 3 else "(top level)"


def census(ref: str) -> dict[str, Counter[str]]:
    """Lines by kind of each package at ``ref``."""
    found: dict[str, Counter[str]] = {}
    for path, text in sources(ref).items():
        found.setdefault(package(path), Counter()).update(kinds(text))
    return found


def steps(since: str, head: str) -> list[tuple[str, int, str]]:
    """(commit, change in ``src/`` lines, subject) of each first-parent commit after ``since`` up to ``head``."""
    log = git("log", "--first-parent", "--reverse", "--format=%h %s", f"{since}..{head}").decode().splitlines()
    out = []
    for line in log:
        commit, subject = line.split(" ", 1)
        stat = git("diff", "--numstat", f"{commit}^1", commit, "--", "src").decode().split("\n")
        change = sum(int(a) - int(d) for a, d, path in (row.split("\t") for row in stat if row)
                     if path.endswith(".py") and a != "-")
        if change:
            out.append((commit, change, subject))
    return out


def table(before: dict[str, Counter[str]], after: dict[str, Counter[str]], since: str, head: str) -> str:
    rows = [f"| package | {since} | {head} | change |", "|---|---:|---:|---:|"]
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name, Counter()).total(), after.get(name, Counter()).total()
        rows.append(f"| {name} | {old:,} | {new:,} | {new - old:+,} |")
    total = [sum((c for c in side.values()), Counter()) for side in (before, after)]
    old, new = total[0].total(), total[1].total()
    rows.append(f"| **src/** | {old:,} | {new:,} | {new - old:+,} |")
    for kind in KINDS:
        rows.append(f"| ({kind}) | {total[0][kind]:,} | {total[1][kind]:,} | {total[1][kind] - total[0][kind]:+,} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loc", description=__doc__.split("\n\n")[0])
    parser.add_argument("--since", default="HEAD~1", help="the earlier commit (default HEAD~1)")
    parser.add_argument("--head", default="HEAD", help="the later commit (default HEAD)")
    parser.add_argument("--steps", action="store_true", help="also each first-parent commit's change in lines")
    args = parser.parse_args(argv)
    print(table(census(args.since), census(args.head), args.since, args.head))
    if args.steps:
        print("\n| commit | lines | subject |\n|---|---:|---|")
        for commit, change, subject in steps(args.since, args.head):
            print(f"| {commit} | {change:+,} | {subject[:100]} |")


if __name__ == "__main__":
    main()
