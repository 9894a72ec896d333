"""``Autoscaler.revise``: a running or waiting job's spec replaced from the next round on."""

from __future__ import annotations

import dataclasses

import pytest

from bellows.autoscaler import Autoscaler, AutoscalerConfig, ClockError, Rescale, Start
from bellows.jobs import Allocation, JobSpec
from bellows.scaling import EfficiencyProfile, default_cluster, throughput
from tests.strategies import make_job

CLUSTER = default_cluster()
HEAVY = 2_000_000_000  # parameters: an Allreduce this size makes more GPUs a loss


def scaler(**options: object) -> Autoscaler:
    return Autoscaler(AutoscalerConfig.paper(**options), capacity=8, cluster=CLUSTER)


def started(auto: Autoscaler, *jobs: JobSpec, at: float) -> dict[str, Allocation]:
    for job in jobs:
        auto.arrive(job, now=0.0)
    assert all(isinstance(d, Start) for d in auto.step(at))
    return dict(auto.allocations)


def test_revise_keeps_the_allocation_and_the_next_round_decides_with_the_new_spec() -> None:
    a, b = make_job("a"), make_job("b")
    slow_a = dataclasses.replace(a, weights=HEAVY)  # what progress revealed about a
    auto = scaler(delta_s=600.0)
    before = started(auto, a, b, at=600.0)
    truth = started(scaler(delta_s=600.0), slow_a, b, at=600.0)
    assert truth != before  # the revision matters to the decision

    assert auto.revise(slow_a, now=700.0)
    assert dict(auto.allocations) == before  # nothing moves before the next round
    assert auto.next_round_at() == 1200.0  # a revision waits for the next Δ tick
    assert auto.job("a") is slow_a
    decisions = auto.step(1200.0)
    assert any(isinstance(d, Rescale) for d in decisions)
    assert dict(auto.allocations) == truth  # the round decided as if a had been known


def test_revise_with_reported_samples_sets_the_remaining_work() -> None:
    a = make_job("a", work=1e9)
    auto = scaler(delta_s=600.0)
    alloc = started(auto, a, at=600.0)["a"]
    slower = dataclasses.replace(a, weights=HEAVY)
    assert auto.revise(slower, now=1000.0, done=5000.0, since=990.0)
    rate = throughput(slower, alloc.gpus, alloc.batch, CLUSTER)
    assert auto.estimated_done("a", 1100.0) == pytest.approx(5000.0 + rate * 110.0)
    # without samples the estimate goes on from where it was, at the revised rate
    kept = auto.estimated_done("a", 1100.0)
    assert auto.revise(a, now=1100.0)
    fast = throughput(a, alloc.gpus, alloc.batch, CLUSTER)
    assert auto.estimated_done("a", 1200.0) == pytest.approx(kept + fast * 100.0)


def test_a_learned_restart_cost_replaces_the_default_for_that_job_only() -> None:
    auto = Autoscaler(AutoscalerConfig(restart_s=30.0), capacity=8, cluster=CLUSTER)
    a, b = make_job("a"), make_job("b")
    auto.arrive(a, now=0.0)
    auto.arrive(b, now=0.0)
    assert auto.revise(dataclasses.replace(a, restart_s=4.5), now=1.0)
    assert (auto.restart_s("a"), auto.restart_s("b")) == (4.5, 30.0)


def test_a_waiting_job_halted_with_progress_keeps_the_reported_samples() -> None:
    auto = scaler(delta_s=0.0, queue=True)
    a = make_job("a", work=1e9, elastic=False, gpus=8, batch_size=256)
    auto.arrive(a, now=0.0)
    auto.step(0.0)
    auto.set_capacity(4, now=10.0)
    auto.step(10.0)
    assert auto.queued == ("a",)
    assert auto.revise(a, now=20.0, done=1234.0)
    auto.set_capacity(8, now=30.0)
    auto.step(30.0)
    assert auto.estimated_done("a", 30.0) == 1234.0


def test_unknown_finished_or_rejected_jobs_are_not_revised() -> None:
    auto = scaler(delta_s=0.0)
    assert not auto.revise(make_job("ghost"), now=0.0)
    a = make_job("a")
    auto.arrive(a, now=0.0)
    auto.step(0.0)
    auto.finish("a", now=5.0)
    assert not auto.revise(a, now=6.0)
    rigid = make_job("r", elastic=False, gpus=8, batch_size=256)
    auto.arrive(rigid, now=7.0)
    auto.arrive(make_job("s", elastic=False, gpus=8, batch_size=256), now=7.0)
    auto.step(7.0)
    assert not auto.revise(make_job("s", elastic=False, gpus=8, batch_size=256), now=8.0)


def test_revise_is_a_fact_dated_on_the_callers_clock() -> None:
    auto = scaler(delta_s=0.0)
    a = make_job("a")
    auto.arrive(a, now=10.0)
    with pytest.raises(ClockError):
        auto.revise(a, now=9.0)


def test_a_job_charged_while_it_runs_counts_reference_samples_at_its_goodput_rate() -> None:
    """Efficiency learned online: charged after arrival with a revision saying its progress
    in reference samples, a running job progresses at throughput x E(b) from then on; paper
    mode ignores the charge; a finished job's charge is dropped."""
    a = make_job("a", b_min=32, b_max=512, batch_size=32, work=1e9)
    learned = EfficiencyProfile(32, 200.0, 0.0)  # phi = 200 samples: E(512) = 0.33
    auto = Autoscaler(AutoscalerConfig(delta_s=600.0), capacity=8, cluster=CLUSTER)
    alloc = started(auto, a, at=0.0)["a"]
    assert auto.goodput
    assert auto.charged("a") is None
    auto.charge("a", learned)
    assert auto.revise(a, now=100.0, done=3000.0, since=100.0)
    gain = float(learned.efficiency(alloc.batch, 3000.0))
    rate = throughput(a, alloc.gpus, alloc.batch, CLUSTER) * gain
    assert gain < 0.5
    assert auto.estimated_done("a", 200.0) == pytest.approx(3000.0 + rate * 100.0)
    assert auto.charged("a") is learned
    auto.finish("a", now=300.0)
    assert auto.charged("a") is None
    paper = scaler(delta_s=600.0)
    started(paper, a, at=0.0)
    paper.charge("a", learned)
    assert not paper.goodput
    assert paper.charged("a") is None
