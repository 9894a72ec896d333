"""benchmarks/policies.py and its machinery: the three policies side by side, the targets, and
the over-commit check rebuilt from a written ``jobs.csv``."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bellows.inputs import SpecError
from bellows.sim.comparing import (
    POLICIES,
    bursty,
    check_targets,
    jobs_csv_over_commit,
    policies,
    run_many,
    run_policy,
)
from bellows.sim.metrics import JobRecord, Segment, write_jobs_csv
from tests.conftest import REPO, load_script

BENCHMARK = REPO / "benchmarks" / "policies.py"
SMALL = ["--gpus", "16", "--minutes", "60", "--period-min", "30", "--seeds", "1"]


def _benchmark() -> Any:
    """benchmarks/policies.py, loaded by path (it is a script, not a package)."""
    return load_script(BENCHMARK)


def test_benchmark_prints_the_three_policies_and_the_targets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = _benchmark().main([*SMALL, "--skip-real", "--workers", "1"])
    out = capsys.readouterr().out
    assert out.startswith("$ python benchmarks/policies.py --gpus 16")
    rows = [line.split("|") for line in out.splitlines() if "|" in line]
    seen = {(r[0].strip(), r[1].strip()) for r in rows if len(r) > 2}
    for policy in POLICIES:
        assert (policy, "1") in seen
        assert (policy, "median") in seen
    header = next(line for line in out.splitlines() if line.startswith("policy"))
    for column in ("avg JCT", "p99 JCT", "avg wait", "idle beside waiting", "utilization",
                   "rescales/job", "pure swaps", "dropped", "over-commit (jobs.csv)"):  # fmt: skip
        assert column in header
    for target in ("Bellows / paper mode", "Bellows / event-driven baseline",
                   "idle beside waiting jobs", "rescales per job", "pure swaps, every run",
                   "jobs dropped, every run", "GPUs over-committed"):  # fmt: skip
        assert target in out
    assert "wall time" in out
    assert code in (0, 1)
    assert ("MISSED" in out) == (code == 1)


def test_the_benchmark_runs_in_parallel_processes_like_in_this_one() -> None:
    scenario = bursty(3, gpus=16, minutes=40.0, period_min=20.0)
    tasks = [(scenario, p) for p in POLICIES]
    here = run_many(tasks, workers=1)
    there = run_many(tasks, workers=2)
    assert [(r.policy, r.summary) for r in here] == [(r.policy, r.summary) for r in there]
    assert all(r.over_commit == 0 and r.csv_rows == r.summary["jobs_total"] for r in here)


def test_targets_are_missed_when_bellows_is_no_better() -> None:
    scenario = bursty(2, gpus=16, minutes=40.0, period_min=20.0)
    runs = {p: run_policy(scenario, p) for p in POLICIES}
    same = {"paper": runs["paper"], "baseline": runs["baseline"], "bellows": runs["paper"]}
    targets = {t.name: t for t in check_targets({2: same})}
    assert not targets["avg JCT, Bellows / paper mode"].met  # a ratio of 1
    assert targets["p99 JCT, Bellows / paper mode"].met  # equal is not worse
    over = dataclasses.replace(run_policy(scenario, "bellows"), over_commit=3)
    targets = {t.name: t for t in check_targets({2: runs}, [over])}
    name = "GPUs over-committed at any instant (rebuilt from jobs.csv), every run"
    assert not targets[name].met
    assert targets[name].value == "most 3 GPUs"


# ------------------------------------------------------------------ the jobs.csv check
def _written(tmp_path: Path) -> tuple[Path, int]:
    """A real run's jobs.csv (paper mode, which keeps the cluster full in bursts)."""
    scenario = bursty(1, gpus=16, minutes=60.0, period_min=30.0)
    result = run_policy(scenario, "paper", keep_result=True).result
    assert result is not None
    path = tmp_path / "jobs.csv"
    write_jobs_csv(result.jobs, path)
    return path, result.gpus


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _rewrite(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_a_real_jobs_csv_is_never_over_committed(tmp_path: Path) -> None:
    path, gpus = _written(tmp_path)
    assert jobs_csv_over_commit(path, gpus) == 0
    assert jobs_csv_over_commit(path, [(0.0, gpus)]) == 0


def test_a_doctored_jobs_csv_is_caught(tmp_path: Path) -> None:
    path, gpus = _written(tmp_path)
    rows = _rows(path)
    # one job given the whole cluster more on its first stretch over-commits by its own count
    target = next(r for r in rows if r["allocations"])
    first, *rest = target["allocations"].split(";")
    minute, allocation = first.split(":")
    count, batch = allocation.split("@")
    target["allocations"] = ";".join([f"{minute}:{int(count) + gpus}@{batch}", *rest])
    _rewrite(path, rows)
    assert jobs_csv_over_commit(path, gpus) >= int(count) > 0


def test_a_job_started_before_another_released_its_gpus_is_caught(tmp_path: Path) -> None:
    rows = [
        {"name": "a", "finish_min": "10.0", "allocations": "0.0:3@30"},
        {"name": "b", "finish_min": "20.0", "allocations": "10.0:1@10"},
    ]
    path = tmp_path / "jobs.csv"
    _rewrite(path, rows)
    assert jobs_csv_over_commit(path, 4) == 0  # b starts as a ends: no overlap
    assert jobs_csv_over_commit(path, 3) == 0
    rows[1]["allocations"] = "9.9999:1@10"
    _rewrite(path, rows)
    assert jobs_csv_over_commit(path, 3) == 1
    # a capacity drop at minute 5 to 2 GPUs, with a still holding 3
    rows[1]["allocations"] = "10.0:1@10"
    _rewrite(path, rows)
    assert jobs_csv_over_commit(path, [(0.0, 4), (300.0, 2)]) == 1
    # a halt by that drop (an entry minute:0@0) frees the GPUs in time
    rows[0]["allocations"] = "0.0:3@30;5.0:0@0;8.0:2@20"
    _rewrite(path, rows)
    assert jobs_csv_over_commit(path, [(0.0, 4), (300.0, 2)]) == 0


@pytest.mark.parametrize(
    ("cell", "column", "says"),
    [
        ("0.0:x@1", "allocations", "'0.0:x@1'"),
        ("0.0-3@1", "allocations", "minute:gpus@batch"),
        ("nan:1@1", "allocations", "nan"),
        ("5.0:1@1;1.0:1@1", "allocations", "time order"),
    ],
)
def test_a_bad_cell_names_its_line_and_column(
    tmp_path: Path, cell: str, column: str, says: str
) -> None:
    path = tmp_path / "jobs.csv"
    _rewrite(path, [{"name": "a", "finish_min": "9.0", "allocations": "0.0:1@1"},
                    {"name": "b", "finish_min": "9.0", "allocations": cell}])  # fmt: skip
    with pytest.raises(SpecError) as error:
        jobs_csv_over_commit(path, 4)
    assert f"jobs.csv:3.{column}" in str(error.value)
    assert says in str(error.value)


def test_a_file_without_the_columns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text("name,start\na,1\n", encoding="utf-8")
    with pytest.raises(SpecError, match="allocations"):
        jobs_csv_over_commit(path, 4)


_STRETCH = st.tuples(st.integers(0, 40), st.integers(1, 20), st.integers(1, 4))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(jobs=st.lists(st.lists(_STRETCH, min_size=1, max_size=3), max_size=8),
       capacity=st.integers(1, 12))  # fmt: skip
def test_over_commit_matches_a_brute_force_sweep(
    tmp_path: Path, jobs: list[list[tuple[int, int, int]]], capacity: int
) -> None:
    """Whole-minute stretches (start, length, GPUs), each job's back to back or with gaps,
    written by write_jobs_csv and read back: the peak matches counting minute by minute."""
    records = []
    held = [0] * 200
    for n, stretches in enumerate(jobs):
        segments, at = [], 0
        for start, length, gpus in stretches:
            at = max(at, start)
            segments.append(Segment(at * 60.0, (at + length) * 60.0, gpus, gpus))
            for minute in range(at, at + length):
                held[minute] += gpus
            at += length
        records.append(JobRecord(
            f"j{n}", "1", "m", 0.0, 60.0, segments[0].start_s, segments[-1].end_s, False,
            tuple(segments), 0, 0,
        ))  # fmt: skip
    path = tmp_path / "jobs.csv"
    write_jobs_csv(records, path)
    assert jobs_csv_over_commit(path, capacity) == max(0, max(held) - capacity)


def test_policies_charge_every_one_the_same_restart_cost() -> None:
    configs = policies(45.0)
    assert {c.restart_s for c in configs.values()} == {45.0}
    assert all(c.queue for c in configs.values())
    assert configs["baseline"].delta_s == 0.0
    assert configs["paper"].delta_s == 600.0


def test_pollux_mode_prints_every_policy_beside_the_reference(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = _benchmark().main([*SMALL, "--skip-real", "--workers", "1", "--pollux"])
    out = capsys.readouterr().out
    rows = [[c.strip() for c in line.split("|")] for line in out.splitlines() if "|" in line]
    mine = {r[1]: r for r in rows if r[0] == "bursty seed 1"}
    assert set(mine) == {*POLICIES, "pollux"}
    assert mine["pollux"][4] == "1.000"  # avg JCT / Pollux
    assert all(r[-1] == "0" for r in mine.values())  # never over-committed
    assert "avg JCT Bellows / Pollux, median seed" in out
    assert (code == 0) == ("all targets met" in out) != ("MISSED" in out)
