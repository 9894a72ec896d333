"""A typed cluster as one pool of equal virtual nodes, and where a type-blind policy's job
runs on it (bellows.sim.blind, issue 39: the type-blind Pollux reference)."""

from __future__ import annotations

import pytest

from bellows.jobs import JobSpec, SpecError, StepProfile, TypeSection
from bellows.scaling import default_cluster
from bellows.scaling.gpu_types import GpuType, TypedCluster, sia_mix
from bellows.scaling.profiles import ClusterProfile
from bellows.sim.blind import VirtualNodes, blind_run


def _cluster(per_node: int) -> ClusterProfile:
    return ClusterProfile(
        default_cluster().intra_node, default_cluster().inter_node, gpus_per_node=per_node
    )


def test_sia_mix_is_sixteen_virtual_nodes_of_four_in_the_clusters_order() -> None:
    virtual = VirtualNodes.of(sia_mix())
    assert virtual.size == 4
    assert virtual.gpus == 64
    assert virtual.owner[:6] == tuple(("t4", n) for n in range(6))
    assert virtual.owner[6:10] == (("a100", 0), ("a100", 0), ("a100", 1), ("a100", 1))
    assert virtual.owner[10:] == tuple(("rtx2080ti", n // 2) for n in range(6))


def test_nodes_that_no_equal_cut_splits_are_refused_by_name() -> None:
    odd = TypedCluster((GpuType("a", 2, _cluster(4)), GpuType("b", 1, _cluster(6))))
    with pytest.raises(SpecError) as err:
        VirtualNodes.of(odd)
    assert err.value.field == "types[b].gpus_per_node"
    assert "multiple of the smallest node's 4 GPUs" in str(err.value)


def _job(m_max: dict[str, int]) -> JobSpec:
    step = StepProfile((8, 64), (0.1, 0.5))
    sections = tuple(TypeSection(t, step, 1_000_000, m) for t, m in m_max.items())
    return JobSpec("j", 8, 512, 64, 16, 64, 1_000_000, 1e6, step, types=sections)


def test_a_job_runs_on_the_type_it_holds_most_gpus_of_on_those_gpus_only() -> None:
    mix = sia_mix()
    virtual = VirtualNodes.of(mix)
    job = _job({"t4": 64, "a100": 64, "rtx2080ti": 64})
    # 4 T4 GPUs on node 5, 8 A100 GPUs on one node (virtual nodes 6 and 7)
    run = blind_run(job, ((5, 4), (6, 4), (7, 4)), 512, virtual, mix)
    assert (run.gpu_type, run.gpus, run.nodes) == ("a100", 8, 1)
    assert run.batch == 512
    assert run.spec.m_max == 64
    # a tie goes to the type first in the cluster's order; the batch is held to the GPUs
    run = blind_run(job, ((5, 4), (6, 4)), 512, virtual, mix)
    assert (run.gpu_type, run.gpus, run.batch) == ("t4", 4, 256)


def test_a_job_its_primary_type_cannot_hold_runs_on_the_next() -> None:
    mix = sia_mix()
    virtual = VirtualNodes.of(mix)
    small = _job({"t4": 1, "a100": 64, "rtx2080ti": 64})  # 8 at least: not on 4 T4s of 1 each
    run = blind_run(small, ((0, 4), (6, 2)), 64, virtual, mix)
    assert (run.gpu_type, run.gpus, run.nodes, run.batch) == ("a100", 2, 1, 64)
    with pytest.raises(SpecError) as err:
        blind_run(small, ((0, 4),), 64, virtual, mix)
    assert "a GPU type that holds the job" in str(err.value)
