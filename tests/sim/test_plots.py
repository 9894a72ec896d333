"""What the plots draw: the per-minute series, against plain loops over the segments."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.axis import XAxis, YAxis
from matplotlib.figure import Figure
from matplotlib.text import Text

from bellows.autoscaler import AutoscalerConfig
from bellows.autoscaler.objectives import Objective
from bellows.scaling import MODEL_EFFICIENCY, default_cluster
from bellows.sim import RunStats, SimResult, plots, run
from bellows.sim.metrics import JobRecord, Segment, settings_summary
from bellows.sim.plots import _GRID_POINTS, mean_batch_by_category
from bellows.sim.plotting import SENT_KEYS
from bellows.sim.workloads.generating import WorkloadSpec, generate


def _plain_mean_batches(result: SimResult) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Each segment adds its batch, and 1, to the grid points in [start, end), one by one."""
    end = max((s.end_s for j in result.jobs for s in j.segments), default=0.0)
    step = max(60.0, math.ceil(end / 60.0 / _GRID_POINTS) * 60.0)
    grid = np.arange(0.0, end + step, step)
    sums: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(grid.size))
    counts: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(grid.size))
    for job in result.jobs:
        for seg in job.segments:
            lo, hi = np.searchsorted(grid, [seg.start_s, seg.end_s], side="left")
            sums[job.category][lo:hi] += seg.batch
            counts[job.category][lo:hi] += 1
    means = {
        cat: np.where(counts[cat] > 0, sums[cat] / np.maximum(counts[cat], 1), np.nan)
        for cat in sorted(sums)
    }
    return grid / 60.0, means


@pytest.mark.parametrize("gpus", [4, 24])
def test_mean_batches_equal_the_plain_loop(gpus: int) -> None:
    # 4 GPUs and no queue: many jobs are dropped and never run (a category may have no curve)
    spec = WorkloadSpec("bursty", 60, (1, 2, 3, 4), 24, period_min=20)  # type: ignore[arg-type]
    trace = generate(spec, np.random.default_rng(11), cluster=default_cluster())
    config = AutoscalerConfig.paper(queue=False)
    result = run(trace, gpus=gpus, config=config, cluster=default_cluster())
    if gpus == 4:
        assert any(not job.segments for job in result.jobs)  # dropped: no segments
    minutes, means = mean_batch_by_category(result)
    plain_minutes, plain = _plain_mean_batches(result)
    np.testing.assert_array_equal(minutes, plain_minutes)
    assert list(means) == list(plain)
    for category, values in plain.items():
        np.testing.assert_array_equal(means[category], values)  # NaN where none ran
        assert np.isfinite(values).any()


# --- for people to read (issue 38, item 5) --------------------------------------------------


def _runs() -> dict[str, tuple[SimResult, dict[str, Any]]]:
    """One trace run twice: as it comes, and charged (efficiency, on nodes, speedup)."""
    spec = WorkloadSpec("bursty", 60, (1, 2, 3, 4), 16, period_min=30)  # type: ignore[arg-type]
    trace = generate(spec, np.random.default_rng(1), cluster=default_cluster())
    out = {}
    for name, config, charged in (
        ("plain", AutoscalerConfig(), False),
        ("charged", AutoscalerConfig(objective=Objective.SPEEDUP), True),
    ):
        result = run(
            trace, gpus=16, config=config, cluster=default_cluster(), nodes=charged,
            efficiency=MODEL_EFFICIENCY if charged else None,
        )  # fmt: skip
        out[name] = (result, result.summary() | settings_summary(config))
    return out


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[SimResult, dict[str, Any]]]:
    return _runs()


def _drawn(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """The figures the ``plot_*`` functions would write, kept open to be read."""
    figures: list[Figure] = []

    def keep(fig: Figure, path: Path) -> Path:
        figures.append(fig)
        return path

    monkeypatch.setattr(plots, "_write", keep)
    return figures


def test_a_runs_titles_say_what_it_charged(
    runs: dict[str, tuple[SimResult, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:  # fmt: skip
    figures = _drawn(monkeypatch)
    titles = {}
    for name, (result, summary) in runs.items():
        figures.clear()
        for draw in plots.run_drawings(result, tmp_path, label="t: bellows", summary=summary):
            draw()
        assert len(figures) == 3
        found = {fig.axes[0].get_title() for fig in figures}
        assert len(found) == 1, found  # the three plots of a run: one title
        titles[name] = found.pop()
        # what the plotting process is sent is enough for the same title
        sent = {key: summary[key] for key in SENT_KEYS if key in summary}
        assert plots.charges(sent) == plots.charges(summary)
    spread = runs["charged"][1]["spread_job_time_share"]
    charged = runs["charged"][1]["efficiency_charged_jobs"]
    assert titles["plain"] == (
        "t: bellows\nefficiency not charged, fewest nodes, objective remaining"
    )
    assert titles["charged"] == (
        f"t: bellows\nefficiency charged ({charged} jobs), on nodes ({spread:.1%} spread), "
        "objective speedup"
    )
    plt.close("all")


def test_a_reference_run_names_no_objective() -> None:
    summary = {"mode": "pollux", "objective": "slack", "spread_job_time_share": 0.25}
    assert plots.charges(summary) == "efficiency not charged, on nodes (25.0% spread)"


def _labels(fig: Figure, axis: XAxis | YAxis) -> list[Text]:
    """The tick labels drawn on ``axis``: in view and with text."""
    fig.canvas.draw()
    low, high = sorted(axis.get_view_interval())
    ticks = [*axis.get_major_ticks(), *axis.get_minor_ticks()]
    return [
        t.label1 for t in ticks
        if t.label1.get_visible() and t.label1.get_text() and low <= t.get_loc() <= high
    ]  # fmt: skip


def _no_overlap(labels: list[Text], fig: Figure) -> None:
    boxes = [label.get_window_extent(fig.canvas.get_renderer()) for label in labels]  # type: ignore[attr-defined]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b), [label.get_text() for label in labels]


def _jobs_with_jcts(minutes: list[float]) -> SimResult:
    jobs = [
        JobRecord(
            name=f"j{i}", category="1", model="m", arrival_s=0.0, single_gpu_s=60.0,
            start_s=0.0, finish_s=m * 60.0, rejected=False,
            segments=(Segment(0.0, m * 60.0, 1, 8),), rescales=0, preemptions=0,
        )
        for i, m in enumerate(minutes)
    ]  # fmt: skip
    return SimResult(
        jobs=tuple(jobs), gpus=4, horizon_s=None, span_s=1.0, gpus_in_use=(),
        capacity=((0.0, 4),), stats=RunStats(0, 0, 0, 0.0, 0.0, 0.0),
    )  # fmt: skip


@pytest.mark.parametrize(
    "span", [(2.0, 60.0), (1.5, 45.0), (2.5, 9_600.0), (0.5, 400.0), (3.0, 100_000.0)]
)
def test_the_jct_cdfs_log_axis_has_readable_ticks(span: tuple[float, float]) -> None:
    minutes = list(np.geomspace(*span, 40))
    fig = plots.jct_cdf_figure(
        {"a": _jobs_with_jcts(minutes), "b": _jobs_with_jcts(minutes[::2])}, title="t"
    )
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    labels = _labels(fig, ax.xaxis)
    assert len(labels) >= 4, [label.get_text() for label in labels]
    _no_overlap(labels, fig)
    assert all("$" not in label.get_text() for label in labels)  # plain numbers, no 10^k
    plt.close(fig)


def test_the_batch_plot_has_more_than_three_labels(
    runs: dict[str, tuple[SimResult, dict[str, Any]]],
) -> None:
    for result, _ in runs.values():
        fig = plots.batches_figure(result, title="t\nsecond line")
        ax = fig.axes[0]
        labels = _labels(fig, ax.yaxis)
        assert len(labels) > 3, [label.get_text() for label in labels]
        _no_overlap(labels, fig)
        plt.close(fig)


def _straggler_run(last_min: float) -> SimResult:
    """Forty jobs done within an hour, and one that runs on to ``last_min``."""
    minutes = [*np.linspace(5.0, 60.0, 40), last_min]
    return _jobs_with_jcts(minutes)


def test_one_straggler_does_not_stretch_the_usage_plot() -> None:
    fig = plots.usage_figure({"a": _straggler_run(55.0), "b": _straggler_run(1_000.0)}, title="t")
    top, bottom = fig.axes
    assert top.get_xlim()[1] <= 62.0  # cut a little past the hour, not at minute 1 000
    assert "b: 1 job on to minute 1,000" in bottom.get_xlabel()
    plt.close(fig)
    fig = plots.usage_figure({"a": _straggler_run(55.0), "b": _straggler_run(70.0)}, title="t")
    assert fig.axes[0].get_xlim()[1] >= 70.0  # no straggler: the whole run
    assert fig.axes[1].get_xlabel() == "time (min)"
    plt.close(fig)
