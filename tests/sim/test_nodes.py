"""The simulated cluster's nodes: placements on the fewest nodes the free GPUs allow, GPUs
conserved through releases and capacity changes, and the simulator charging placements."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bellows.autoscaler import AutoscalerConfig
from bellows.jobs import SpecError
from bellows.scaling import default_cluster, step_time, throughput
from bellows.sim import run
from bellows.sim.nodes import Nodes, Placement
from bellows.sim.workloads.traces import TraceJob
from tests.strategies import make_job

CLUSTER = default_cluster()


def _fewest_possible(free: list[int], gpus: int) -> int:
    """The fewest nodes whose free GPUs add up to ``gpus``: the ``n`` emptiest nodes hold the
    most any ``n`` nodes can (a brute force over combinations blew up on 40 nodes of 1)."""
    for n, held in enumerate(itertools.accumulate(sorted(free, reverse=True)), start=1):
        if held >= gpus:
            return n
    raise AssertionError("does not fit")


def _check(nodes: Nodes, held: list[Placement]) -> None:
    used = [0] * len(nodes.size)
    for placement in held:
        for node, gpus in placement:
            used[node] += gpus
    assert all(0 <= f == s - u for f, s, u in zip(nodes.free, nodes.size, used, strict=True))
    for f, bucket in enumerate(nodes.buckets):
        assert all(nodes.free[n] == f for n in bucket)
    assert sum(len(b) for b in nodes.buckets) == len(nodes.size)


@settings(max_examples=150, deadline=None)
@given(
    per_node=st.sampled_from([1, 2, 4, 8]),
    capacity=st.integers(0, 40),
    ops=st.lists(st.tuples(st.sampled_from(["place", "release", "resize"]), st.integers(0, 40))),
)
def test_placements_use_the_fewest_nodes_and_conserve_gpus(
    per_node: int, capacity: int, ops: list[tuple[str, int]]
) -> None:
    nodes = Nodes(capacity, per_node)
    held: list[Placement] = []
    for op, n in ops:
        free = sum(nodes.free)
        if op == "place" and free:
            gpus = 1 + n % free
            before = list(nodes.free)
            placement = nodes.place(gpus)
            assert sum(g for _, g in placement) == gpus
            assert len(placement) == _fewest_possible(before, gpus)
            held.append(placement)
        elif op == "release" and held:
            nodes.release(held.pop(n % len(held)))
        elif op == "resize":
            nodes.resize(n)
            assert nodes.capacity == n
        in_use = sum(g for p in held for _, g in p)
        assert sum(nodes.free) == max(nodes.capacity - in_use, 0)
        _check(nodes, held)


def test_best_fit_keeps_whole_nodes_whole() -> None:
    nodes = Nodes(8, 4)
    assert nodes.place(3) == ((0, 3),)
    assert nodes.place(1) == ((0, 1),)  # the hole, not a fresh node
    assert nodes.place(4) == ((1, 4),)
    with pytest.raises(SpecError, match="gpus"):
        nodes.place(1)


def test_fragmented_free_gpus_spread_a_job() -> None:
    nodes = Nodes(8, 4)
    a, b = nodes.place(3), nodes.place(3)
    assert (a, b) == (((0, 3),), ((1, 3),))
    assert nodes.place(2) == ((0, 1), (1, 1))  # only two holes of one left


def test_a_capacity_drop_takes_free_gpus_then_owes_the_rest() -> None:
    nodes = Nodes(8, 4)
    job = nodes.place(4)
    nodes.resize(2)  # 4 free taken, 2 owed by the job still running
    assert nodes.capacity == 2
    assert nodes.owed == 2
    nodes.release(job)
    assert sum(nodes.free) == 2
    assert nodes.owed == 0
    nodes.resize(8)
    assert sorted(nodes.free) == [4, 4]


def _trace() -> list[TraceJob]:
    # three rigid jobs of 3 GPUs then one of 2 on two nodes of 4: the 2 must straddle
    rigid = {"elastic": False, "k_max": 4, "work": 3e5}
    return [
        TraceJob(0.0, make_job("a", gpus=3, batch_size=96, b_min=96, b_max=96, **rigid)),
        TraceJob(0.0, make_job("b", gpus=3, batch_size=96, b_min=96, b_max=96, **rigid)),
        TraceJob(1.0, make_job("c", gpus=2, batch_size=64, b_min=64, b_max=64, **rigid)),
    ]


def _short_c() -> list[TraceJob]:
    # c done before a or b frees a node: it never has one to move to (tests/autoscaler/
    # test_straddle.py moves it when it does)
    a, b, c = _trace()
    return [a, b, TraceJob(c.arrival_s, dataclasses.replace(c.spec, work=1e5))]


def test_the_simulator_charges_the_placement_it_got() -> None:
    trace = _short_c()
    config = AutoscalerConfig(queue=True, restart_s=0.0, node_counts=False)
    placed = run(trace, gpus=8, config=config, cluster=CLUSTER, nodes=True)
    fewest = run(trace, gpus=8, config=config, cluster=CLUSTER, nodes=False)
    c = next(j for j in placed.jobs if j.name == "c")
    assert [s.extra_nodes for s in c.segments] == [1]
    spec = trace[2].spec
    assert step_time(spec, 2, 64, CLUSTER, nodes=2) > step_time(spec, 2, 64, CLUSTER)
    length = c.finish_s - c.start_s  # type: ignore[operator]
    assert length == pytest.approx(spec.work / throughput(spec, 2, 64, CLUSTER, nodes=2))
    c_fewest = next(j for j in fewest.jobs if j.name == "c")
    assert c_fewest.finish_s < c.finish_s  # type: ignore[operator]
    share = placed.summary()["spread_job_time_share"]
    held = sum(s.end_s - s.start_s for j in placed.jobs for s in j.segments)
    assert share == pytest.approx(length / held, abs=1e-6)
    assert "spread_job_time_share" not in fewest.summary()
