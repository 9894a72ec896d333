"""Counts that would straddle nodes pay for it (issue 29, item 5): rooms, the joint placement
a round's starts and moves get, and the core pricing a fragmenting count at its step time."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bellows.autoscaler import Autoscaler, AutoscalerConfig, straddle
from bellows.autoscaler.decisions import Start
from bellows.autoscaler.straddle import FreeNodes
from bellows.jobs import JobSpec, SpecError
from bellows.scaling import default_cluster, step_time
from bellows.sim import run
from bellows.sim.workloads.traces import TraceJob
from tests.strategies import make_job

CLUSTER = default_cluster()  # nodes of 4


def _talky(name: str, k_max: int = 4) -> JobSpec:
    """A job whose Allreduce dominates across nodes: on two nodes it loses most of its gain."""
    return make_job(name, k_max=k_max, b_max=512, m_max=128, weights=200_000_000, work=1e9)


def test_rooms_count_a_jobs_own_gpus_on_its_node() -> None:
    nodes = FreeNodes(free=(1, 2, 0), held={"a": ((0, 2),), "b": ((1, 1), (2, 3))})
    assert straddle.rooms(nodes, ["a", "b", "new"], 4).tolist() == [3, 3, 2]
    # beyond a node, the room is all the whole free nodes (its own GPUs counted free)
    wide = FreeNodes(free=(4, 4, 3, 0), held={"c": ((2, 1), (3, 2))})
    assert straddle.rooms(wide, ["c", "new"], 4).tolist() == [12, 8]
    with pytest.raises(SpecError, match="free"):
        FreeNodes(free=(1, -1))
    with pytest.raises(SpecError, match="held"):
        FreeNodes(free=(1,), held={"a": ((3, 1),)})


def test_the_joint_placement_goes_largest_first_and_releases_movers_first() -> None:
    # a job of 4 and one of 2 on free (2, 2, 1) plus the 2 the mover "m" holds on node 2:
    # released first, node 2 has 3 free; the 4 goes first and straddles (3 there, 1 on a
    # node of 2), so the 2 finds a node of 2 left
    nodes = FreeNodes(free=(2, 2, 1), held={"m": ((2, 2),)})
    assert straddle.placed_rooms(nodes, {"m": 2, "new": 4}, 4) == {"new": 3, "m": 2}
    # alone, the mover goes back on its own node
    assert straddle.placed_rooms(nodes, {"m": 3}, 4) == {"m": 3}
    # two jobs of 4 on (4, 2, 2): each fits alone, together the second straddles
    assert straddle.placed_rooms(FreeNodes(free=(4, 2, 2)), {"x": 4, "y": 4}, 4) == {"x": 4, "y": 2}


def test_reprice_scales_only_the_counts_above_the_room_up_to_a_node() -> None:
    values = np.array([[-np.inf, 1.0, 1.8, 2.5, 3.0, 3.6]] * 4)
    half, most = np.array([1.0, 1.0, 0.5, 0.5, 0.5]), np.array([1.0, 1.0, 0.9, 0.9, 0.9])
    values[3, 1:3] = -np.inf  # no count within its room: only straddling
    changed = straddle.reprice(
        values, np.array([2, 1, 2, 2]), [half, half, most, most], np.array([-1, 2, -1, -1])
    )
    assert changed.tolist() == [0, 1, 2, 3]
    assert values[0].tolist() == [-np.inf, 1.0, 1.8, 1.25, 1.5, 3.6]  # 5 spans 2 nodes anyway
    assert values[1].tolist() == [-np.inf, 1.0, 1.8, 1.25, 1.5, 3.6]  # its current 2 is kept
    # 2.25 and 2.7 straddled, but the GPUs past its room's 2 add nothing: capped at 1.8
    assert values[2].tolist() == [-np.inf, 1.0, 1.8, 1.8, 1.8, 3.6]
    assert values[3].tolist() == [-np.inf, -np.inf, -np.inf, 2.25, 2.7, 3.6]


def test_counts_beyond_a_node_sit_on_whole_free_nodes_only() -> None:
    values = np.tile(np.arange(13, dtype=np.float64), (3, 1))
    values[:, 0] = -np.inf
    changed = straddle.whole_nodes(values, 4, np.array([-1, 6, -1]), np.array([12, 12, 4]))
    assert changed == {0, 1, 2}
    allowed = [np.flatnonzero(np.isfinite(row)).tolist() for row in values]
    assert allowed[0] == [1, 2, 3, 4, 8, 12]  # 6, 7, 9, ... leave a node partly held
    assert allowed[1] == [1, 2, 3, 4, 6, 8, 12]  # but not its current count
    assert allowed[2] == [1, 2, 3, 4]  # only one whole node free: 8 would straddle
    only = np.array([[-np.inf] * 6 + [1.0]])  # a row with no other count is left whole
    assert straddle.whole_nodes(only, 4, np.array([-1]), np.array([12])) == set()


def test_straddle_ratios_are_the_jsas_step_times() -> None:
    job = _talky("t")
    batch = (0, 128, 256, 384, 512)
    ratio = straddle.straddle_ratios(job, batch, CLUSTER)
    assert ratio[:2].tolist() == [1.0, 1.0]
    for k in (2, 3, 4):
        one = step_time(job, k, batch[k], CLUSTER, nodes=1)
        assert ratio[k] == pytest.approx(one / step_time(job, k, batch[k], CLUSTER, nodes=2))
        assert ratio[k] < 0.6


def _start(nodes: FreeNodes | None, *, mode: str = "bellows", jobs: int = 1) -> dict[str, int]:
    config = AutoscalerConfig() if mode == "bellows" else AutoscalerConfig.paper(queue=True)
    auto = Autoscaler(config, capacity=sum(nodes.free) if nodes else 2, cluster=CLUSTER)
    for i in range(jobs):
        auto.arrive(_talky(f"j{i}"), 0.0)
    auto.see_nodes(nodes)
    decisions = auto.step(0.0)
    return {d.job: d.gpus for d in decisions if isinstance(d, Start)}


def test_a_count_that_only_fragments_is_not_taken_for_free() -> None:
    # two free GPUs on one node: the job takes both; one free on each of two nodes: 2 GPUs
    # would straddle and run slower than 1 does, so it takes 1
    assert _start(FreeNodes(free=(2, 0))) == {"j0": 2}
    assert _start(FreeNodes(free=(1, 1))) == {"j0": 1}
    assert _start(None) == {"j0": 2}  # nothing seen: every count priced on the fewest nodes
    # paper mode keeps the paper's model (no nodes)
    assert _start(FreeNodes(free=(1, 1)), mode="paper") == {"j0": 2}


def test_a_round_solves_again_when_its_joint_placement_would_straddle() -> None:
    # two jobs on free (4, 2, 2): each alone has room for 4, but together the second would
    # straddle; priced so, it takes the 2 a node has (the other 2 stay free: on two nodes
    # its 4 would run slower than its 2); a third job takes them
    got = _start(FreeNodes(free=(4, 2, 2)), jobs=2)
    assert sorted(got.values()) == [2, 4]
    got = _start(FreeNodes(free=(4, 2, 2)), jobs=3)
    assert sorted(got.values()) == [2, 2, 4]


def test_the_simulator_shows_the_core_where_gpus_sit(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[FreeNodes | None] = []
    monkeypatch.setattr(Autoscaler, "see_nodes", lambda self, nodes: seen.append(nodes))
    rigid = {"elastic": False, "k_max": 4, "work": 3e5, "b_min": 96, "b_max": 96}
    trace = [TraceJob(0.0, make_job("a", gpus=3, batch_size=96, **rigid)),
             TraceJob(5.0, make_job("b", gpus=3, batch_size=96, **rigid))]  # fmt: skip
    config = AutoscalerConfig(queue=True, restart_s=0.0)
    run(trace, gpus=8, config=config, cluster=CLUSTER, nodes=True)
    assert seen[0] == FreeNodes(free=(4, 4))
    assert FreeNodes(free=(1, 4), held={"a": ((0, 3),)}) in seen  # before b's fill
    seen.clear()
    run(trace, gpus=8, config=config, cluster=CLUSTER, nodes=False)
    assert seen == []  # without nodes nothing is shown: every output as before


def test_a_straddled_job_moves_onto_a_freed_node_when_that_pays() -> None:
    # rigid a and b of 3 GPUs on two nodes of 4, then c of 2 straddles the two holes; when a
    # finishes, c moves onto its node if the time it gains pays c's restart
    rigid = {"elastic": False, "k_max": 4, "b_min": 96, "b_max": 96, "batch_size": 96}
    trace = [TraceJob(0.0, make_job("a", gpus=3, work=3e5, **rigid)),
             TraceJob(0.0, make_job("b", gpus=3, work=6e5, **rigid)),
             TraceJob(1.0, make_job("c", gpus=2, work=6e5, **rigid))]  # fmt: skip
    for restart_s, spread in ((0.0, [1, 0]), (3000.0, [1])):
        config = AutoscalerConfig(queue=True, restart_s=restart_s, early_share=0.2, early_gap_s=0)
        result = run(trace, gpus=8, config=config, cluster=CLUSTER, nodes=True)
        c = next(j for j in result.jobs if j.name == "c")
        assert [s.extra_nodes for s in c.segments] == spread
        assert c.rescales == len(spread) - 1
        if restart_s == 0.0:
            a = next(j for j in result.jobs if j.name == "a")
            # nothing waits, so no fill: a is a third of the running jobs, so its end starts
            # the early round (early_share 0.2), which moves c at once
            assert a.finish_s is not None
            assert c.segments[1].start_s == a.finish_s
            assert c.segments[0].gpus == c.segments[1].gpus == 2
    # without the early round, the next round on the grid (every 120 s) moves it
    config = AutoscalerConfig(queue=True, restart_s=0.0, early_share=0)
    result = run(trace, gpus=8, config=config, cluster=CLUSTER, nodes=True)
    a, c = (next(j for j in result.jobs if j.name == n) for n in "ac")
    assert [s.extra_nodes for s in c.segments] == [1, 0]
    assert a.finish_s is not None
    assert a.finish_s < c.segments[1].start_s == 120.0 * math.ceil(a.finish_s / 120.0)


def test_migrations_go_best_first_and_never_squeeze_a_job_that_fits() -> None:
    # one whole node free: s1 and s2 straddle (2 each over nodes 1-2, 3-4); only the first
    # listed goes onto node 0; a start of 4 that takes node 0 leaves room for neither
    nodes = FreeNodes(free=(4, 0, 0, 0, 0), held={"s1": ((1, 1), (2, 1)), "s2": ((3, 1), (4, 1))})
    assert straddle.migrations(nodes, {}, [("s2", 2), ("s1", 2)], 4) == ["s2", "s1"]  # 2 + 2 fit
    assert straddle.migrations(nodes, {"new": 3}, [("s1", 2), ("s2", 2)], 4) == []
    assert straddle.migrations(nodes, {"new": 2}, [("s1", 2), ("s2", 2)], 4) == ["s1"]


def test_a_fill_moves_a_straddled_job_too() -> None:
    # as above, with d waiting for one GPU: a's end makes a fill, which starts d and moves c
    # at once (a fill takes no GPUs from a running job; c keeps its 2)
    rigid = {"elastic": False, "k_max": 4, "b_min": 96, "b_max": 96, "batch_size": 96}
    trace = [TraceJob(0.0, make_job("a", gpus=3, work=3e5, **rigid)),
             TraceJob(0.0, make_job("b", gpus=3, work=6e5, **rigid)),
             TraceJob(1.0, make_job("c", gpus=2, work=6e5, **rigid)),
             TraceJob(2.0, make_job("d", gpus=1, work=1e5, b_min=32, b_max=32, batch_size=32,
                                    elastic=False, k_max=4))]  # fmt: skip
    result = run(trace, gpus=8, config=AutoscalerConfig(queue=True, restart_s=0.0),
                 cluster=CLUSTER, nodes=True)  # fmt: skip
    jobs = {j.name: j for j in result.jobs}
    assert jobs["d"].start_s == jobs["a"].finish_s == jobs["c"].segments[1].start_s
    assert [s.extra_nodes for s in jobs["c"].segments] == [1, 0]
