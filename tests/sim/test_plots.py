"""What the plots draw: the per-minute series, against plain loops over the segments."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

from bellows.autoscaler import AutoscalerConfig
from bellows.scaling import default_cluster
from bellows.sim import SimResult, run
from bellows.sim.plots import _GRID_POINTS, mean_batch_by_category
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
