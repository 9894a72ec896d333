"""What measured steps teach a class of jobs (bellows.scaling.placement_memory) and a core
that learns from them (``Autoscaler.observe_step``, issue 36)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.jobs import JobSpec, SpecError, StepProfile
from bellows.scaling import default_cluster, step_time
from bellows.scaling import placement_memory as memory_module
from bellows.scaling.placement_memory import ObservedStep, PlacementMemory
from bellows.sim import run
from bellows.sim.workloads.traces import TraceJob

CLUSTER = default_cluster()
PROFILE = StepProfile((8, 32, 64, 128), (0.02, 0.05, 0.09, 0.17))


def _job(name: str, *, profile: StepProfile = PROFILE, work: float = 1e7) -> JobSpec:
    return JobSpec(
        name=name, b_min=16, b_max=1024, batch_size=64, k_max=8, m_max=128,
        weights=11_173_962, work=work, profile=profile,
    )  # fmt: skip


def _jsa(job: JobSpec, gpus: int, batch: int) -> float:
    return float(step_time(job, gpus, batch, CLUSTER, nodes=math.ceil(gpus / 4)))


def test_a_step_on_the_fewest_nodes_teaches_its_class_at_that_count() -> None:
    memory = PlacementMemory(CLUSTER)
    a, b = _job("a"), _job("b")
    other = _job("c", profile=StepProfile((8, 32, 64, 128), (0.03, 0.06, 0.1, 0.2)))
    assert memory(b, 8, 256) is None  # nothing known: the JSA's rows stay as they are
    assert memory.observe(a, ObservedStep(8, 256, 3 * _jsa(a, 8, 256), nodes=2))
    assert memory.version(b) == 1
    assert memory(b, 8, 256) == pytest.approx(3 * _jsa(b, 8, 256))
    assert memory(b, 8, 512) == pytest.approx(3 * _jsa(b, 8, 512))  # nearest batch seen
    assert memory(b, 4, 256) == pytest.approx(_jsa(b, 4, 256))  # a count never seen
    assert memory(other, 8, 256) is None
    assert memory.version(other) == 0


@pytest.mark.parametrize(
    "step",
    [
        ObservedStep(8, 256, 10.0, nodes=3),  # spread over more nodes: another placement
        ObservedStep(8, 256, math.nan),
        ObservedStep(8, 256, 0.0),
    ],
)
def test_what_does_not_speak_for_the_fewest_nodes_teaches_nothing(step: ObservedStep) -> None:
    memory = PlacementMemory(CLUSTER)
    assert not memory.observe(_job("a"), step)
    assert memory.version(_job("a")) == 0


def test_a_step_within_tolerance_of_what_is_known_changes_nothing() -> None:
    memory = PlacementMemory(CLUSTER)
    a = _job("a")
    assert not memory.observe(a, ObservedStep(8, 256, 1.03 * _jsa(a, 8, 256)))  # as the JSA
    assert memory.observe(a, ObservedStep(8, 256, 2 * _jsa(a, 8, 256)))
    assert not memory.observe(a, ObservedStep(8, 256, 2.05 * _jsa(a, 8, 256)))
    assert memory.observe(a, ObservedStep(8, 256, 1.5 * _jsa(a, 8, 256)))
    assert memory.version(a) == 2


def test_the_memory_is_bounded_and_a_copy_is_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_module, "MAX_POINTS", 2)
    memory = PlacementMemory(CLUSTER)
    a = _job("a")
    assert memory.observe(a, ObservedStep(8, 256, 2 * _jsa(a, 8, 256)))
    twin = memory.copy()
    assert memory.observe(a, ObservedStep(6, 192, 2 * _jsa(a, 6, 192)))
    assert not memory.observe(a, ObservedStep(5, 160, 2 * _jsa(a, 5, 160)))  # full
    assert memory.observe(a, ObservedStep(8, 256, 3 * _jsa(a, 8, 256)))  # a kept point moves
    assert twin(a, 6, 192) == pytest.approx(_jsa(a, 6, 192))
    assert twin(a, 8, 256) == pytest.approx(2 * _jsa(a, 8, 256))


def test_a_core_learns_for_a_job_what_another_of_its_class_measured() -> None:
    """Job ``a`` runs on 8 GPUs over two nodes and reports 3x the JSA's step time: the waiting
    job ``b`` of the same class is valued by it (its 8-GPU value falls), a fork's lesson
    stays in the fork, and a core without a memory ignores the report."""
    config = AutoscalerConfig(queue=True, delta_s=60.0)
    core = Autoscaler(config, capacity=8, cluster=CLUSTER, measured=PlacementMemory(CLUSTER))
    core.arrive(_job("a", work=1e9), 0.0)
    core.step(0.0)
    held = core.allocations["a"]
    assert held.gpus > 4  # the JSA gives it both nodes
    core.arrive(_job("b"), 1.0)
    before = core._s.rows["b"].values.copy()
    seconds = 3 * _jsa(_job("a"), held.gpus, held.batch)
    twin = core.fork()
    assert twin.observe_step("a", 2.0, ObservedStep(held.gpus, held.batch, seconds, nodes=2))
    assert np.array_equal(core._s.rows["b"].values, before)
    assert core.observe_step("a", 2.0, ObservedStep(held.gpus, held.batch, seconds, nodes=2))
    after = core._s.rows["b"].values
    assert after[held.gpus] < before[held.gpus] / 2
    assert np.array_equal(after[:5], before[:5])  # one node: as before
    plain = Autoscaler(config, capacity=8, cluster=CLUSTER)
    plain.arrive(_job("a"), 0.0)
    assert not plain.observe_step("a", 1.0, ObservedStep(8, 256, seconds))


def test_the_simulator_learns_placements_only_from_reports() -> None:
    with pytest.raises(SpecError, match="learn_placements"):
        run([TraceJob(0.0, _job("a"), "x")], gpus=8, config=AutoscalerConfig(),
            cluster=CLUSTER, learn_placements=True)  # fmt: skip


def test_a_job_refitted_online_stays_in_the_class_it_arrived_in() -> None:
    """The memory keeps measured times, not ratios to a JSA: a job whose profile the online
    refit changed is still valued by its class's measurement, moved to another batch by
    its own (refitted) JSA."""
    memory = PlacementMemory(CLUSTER)
    a, b = _job("a"), _job("b")
    assert memory.version(b) == 0  # b seen first with its arrival profile
    assert memory.observe(a, ObservedStep(8, 256, 3 * _jsa(a, 8, 256), nodes=2))
    refit = _job("b", profile=StepProfile((8, 32, 64, 128), (0.01, 0.03, 0.05, 0.09)))
    assert memory(refit, 8, 256) == pytest.approx(3 * _jsa(a, 8, 256))
    moved = 3 * _jsa(a, 8, 256) * _jsa(refit, 8, 512) / _jsa(refit, 8, 256)
    assert memory(refit, 8, 512) == pytest.approx(moved)
    stranger = _job("z", profile=refit.profile)  # arrived with that profile: another class
    assert memory(stranger, 8, 256) is None
