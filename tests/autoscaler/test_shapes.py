"""Node-shaped GPU counts: which counts a round may choose with ``node_counts`` on."""

from __future__ import annotations

import numpy as np

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.autoscaler.shapes import node_shaped, shape_rows
from bellows.scaling import default_cluster
from tests.strategies import make_job


def test_node_shaped_counts() -> None:
    assert np.flatnonzero(node_shaped(17, 4)).tolist() == [1, 2, 4, 8, 12, 16]
    assert np.flatnonzero(node_shaped(24, 8)).tolist() == [1, 2, 4, 8, 16, 24]
    assert np.flatnonzero(node_shaped(7, 6)).tolist() == [1, 2, 3, 6]


def test_a_row_with_no_shaped_count_is_left_whole() -> None:
    values = np.array([[-np.inf, 1.0, 1.5, 2.0, 2.4], [-np.inf, -np.inf, -np.inf, 2.0, -np.inf]])
    shape_rows(values, 4)
    assert values[0].tolist() == [-np.inf, 1.0, 1.5, -np.inf, 2.4]
    assert values[1].tolist() == [-np.inf, -np.inf, -np.inf, 2.0, -np.inf]


def test_rounds_choose_only_shaped_counts() -> None:
    jobs = [make_job(f"j{i}", k_max=8, b_max=4096, m_max=512, work=1e9) for i in range(3)]
    for node_counts, expect in ((True, {1, 2, 4, 8}), (False, set(range(1, 9)))):
        auto = Autoscaler(
            AutoscalerConfig(node_counts=node_counts), capacity=11, cluster=default_cluster()
        )
        for job in jobs:
            auto.arrive(job, 0.0)
        auto.step(0.0)
        counts = {a.gpus for a in auto.allocations.values()}
        assert counts <= expect
        # the switch matters here: any count takes 3 of the 11 GPUs for one job
        assert (counts <= {1, 2, 4, 8}) is node_counts
    # opt in (issue 29): off by default and in paper mode, so every output stays as before
    assert not AutoscalerConfig().node_counts
    assert not AutoscalerConfig.paper().node_counts
