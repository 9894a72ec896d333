"""The autoscaler core on hand-made scenarios: rounds, admission, rejection, options."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from bellows.autoscaler import (
    Autoscaler,
    AutoscalerConfig,
    ClockError,
    Mode,
    Policy,
    Preempt,
    Reject,
    Rescale,
    Start,
)
from bellows.autoscaler.config import EARLY_GAP_S, EARLY_SHARE, restart_s, restart_s_each
from bellows.autoscaler.pricing import exact
from bellows.jobs import MAX_RESTART_S, Allocation, SpecError
from bellows.scaling import default_cluster
from tests.strategies import make_job

CLUSTER = default_cluster()


def scaler(capacity: int = 8, **options: object) -> Autoscaler:
    """A core in paper mode (the scenarios below are the paper's), with ``options``."""
    return Autoscaler(AutoscalerConfig.paper(**options), capacity=capacity, cluster=CLUSTER)


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
    auto = scaler(capacity=8, delta_s=600.0, early_share=0.5, early_gap_s=0.0, queue=True)
    for name in "abcd":
        auto.arrive(make_job(name, elastic=False, gpus=2, batch_size=64), now=0.0)
    auto.step(0.0)
    auto.arrive(make_job("e", elastic=False, gpus=2, batch_size=64), now=10.0)
    assert auto.next_round_at() == 600.0
    auto.finish("a", now=20.0)
    assert auto.next_round_at() == 600.0  # 1 of 4 finished: below the share
    auto.finish("b", now=30.0)
    assert auto.next_round_at() == 30.0  # half finished: due at once, not in the past
    assert Start("e", 2, 64) in auto.step(30.0)


def test_an_early_round_waits_its_gap_after_the_last_round() -> None:
    # The same completions with the default gap (60 s): the share is reached at 30 s, the
    # round comes 60 s after the last (at 0), and a later share waits 60 s after that one.
    auto = scaler(capacity=8, delta_s=600.0, early_share=0.5, queue=True)
    assert auto.config.early_gap_s == EARLY_GAP_S == 60.0
    for name in "abcd":
        auto.arrive(make_job(name, elastic=False, gpus=2, batch_size=64), now=0.0)
    auto.step(0.0)
    auto.arrive(make_job("e", elastic=False, gpus=2, batch_size=64), now=10.0)
    auto.finish("a", now=20.0)
    auto.finish("b", now=30.0)
    assert auto.next_round_at() == 60.0  # due at the share, held to the gap
    assert auto.step(30.0) == []  # not yet
    assert Start("e", 2, 64) in auto.step(60.0)
    auto.finish("c", now=70.0)  # 1 of 3 running after the round: below the share
    assert auto.next_round_at() == 600.0
    auto.finish("d", now=80.0)  # 2 of 3: the share, 60 s after the round at 60
    assert auto.next_round_at() == 120.0
    # a gap past the next tick leaves the tick: Δ still holds
    late = scaler(capacity=8, delta_s=100.0, early_share=0.5, early_gap_s=500.0, queue=True)
    late.arrive(make_job("a", elastic=False, gpus=2, batch_size=64), now=0.0)
    late.step(0.0)
    late.finish("a", now=10.0)
    assert late.next_round_at() == 100.0


def test_restart_cost_with_hysteresis_skips_rescales_that_do_not_pay() -> None:
    short = 20_000.0  # samples: a job close to done is not worth restarting
    decisions = {}
    for cost in (0.0, 3600.0):
        auto = scaler(capacity=8, delta_s=0.0, restart_s=cost, hysteresis=2.0)
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
        for i in range(13):
            while (due := auto.next_round_at()) is not None and due <= 40.0 * i:
                out.extend(auto.step(due))
            if i < 12:
                auto.arrive(make_job(f"j{i}", b_min=16 * (1 + i % 3), k_max=2 + i % 7), 40.0 * i)
        return out

    assert run() == run()


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"delta_s": -1.0}, "delta_s"),
        ({"delta_s": math.inf}, "delta_s"),
        ({"early_share": -0.1}, "early_share"),
        ({"early_share": 1.5}, "early_share"),
        ({"early_share": True}, "early_share"),
        ({"restart_s": -5.0}, "restart_s"),
        ({"hysteresis": math.nan}, "hysteresis"),
        ({"policy": "greedy"}, "policy"),
    ],
)
def test_bad_config_names_the_field(options: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as error:
        AutoscalerConfig(**options)  # type: ignore[arg-type]
    assert error.value.field == field


def test_the_early_round_is_on_in_bellows_mode_off_in_paper_mode_and_zero_turns_it_off() -> None:
    assert AutoscalerConfig().early_share == EARLY_SHARE == 0.05  # issue 36's re-decision
    assert AutoscalerConfig.paper().early_share is None  # the paper's rounds: Δ only
    assert AutoscalerConfig(early_share=0).early_share is None
    assert AutoscalerConfig(early_share=None).early_share is None
    assert AutoscalerConfig.paper(early_share=0.5).early_share == 0.5
    for gap in (-1.0, math.inf, math.nan, True, "60"):
        with pytest.raises(SpecError, match="early_gap_s"):
            AutoscalerConfig(early_gap_s=gap)  # type: ignore[arg-type]


def test_bad_capacity_names_the_field() -> None:
    with pytest.raises(SpecError, match="capacity"):
        scaler(capacity=-1)


# ---------------------------------------------------------------- fixes found in review


def test_the_hybrid_trigger_never_runs_a_round_in_the_past() -> None:
    # The review's repro: 8 GPUs, four rigid 2-GPU jobs at 0, a fifth at 10, completions at
    # 100 and 200, early share 0.5, Δ = 600 s. The fifth job starts at 200, not at 10.
    auto = scaler(capacity=8, delta_s=600.0, early_share=0.5, queue=True)
    for name in "abcd":
        auto.arrive(make_job(name, elastic=False, gpus=2, batch_size=64), now=0.0)
    assert len(auto.step(0.0)) == 4
    auto.arrive(make_job("e", elastic=False, gpus=2, batch_size=64), now=10.0)
    auto.finish("a", now=100.0)
    assert auto.next_round_at() == 600.0
    auto.finish("b", now=200.0)
    assert auto.next_round_at() == 200.0
    assert auto.step(200.0) == [Start("e", 2, 64)]


@pytest.mark.parametrize("fact", ["arrive", "finish", "set_capacity", "step", "adopt"])
def test_time_going_backwards_is_refused(fact: str) -> None:
    auto = scaler(capacity=8, delta_s=0.0)
    auto.arrive(make_job("a"), now=100.0)
    calls = {
        "arrive": lambda: auto.arrive(make_job("b"), now=99.0),
        "finish": lambda: auto.finish("a", now=99.0),
        "set_capacity": lambda: auto.set_capacity(4, now=99.0),
        "step": lambda: auto.step(99.0),
        "adopt": lambda: auto.adopt(make_job("c"), Allocation(1, 32), now=99.0),
    }
    with pytest.raises(ClockError, match="before the last"):
        calls[fact]()
    assert auto.queued == ("a",)  # nothing was taken


def test_a_capacity_drop_preempts_at_once_not_at_the_next_tick() -> None:
    auto = scaler(capacity=8, delta_s=600.0, queue=True)
    for name in "ab":
        auto.arrive(make_job(name, elastic=False, gpus=4, batch_size=64), now=0.0)
    auto.step(0.0)
    auto.set_capacity(4, now=130.0)
    assert auto.next_round_at() == 130.0
    assert auto.step(130.0) == [Preempt("b", "cluster capacity fell to 4 GPUs")]
    assert auto.in_use == 4
    assert auto.next_round_at() == 600.0  # the round on the grid still looks at the change


def test_identical_jobs_never_swap_on_a_tie() -> None:
    # Two jobs of one template at 2 and 1 GPUs: an exchange is worth exactly the same, so
    # at every later round the running jobs keep what they have.
    auto = scaler(capacity=1, delta_s=0.0, queue=True)
    auto.arrive(make_job("a", k_max=2), now=0.0)
    auto.step(0.0)
    auto.set_capacity(3, now=1.0)
    auto.arrive(make_job("b", k_max=2), now=1.0)
    auto.step(1.0)
    before = dict(auto.allocations)
    assert (before["a"].gpus, before["b"].gpus) == (1, 2)  # a kept its GPU on the tie
    for t in range(2, 12):
        # a round at each arrival of a job that cannot fit: nothing else changes
        auto.arrive(make_job(f"w{t}", elastic=False, gpus=4, batch_size=64), now=float(t))
        assert not [d for d in auto.step(float(t)) if isinstance(d, Rescale)]
    assert dict(auto.allocations) == before


def test_values_off_by_float_noise_are_exactly_equal_on_the_grid() -> None:
    row = np.array([-np.inf, 1.0, 1.7, 2.2])
    noisy = row + np.array([0.0, 2e-16, -4e-16, 8e-16])
    keep = np.array([-1, -1], dtype=np.int64)
    grid = exact(np.stack([row, noisy]), keep)
    assert np.array_equal(grid[0], grid[1])
    kept = exact(np.stack([row, noisy]), np.array([2, -1], dtype=np.int64))
    assert kept[0, 2] == grid[0, 2] + 1  # the running job's own count wins a tie
    assert kept[0, 2] < grid[0, 3]  # but never beats a better value


# ---------------------------------------------------------------- Bellows mode


def bellows(capacity: int = 8, **options: object) -> Autoscaler:
    config = AutoscalerConfig(**options)  # type: ignore[arg-type]
    return Autoscaler(config, capacity=capacity, cluster=CLUSTER)


def test_bellows_mode_is_the_default_and_paper_mode_keeps_the_papers_settings() -> None:
    default, paper = AutoscalerConfig(), AutoscalerConfig.paper()
    assert (default.mode, default.restart_s, default.queue) == (Mode.BELLOWS, 60.0, True)
    assert (paper.mode, paper.restart_s, paper.queue, paper.backfill) == (
        Mode.PAPER, 0.0, False, False,
    )  # fmt: skip
    assert AutoscalerConfig.paper(queue=True).queue


def test_an_arrival_on_free_gpus_starts_at_once_without_touching_running_jobs() -> None:
    auto = bellows(capacity=8, delta_s=600.0)
    auto.arrive(make_job("a", k_max=4), now=5.0)
    assert auto.next_round_at() == 5.0
    assert auto.step(5.0) == [Start("a", 4, auto.allocations["a"].batch)]
    auto.arrive(make_job("b", k_max=8), now=7.0)
    (start,) = auto.step(7.0)
    assert start == Start("b", 4, start.batch)  # its best within the 4 free GPUs
    auto.arrive(make_job("c"), now=9.0)
    assert auto.step(9.0) == []  # nothing free: it waits, and a is not shrunk
    assert auto.next_round_at() == 600.0
    decisions = auto.step(600.0)  # the round may take GPUs from running jobs
    assert any(isinstance(d, Rescale) for d in decisions)
    assert "c" in auto.allocations


def test_a_completion_hands_its_gpus_to_waiting_jobs_at_once() -> None:
    auto = bellows(capacity=4, delta_s=600.0)
    for name in "ab":
        auto.arrive(make_job(name, elastic=False, gpus=4, batch_size=64), now=0.0)
    assert auto.step(0.0) == [Start("a", 4, 64)]
    auto.finish("a", now=50.0)
    assert auto.next_round_at() == 50.0
    assert auto.step(50.0) == [Start("b", 4, 64)]


def test_backfill_fills_around_a_head_that_does_not_fit() -> None:
    auto = bellows(capacity=8, delta_s=600.0)
    auto.arrive(make_job("r", elastic=False, gpus=6, batch_size=64, k_max=6), now=0.0)
    auto.step(0.0)
    auto.arrive(make_job("big", elastic=False, gpus=4, batch_size=64), now=1.0)
    auto.arrive(make_job("small", k_max=2), now=2.0)
    assert [d.job for d in auto.step(2.0)] == ["small"]
    assert auto.queued == ("big",)


def test_a_job_halted_by_a_capacity_drop_pays_its_restart_when_it_resumes() -> None:
    job = make_job("a", elastic=False, gpus=4, batch_size=64, k_max=4)
    auto = bellows(capacity=4, delta_s=600.0, restart_s=30.0)
    auto.arrive(job, now=0.0)
    auto.step(0.0)
    auto.set_capacity(2, now=100.0)
    assert [type(d) for d in auto.step(100.0)] == [Preempt]
    done = auto_done = 0.0
    auto.set_capacity(4, now=200.0)
    assert auto.step(200.0) == [Start("a", 4, 64)]
    auto_done = auto.estimated_done("a", 230.0)
    done = auto.estimated_done("a", 100.0 + 0.0)  # progress kept over the halt
    assert auto_done == pytest.approx(done)  # no progress during the 30 s restart


def test_a_jobs_own_restart_cost_replaces_the_default() -> None:
    auto = bellows(restart_s=60.0)
    plain, own = make_job("a"), dataclasses.replace(make_job("b"), restart_s=5.0)
    auto.arrive(plain, now=0.0)
    auto.arrive(own, now=0.0)
    assert (auto.restart_s("a"), auto.restart_s("b")) == (60.0, 5.0)
    # a round prices its running jobs all at once, by the same rule
    jobs = [plain, own, dataclasses.replace(make_job("c"), restart_s=0.0)]
    config = auto.config
    assert restart_s_each(jobs, config) == [restart_s(j, config) for j in jobs]
    assert restart_s_each(jobs, config) == [60.0, 5.0, 0.0]


@pytest.mark.parametrize("mode", list(Mode))
def test_a_job_that_cannot_run_on_the_whole_cluster_does_not_block_the_queue(mode: Mode) -> None:
    # no backfill, queue on: the paper's FIFO would stop at the head forever
    config = AutoscalerConfig(mode=mode, backfill=False, delta_s=60.0)
    auto = Autoscaler(config, capacity=8, cluster=CLUSTER)
    auto.arrive(make_job("huge", elastic=False, gpus=16, k_max=16, batch_size=64), now=0.0)
    auto.arrive(make_job("small", elastic=False, gpus=2, batch_size=64), now=1.0)
    decisions = []
    while (due := auto.next_round_at()) is not None and due <= 60.0:
        decisions += auto.step(due)
    assert Start("small", 2, 64) in decisions
    assert auto.queued == ("huge",)  # it waits for a bigger cluster, and is not dropped
    auto.set_capacity(16, now=61.0)
    auto.finish("small", now=62.0)
    while (due := auto.next_round_at()) is not None:
        decisions += auto.step(due)
    assert Start("huge", 16, 64) in decisions


@pytest.mark.parametrize(("restart_s", "moves"), [(MAX_RESTART_S, False), (0.0, True)])
def test_a_job_adopted_at_another_batch_keeps_it_unless_the_restart_pays(
    restart_s: float, moves: bool
) -> None:
    """The pricing charges no restart at a job's own GPU count, where it assumes the row's
    batch; a job found running at another batch (adopted, or admitted by Kueue at its
    owner's size) moves to the row's batch on the same GPUs only when the restart pays."""
    config = AutoscalerConfig(restart_s=restart_s)
    fresh = Autoscaler(config, capacity=4, cluster=default_cluster())
    job = make_job("a", k_max=4, b_max=512)
    fresh.arrive(job, 0.0)
    (start,) = fresh.step(0.0)
    assert isinstance(start, Start)
    assert start.gpus == 4
    owners = start.batch // 2  # a valid batch the round would not pick: half the best
    assert owners >= job.b_min
    auto = Autoscaler(config, capacity=4, cluster=default_cluster())
    assert auto.adopt(job, Allocation(4, owners), 0.0)
    decisions = auto.step(config.delta_s) + auto.step(2 * config.delta_s)
    rescales = [d for d in decisions if isinstance(d, Rescale)]
    if moves:
        assert rescales == [Rescale("a", 4, owners, 4, start.batch)]
    else:
        assert rescales == []
        assert auto.allocations["a"] == Allocation(4, owners)
