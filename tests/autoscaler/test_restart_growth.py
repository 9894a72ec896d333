"""Restart pricing past one move: each rescale makes a job's next move dearer."""

from __future__ import annotations

import pytest

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.autoscaler.config import RESTART_GROWTH
from bellows.jobs import SpecError
from bellows.scaling import default_cluster
from tests.strategies import make_job


def _counts(growth: float) -> list[int]:
    """The GPUs of one job on a cluster that grows by one GPU every other round."""
    auto = Autoscaler(
        AutoscalerConfig(restart_growth=growth), capacity=1, cluster=default_cluster()
    )
    auto.arrive(make_job("j", k_max=8, b_max=4096, m_max=256, weights=1_000_000, work=3e6), 0.0)
    auto.step(0.0)
    seen = [auto.allocations["j"].gpus]
    now = 0.0
    for capacity in range(2, 9):
        auto.set_capacity(capacity, now := now + 130.0)
        auto.step(now)
        auto.step(now := now + 130.0)
        seen.append(auto.allocations["j"].gpus)
    return seen


def test_a_job_offered_more_every_round_stops_taking_every_step() -> None:
    assert _counts(0.0) == [1, 2, 3, 4, 5, 6, 7, 8]  # each step pays alone: it takes each
    grown = _counts(100.0)
    assert grown[:2] == [1, 2]  # the first move is priced as before
    assert grown[2:] == [2] * 6  # the next would cost 101 restarts: not worth it here


def test_growth_is_checked_a_fifth_by_default_and_off_in_paper_mode() -> None:
    assert AutoscalerConfig().restart_growth == RESTART_GROWTH == 0.2  # issue 36
    assert AutoscalerConfig.paper().restart_growth == 0.0
    with pytest.raises(SpecError, match="restart_growth"):
        AutoscalerConfig(restart_growth=-1.0)
