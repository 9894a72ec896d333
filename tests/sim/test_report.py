"""The report's pictures and its *Beyond the paper* section, on hand-built runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bellows.sim import RunStats, SimResult
from bellows.sim.comparing import POLICIES, PolicyRun, bursty, run_policy
from bellows.sim.metrics import JobRecord, Segment
from bellows.sim.plots import plot_jct_cdf, plot_usage, usage_per_minute
from bellows.sim.report import beyond_section, scenario_figures, scenario_key


def _job(name: str, arrival: float, segs: list[Segment], **kw: bool) -> JobRecord:
    return JobRecord(
        name=name, category="1", model="m", arrival_s=arrival, single_gpu_s=60.0,
        start_s=segs[0].start_s if segs else None,
        finish_s=segs[-1].end_s if segs and not kw.get("unfinished") else None,
        rejected=kw.get("rejected", False), segments=tuple(segs), rescales=0, preemptions=0,
    )  # fmt: skip


def _result(jobs: list[JobRecord], capacity: tuple[tuple[float, int], ...]) -> SimResult:
    return SimResult(
        jobs=tuple(jobs), gpus=capacity[0][1], horizon_s=None, span_s=1.0, gpus_in_use=(),
        capacity=capacity, stats=RunStats(0, 0, 0, 0.0, 0.0, 0.0),
    )  # fmt: skip


def test_usage_is_the_exact_mean_over_each_minute() -> None:
    jobs = [
        # 4 GPUs from 0:30 to 1:30; waited from 0:00 to 0:30
        _job("a", 0.0, [Segment(30.0, 90.0, 4, 8)]),
        # halted by a capacity drop from 2:00 to 2:45 (a gap between segments), 2 GPUs
        _job("b", 60.0, [Segment(60.0, 120.0, 2, 4), Segment(165.0, 180.0, 2, 4)]),
        # dropped: never counted as waiting
        _job("c", 0.0, [], rejected=True),
    ]
    series = usage_per_minute(_result(jobs, ((0.0, 8), (120.0, 4))))
    assert series["minute"].tolist() == [0.0, 1.0, 2.0]
    assert series["width"][0] == 1.0
    assert np.allclose(series["gpus"], [2.0, 2.0 + 2.0, 2.0 * 15 / 60])
    assert np.allclose(series["waiting"], [0.5, 0.0, 45 / 60])
    assert np.allclose(series["capacity"], [8.0, 8.0, 4.0])


def test_a_long_run_is_averaged_over_wider_bins() -> None:
    day = 86_400.0 * 3
    jobs = [_job("a", 0.0, [Segment(0.0, day, 3, 3)])]
    series = usage_per_minute(_result(jobs, ((0.0, 4),)))
    assert series["minute"].size <= 1500
    assert series["width"][0] == 3.0  # 4 320 minutes in bins of 3
    assert np.allclose(series["gpus"], 3.0)


def test_plots_write_files(tmp_path: Path) -> None:
    a = _result([_job("a", 0.0, [Segment(0.0, 600.0, 2, 2)])], ((0.0, 4),))
    b = _result([_job("a", 0.0, [Segment(300.0, 6000.0, 1, 2)])], ((0.0, 4),))
    for path in (
        plot_usage({"a": a, "b": b}, tmp_path / "usage.png", title="t"),
        plot_jct_cdf({"a": a, "b": b}, tmp_path / "jct.png", title="t"),
    ):
        assert path.stat().st_size > 1000


@pytest.fixture(scope="module")
def small_runs() -> dict[str, PolicyRun]:
    scenario = bursty(4, gpus=16, minutes=40.0, period_min=20.0)
    return {p: run_policy(scenario, p, keep_result=True) for p in POLICIES}


def test_beyond_section_tables_ratios_and_figures(
    tmp_path: Path, small_runs: dict[str, PolicyRun]
) -> None:
    scenario = bursty(4, gpus=16, minutes=40.0, period_min=20.0)
    lines = beyond_section(
        [(scenario, small_runs)], figures=tmp_path / "f", report=tmp_path / "r.md"
    )
    text = "\n".join(lines)
    assert text.startswith("## Beyond the paper")
    assert f"### {scenario.title}" in text
    jct = {p: small_runs[p].summary["avg_jct_min"] for p in POLICIES}
    ratio = jct["bellows"] / jct["paper"]
    assert f"Bellows mode's avg JCT is {ratio:.2f}x paper mode's" in text
    table = [line for line in lines if line.startswith("| Bellows mode |")]
    assert len(table) == 1
    assert f"| {jct['bellows']:.1f} |" in table[0]
    for kind in ("jct", "usage"):
        assert f"(f/beyond-{scenario.key}-{kind}.png)" in text
        assert (tmp_path / "f" / f"beyond-{scenario.key}-{kind}.png").is_file()


def test_figures_drawn_while_the_runs_went_on_are_not_drawn_again(
    tmp_path: Path, small_runs: dict[str, PolicyRun]
) -> None:
    """``bellows reproduce`` draws a scenario's figures as its runs come in; the report then
    names those files and draws nothing more, and reads the same as one drawn at the end."""
    scenario = bursty(4, gpus=16, minutes=40.0, period_min=20.0)
    beyond = [(scenario, small_runs)]
    at_end = beyond_section(beyond, figures=tmp_path / "f", report=tmp_path / "r.md")
    early = scenario_figures(scenario, small_runs, tmp_path / "g")
    for p in early:  # a redraw would write them again: make that visible
        p.write_bytes(b"drawn early")
    drawn = {scenario_key(scenario): early}
    lines = beyond_section(beyond, figures=tmp_path / "g", report=tmp_path / "r.md", drawn=drawn)
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == sorted(p.name for p in early)
    assert all(p.read_bytes() == b"drawn early" for p in early)
    assert "\n".join(lines) == "\n".join(at_end).replace("(f/", "(g/")
