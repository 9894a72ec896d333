"""A job still running past the work the core expected of it is not done.

The core's progress estimate runs ahead of the truth wherever its model is optimistic, and
a job's stated work is its owner's estimate. At zero work left, every move of the job was
priced worth nothing and the core never moved it again: shrunk to one GPU once, it stayed
there to its end with the cluster's GPUs free beside it (the Pollux artifact's workload-3:
a yolov3 job ran its last 8 400 s on one GPU). The core now believes such a job has
:data:`~bellows.autoscaler.progress.LEAST_LEFT` of its work left.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Mode, Objective, Rescale
from bellows.autoscaler.progress import LEAST_LEFT, work_left
from bellows.scaling import default_cluster
from tests.strategies import make_job

CLUSTER = default_cluster()


@pytest.mark.parametrize("objective", list(Objective))
def test_a_job_past_its_expected_work_still_grows_into_freed_gpus(objective: Objective) -> None:
    config = AutoscalerConfig(mode=Mode.BELLOWS, delta_s=60.0, restart_s=30.0, objective=objective)
    auto = Autoscaler(config, capacity=8, cluster=CLUSTER)
    auto.arrive(make_job("long", work=1e12), now=0.0)
    auto.arrive(make_job("short", work=2e8), now=0.0)
    auto.step(60.0)
    held = auto.allocations["short"].gpus
    assert 1 <= held < 8, "the scenario needs the short job to share the cluster"
    # Long after the core expected it to end, the short job still runs; the long one ends.
    late = 1e6
    assert auto.estimated_done("short", late) > 2e8
    auto.finish("long", now=late)
    decisions = auto.step(auto.next_round_at() or late)
    grown = [d for d in decisions if isinstance(d, Rescale) and d.job == "short"]
    assert grown, decisions
    assert grown[0].gpus > held


@given(
    st.floats(1.0, 1e12, allow_nan=False),
    st.floats(0.0, 1e13, allow_nan=False),
)
def test_work_left_is_never_below_its_share_and_exact_above_it(work: float, done: float) -> None:
    left = float(work_left(work, done))
    assert left >= LEAST_LEFT * work
    if work - done >= LEAST_LEFT * work:
        assert left == work - done
    assert work_left(np.array([work, work]), np.array([done, 0.0])).tolist() == [left, work]
