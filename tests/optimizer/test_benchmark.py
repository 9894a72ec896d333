"""The documented benchmark command runs and reports agreeing objectives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_benchmark_command_runs_quick():
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "optimizer.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    out = result.stdout
    assert "NumPy/JAX" in out
    assert "MILP/JAX" in out
    assert "admit(" in out
    assert "process max RSS" in out
    table = [line for line in out.splitlines() if line.startswith(("tsf", "uniform", "identical"))]
    assert len(table) == 6
    assert all(line.split("|")[3].strip() == "yes" for line in table)
