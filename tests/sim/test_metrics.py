"""The paper's metrics on hand-computed records."""

from __future__ import annotations

from pathlib import Path

import pytest

from bellows.sim.metrics import JobRecord, Segment, completed_over_time, summarize, write_jobs_csv


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
    assert row.endswith(",0.00:2@64")
