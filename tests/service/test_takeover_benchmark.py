"""benchmarks/takeover.py's machinery, on 200 jobs: both modes run real controller
processes, and what it reads of them (the log lines, each process's CPU) is what it says."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, load_script

SCRIPT = REPO / "benchmarks" / "takeover.py"


@pytest.fixture(scope="module")
def takeover(tmp_path_factory: pytest.TempPathFactory) -> object:
    sys.path.insert(0, str(SCRIPT.parent))  # it imports its sibling benchmarks
    try:
        return load_script(SCRIPT)
    finally:
        sys.path.remove(str(SCRIPT.parent))


def test_cpu_seconds_count_this_process_work(takeover: object) -> None:
    before = takeover.cpu_seconds(os.getpid())  # type: ignore[attr-defined]
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # busy: CPU time, not a sleep
        pass
    spent = takeover.cpu_seconds(os.getpid()) - before  # type: ignore[attr-defined]
    assert 0.2 < spent < 5.0


def test_the_follower_samples_each_event_once_as_its_line_is_written(
    takeover: object, tmp_path: Path
) -> None:
    log = tmp_path / "controller.log"
    log.write_text('not json\n{"event": "leader.acquired", "monotonic": 1.0}\n{"event": "rebu')
    pid = os.getpid()
    follower = takeover.Follower(log, pid, pid)  # type: ignore[attr-defined]
    follower.poll()
    assert set(follower.seen) == {"leader.acquired"}
    first = follower.seen["leader.acquired"]
    with log.open("a") as f:  # the rest of a half-written line, and the event again
        f.write('ild.first_round", "seconds": 2.0}\n{"event": "leader.acquired"}\n')
    follower.poll()
    assert set(follower.seen) == {"leader.acquired", "rebuild.first_round"}
    assert follower.seen["leader.acquired"] is first
    assert follower.lines["rebuild.first_round"]["seconds"] == 2.0


def test_the_benchmark_times_both_takeovers_of_real_controllers() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--jobs", "200", "--running", "20", "--repeat", "1",
         "--cache", "cold", "--optimizer", "numpy"],
        capture_output=True, text=True, timeout=400, check=True,
    )  # fmt: skip
    rows = {}
    for line in done.stdout.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| fresh |") or line.startswith("| failover |"):
            rows[cells[0]] = cells
    assert set(rows) == {"fresh", "failover"}, done.stdout
    for mode, row in rows.items():
        decided, applied, controller_cpu, server_cpu = (float(x) for x in row[3:7])
        assert 0.0 <= decided <= applied < 60.0, row
        assert controller_cpu > 0.0, row  # the new leader's rebuild read 200 jobs
        assert server_cpu >= 0.0, row
        running, queued = (int(n) for n in row[9].split("/"))
        assert running >= 20, row  # the 20 running adopted, more started into free GPUs
        assert running + queued == 200, row
        expiry = row[8]
        if mode == "fresh":
            assert expiry == "-"  # nobody held the Lease
        else:  # the killed leader's Lease ran out (leaseDurationSeconds 15) first
            assert 5.0 < float(expiry) < 30.0, row
