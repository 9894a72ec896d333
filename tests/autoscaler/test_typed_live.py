"""``TypedAutoscaler`` as the live controller drives it (issue 39): a drop-in for the one-type
core on a cluster of several GPU types. Jobs found running are adopted on their type, revised
and estimated as whole jobs across changes of type, forked for a what-if, queued in arrival
order over every type; and a cluster whose jobs and capacity do not change settles."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bellows.autoscaler import (
    AutoscalerConfig,
    Mode,
    Objective,
    Policy,
    Preempt,
    Rescale,
    Start,
)
from bellows.autoscaler.decisions import Decision
from bellows.autoscaler.straddle import FreeNodes
from bellows.autoscaler.typed import TypedAutoscaler
from bellows.autoscaler.typed_round import graded, released, round_values
from bellows.jobs import Allocation, JobSpec, SpecError, StepProfile, TypeSection
from bellows.optimizer.typed import allocate_typed
from bellows.scaling import MODEL_EFFICIENCY, default_cluster
from bellows.scaling.gpu_types import GpuType, TypedCluster
from bellows.scaling.placement_memory import ObservedStep
from tests.strategies import LINEAR_PROFILE, job_specs, steady_configs

CONFIG = AutoscalerConfig(restart_s=30.0, delta_s=60.0, early_share=0)  # rounds on the grid
STEP = StepProfile((8, 64), (0.1, 0.5))


def _cluster(slow: int = 1, fast: int = 1) -> TypedCluster:
    """Two types of ``slow`` and ``fast`` nodes of 4 GPUs, alike but for the jobs' speeds."""
    return TypedCluster((GpuType("slow", slow, default_cluster()),
                         GpuType("fast", fast, default_cluster())))  # fmt: skip


def _job(name: str, work: float = 1e7, fast: float = 1.0, *, only: str = "") -> JobSpec:
    """A job ``fast`` times faster on "fast" than on "slow" (``only``: a section there only)."""
    quick = StepProfile(STEP.local_batches, tuple(s / fast for s in STEP.seconds))
    sections = (TypeSection("slow", STEP, 1_000_000, 64), TypeSection("fast", quick, 1_000_000, 64))
    kept = tuple(s for s in sections if not only or s.gpu_type == only)
    return JobSpec(name, 8, 256, 8, 4, 64, 1_000_000, work, STEP, types=kept)


def _settle(auto: TypedAutoscaler, until: float) -> list[Decision]:
    decisions: list[Decision] = []
    while (due := auto.next_round_at()) is not None and due <= until:
        decisions.extend(auto.step(due))
    return decisions


def _view(auto: TypedAutoscaler) -> tuple[object, ...]:
    types = {name: auto.gpu_type(name) for name in [*auto.allocations, *auto.queued]}
    return (dict(auto.allocations), auto.queued, types, auto.in_use, auto.next_round_at())


def _moved(now: float = 700.0) -> tuple[TypedAutoscaler, float]:
    """b starts on "slow" beside a on "fast" (both 5x faster there) and moves to "fast" when a
    finishes at 600 s: the typed round at 660 s. The work b did on "slow", as estimated then."""
    auto = TypedAutoscaler(CONFIG, cluster=_cluster())
    auto.arrive(_job("a", 1e6, 5.0), 0.0)
    auto.arrive(_job("b", 2e7, 5.0), 1.0)
    _settle(auto, 600.0)
    assert auto.gpu_type("a") == "fast"
    assert auto.gpu_type("b") == "slow"
    auto.finish("a", 600.0)
    before = auto.estimated_done("b", 660.0)
    moves = _settle(auto, now)
    assert Preempt("b", "") in [replace(d, reason="") for d in moves if isinstance(d, Preempt)]
    assert auto.gpu_type("b") == "fast"
    return auto, before


def test_an_adopted_job_stays_on_its_type_at_its_allocation() -> None:
    """Alike on both types, found running on the second (arrival would pick the first): the
    typed rounds leave it there, and its core keeps the allocation it would choose."""
    job = _job("a")
    fresh = TypedAutoscaler(CONFIG, cluster=_cluster())
    fresh.arrive(job, 0.0)
    (start,) = fresh.step(0.0)
    assert isinstance(start, Start)
    assert start.gpu_type == "slow"
    auto = TypedAutoscaler(CONFIG, cluster=_cluster())
    running = Allocation(start.gpus, start.batch)
    assert auto.adopt(job, running, 0.0, done=1000.0, since=-50.0, gpu_type="fast")
    assert not auto.adopt(job, running, 0.0, gpu_type="fast")  # known
    assert auto.gpu_type("a") == "fast"
    assert auto.job("a") is job
    assert dict(auto.allocations) == {"a": running}
    assert auto.in_use == start.gpus
    assert _settle(auto, 1200.0) == []
    assert dict(auto.allocations) == {"a": running}
    assert auto.gpu_type("a") == "fast"


def test_adopt_refuses_a_type_the_cluster_or_the_job_has_not_and_changes_nothing() -> None:
    auto = TypedAutoscaler(CONFIG, cluster=_cluster())
    auto.adopt(_job("a"), Allocation(2, 64), 0.0, gpu_type="slow")
    auto.arrive(_job("b"), 0.0)
    before = _view(auto)
    for job, gpu_type, valid in (
        (_job("c"), "h100", "one of slow, fast"),
        (_job("c", only="slow"), "fast", "sections for slow"),
        (_job("a", only="slow"), "fast", "sections for slow"),  # known, but refused first
    ):
        with pytest.raises(SpecError) as err:
            auto.adopt(job, Allocation(2, 64), 1.0, gpu_type=gpu_type)
        assert err.value.field == "gpu_type"
        assert err.value.value == gpu_type
        assert valid in str(err.value)
        assert _view(auto) == before
    with pytest.raises(SpecError):  # an allocation its bounds rule out: the core's check
        auto.adopt(_job("c"), Allocation(8, 64), 1.0, gpu_type="slow")
    assert _view(auto) == before
    with pytest.raises(KeyError):
        auto.job("c")


def test_a_moved_job_resumes_in_its_new_core_where_it_was_after_its_restart() -> None:
    """The cluster (and the simulator) halt a moved job and start it on its new type: it
    resumes from its checkpoint after its restart. Its new core holds it whole, from the
    progress it carried, and counts nothing during the restart (it used to count the job
    progressing from the move on, restart unpaid: what only a live controller's reports
    then corrected, so that the demo's halves decided apart)."""
    auto, before = _moved(now=660.0)
    assert auto.estimated_done("b", 660.0) == pytest.approx(before)  # it restarts where it was
    resumed = 660.0 + CONFIG.restart_s
    assert auto.estimated_done("b", resumed) == pytest.approx(before)  # restarting
    later = auto.estimated_done("b", 1660.0)
    assert later > before
    core = auto._cores["fast"]
    assert later == pytest.approx(core.estimated_done("b", 1660.0))  # its core counts it all
    assert core.job("b").work == 2e7  # the whole job, there too
    assert auto.job("b").work == 2e7
    rate = core.estimated_done("b", resumed + 100.0) - core.estimated_done("b", resumed)
    assert later == pytest.approx(before + rate * (1660.0 - resumed) / 100.0)


def test_a_moved_charged_job_is_priced_at_the_progress_it_carried() -> None:
    """Charged efficiency depends on progress (the gradient noise grows as a job trains):
    on its new type a moved job runs at the efficiency of the progress it carried, after its
    restart, as a job found running there with that progress does."""
    auto = TypedAutoscaler(CONFIG, cluster=_cluster())
    profile = MODEL_EFFICIENCY["imagenet"].rebased(256)
    for name in ("a", "b"):
        auto.charge(name, profile)
    auto.arrive(_job("a", 1e6, 5.0), 0.0)
    auto.arrive(_job("b", 2e7, 5.0), 1.0)
    while (due := auto.next_round_at()) is not None and due <= 600.0:
        running = "b" in auto.allocations
        held, done = auto.gpu_type("b"), auto.estimated_done("b", due) if running else 0.0
        moves = auto.step(due)
        if any(isinstance(d, Preempt) and d.job == "b" for d in moves):
            break
    else:
        pytest.fail("b never moved")
    (start,) = [d for d in moves if isinstance(d, Start) and d.job == "b"]
    assert start.gpu_type != held
    assert 0.0 < done < 2e7
    fresh = TypedAutoscaler(CONFIG, cluster=_cluster())  # b alone, found where it got
    fresh.charge("b", profile)
    assert fresh.adopt(_job("b", 2e7, 5.0), Allocation(start.gpus, start.batch), due,
                       done=done, gpu_type=start.gpu_type)  # fmt: skip
    for at in (due + CONFIG.restart_s, due + 300.0):
        assert auto.estimated_done("b", at) == pytest.approx(fresh.estimated_done("b", at))


def test_revise_keeps_the_home_and_tells_a_moved_jobs_core_its_progress() -> None:
    auto, before = _moved()
    sections = tuple(replace(t, weights=2_000_000) for t in auto.job("b").types)
    slower = replace(auto.job("b"), types=sections)  # what its reports taught
    assert auto.revise(slower, 800.0, done=before + 5000.0, since=790.0)
    assert auto.gpu_type("b") == "fast"  # the next typed round decides, not the revision
    assert auto.job("b") is slower
    assert auto.estimated_done("b", 790.0) == pytest.approx(before + 5000.0)
    core = auto._cores["fast"]
    assert core.job("b").work == 2e7  # the whole job: its core counts its progress
    assert core.job("b").weights == 2_000_000
    # what the job reports is its progress, whichever type it made it on
    assert auto.revise(slower, 810.0, done=before / 2, since=810.0)
    assert auto.estimated_done("b", 810.0) == pytest.approx(before / 2)
    assert not auto.revise(_job("z"), 810.0)  # unknown
    # a spec without a section for the type it is on: refused, nothing changed
    with pytest.raises(SpecError) as err:
        auto.revise(_job("b", 2e7, only="slow"), 820.0, done=0.0)
    assert err.value.field == "types"
    assert auto.job("b") is slower
    assert auto.estimated_done("b", 820.0) > before / 2


def test_a_fork_decides_apart_from_the_original() -> None:
    auto = TypedAutoscaler(CONFIG, cluster=_cluster())
    for i, fast in enumerate((5.0, 0.2, 5.0, 0.2, 1.0, 1.0) * 2):
        auto.arrive(_job(f"j{i}", 1e7, fast), float(i))
    _settle(auto, 300.0)
    assert auto.queued
    before = _view(auto)
    fork, deep = auto.fork(), copy.deepcopy(auto)

    def play(core: TypedAutoscaler) -> list[Decision]:
        core.finish(next(iter(core.allocations)), 400.0)
        core.arrive(_job("late", 1e7, 5.0), 400.0)
        core.set_capacity(8, 400.0, "slow")
        return _settle(core, 1000.0)

    assert play(fork) == play(deep)
    assert _view(fork) == _view(deep)
    assert _view(auto) == before  # nothing the fork was told or decided reached it
    assert _view(fork) != before
    assert auto.capacities["slow"] == 4
    again = copy.deepcopy(auto)  # and the original goes on as if the fork never was
    assert play(auto) == play(again)
    assert _view(auto) == _view(again)


def test_queued_is_in_arrival_order_over_every_type() -> None:
    auto = TypedAutoscaler(CONFIG, cluster=_cluster())
    auto.set_capacity(0, 0.0, "slow")
    auto.set_capacity(0, 0.0, "fast")
    names = [f"j{i}" for i in range(6)]
    for i, name in enumerate(names):  # each one's fastest type alternates
        auto.arrive(_job(name, 1e7, 5.0 if i % 2 else 0.2), float(i))
    assert auto.queued == tuple(names)
    assert {auto.gpu_type(n) for n in names} == {"slow", "fast"}
    assert _settle(auto, 200.0) == []
    assert auto.queued == tuple(names)
    auto.set_capacity(4, 200.0, "fast")
    auto.set_capacity(4, 200.0, "slow")
    started = _settle(auto, 200.0)
    assert {d.job for d in started if isinstance(d, Start)} <= set(names)
    assert auto.queued == tuple(n for n in names if n not in auto.allocations)


def test_capacity_capacities_and_in_use_over_the_types() -> None:
    auto = TypedAutoscaler(CONFIG, cluster=_cluster(slow=2, fast=1))
    assert auto.capacity == 12
    assert dict(auto.capacities) == {"slow": 8, "fast": 4}
    assert auto.cluster.names == ("slow", "fast")
    auto.set_capacity(4, 0.0, "slow")
    assert auto.capacity == 8
    assert dict(auto.capacities) == {"slow": 4, "fast": 4}
    auto.adopt(_job("a"), Allocation(2, 64), 0.0, gpu_type="slow")
    auto.adopt(_job("b"), Allocation(3, 96), 0.0, gpu_type="fast")
    assert auto.in_use == 5
    assert auto.config is CONFIG
    assert auto.goodput
    assert auto.engines is auto._cores["fast"].engines


def test_note_keeps_is_set_on_every_core_and_on_forks() -> None:
    auto = TypedAutoscaler(CONFIG, cluster=_cluster())
    assert not auto.note_keeps
    auto.note_keeps = True
    assert all(core.note_keeps for core in auto._cores.values())
    fork = auto.fork()
    assert fork.note_keeps
    assert all(core.note_keeps for core in fork._cores.values())
    fork.note_keeps = False
    assert auto.note_keeps
    assert all(core.note_keeps for core in auto._cores.values())
    assert not any(core.note_keeps for core in fork._cores.values())


def test_last_round_is_the_latest_a_core_ran_and_keeps_are_a_round_s() -> None:
    auto = TypedAutoscaler(CONFIG, cluster=_cluster())
    assert auto.last_round is None
    auto.see_nodes(None)  # no node view: every count on the fewest nodes
    auto.arrive(_job("a", 1e7, 5.0), 10.0)
    auto.step(10.0)
    filled = auto.last_round
    assert filled is not None
    assert filled.kind == "fill"
    assert auto.step(10.0) == []
    assert auto.last_round is filled  # nothing ran: the same object
    _settle(auto, 60.0)
    ran = auto.last_round
    assert ran is not None
    assert ran.kind == "round"
    assert ran.at == 60.0


def test_keeps_are_the_cores_rounds_and_the_caller_clears_them() -> None:
    """A restart too dear to grow into the free GPUs: the round on its type keeps the job,
    and says so when the controller asks (note_keeps)."""
    auto = TypedAutoscaler(replace(CONFIG, restart_s=50_000.0), cluster=_cluster())
    auto.note_keeps = True
    auto.adopt(_job("a", 1e6), Allocation(1, 64), 10.0, gpu_type="fast")
    assert _settle(auto, 60.0) == []
    assert [(k.job, k.gpus, k.better) for k in auto.keeps] == [("a", 1, 4)]
    auto.keeps = ()  # the controller clears what it read
    _settle(auto, 60.0)
    assert auto.keeps == ()


def test_charged_and_observe_step_are_the_home_core_s() -> None:
    auto = TypedAutoscaler(CONFIG, cluster=_cluster())
    profile = MODEL_EFFICIENCY["cifar10"]
    auto.charge("a", profile)
    assert auto.charged("a") is profile  # before it arrives: what it will be decided by
    auto.arrive(_job("a"), 0.0)
    assert auto.charged("a") is profile
    auto.finish("a", 1.0)
    assert auto.charged("a") is None
    assert all(core.charged("a") is None for core in auto._cores.values())  # none kept
    with pytest.raises(KeyError):
        auto.gpu_type("a")
    step = ObservedStep(2, 64, 0.3)
    assert not auto.observe_step("a", 2.0, step)  # unknown now
    auto.arrive(_job("b"), 2.0)
    assert not auto.observe_step("b", 2.0, step)  # no placement memory: nothing learned
    baseline = TypedAutoscaler(replace(CONFIG, policy=Policy.BASELINE), cluster=_cluster())
    baseline.charge("a", profile)
    assert not baseline.goodput
    assert baseline.charged("a") is None


# ---------------------------------------------------------------- the cluster settles
ROUNDS = 8
SETTLED = 3  # rounds a steady cluster may still move in (see the test)


def _sectioned(job: JobSpec, fast: float) -> JobSpec:
    """``job``, a day or more of work on one GPU (every round finds it running), ``fast``
    times faster on "fast" than on "slow"."""
    quick = StepProfile(job.profile.local_batches, tuple(s / fast for s in job.profile.seconds))
    sections = (TypeSection("slow", job.profile, job.weights, job.m_max),
                TypeSection("fast", quick, job.weights, job.m_max))  # fmt: skip
    return replace(job, work=1e11, types=sections)


@st.composite
def steady(draw: st.DrawFn) -> tuple[AutoscalerConfig, TypedCluster, list[JobSpec], float]:
    config = draw(steady_configs())
    cluster = _cluster(draw(st.integers(0, 3)), draw(st.integers(1, 3)))
    jobs = [_sectioned(draw(job_specs(f"job{i}")), draw(st.sampled_from([0.5, 1.0, 2.0, 5.0])))
            for i in range(draw(st.integers(1, 8)))]  # fmt: skip
    every = draw(st.sampled_from([60.0, 300.0]))
    return config, cluster, jobs, every


def _one_gpu(name: str, *, elastic: bool) -> JobSpec:
    return JobSpec(name, 1, 1, 1, 1, 8, 1_000_000, 1.0, LINEAR_PROFILE, elastic)


SWAP = (  # found by the strategy: job3 and job4, alike, swap types at 240 s
    AutoscalerConfig(mode=Mode.BELLOWS, queue=False, delta_s=60.0, restart_s=0.0,
                     objective=Objective.SPEEDUP),
    _cluster(1, 1),
    [_sectioned(j, 0.5) for j in (
        *(_one_gpu(f"job{i}", elastic=True) for i in range(3)),
        *(_one_gpu(f"job{i}", elastic=False) for i in (3, 4)),
        JobSpec("job5", 1, 5, 5, 5, 8, 1_000_000, 1.0, LINEAR_PROFILE, False, 5),  # on no type
    )],
    60.0,
)  # fmt: skip


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steady())
@example(SWAP)
def test_a_cluster_whose_jobs_and_capacity_do_not_change_settles(
    case: tuple[AutoscalerConfig, TypedCluster, list[JobSpec], float],
) -> None:
    """As the one-type core (tests/autoscaler/test_no_flapping.py), uncharged: once a typed
    round has seen the jobs running (put each on its type) and the cores have sized them
    there, rounds that only see the jobs' progress (a revision with the same spec, as the
    progress loop makes) start, move, halt and rescale nothing. It failed on three counts
    before the typed round kept a running job's (type, count) on a tie (``SWAP``: two alike
    jobs swapped types round after round with restart_s 0) and came ``delta_s`` after the
    cores started jobs in the step of a typed round that found none running."""
    config, cluster, jobs, every = case
    auto = TypedAutoscaler(config, cluster=cluster)
    for job in jobs:
        auto.arrive(job, now=0.0)
    now = 2 * max(config.delta_s, every)
    _settle(auto, now)  # the cores' fills, and the typed round on the Δ grid after them
    rounds: list[list[Decision]] = []
    for _ in range(ROUNDS + 1):
        now += every
        for name in auto.allocations:
            done = auto.estimated_done(name, now)
            assert done < auto.job(name).work, "a job finished: the jobs changed"
            auto.revise(auto.job(name), now, done=done)
        rounds.append([d for d in _settle(auto, now) if isinstance(d, Start | Rescale | Preempt)])
    # the first: a typed round that sees the jobs running (delta_s 0: at the first fact after
    # the fills) and the cores' rounds after its moves; a typed round plans a job's count on
    # a type whose core then sizes it, so the next may improve on it, a free move (restart_s
    # 0) included: settled within SETTLED rounds, and from then on, nothing, ever again
    late = [(i, moved) for i, moved in enumerate(rounds) if moved and i >= SETTLED]
    assert late == [], f"moves after {SETTLED} rounds with nothing changed: {late}"


def test_a_typed_round_comes_delta_s_after_the_cores_start_jobs() -> None:
    """The module's rule, every ``delta_s`` while jobs run: here a job no type holds makes a
    typed round due at once, it finds the other one waiting, and the fill after it starts
    that one in the same step."""
    auto = TypedAutoscaler(CONFIG, cluster=_cluster())
    auto.arrive(_job("a"), 0.0)
    elsewhere = (TypeSection("h100", STEP, 1_000_000, 64),)
    auto.arrive(replace(_job("elsewhere"), types=elsewhere), 0.0)
    decisions = auto.step(0.0)
    assert {type(d).__name__ for d in decisions} == {"Reject", "Start"}
    assert auto.allocations
    assert auto.next_round_at() == 60.0


def test_a_running_job_does_not_move_to_a_type_where_it_runs_no_faster() -> None:
    """A move priced below the solver's tolerance (HiGHS: 1e-6 absolute) was a tie: this job
    of 1e11 samples, its restart 30 s, moved once to the type where it runs no faster. On
    the grid it is worth less than keeping the job where it is."""
    config = AutoscalerConfig(delta_s=60.0, restart_s=30.0, objective=Objective.FAIR)
    auto = TypedAutoscaler(config, cluster=_cluster())
    job = _sectioned(JobSpec("a", 1, 2, 1, 2, 8, 1_000_000, 1.0, LINEAR_PROFILE), 1.0)
    auto.arrive(job, 0.0)
    _settle(auto, 600.0)
    assert auto.gpu_type("a") == "slow"
    auto.revise(job, 600.0, done=auto.estimated_done("a", 600.0))
    assert [d for d in _settle(auto, 1200.0) if not isinstance(d, Rescale)] == []
    assert auto.gpu_type("a") == "slow"


def test_with_delta_s_0_the_typed_round_comes_at_facts_only() -> None:
    """Once it ran, it is not due again at once (a caller stepping at next_round_at looped)."""
    auto = TypedAutoscaler(replace(CONFIG, delta_s=0.0), cluster=_cluster())
    auto.arrive(_job("a", 1e7, 5.0), 0.0)
    auto.arrive(_job("b", 1e7, 5.0), 0.0)
    assert _settle(auto, 0.0)
    assert auto.next_round_at() is None
    auto.finish("a", 100.0)
    assert auto.next_round_at() == 100.0
    _settle(auto, 100.0)
    assert auto.next_round_at() is None


def test_a_job_that_moves_back_to_a_type_it_left_keeps_its_charge() -> None:
    """The core a job leaves forgets its charge (:meth:`Autoscaler.finish`): the core it moves
    back to is charged again, and decides it by goodput as the typed round does."""
    profile = MODEL_EFFICIENCY["cifar10"]
    auto = TypedAutoscaler(CONFIG, cluster=_cluster())
    auto.charge("b", profile)
    auto.arrive(_job("a", 1e6, 5.0), 0.0)
    auto.arrive(_job("b", 2e7, 5.0), 1.0)
    _settle(auto, 600.0)
    assert auto.gpu_type("b") == "slow"
    auto.finish("a", 600.0)
    _settle(auto, 700.0)
    assert auto.gpu_type("b") == "fast"
    auto.set_capacity(0, 700.0, "fast")  # its core halts it; the typed round sends it back
    _settle(auto, 800.0)
    assert auto.gpu_type("b") == "slow"
    assert "b" in auto.allocations
    assert auto.charged("b") is profile
    assert auto._cores["slow"].charged("b") is profile


def test_the_gpus_of_a_job_moved_off_a_type_are_free_to_its_core() -> None:
    """b moves from slow to fast when a finishes; c, waiting on slow, starts in b's GPUs in
    the same step: the slow core is shown them free, not held by b (the node view was taken
    before the typed round)."""
    auto = TypedAutoscaler(CONFIG, cluster=_cluster())
    auto.arrive(_job("a", 1e6, 5.0), 0.0)
    auto.arrive(_job("b", 2e7, 5.0), 1.0)
    _settle(auto, 600.0)
    auto.arrive(_job("c", 2e7, 0.2), 600.0)
    assert auto.queued == ("c",)
    auto.finish("a", 600.0)
    seen: list[FreeNodes | None] = []
    slow = auto._cores["slow"]
    shown = slow.see_nodes
    slow.see_nodes = lambda nodes: (seen.append(nodes), shown(nodes))[1]  # type: ignore[method-assign]
    _settle(auto, 659.0)
    b = auto.allocations["b"].gpus
    auto.see_nodes({"slow": FreeNodes((4 - b,), {"b": ((0, b),)}), "fast": FreeNodes((4,))})
    moved = auto.step(660.0)
    assert Preempt("b", "") in [replace(d, reason="") for d in moved if isinstance(d, Preempt)]
    assert seen[-1] == FreeNodes((4,), {})
    assert auto.gpu_type("c") == "slow"
    assert auto.allocations["c"].gpus == 4


def test_released_frees_the_moved_jobs_gpus_and_keeps_the_rest() -> None:
    nodes = FreeNodes((1, 0, 2), {"a": ((0, 3),), "b": ((1, 4), (2, 2)), "c": ((2, 1),)})
    assert released(nodes, []) is nodes
    assert released(nodes, ["z"]) is nodes  # on another type
    out = released(nodes, ["b", "z"])
    assert out == FreeNodes((1, 4, 4), {"a": ((0, 3),), "c": ((2, 1),)})
    assert out.spread == frozenset()


def test_a_move_pays_for_its_restart_as_the_core_prices_it() -> None:
    """Hysteresis and restart growth (each earlier restart, a rescale or a change of type,
    makes the next move dearer) price a change of type as the core prices a rescale."""
    cluster = _cluster()
    job = _job("a", 1e6, 2.0)
    rates = np.zeros((1, 2, 5))
    rates[0, 0, 1:] = [10.0, 19.0, 27.0, 34.0]  # slow
    rates[0, 1, 1:] = [20.0, 38.0, 54.0, 68.0]  # fast
    allowed = rates > 0

    def fast_at_4(config: AutoscalerConfig, restarts: int) -> float:
        values = round_values(config, cluster.names, jobs=[job], homes=["slow"], held=[4],
                              rates=rates, allowed=allowed, done=[0.0],
                              restarts=[restarts])  # fmt: skip
        return float(values[0, 1, 4] - values[0, 0, 4])  # the move's worth over keeping

    plain = replace(CONFIG, objective=Objective.SPEEDUP)
    base = fast_at_4(plain, 0)
    assert base > 0  # twice as fast: it pays
    assert fast_at_4(replace(plain, hysteresis=3.0), 0) < base
    assert fast_at_4(replace(plain, restart_growth=1.0), 0) == base
    assert fast_at_4(replace(plain, restart_growth=1.0), 3) < base
    assert fast_at_4(replace(plain, restart_s=0.0), 0) > base


def test_graded_values_keep_every_running_job_where_the_solver_finds_no_better() -> None:
    """On the grid, allocations worth the same are told apart by the keep bonus, beyond the
    solver's tolerances: the optimum found with every job running, each where it is, is
    returned as it is, on the bound's path too (over 2 000 choices)."""
    rng = np.random.default_rng(7)
    for jobs in (12, 60):
        kinds = np.cumsum(rng.uniform(0.0, 1.0, size=(3, 3, 25)), axis=2)
        values = kinds[rng.integers(0, 3, jobs)]  # few templates: many exact ties
        values[:, :, 0] = -np.inf  # running: placed
        caps = np.array([24, 16, 24])
        anywhere = np.zeros(jobs, dtype=np.int64)  # the same grid, no bonus (column 0)
        found = allocate_typed(graded(values, anywhere, anywhere), caps)
        kept = allocate_typed(graded(values, found.types, found.gpus), caps)
        assert kept.types.tolist() == found.types.tolist()
        assert kept.gpus.tolist() == found.gpus.tolist()


def test_assigned_types_are_kueues_waiting_jobs_go_to_the_first_with_room() -> None:
    """A Kueue ClusterQueue's pool (``assigned``): no type is chosen for speed. A job 4x
    faster on "fast" still goes where Kueue would admit it, the first type (in the queue's
    flavor order) with room for its smallest count."""
    auto = TypedAutoscaler(AutoscalerConfig(), cluster=_cluster(1, 1), assigned=True)
    auto.arrive(_job("a", fast=4.0), now=0.0)
    assert auto.gpu_type("a") == "slow"
    auto.step(0.0)
    assert auto.allocations["a"].gpus == 4  # the slow node whole
    auto.arrive(_job("b", fast=4.0), now=1.0)
    assert auto.gpu_type("b") == "fast"  # the slow type has no room left
    typed = TypedAutoscaler(AutoscalerConfig(), cluster=_cluster(1, 1))
    typed.arrive(_job("a", fast=4.0), now=0.0)
    assert typed.gpu_type("a") == "fast"  # choosing by speed, for comparison


def test_a_job_kueue_put_elsewhere_is_relocated_without_a_restart() -> None:
    auto = TypedAutoscaler(AutoscalerConfig(), cluster=_cluster(1, 1), assigned=True)
    auto.arrive(_job("a", work=1e9), now=0.0)
    auto.step(0.0)
    gpus = auto.allocations["a"]
    done = auto.estimated_done("a", 100.0)
    assert auto.relocate("a", "fast", 100.0)
    assert auto.gpu_type("a") == "fast"
    assert auto.allocations["a"] == gpus  # the same allocation: it did not move
    assert auto.estimated_done("a", 100.0) == pytest.approx(done)
    assert auto.estimated_done("a", 200.0) > done  # and no restart pause on the new type
    assert auto.capacities == {"slow": 4, "fast": 4}
    assert auto.in_use == gpus.gpus
    assert not auto.relocate("a", "fast", 200.0)  # already there
    assert not auto.relocate("nobody", "fast", 200.0)
    auto.arrive(_job("b", only="slow"), now=200.0)
    assert not auto.relocate("b", "fast", 200.0)  # no section there (and not running)
