"""The paper's metrics on hand-computed records."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from bellows.sim.metrics import (
    JobRecord,
    Segment,
    completed_over_time,
    summarize,
    usage,
    write_jobs_csv,
)


def _job(
    name: str, arrival: float, segs: list[Segment], finish: float | None, **kw: object
) -> JobRecord:
    return JobRecord(
        name=name,
        category="1",
        model="m",
        arrival_s=arrival,
        single_gpu_s=600.0,
        start_s=segs[0].start_s if segs else None,
        finish_s=finish,
        rejected=bool(kw.get("rejected", False)),
        segments=tuple(segs),
        rescales=int(kw.get("rescales", 0)),
        preemptions=0,  # type: ignore[call-overload]
    )


def test_paper_example_sjs_efficiency() -> None:
    # the paper's example: 10 min on one GPU, 6 min on 2 GPUs -> Opt 10, Act 12
    job = _job("a", 0.0, [Segment(0.0, 360.0, 2, 64)], 360.0)
    summary = summarize([job], gpus=4, horizon_s=None, span_s=600.0)
    assert summary["sjs_efficiency"] == pytest.approx(10 / 12, abs=1e-6)
    assert summary["avg_jct_min"] == pytest.approx(6.0)
    assert summary["offered_load"] == pytest.approx(600 / (4 * 600))


def test_counts_drop_ratio_horizon_and_curve() -> None:
    jobs = [
        _job(
            "a", 0.0, [Segment(60.0, 120.0, 1, 8), Segment(120.0, 300.0, 2, 16)], 300.0, rescales=1
        ),
        _job("b", 30.0, [], None, rejected=True),
        _job("c", 90.0, [Segment(600.0, 900.0, 1, 8)], 900.0),
    ]
    s = summarize(jobs, gpus=2, horizon_s=600.0, span_s=600.0)
    required = {
        "jobs_total",
        "jobs_completed",
        "jobs_dropped",
        "drop_ratio",
        "sjs_efficiency",
        "avg_jct_min",
        "completed_over_time",
        "rescales",
    }
    assert required <= s.keys()
    assert (s["jobs_total"], s["jobs_completed"], s["jobs_dropped"]) == (3, 1, 1)
    assert s["jobs_completed_total"] == 2
    assert s["drop_ratio"] == pytest.approx(1 / 3, abs=1e-6)
    assert s["rescales"] == 1
    assert s["avg_queue_min"] == pytest.approx((1.0 + 8.5) / 2)
    assert s["completed_over_time"][5] == [5, 1]
    assert s["completed_over_time"][-1] == [15, 2]


def test_curve_is_coarsened_for_long_runs() -> None:
    jobs = [_job("a", 0.0, [Segment(0.0, 10.0, 1, 8)], 10.0)]
    curve = completed_over_time(jobs, until_s=60.0 * 100_000)
    assert len(curve) <= 2002
    assert curve[-1][1] == 1


def test_jobs_csv(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    write_jobs_csv([_job("a", 0.0, [Segment(0.0, 120.0, 2, 64)], 120.0)], path)
    header, row = path.read_text().splitlines()
    assert header.startswith("name,category,model,arrival_min,start_min,finish_min")
    assert row.endswith(",0.0:2@64")


def test_jobs_csv_allocations_carry_the_precision_of_start_and_finish(tmp_path: Path) -> None:
    # 7 s and 13 s: 0.1167 and 0.2167 min; a halt by a capacity drop is written as 0@0
    segments = [Segment(7.0, 13.0, 2, 64), Segment(13.0, 20.0, 4, 128), Segment(50.0, 70.0, 1, 32)]
    path = tmp_path / "jobs.csv"
    write_jobs_csv([_job("a", 7.0, segments, 70.0)], path)
    row = next(csv.DictReader(path.open()))
    assert row["start_min"] == "0.1167"
    assert row["allocations"] == "0.1167:2@64;0.2167:4@128;0.3333:0@0;0.8333:1@32"
    assert row["finish_min"] == "1.1667"


def test_usage_rebuilds_idle_gpus_beside_waiting_jobs() -> None:
    # 4 GPUs; a holds 2 from 0 to 100; b waits from 10 to 100 (needs 4), then holds 4 to 200
    a = _job("a", 0.0, [Segment(0.0, 100.0, 2, 64)], 100.0)
    b = dataclasses.replace(_job("b", 100.0, [Segment(100.0, 200.0, 4, 64)], 200.0), arrival_s=10.0)
    spent = usage([a, b], [(0.0, 4)], end_s=200.0)
    assert spent.capacity_s == 800.0
    assert spent.held_s == 200.0 + 400.0
    assert spent.idle_while_waiting_s == 2 * 90.0  # 2 idle GPUs while b waited
    assert spent.peak_over_commit <= 0
    over = usage([a, dataclasses.replace(b, segments=(Segment(50.0, 150.0, 4, 64),))],
                 [(0.0, 4)], end_s=200.0)  # fmt: skip
    assert over.peak_over_commit == 2


def test_summary_has_the_policy_keys() -> None:
    jobs = [
        _job(f"j{i}", 0.0, [Segment(0.0, 60.0 * (i + 1), 1, 8)], 60.0 * (i + 1)) for i in range(100)
    ]
    s = summarize(jobs, gpus=200, horizon_s=None, span_s=600.0)
    assert s["p99_jct_min"] == pytest.approx(99.01)
    assert s["rescales_per_job"] == 0.0
    assert s["idle_while_waiting_share"] == 0.0
    assert s["utilization"] == pytest.approx(sum(range(1, 101)) / (200 * 100))


def test_offered_load_of_a_zero_span_is_null_not_infinity() -> None:
    s = summarize(
        [_job("a", 0.0, [Segment(0.0, 1.0, 1, 8)], 1.0)], gpus=2, horizon_s=None, span_s=0.0
    )
    assert s["offered_load"] is None
