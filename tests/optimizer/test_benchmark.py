"""The documented benchmark command runs and reports agreeing methods and a JAX-free path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _quick(script: str) -> str:
    """The stdout of ``benchmarks/<script> --quick``, which must exit 0."""
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), "--quick"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return result.stdout


def test_benchmark_command_runs_quick() -> None:
    out = _quick("optimizer.py")
    for column in ("numpy/band", "ref/numpy", "MILP/auto", "peak MiB numpy"):
        assert column in out
    assert "admit(" in out
    assert "process max RSS" in out
    assert "method='numpy': max RSS" in out
    assert "JAX imported: False" in out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("table"))
    agree = [cell.strip() for cell in header.split("|")].index("agree")
    table = [line for line in lines if line.startswith(("tsf", "uniform", "identical"))]
    assert len(table) == 6
    assert all(line.split("|")[agree].strip() == "yes" for line in table)


def test_typed_benchmark_command_runs_quick_and_agrees() -> None:
    out = _quick("typed_optimizer.py")
    lines = out.splitlines()
    rows = [line for line in lines if line.startswith(("tsf", "uniform"))]
    assert len(rows) == 4
    assert all(line.split("|")[6].strip() == "yes" for line in rows), out
    assert any("same allocation: yes" in line for line in lines), out
    assert any(line.startswith("whole process, cold") for line in lines), out
