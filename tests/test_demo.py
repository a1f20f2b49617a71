"""The offline demo (docs/demo.md) runs on real data and answers with a value only the full output holds;
run again in the same data dir (a second ``make demo`` with CTXAGENT_DATA_DIR set), it starts a new
session instead of resuming the first one (which once failed with "script exhausted")."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# two demo runs, each 3.4 MB through the shell, the secret scan and the offload: under coverage on a busy
# 2-core machine one run took 74 s, and the suite's 120 s timeout failed the test
@pytest.mark.timeout(300)
def test_prices_demo_runs_offline_twice_in_one_data_dir(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "CTXAGENT_DATA_DIR": str(tmp_path / "data")}
    for _ in range(2):
        out = subprocess.run(["bash", str(ROOT / "examples/prices/demo.sh")], capture_output=True, text=True,
                             env=env, timeout=120, stdin=subprocess.DEVNULL)
        assert out.returncode == 0, out.stderr
        assert "input_cost_per_token 2.5e-06" in out.stdout
        assert "'\"gpt-4o\": {' in the preview: False" in out.stdout  # the value came from the full output
        size = re.search(r"output @prices from shell: (\d+) bytes", out.stdout)
        assert size and int(size[1]) > 2_000_000  # litellm's price list: 3.0 MB in 1.108, 3.5 MB in 1.110
    names = sorted(p.name for p in (tmp_path / "data" / "sessions").iterdir())
    assert len(names) == 2 and all(n.startswith("prices-demo-") for n in names), names


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_demo_installs_the_package_alone_not_the_developer_extras(tmp_path):
    """`make demo` installed the developer extras (~1.1 GB, 142 packages) although the demo needs only
    the package (76 packages, ~0.5 GB). `make -n` prints what it would run, running nothing."""
    venv = tmp_path / "venv"
    out = subprocess.run(["make", "-n", "demo", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    installs = [line for line in out.stdout.splitlines() if "pip install" in line and "-e '." in line]
    assert installs and all("-e '.'" in line for line in installs), installs
    assert "[dev]" not in out.stdout and f". {venv}/bin/activate" in out.stdout  # and it says how to reach ctxagent
    dev = subprocess.run(["make", "-n", "setup", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "-e '.[dev]'" in dev.stdout
