"""The simulator against invariants and queueing theory, driving the real autoscaler core."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Mode, Policy
from bellows.scaling import default_cluster, throughput
from bellows.sim import CapacityChange, SimResult, run
from bellows.sim.workloads.generating import WorkloadSpec, generate
from bellows.sim.workloads.traces import TraceJob
from tests.strategies import make_job

CLUSTER = default_cluster()


Scenario = tuple[list[TraceJob], int, AutoscalerConfig, list[CapacityChange]]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    capacity = draw(st.integers(1, 12))
    jobs = []
    for i in range(draw(st.integers(1, 8))):
        rigid = draw(st.booleans())
        k_max = draw(st.integers(1, 8))
        if rigid:
            gpus = draw(st.integers(1, min(k_max, capacity)))
            spec = make_job(
                f"j{i}",
                elastic=False,
                gpus=gpus,
                k_max=k_max,
                batch_size=32 * gpus,
                b_min=32 * gpus,
                b_max=32 * gpus,
                work=draw(st.floats(1e3, 1e6)),
            )
        else:
            spec = make_job(
                f"j{i}",
                k_max=k_max,
                batch_size=draw(st.integers(32, 128)),
                work=draw(st.floats(1e3, 1e6)),
            )
        jobs.append(TraceJob(float(draw(st.integers(0, 3000))), spec))
    config = AutoscalerConfig(
        mode=draw(st.sampled_from(list(Mode))),
        policy=draw(st.sampled_from(list(Policy))),
        queue=draw(st.booleans()),
        delta_s=draw(st.sampled_from([0.0, 300.0, 600.0])),
        early_share=draw(st.sampled_from([None, 0.5])),
        restart_s=draw(st.sampled_from([0.0, 20.0])),
        backfill=draw(st.booleans()),
    )
    # the capacity may dip for a while, and is whole again before the last arrival + 1 h
    changes = []
    if draw(st.booleans()):
        at = float(draw(st.integers(0, 3000)))
        dip = draw(st.integers(0, capacity))
        changes = [
            CapacityChange(at, dip),
            CapacityChange(at + draw(st.integers(1, 600)), capacity),
        ]
    return jobs, capacity, config, changes


def _held_at_most(spans: list[tuple[float, float, int]], capacity: list[tuple[float, int]]) -> None:
    """GPUs held never exceed the capacity at any instant (releases before claims)."""
    changes = sorted(
        [(s, 2, g) for s, _, g in spans] + [(e, 0, -g) for _, e, g in spans]
        + [(t, 1, c) for t, c in capacity]
    )  # fmt: skip
    held, cap = 0, 0
    for t, kind, value in changes:
        if kind == 1:
            cap = value
        else:
            held += value
        assert held <= cap, f"t={t}: {held} GPUs held on a cluster of {cap}"


def _check_invariants(
    trace: list[TraceJob],
    capacity: int,
    config: AutoscalerConfig,
    result: SimResult,
    changes: list[CapacityChange] = (),  # type: ignore[assignment]
) -> None:
    spans = []
    for job, record in zip(trace, result.jobs, strict=True):
        assert record.name == job.spec.name
        # finished xor dropped (every job here fits the cluster on its own)
        assert (record.finish_s is not None) != record.rejected
        if record.rejected:
            assert not config.queue
            assert not record.segments
            continue
        assert record.start_s is not None
        assert record.start_s >= job.arrival_s
        done = 0.0
        for i, seg in enumerate(record.segments):
            assert seg.start_s >= job.arrival_s
            assert seg.end_s >= seg.start_s
            # every segment after the first began with a restart (a rescale or a resume)
            pause = min(config.restart_s, seg.end_s - seg.start_s) if i else 0.0
            spread = CLUSTER.nodes(seg.gpus) + seg.extra_nodes  # the placement it got
            done += throughput(job.spec, seg.gpus, seg.batch, CLUSTER, nodes=spread) * (
                seg.end_s - seg.start_s - pause
            )
            spans.append((seg.start_s, seg.end_s, seg.gpus))
        assert done == pytest.approx(job.spec.work, rel=1e-9)
        assert record.rescales + record.preemptions == len(record.segments) - 1
    _held_at_most(spans, [(0.0, capacity)] + [(c.at_s, c.gpus) for c in changes])
    assert result.summary()["pure_swaps"] == 0


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_hold(scenario: Scenario) -> None:
    trace, capacity, config, changes = scenario
    result = run(trace, gpus=capacity, config=config, cluster=CLUSTER, capacity_changes=changes)
    _check_invariants(trace, capacity, config, result, changes)
    again = run(trace, gpus=capacity, config=config, cluster=CLUSTER, capacity_changes=changes)
    assert again.jobs == result.jobs  # deterministic


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.booleans())
def test_invariants_hold_on_nodes(scenario: Scenario, node_counts: bool) -> None:
    # issue 29 (opt in): jobs placed on nodes, each charged the step time of its placement
    trace, capacity, config, changes = scenario
    config = dataclasses.replace(config, node_counts=node_counts)
    result = run(
        trace, gpus=capacity, config=config, cluster=CLUSTER, capacity_changes=changes,
        nodes=True,
    )  # fmt: skip
    _check_invariants(trace, capacity, config, result, changes)
    assert 0.0 <= result.summary()["spread_job_time_share"] <= 1.0


def test_rounds_fall_on_the_delta_grid_and_rejects_wait_for_them() -> None:
    trace = [
        TraceJob(10.0, make_job("a", elastic=False, gpus=2, batch_size=64, b_min=64, b_max=64)),
        TraceJob(20.0, make_job("b", elastic=False, gpus=2, batch_size=64, b_min=64, b_max=64)),
    ]
    result = run(trace, gpus=2, config=AutoscalerConfig.paper(delta_s=600.0), cluster=CLUSTER)
    a, b = result.jobs
    assert a.start_s == 600.0
    assert b.rejected
    assert b.start_s is None


def _erlang_c_wait(c: int, lam: float, mu: float) -> float:
    a = lam / mu
    top = a**c / math.factorial(c) * c / (c - a)
    p_wait = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
    return p_wait / (c * mu - lam)


def _rigid_poisson(n: int, lam: float, mu: float, seed: int) -> list[TraceJob]:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / lam, n))
    probe = make_job("p", elastic=False, gpus=1, batch_size=64, b_min=64, b_max=64)
    rate = throughput(probe, 1, 64, CLUSTER)
    return [
        TraceJob(
            float(t),
            make_job(
                f"r{i}",
                elastic=False,
                gpus=1,
                batch_size=64,
                b_min=64,
                b_max=64,
                work=float(rng.exponential(1 / mu)) * rate,
            ),
        )
        for i, t in enumerate(arrivals)
    ]


def test_all_rigid_queue_matches_erlang_c() -> None:
    # M/M/c: rigid 1-GPU jobs, Poisson arrivals, exponential lengths, FIFO queue, a round at
    # every event. The mean wait must match Erlang C (within sampling error).
    c, lam, mu = 3, 1 / 60.0, 1 / 120.0  # load a = 2 of 3 servers
    trace = _rigid_poisson(3000, lam, mu, seed=11)
    config = AutoscalerConfig.paper(queue=True, delta_s=0.0)
    result = run(trace, gpus=c, config=config, cluster=CLUSTER)
    waits = [r.queue_s for r in result.jobs if r.queue_s is not None]
    assert len(waits) == len(trace)
    assert np.mean(waits) == pytest.approx(_erlang_c_wait(c, lam, mu), rel=0.2)


def test_all_rigid_with_room_for_all_never_waits() -> None:
    trace = _rigid_poisson(60, 1 / 60.0, 1 / 600.0, seed=2)
    result = run(
        trace, gpus=60, config=AutoscalerConfig.paper(queue=True, delta_s=0.0), cluster=CLUSTER
    )
    assert all(r.queue_s == 0.0 for r in result.jobs)


def test_capacity_loss_preempts_and_the_job_still_completes_its_work() -> None:
    job = make_job("a", elastic=False, gpus=4, batch_size=128, b_min=128, b_max=128, k_max=4)
    config = AutoscalerConfig.paper(queue=True, delta_s=0.0)
    result = run(
        [TraceJob(0.0, job)],
        gpus=4,
        config=config,
        cluster=CLUSTER,
        capacity_changes=[CapacityChange(100.0, 2), CapacityChange(500.0, 4)],
    )
    (record,) = result.jobs
    assert record.preemptions == 1
    assert [(s.start_s, s.end_s) for s in record.segments][:1] == [(0.0, 100.0)]
    assert record.segments[1].start_s == 500.0
    done = sum(
        throughput(job, s.gpus, s.batch, CLUSTER) * (s.end_s - s.start_s) for s in record.segments
    )
    assert done == pytest.approx(job.work)


def test_simulated_allocations_match_the_core() -> None:
    # drive a core by hand beside the simulator: the first round's starts agree
    trace = [TraceJob(0.0, make_job(f"j{i}")) for i in range(3)]
    auto = Autoscaler(AutoscalerConfig.paper(delta_s=0.0), capacity=8, cluster=CLUSTER)
    for j in trace:
        auto.arrive(j.spec, 0.0)
    auto.step(0.0)
    result = run(trace, gpus=8, config=AutoscalerConfig.paper(delta_s=0.0), cluster=CLUSTER)
    first = {r.name: (r.segments[0].gpus, r.segments[0].batch) for r in result.jobs}
    assert first == {n: (a.gpus, a.batch) for n, a in auto.allocations.items()}


def test_the_reviews_swap_scenario_has_no_pure_swap_left() -> None:
    # 240 min of category-1 bursty arrivals on 40 GPUs (60 min period), queue on: the review
    # found 10 of 115 rescales to be pure swaps of same-template jobs (float-noise ties).
    spec = WorkloadSpec(pattern="bursty", minutes=240, categories=(1,), gpus=40, period_min=60)
    trace = generate(spec, np.random.default_rng(1), cluster=CLUSTER)
    for config in (AutoscalerConfig.paper(queue=True), AutoscalerConfig()):
        summary = run(trace, gpus=40, config=config, cluster=CLUSTER).summary()
        assert summary["rescales"] > 0
        assert summary["pure_swaps"] == 0, summary["mode"]


def test_the_hybrid_trigger_starts_the_waiting_job_at_the_completion_that_fires_it() -> None:
    rigid = {"elastic": False, "gpus": 2, "batch_size": 64, "b_min": 64, "b_max": 64}
    trace = [TraceJob(0.0, make_job(f"r{i}", **rigid, work=w)) for i, w in enumerate((1, 2, 9, 9))]
    rate = throughput(trace[0].spec, 2, 64, CLUSTER)
    trace = [  # completions at 100 s and 200 s, the others much later
        TraceJob(0.0, dataclasses.replace(j.spec, work=rate * t))
        for j, t in zip(trace, (100.0, 200.0, 5000.0, 5000.0), strict=True)
    ] + [TraceJob(10.0, make_job("late", **rigid))]
    config = AutoscalerConfig.paper(queue=True, delta_s=600.0, early_share=0.5)
    result = run(trace, gpus=8, config=config, cluster=CLUSTER)
    late = result.jobs[-1]
    assert late.start_s == pytest.approx(200.0)
    _held_at_most(
        [(s.start_s, s.end_s, s.gpus) for r in result.jobs for s in r.segments], [(0.0, 8)]
    )
