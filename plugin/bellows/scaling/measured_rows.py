"""TSF and goodput rows from measured step times, where a job has them (issue 36).

The JSA predicts a step time for every (GPUs, batch) from a job's one-GPU times and one
Allreduce weight. Where step times were *measured* on the placements themselves (the Pollux
artifact's ``placements.csv``: every placement of 1 to 16 GPUs on nodes of 4), the
measurements can disagree with any such model: 8 GPUs over two nodes measure 1.4-1.8x the
JSA for bert, yolov3 and imagenet at small per-GPU batches, while three and four nodes
measure within 0.9-1.2x. A core that decides with the JSA there gives jobs counts that the
cluster runs slower than it believed (docs/autoscaler.md, "Deciding with measured step
times").

A :data:`StepTimes` source gives the seconds of one step of a job's global batch on ``k``
GPUs packed on the fewest nodes, or ``None`` where it has no measurement of the job (the
JSA's row is kept). :func:`measured_tables` replaces, in a :class:`TsfTables`, the row of
every job the source knows: per count, the batch with the highest goodput (throughput
times ``E(b)`` at the job's progress) among a geometric grid of per-GPU batches over the
job's bounds and the JSA's own choice; ``values`` that goodput over the best goodput on one
GPU (at ``x1_batch`` or a better batch), as :func:`~bellows.scaling.tables.tsf_tables`
does. A count whose every batch is unmeasured (``NaN``: outside what was measured) is not
offered. Pure: the source is called, nothing else; no I/O here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from bellows.jobs import JobSpec, per_gpu_batches
from bellows.scaling.efficiency import EfficiencyProfile
from bellows.scaling.tables import TsfTables

__all__ = ["MEASURED_GRID", "StepTimes", "measured_tables", "measured_x1", "per_gpu_grid"]

StepTimes = Callable[[JobSpec, int, int], "float | None"]
"""``(job, gpus, global batch)`` to the measured seconds of one step on ``gpus`` packed on
the fewest nodes (``None``: this job is not measured; ``NaN``: that point is not)."""

MEASURED_GRID = 16
"""Geometric steps of per-GPU batch weighed per count (the Pollux reference's grid is 12)."""


def _gain(profile: EfficiencyProfile | None, batch: np.ndarray, progress: float) -> np.ndarray:
    if profile is None:
        return np.ones(batch.shape)
    return np.asarray(profile.efficiency(batch, progress), dtype=np.float64)


def measured_x1(
    job: JobSpec, steps: StepTimes, profile: EfficiencyProfile | None = None, progress: float = 0.0
) -> float | None:
    """The job's goodput on one GPU at ``x1_batch`` by the measurements (``None``: not
    measured, or not measurable there)."""
    seconds = steps(job, 1, job.x1_batch)
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return None
    return job.x1_batch / seconds * float(_gain(profile, np.array([job.x1_batch]), progress)[0])


def per_gpu_grid(job: JobSpec, k: int, steps: int) -> list[int]:
    """The per-GPU batches ``job`` may run at on ``k`` GPUs, in ``steps`` geometric steps
    over its bounds and both ends (none when no batch fits ``k``), ascending."""
    lo, hi = per_gpu_batches(job, k)
    if lo > hi:
        return []
    return sorted({lo, hi, *(round(lo * (hi / lo) ** (i / steps)) for i in range(steps))})


def _candidates(job: JobSpec, k: int, chosen: int) -> list[int]:
    """Global batches weighed on ``k`` GPUs: a rigid job's own; else a geometric grid of
    per-GPU batches over the bounds, and the JSA's choice."""
    if not job.elastic:
        return [job.batch_size] if k == job.gpus else []
    grid = per_gpu_grid(job, k, MEASURED_GRID)
    if not grid:
        return []
    batches = {k * m for m in grid}
    if chosen > 0:
        batches.add(chosen)
    return sorted(batches)


def measured_tables(
    tables: TsfTables,
    jobs: Sequence[JobSpec],
    steps: StepTimes,
    efficiency: Sequence[EfficiencyProfile | None] | None = None,
    progress: Sequence[float] | None = None,
) -> tuple[TsfTables, list[float | None]]:
    """``tables`` with the row of every job ``steps`` measures rebuilt from its
    measurements (module docstring), and the one-GPU goodput each row is relative to
    (``None`` for a row kept as the JSA's)."""
    values, batch = np.array(tables.values), np.array(tables.batch)
    rate = np.array(tables.throughput)
    gain = np.ones(values.shape) if tables.efficiency is None else np.array(tables.efficiency)
    x1s: list[float | None] = []
    for j, job in enumerate(jobs):
        profile = None if efficiency is None else efficiency[j]
        done = 0.0 if progress is None else float(progress[j])
        x1 = measured_x1(job, steps, profile, done)
        x1s.append(x1)
        if x1 is None or x1 <= 0:
            x1s[-1] = None
            continue
        for k in range(1, values.shape[1]):
            options = _candidates(job, k, int(tables.batch[j, k])) if k <= job.k_max else []
            seconds = np.array([steps(job, k, b) or math.nan for b in options], dtype=float)
            ok = np.isfinite(seconds) & (seconds > 0)
            if not ok.any():
                values[j, k], batch[j, k], rate[j, k], gain[j, k] = -np.inf, 0, 0.0, 1.0
                continue
            b = np.array(options, dtype=float)[ok]
            e = _gain(profile, b, done)
            good = b / seconds[ok] * e
            best = int(np.argmax(good))  # the smallest batch of the best goodput
            values[j, k], batch[j, k] = good[best], int(b[best])
            rate[j, k], gain[j, k] = b[best] / seconds[ok][best], e[best]
        if np.isfinite(values[j, 1]):  # relative to the best one GPU does (tables.TsfTables)
            x1 = max(x1, float(values[j, 1]))
        x1s[-1] = x1
        values[j, 1:] /= x1
    out = TsfTables(
        values=values, batch=batch, throughput=rate,
        efficiency=None if tables.efficiency is None else gain, one=tables.one,
    )  # fmt: skip
    return out, x1s
