"""Rows from measured step times (bellows.scaling.measured_rows) and a core that decides
with them (``Autoscaler(measured=...)``, issue 36)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.autoscaler.decisions import Start
from bellows.jobs import JobSpec, StepProfile
from bellows.scaling import MODEL_EFFICIENCY, default_cluster, step_time, tsf_tables
from bellows.scaling.measured_rows import StepTimes, measured_tables

CLUSTER = default_cluster()
PER_NODE = CLUSTER.gpus_per_node


def _job(name: str = "a", *, elastic: bool = True) -> JobSpec:
    return JobSpec(
        name=name, b_min=16, b_max=1024, batch_size=64, k_max=12, m_max=128,
        weights=11_173_962, work=1e7, elastic=elastic, gpus=1 if elastic else 4,
        profile=StepProfile((8, 32, 64, 128), (0.02, 0.05, 0.09, 0.17)),
    )  # fmt: skip


def _jsa(job: JobSpec, gpus: int, batch: int) -> float:
    """The JSA's own step time on the fewest nodes: a 'measurement' that agrees with it."""
    return float(step_time(job, gpus, batch, CLUSTER, nodes=math.ceil(gpus / PER_NODE)))


def _two_nodes_slow(job: JobSpec, gpus: int, batch: int) -> float:
    """The measured shape of bert, yolov3 and imagenet: two nodes 3x slower, others as the JSA."""
    return _jsa(job, gpus, batch) * (3.0 if math.ceil(gpus / PER_NODE) == 2 else 1.0)


@pytest.mark.parametrize("charged", [False, True])
def test_measurements_that_agree_with_the_jsa_give_its_rows(charged: bool) -> None:
    """Weighing a grid and the JSA's own choice, the measured row is the JSA's within the
    grid's resolution, and never below it."""
    job = _job()
    profiles = [MODEL_EFFICIENCY["cifar10"]] if charged else None
    plain = tsf_tables([job], CLUSTER, fixed_batch=False, efficiency=profiles, progress=[1e5])
    measured, x1s = measured_tables(plain, [job], _jsa, profiles, [1e5])
    assert x1s[0] is not None
    finite = np.isfinite(plain.values[0])
    assert np.array_equal(finite, np.isfinite(measured.values[0]))
    assert np.all(measured.values[0][finite] >= plain.values[0][finite] * (1 - 1e-9))
    assert measured.values[0][finite] == pytest.approx(plain.values[0][finite], rel=5e-3)


def test_a_job_the_source_does_not_know_keeps_the_jsa_row_bit_for_bit() -> None:
    jobs = [_job("a"), _job("b")]
    plain = tsf_tables(jobs, CLUSTER, fixed_batch=False)
    measured, x1s = measured_tables(
        plain, jobs, lambda job, k, b: _two_nodes_slow(job, k, b) if job.name == "a" else None
    )
    assert x1s[1] is None
    assert x1s[0] is not None
    for field in ("values", "batch", "throughput"):
        assert np.array_equal(getattr(measured, field)[1], getattr(plain, field)[1])
    assert measured.values[0][8] < plain.values[0][8] / 2  # 8 GPUs on two nodes, 3x slower


def test_an_unmeasured_count_is_not_offered_and_a_rigid_job_keeps_its_size() -> None:
    """NaN (outside what was measured) at every batch of a count: that count is -inf; a
    rigid job is weighed at its own GPUs and batch only."""
    job = _job()

    def holes(j: JobSpec, k: int, b: int) -> float:
        return math.nan if k == 3 else _jsa(j, k, b)

    measured, _ = measured_tables(tsf_tables([job], CLUSTER, fixed_batch=False), [job], holes)
    assert measured.values[0][3] == -np.inf
    assert measured.batch[0][3] == 0
    assert np.isfinite(measured.values[0][2])
    assert np.isfinite(measured.values[0][4])
    rigid = _job("r", elastic=False)
    table, _ = measured_tables(tsf_tables([rigid], CLUSTER, fixed_batch=False), [rigid], _jsa)
    finite = np.flatnonzero(np.isfinite(table.values[0]))
    assert finite.tolist() == [4]
    assert table.batch[0][4] == 64


def test_a_core_that_knows_two_nodes_are_slow_does_not_give_them() -> None:
    """Alone on 12 GPUs, the JSA's core gives the job a count over two nodes; told that two
    nodes measure 3x slower, it takes one node or three instead."""
    config = AutoscalerConfig(queue=True, delta_s=60.0)

    def first_start(measured: StepTimes | None) -> Start:
        auto = Autoscaler(config, capacity=12, cluster=CLUSTER, measured=measured)
        job = JobSpec(
            name="a", b_min=16, b_max=1024, batch_size=64, k_max=8, m_max=128,
            weights=11_173_962, work=1e7,
            profile=StepProfile((8, 32, 64, 128), (0.02, 0.05, 0.09, 0.17)),
        )  # fmt: skip
        auto.arrive(job, 0.0)
        starts = [d for d in auto.step(0.0) if isinstance(d, Start)]
        assert len(starts) == 1
        return starts[0]

    jsa = first_start(None)
    assert math.ceil(jsa.gpus / PER_NODE) == 2
    told = first_start(_two_nodes_slow)
    assert math.ceil(told.gpus / PER_NODE) != 2
