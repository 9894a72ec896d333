"""Goodput rows of many jobs at once are the job-by-job search's, bit for bit (seeded)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt
import pytest

from bellows.jobs import JobSpec
from bellows.scaling import MODEL_EFFICIENCY, EfficiencyProfile, default_cluster, tsf_tables
from bellows.scaling.profiles import ClusterProfile
from bellows.scaling.tables import (
    _allreduce_rows,
    _combine,
    _goodput_candidates,
    _pack,
    processing_seconds_rows,
)
from bellows.sim.workloads.models import MODELS

F64 = npt.NDArray[np.float64]


def _one_row(
    job: JobSpec, cluster: ClusterProfile, profile: EfficiencyProfile, done: float, width: int
) -> tuple[F64, npt.NDArray[np.int64], F64, F64]:
    """One job's goodput row as the tables computed it before rows were batched: per k,
    every candidate m and the k's bounds, sorted, the first maximum of ``X * E``."""
    top = min(job.m_max, job.b_max)
    knots = _pack([job.profile])
    tar = _allreduce_rows(cluster, np.array([float(job.weights)]), width)[0]
    x_out, b_out, e_out = (
        np.zeros(width + 1),
        np.zeros(width + 1, dtype=np.int64),
        np.ones(width + 1),
    )
    last = min(job.k_max, width)
    k = np.arange(1, last + 1, dtype=np.int64)[:, None]
    lo = np.maximum(1, -(-job.b_min // k))
    hi = np.minimum(top, job.b_max // k)
    cand = np.array(_goodput_candidates(job.profile, top), dtype=np.int64)[None, :]
    m = np.sort(np.concatenate([np.broadcast_to(cand, (k.shape[0], cand.shape[1])), lo, hi],
                               axis=1), axis=1)  # fmt: skip
    ok = (m >= lo) & (m <= hi)
    t_proc = processing_seconds_rows(knots, m.reshape(1, -1).astype(np.float64)).reshape(m.shape)
    b = k * m
    x = b / _combine(cluster, t_proc, np.broadcast_to(tar[k], b.shape))
    e = profile.efficiency(np.where(ok, b, 1), done)
    at = np.argmax(np.where(ok, x * e, -np.inf), axis=1)
    rows = np.arange(k.shape[0])
    hit = ok[rows, at]
    x_out[k[:, 0]] = np.where(hit, x[rows, at], 0.0)
    b_out[k[:, 0]] = np.where(hit, b[rows, at], 0)
    e_out[k[:, 0]] = np.where(hit, e[rows, at], 1.0)
    x1 = job.x1_batch / float(
        processing_seconds_rows(knots, np.array([[float(job.x1_batch)]]))[0, 0]
    )
    good = np.where(ok, x * e, -np.inf)
    g1 = max(x1 * float(profile.efficiency(job.x1_batch, done)), float(good[0].max()))
    ok_k = b_out > 0
    values = np.where(ok_k, x_out * e_out / g1, -np.inf)
    return values, b_out, np.where(ok_k, x_out, 0.0), np.where(ok_k, e_out, 1.0)


def _jobs(rng: np.random.Generator, count: int) -> tuple[list[JobSpec], list[str]]:
    names = sorted(MODEL_EFFICIENCY)
    jobs, models = [], []
    for i in range(count):
        name = names[int(rng.integers(len(names)))]
        model = MODELS[name]
        m_max, k_max = model.m_max, int(rng.integers(1, 40))
        b_min = int(rng.integers(1, k_max * m_max + 1))
        b_max = int(rng.integers(b_min, 64 * m_max + 1))
        elastic = bool(rng.random() < 0.9)
        jobs.append(
            JobSpec(
                name=f"j{i}", b_min=b_min, b_max=b_max, batch_size=b_min, k_max=k_max,
                m_max=m_max, weights=model.weights, work=1e8, profile=model.step,
                elastic=elastic, gpus=1 if elastic else -(-b_min // m_max),
            )
        )  # fmt: skip
        models.append(name)
    return jobs, models


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("overlap", [1.0, 1.7])
def test_batched_goodput_rows_are_the_job_by_job_search(seed: int, overlap: float) -> None:
    rng = np.random.default_rng(seed)
    cluster = replace(default_cluster(), overlap=overlap)
    jobs, models = _jobs(rng, 60)
    profiles: list[EfficiencyProfile | None] = [
        None if rng.random() < 0.2 else MODEL_EFFICIENCY[m] for m in models
    ]
    width = int(rng.integers(30, 48))
    plain = tsf_tables(jobs, cluster, fixed_batch=False, width=width)
    for _ in range(2):  # the second time, each job's block is the one kept the first time
        done = [float(rng.choice([0.0, rng.uniform(0, 5e7)])) for _ in jobs]
        tables = tsf_tables(
            jobs, cluster, fixed_batch=False, width=width, efficiency=profiles, progress=done
        )
        assert tables.efficiency is not None
        for j, (job, profile) in enumerate(zip(jobs, profiles, strict=True)):
            got = (tables.values[j], tables.batch[j], tables.throughput[j], tables.efficiency[j])
            if profile is None or not job.elastic:
                want = (plain.values[j], plain.batch[j], plain.throughput[j], got[3])
            else:
                want = _one_row(job, cluster, profile, done[j], width)
            for name, a, b in zip(("values", "batch", "throughput", "efficiency"), got, want,
                                  strict=True):  # fmt: skip
                assert a.tobytes() == b.tobytes(), (j, name)
