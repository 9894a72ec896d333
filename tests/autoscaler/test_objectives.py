"""Round objectives: the sum of speedups, Pollux's p = -1 fairness, remaining-time weights
(the default) and the same weights scaled by the cluster's slack."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Objective, valuing
from bellows.autoscaler.objectives import (
    REMAINING_EXPONENT,
    SLACK_SHARE,
    objective_values,
    shared_remaining,
    slack,
)
from bellows.autoscaler.pricing import exact
from bellows.jobs import JobSpec, SpecError
from bellows.scaling import default_cluster, tsf_tables
from tests.strategies import make_job

ROWS = np.array([[-np.inf, 1.0, 1.8, 2.4], [-np.inf, -np.inf, 1.5, 1.6]])


def test_speedup_is_the_table_itself() -> None:
    assert objective_values(ROWS, Objective.SPEEDUP) is ROWS


def test_fair_is_minus_one_over_the_speedup() -> None:
    fair = objective_values(ROWS, Objective.FAIR)
    np.testing.assert_array_equal(np.isinf(fair), np.isinf(ROWS))
    np.testing.assert_allclose(fair[np.isfinite(fair)], -1.0 / ROWS[np.isfinite(ROWS)])


def test_remaining_weights_the_shortest_one() -> None:
    out = objective_values(ROWS, Objective.REMAINING, np.array([600.0, 30.0]))
    np.testing.assert_allclose(out[0, 1:], ROWS[0, 1:] * 0.1**REMAINING_EXPONENT)
    np.testing.assert_allclose(out[1, 2:], ROWS[1, 2:])  # under a minute left: weight 1
    assert out[1, 1] == -np.inf
    with pytest.raises(ValueError, match="remaining_s"):
        objective_values(ROWS, Objective.REMAINING)


def _round(jobs: list[JobSpec], objective: Objective, capacity: int) -> dict[str, int]:
    auto = Autoscaler(
        AutoscalerConfig(objective=objective), capacity=capacity, cluster=default_cluster()
    )
    for job in jobs:
        auto.arrive(job, 0.0)
    auto.step(0.0)
    auto.step(1.0e4)  # a round: the fills started them, the round rebalances
    return {name: a.gpus for name, a in auto.allocations.items()}


def _pair() -> list[JobSpec]:
    good = make_job("scales", k_max=16, b_max=4096, m_max=256, weights=1_000_000, work=1e12)
    poor = make_job("poorly", k_max=16, b_max=4096, m_max=256, weights=400_000_000, work=1e12)
    return [good, poor]


def test_fair_gives_the_poorly_scaling_job_more_than_the_sum_of_speedups() -> None:
    speedup = _round(_pair(), Objective.SPEEDUP, 16)
    fair = _round(_pair(), Objective.FAIR, 16)
    assert speedup["scales"] > speedup["poorly"]
    assert fair["poorly"] > speedup["poorly"]
    assert sum(fair.values()) <= 16


def test_remaining_favours_the_job_nearest_its_end() -> None:
    jobs = [
        make_job("short", k_max=16, b_max=4096, m_max=256, weights=4_000_000, work=2e6),
        make_job("long", k_max=16, b_max=4096, m_max=256, weights=4_000_000, work=2e9),
    ]
    speedup = _round(jobs, Objective.SPEEDUP, 12)
    remaining = _round(jobs, Objective.REMAINING, 12)
    assert remaining["short"] > remaining["long"]
    assert remaining["short"] > speedup["short"]


@pytest.mark.parametrize("objective", [Objective.FAIR, Objective.SPEEDUP])
def test_rounds_are_the_exact_optimum_of_the_objective(objective: Objective) -> None:
    jobs = [
        make_job("a", k_max=6, b_max=2048, m_max=256, weights=1_000_000, work=1e12),
        make_job("b", k_max=6, b_max=2048, m_max=256, weights=60_000_000, work=1e12),
        make_job("c", k_max=6, b_max=2048, m_max=256, weights=300_000_000, work=1e12),
    ]
    capacity = 9
    got = _round(jobs, objective, capacity)
    table = tsf_tables(jobs, default_cluster(), fixed_batch=False, width=6).values
    graded = exact(objective_values(table, objective), np.full(3, -1, dtype=np.int64))
    best = max(
        (sum(graded[i, k] for i, k in enumerate(ks)), ks)
        for ks in itertools.product(range(1, 7), repeat=3)
        if sum(ks) <= capacity
    )
    assert sum(graded[i, got[job.name]] for i, job in enumerate(jobs)) == best[0]


def test_objective_is_checked_and_paper_mode_keeps_the_sum_of_speedups() -> None:
    assert AutoscalerConfig(objective="fair").objective is Objective.FAIR  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"objective.*'speedup' or 'fair' or 'remaining'"):
        AutoscalerConfig(objective="fastest")  # type: ignore[arg-type]
    assert AutoscalerConfig.paper().objective is Objective.SPEEDUP
    assert AutoscalerConfig().objective is Objective.REMAINING


def _swap_setting(share: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Two jobs of one template: the long one took the cluster's 8 first, the short one
    (1 % of its work) the 4 left; the next rounds under ``remaining``."""
    if not share:  # each job weighted by its own remaining time, as before templates shared
        monkeypatch.setattr(valuing, "shared_remaining", lambda remaining, groups: remaining)
    auto = Autoscaler(
        AutoscalerConfig(objective=Objective.REMAINING), capacity=12, cluster=default_cluster()
    )
    spec = {"k_max": 8, "b_max": 4096, "m_max": 256, "weights": 1_000_000}
    auto.arrive(make_job("long", work=1e12, **spec), 0.0)
    auto.step(0.0)
    auto.arrive(make_job("short", work=1e10, **spec), 1.0)
    auto.step(1.0)
    before = {name: a.gpus for name, a in auto.allocations.items()}
    assert before == {"long": 8, "short": 4}
    for now in (1.0e3, 2.0e3, 3.0e3):
        auto.step(now)
    return {name: a.gpus for name, a in auto.allocations.items()}


def test_remaining_never_swaps_two_jobs_of_one_template(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _swap_setting(True, monkeypatch) == {"long": 8, "short": 4}
    # each job's own weight: the short one's is higher, and the two trade their counts
    assert _swap_setting(False, monkeypatch) == {"long": 4, "short": 8}


def test_shared_remaining_is_the_mean_of_each_group() -> None:
    out = shared_remaining(np.array([100.0, 300.0, 50.0, 7.0]), np.array([0, 0, -1, 3]))
    np.testing.assert_array_equal(out, [200.0, 200.0, 50.0, 7.0])


def test_slack_is_one_when_idle_and_none_from_its_share_on() -> None:
    assert slack(0, 100) == 1.0
    assert slack(45, 100) == 0.0 == slack(100, 100) == slack(300, 100)
    assert slack(10, 0) == 0.0  # no GPUs: nothing to weigh
    assert slack(9, 100) == pytest.approx(1.0 - 9 / (SLACK_SHARE * 100))


def test_slack_scales_the_power_of_the_remaining_weights() -> None:
    left = np.array([600.0, 30.0])
    full = objective_values(ROWS, Objective.SLACK, left, share=1.0)
    np.testing.assert_array_equal(full, objective_values(ROWS, Objective.REMAINING, left))
    half = objective_values(ROWS, Objective.SLACK, left, share=0.5)
    np.testing.assert_allclose(half[0, 1:], ROWS[0, 1:] * 0.1 ** (REMAINING_EXPONENT / 2))
    assert objective_values(ROWS, Objective.SLACK, left, share=0.0) is ROWS
    with pytest.raises(ValueError, match="share"):
        objective_values(ROWS, Objective.SLACK, left, share=1.5)


def _short_and_long(objective: Objective, rigid: int) -> dict[str, int]:
    """A short and a long job of one shape on 40 GPUs, beside ``rigid`` rigid one-GPU jobs
    that take the cluster's slack; GPUs after a round under ``objective``."""
    auto = Autoscaler(AutoscalerConfig(objective=objective), capacity=24, cluster=default_cluster())
    shape = {"k_max": 16, "b_max": 4096, "m_max": 256, "weights": 4_000_000}
    for i in range(rigid):
        auto.arrive(make_job(f"rigid{i}", elastic=False, gpus=1, work=1e15), 0.0)
    auto.arrive(make_job("short", work=2e6, **shape), 0.0)
    auto.arrive(make_job("long", work=2e9, **shape), 0.0)
    auto.step(0.0)
    auto.step(1.0e4)
    return {name: a.gpus for name, a in auto.allocations.items() if not name.startswith("rigid")}


def test_slack_weighs_remaining_time_on_an_idle_cluster_and_speedups_near_a_backlog() -> None:
    idle = _short_and_long(Objective.SLACK, 0)  # 2 of 24 GPUs taken at the smallest
    assert idle["short"] > idle["long"]  # the job nearest its end first, as remaining
    assert idle["short"] > _short_and_long(Objective.SPEEDUP, 0)["short"]
    # 12 of 24 GPUs held by rigid jobs: more than SLACK_SHARE taken, the sum of speedups
    busy = _short_and_long(Objective.SLACK, 12)
    assert busy == _short_and_long(Objective.SPEEDUP, 12)
    assert busy != _short_and_long(Objective.REMAINING, 12)


def test_the_remaining_weights_power_is_a_setting() -> None:
    """``AutoscalerConfig.remaining_exponent`` (chart ``controller.remainingExponent``,
    ``simulate --remaining-exponent``): 0 is the sum of speedups, and a steeper power leans
    harder to the job nearest its end; out of [0, 1] it is refused by name."""
    left = np.array([600.0, 30.0])
    flat = objective_values(ROWS, Objective.REMAINING, left, exponent=0.0)
    np.testing.assert_array_equal(flat, ROWS)
    steep = objective_values(ROWS, Objective.REMAINING, left, exponent=0.5)
    np.testing.assert_allclose(steep[0, 1:], ROWS[0, 1:] * 0.1**0.5)
    assert AutoscalerConfig().remaining_exponent == REMAINING_EXPONENT
    for bad in (-0.1, 1.5, float("nan"), True):
        with pytest.raises(SpecError) as err:
            AutoscalerConfig(remaining_exponent=bad)
        assert err.value.field == "remaining_exponent"


def test_a_steeper_power_gives_the_job_nearest_its_end_more() -> None:
    """A short job that scales poorly and a long one that scales well, 3 GPUs: the sum of
    speedups (power 0) gives the third GPU to the long job, a power above 0 to the short."""
    gpus: dict[float, dict[str, int]] = {}
    for power in (0.0, 1.0):
        config = AutoscalerConfig(delta_s=0.0, remaining_exponent=power)
        auto = Autoscaler(config, capacity=3, cluster=default_cluster())
        auto.arrive(make_job("short", work=1e6, weights=200_000_000), now=0.0)
        auto.arrive(make_job("long", work=1e10, weights=1_000_000), now=0.0)
        auto.step(0.0)
        gpus[power] = {n: a.gpus for n, a in auto.allocations.items()}
    assert gpus[0.0] == {"short": 1, "long": 2}
    assert gpus[1.0] == {"short": 2, "long": 1}
