"""The autoscaler core on hand-made scenarios: rounds, admission, rejection, options."""

from __future__ import annotations

import math

import pytest

from bellows.autoscaler import (
    Autoscaler,
    AutoscalerConfig,
    Policy,
    Preempt,
    Reject,
    Rescale,
    Start,
)
from bellows.jobs import SpecError
from bellows.scaling import default_cluster
from tests.strategies import make_job

CLUSTER = default_cluster()


def scaler(capacity: int = 8, **options: object) -> Autoscaler:
    return Autoscaler(AutoscalerConfig(**options), capacity=capacity, cluster=CLUSTER)  # type: ignore[arg-type]


def test_round_waits_for_the_delta_tick() -> None:
    auto = scaler(delta_s=600.0)
    assert auto.next_round_at() is None
    auto.arrive(make_job("a"), now=5.0)
    assert auto.next_round_at() == 600.0
    assert auto.step(599.0) == []
    decisions = auto.step(600.0)
    assert [type(d) for d in decisions] == [Start]
    assert auto.next_round_at() is None


def test_delta_zero_decides_at_every_event() -> None:
    auto = scaler(delta_s=0.0)
    auto.arrive(make_job("a"), now=12.5)
    assert auto.next_round_at() == 12.5
    assert len(auto.step(12.5)) == 1


def test_an_event_at_a_tick_already_decided_waits_for_the_next_tick() -> None:
    auto = scaler(delta_s=600.0)
    auto.arrive(make_job("a"), now=600.0)
    auto.step(600.0)
    auto.arrive(make_job("b"), now=600.0)
    assert auto.next_round_at() == 1200.0


def test_lone_elastic_job_takes_the_cluster_and_shares_it_when_another_arrives() -> None:
    auto = scaler(capacity=8, delta_s=0.0)
    auto.arrive(make_job("a"), now=0.0)
    (start,) = auto.step(0.0)
    assert isinstance(start, Start)
    assert start.gpus == 8  # the job scales well: it gets every GPU
    assert start.batch >= 32
    auto.arrive(make_job("b"), now=10.0)
    decisions = auto.step(10.0)
    assert isinstance(decisions[0], Rescale)
    assert decisions[0].gpus < 8
    assert isinstance(decisions[-1], Start)
    assert sum(a.gpus for a in auto.allocations.values()) <= 8


def test_no_queue_rejects_what_does_not_fit_and_queue_mode_keeps_it() -> None:
    jobs = [make_job(f"j{i}", elastic=False, gpus=4, batch_size=64) for i in range(3)]
    for queue in (False, True):
        auto = scaler(capacity=8, delta_s=0.0, queue=queue)
        for job in jobs:
            auto.arrive(job, now=0.0)
        decisions = auto.step(0.0)
        starts = [d for d in decisions if isinstance(d, Start)]
        rejects = [d for d in decisions if isinstance(d, Reject)]
        assert [s.job for s in starts] == ["j0", "j1"]
        assert [r.job for r in rejects] == ([] if queue else ["j2"])
        assert auto.queued == (("j2",) if queue else ())


def test_fifo_stops_at_an_infeasible_head_and_backfill_goes_past_it() -> None:
    big = make_job("big", elastic=False, gpus=8, batch_size=64, k_max=8)
    small = make_job("small", elastic=False, gpus=2, batch_size=64)
    for backfill, started in ((False, ["r"]), (True, ["r", "small"])):
        auto = scaler(capacity=8, delta_s=0.0, queue=True, backfill=backfill)
        auto.arrive(make_job("r", elastic=False, gpus=4, batch_size=64), now=0.0)
        auto.step(0.0)
        auto.arrive(big, now=1.0)
        auto.arrive(small, now=2.0)
        auto.step(2.0)
        assert list(auto.allocations) == started


def test_baseline_keeps_the_owners_batch() -> None:
    auto = scaler(capacity=8, delta_s=0.0, policy=Policy.BASELINE)
    auto.arrive(make_job("a", batch_size=96), now=0.0)
    (start,) = auto.step(0.0)
    assert isinstance(start, Start)
    assert start.batch == 96


def test_finish_frees_gpus_for_the_next_round_and_is_idempotent() -> None:
    auto = scaler(capacity=4, delta_s=0.0, queue=True)
    auto.arrive(make_job("a", elastic=False, gpus=4, batch_size=64), now=0.0)
    auto.arrive(make_job("b", elastic=False, gpus=4, batch_size=64), now=0.0)
    auto.step(0.0)
    assert auto.queued == ("b",)
    assert auto.finish("a", now=50.0)
    assert not auto.finish("a", now=50.0)
    assert not auto.finish("nobody", now=50.0)
    assert auto.step(50.0) == [Start("b", 4, 64)]


def test_duplicate_arrival_is_ignored() -> None:
    auto = scaler()
    assert auto.arrive(make_job("a"), now=0.0)
    assert not auto.arrive(make_job("a"), now=1.0)
    assert auto.queued == ("a",)


def test_hybrid_trigger_starts_a_round_early() -> None:
    auto = scaler(capacity=8, delta_s=600.0, early_share=0.5, queue=True)
    for name in "abcd":
        auto.arrive(make_job(name, elastic=False, gpus=2, batch_size=64), now=0.0)
    auto.step(0.0)
    auto.arrive(make_job("e", elastic=False, gpus=2, batch_size=64), now=10.0)
    assert auto.next_round_at() == 600.0
    auto.finish("a", now=20.0)
    assert auto.next_round_at() == 600.0  # 1 of 4 finished: below the share
    auto.finish("b", now=30.0)
    assert auto.next_round_at() == 10.0  # half finished: due at once
    assert Start("e", 2, 64) in auto.step(30.0)


def test_restart_cost_with_hysteresis_skips_rescales_that_do_not_pay() -> None:
    short = 20_000.0  # samples: a job close to done is not worth restarting
    decisions = {}
    for cost in (0.0, 3600.0):
        auto = scaler(capacity=8, delta_s=0.0, restart_cost_s=cost, hysteresis=2.0)
        auto.arrive(make_job("a", work=short), now=0.0)
        auto.step(0.0)
        auto.finish("a", now=1.0)
        auto.arrive(make_job("b", work=short), now=1.0)
        auto.arrive(make_job("c", work=short), now=1.0)
        auto.step(1.0)
        auto.finish("b", now=2.0)
        decisions[cost] = auto.step(2.0)
    assert any(isinstance(d, Rescale) for d in decisions[0.0])
    assert not any(isinstance(d, Rescale) for d in decisions[3600.0])


def test_capacity_drop_preempts_the_newest_running_job_and_keeps_it_queued() -> None:
    auto = scaler(capacity=8, delta_s=0.0)
    auto.arrive(make_job("a", elastic=False, gpus=4, batch_size=64), now=0.0)
    auto.arrive(make_job("b", elastic=False, gpus=4, batch_size=64), now=0.0)
    auto.step(0.0)
    auto.set_capacity(4, now=100.0)
    decisions = auto.step(100.0)
    assert decisions == [Preempt("b", "cluster capacity fell to 4 GPUs")]
    assert auto.queued == ("b",)  # never rejected, even in no-queue mode
    auto.set_capacity(8, now=200.0)
    assert auto.step(200.0) == [Start("b", 4, 64)]


def test_same_inputs_give_the_same_decisions() -> None:
    def run() -> list[object]:
        auto = scaler(capacity=16, delta_s=300.0, queue=True)
        out: list[object] = []
        for i in range(12):
            auto.arrive(make_job(f"j{i}", b_min=16 * (1 + i % 3), k_max=2 + i % 7), now=40.0 * i)
            due = auto.next_round_at()
            assert due is not None
            out.extend(auto.step(max(due, 40.0 * i)))
        return out

    assert run() == run()


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"delta_s": -1.0}, "delta_s"),
        ({"delta_s": math.inf}, "delta_s"),
        ({"early_share": 0.0}, "early_share"),
        ({"restart_cost_s": -5.0}, "restart_cost_s"),
        ({"hysteresis": math.nan}, "hysteresis"),
        ({"policy": "greedy"}, "policy"),
    ],
)
def test_bad_config_names_the_field(options: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as error:
        AutoscalerConfig(**options)  # type: ignore[arg-type]
    assert error.value.field == field


def test_bad_capacity_names_the_field() -> None:
    with pytest.raises(SpecError, match="capacity"):
        scaler(capacity=-1)
