"""Time whole ``bellows`` processes, as a user runs them: wall time and peak RSS per run.

Shared by ``cli_startup.py`` and ``sim_speed.py``. Each run is a fresh process; its peak
resident memory comes from ``os.wait4`` (that child alone, not every child so far).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

BELLOWS = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "bellows"


@dataclass(frozen=True)
class Timed:
    """One process: seconds from start to exit, peak resident memory, exit status, and the
    CPU seconds it used (user and system: on a loaded machine, steadier than wall time)."""

    wall_s: float
    peak_mib: float
    status: int
    cpu_s: float = 0.0


def time_process(argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> Timed:
    """Run ``argv`` to its end (output discarded) and measure it; raise if it failed."""
    with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: a chatty run never blocks
        started = time.perf_counter()
        child = subprocess.Popen(
            list(argv), env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=stderr
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = code = os.waitstatus_to_exitcode(status)
        if code != 0:
            stderr.seek(0)
            said = stderr.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(argv)} exited {code}: {said}")
    return Timed(wall, usage.ru_maxrss / 1024.0, code, usage.ru_utime + usage.ru_stime)


def median_of(runs: Sequence[Timed]) -> Timed:
    """Median wall time, peak memory and CPU time of several runs."""
    return Timed(
        statistics.median(r.wall_s for r in runs),
        statistics.median(r.peak_mib for r in runs),
        0,
        statistics.median(r.cpu_s for r in runs),
    )


def bellows_command(before: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that run ``bellows``: the installed one, or the
    source tree ``before`` (its ``plugin/`` first on the path) to compare with."""
    if before is None:
        return [str(BELLOWS)], {}
    return [sys.executable, "-m", "bellows.cli.main"], {"PYTHONPATH": str(before / "plugin")}
