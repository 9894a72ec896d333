"""Goodput TSF tables: the batch maximising throughput x efficiency, per GPU count."""

from __future__ import annotations

import numpy as np
import pytest

from bellows.jobs import JobSpec, SpecError, StepProfile, feasible_allocations
from bellows.scaling import (
    MODEL_EFFICIENCY,
    EfficiencyProfile,
    default_cluster,
    throughput,
    throughput_table,
    tsf_tables,
)
from bellows.sim.workloads.models import MODELS


def _job(name: str, *, elastic: bool = True, k_max: int = 12) -> JobSpec:
    return JobSpec(
        name=name,
        b_min=16,
        b_max=1024,
        batch_size=64,
        k_max=k_max,
        m_max=128,
        weights=11_173_962,
        work=1e7,
        profile=StepProfile((8, 32, 64, 128), (0.02, 0.05, 0.09, 0.17)),
        elastic=elastic,
        gpus=4 if not elastic else 1,
    )


def test_no_efficiency_is_todays_tables_bit_for_bit() -> None:
    jobs = [_job("a"), _job("b", elastic=False), _job("c", k_max=5)]
    cluster = default_cluster()
    for fixed in (False, True):
        plain = tsf_tables(jobs, cluster, fixed_batch=fixed, width=16)
        none = tsf_tables(jobs, cluster, fixed_batch=fixed, width=16, efficiency=[None] * 3)
        assert none.efficiency is None
        for name in ("values", "batch", "throughput"):
            assert getattr(plain, name).tobytes() == getattr(none, name).tobytes(), name
        np.testing.assert_array_equal(plain.goodput, plain.throughput)


@pytest.mark.parametrize("done", [0.0, 3e5, 3e6])
def test_goodput_rows_match_the_scalar_search(done: float) -> None:
    job = _job("a")
    other = _job("b", k_max=7)
    profile = EfficiencyProfile(32, 400.0, growth=0.5, batch_exponent=0.1)
    cluster = default_cluster()
    tables = tsf_tables(
        [job, other], cluster, fixed_batch=False, width=14,
        efficiency=[profile, None], progress=[done, 0.0],
    )  # fmt: skip
    assert tables.efficiency is not None

    def goodput(k: int, batch: int) -> float:
        return throughput(job, k, batch, cluster) * float(profile.efficiency(batch, done))

    # relative to the best one GPU does, not to the goodput at x1_batch alone
    g1 = max(goodput(1, a.batch) for a in feasible_allocations(job) if a.gpus == 1)
    assert g1 >= goodput(1, job.x1_batch)
    assert tables.one is not None
    assert tables.one[0] == pytest.approx(g1, rel=1e-12)
    assert np.isnan(tables.one[1])
    for k in range(1, 15):
        options = [a for a in feasible_allocations(job) if a.gpus == k]
        if not options:
            assert tables.values[0, k] == -np.inf
            continue
        best = max(
            options,
            key=lambda a: (
                throughput(job, k, a.batch, cluster) * float(profile.efficiency(a.batch, done))
            ),
        )
        good = throughput(job, k, best.batch, cluster) * float(profile.efficiency(best.batch, done))
        assert tables.batch[0, k] == best.batch, k
        assert tables.goodput[0, k] == pytest.approx(good, rel=1e-12)
        assert tables.values[0, k] == pytest.approx(good / g1, rel=1e-12)
        assert tables.efficiency[0, k] == pytest.approx(float(profile.efficiency(best.batch, done)))
    # the row without a profile is today's, and its efficiency is 1
    plain = tsf_tables([other], cluster, fixed_batch=False, width=14)
    assert tables.values[1].tobytes() == plain.values[0].tobytes()
    np.testing.assert_array_equal(tables.efficiency[1], 1.0)


def test_efficiency_takes_smaller_batches_early_in_training() -> None:
    job = _job("a", k_max=16)
    cluster = default_cluster()
    plain = tsf_tables([job], cluster, fixed_batch=False)
    early = tsf_tables([job], cluster, fixed_batch=False, efficiency=[MODEL_EFFICIENCY["cifar10"]])
    late = tsf_tables(
        [job], cluster, fixed_batch=False,
        efficiency=[MODEL_EFFICIENCY["cifar10"]], progress=[4e6],
    )  # fmt: skip
    k = np.arange(1, 17)
    assert np.all(early.batch[0, k] <= plain.batch[0, k])
    assert np.all(early.batch[0, k] <= late.batch[0, k])
    assert np.any(early.batch[0, k] < plain.batch[0, k])
    # goodput exceeds throughput only below the reference batch (the published form's gain)
    above = early.batch[0, k] >= MODEL_EFFICIENCY["cifar10"].reference_batch
    assert np.all((early.goodput[0, k] <= early.throughput[0, k])[above])


def test_fixed_batch_rows_keep_their_batch() -> None:
    job = _job("a")
    cluster = default_cluster()
    plain = tsf_tables([job], cluster, fixed_batch=True)
    good = tsf_tables([job], cluster, fixed_batch=True, efficiency=[MODEL_EFFICIENCY["cifar10"]])
    np.testing.assert_array_equal(plain.batch, good.batch)
    assert good.values.tobytes() == plain.values.tobytes()
    assert good.efficiency is not None
    e64 = float(MODEL_EFFICIENCY["cifar10"].efficiency(64, 0.0))
    np.testing.assert_array_equal(good.efficiency, np.where(plain.batch > 0, e64, 1.0))


def test_lengths_must_match() -> None:
    job = _job("a")
    with pytest.raises(SpecError, match="efficiency"):
        tsf_tables([job], default_cluster(), fixed_batch=False, efficiency=[None, None])
    with pytest.raises(SpecError, match="progress"):
        tsf_tables(
            [job], default_cluster(), fixed_batch=False,
            efficiency=[MODEL_EFFICIENCY["ncf"]], progress=[1.0, 2.0],
        )  # fmt: skip


def test_large_per_gpu_batches_are_weighed_on_a_fine_grid() -> None:
    model = MODELS["ncf"]
    job = JobSpec(
        name="ncf", b_min=32, b_max=8 * 32768, batch_size=32768, k_max=8,
        m_max=model.m_max, weights=model.weights, work=1e8, profile=model.step,
    )  # fmt: skip
    profile = MODEL_EFFICIENCY["ncf"]
    cluster = default_cluster()
    tables = tsf_tables([job], cluster, fixed_batch=False, efficiency=[profile], progress=[1e6])
    every = throughput_table(job, cluster)  # [k, m], every feasible m
    for k in range(1, 9):
        m = np.arange(every.shape[1])
        good = np.where(every[k] > 0, every[k] * profile.efficiency(np.maximum(k * m, 1), 1e6), 0)
        best = float(good.max())
        assert best * (1 - 2e-3) <= tables.goodput[0, k] <= best * (1 + 1e-12), k
