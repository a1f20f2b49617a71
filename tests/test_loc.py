"""benchmarks/loc.py: the line census issue 35's closing figure comes from."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

from benchmarks import loc

ROOT = Path(__file__).resolve().parent.parent


def test_each_line_is_counted_once_as_code_doc_comment_or_blank() -> None:
    source = textwrap.dedent('''\
        """Module doc,
        two lines."""

        # a comment
        def f(x):
            """One line."""
            return x  # trailing comments are code lines


        class C:
            """Class doc."""

            y = 1
        ''')
    assert loc.kinds(source) == {"doc": 4, "blank": 4, "comment": 1, "code": 4}


def test_the_census_of_a_commit_counts_every_line_git_holds_for_src() -> None:
    paths = subprocess.run(["git", "ls-tree", "-r", "--name-only", "HEAD", "src"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    expected = sum(len(subprocess.run(["git", "show", f"HEAD:{p}"], cwd=ROOT, capture_output=True, text=True,
                                      check=True).stdout.splitlines()) for p in paths if p.endswith(".py"))
    found = loc.census("HEAD")
    assert sum(c.total() for c in found.values()) == expected
    assert {"agent", "tools", "strategies", "(top level)"} <= set(found)
