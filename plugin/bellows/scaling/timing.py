"""Iteration time and throughput of one job at one ``(gpus, batch)``: the JSA's scalar model.

``t_proc(m)`` comes from the job's profiled single-GPU points:

* between two profiled batches, linear interpolation;
* below the smallest profiled batch, the smallest batch's time (a fixed per-iteration cost
  dominates there, and nothing measured says how much lower it goes);
* above the largest, the largest batch's time per sample (``t_P * m / m_P``): no further
  gain in efficiency is assumed where none was measured.

These functions are the reference the vectorized tables in :mod:`bellows.scaling.tables`
are tested against, so they use plain Python floats and no NumPy.
"""

from __future__ import annotations

import bisect

from bellows.jobs import JobSpec, SpecError, StepProfile
from bellows.scaling.profiles import ClusterProfile

__all__ = [
    "local_batch",
    "processing_seconds",
    "single_gpu_throughput",
    "step_time",
    "throughput",
]


def processing_seconds(profile: StepProfile, local_batch: int | float) -> float:
    """``t_proc(m)``: single-GPU compute time of one iteration at per-GPU batch ``m``."""
    ms = profile.local_batches
    ts = profile.seconds
    m = float(local_batch)
    if m <= 0:
        raise SpecError("local_batch", local_batch, "a number > 0")
    if m < ms[0]:
        return ts[0]
    if m > ms[-1]:
        return ts[-1] * m / ms[-1]
    if len(ms) == 1:
        return ts[0]
    # Same segment choice as the vectorized version: the last knot belongs to the last segment.
    i = min(max(bisect.bisect_right(ms, m) - 1, 0), len(ms) - 2)
    lo_m, hi_m, lo_t, hi_t = ms[i], ms[i + 1], ts[i], ts[i + 1]
    return lo_t + (m - lo_m) / (hi_m - lo_m) * (hi_t - lo_t)


def local_batch(gpus: int, batch: int) -> int:
    """Per-GPU batch of the slowest GPU: ``ceil(batch / gpus)``."""
    return -(-batch // gpus)


def _check(gpus: int, batch: int) -> None:
    for name, value in (("gpus", gpus), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(name, value, "an integer >= 1")


def step_time(
    job: JobSpec, gpus: int, batch: int, cluster: ClusterProfile, *, nodes: int | None = None
) -> float:
    """Seconds per iteration of ``job`` with global ``batch`` on ``gpus`` GPUs.

    The slowest GPU carries ``ceil(batch / gpus)`` samples; the Allreduce of ``job.weights``
    parameters is combined with it under the cluster's overlap model. Works for any
    ``gpus, batch >= 1``; whether the allocation is allowed is the caller's question.
    ``nodes``: the nodes the GPUs actually span (default: as few as hold them).
    """
    _check(gpus, batch)
    compute = processing_seconds(job.profile, local_batch(gpus, batch))
    return cluster.combine(compute, cluster.allreduce_seconds(job.weights, gpus, nodes=nodes))


def throughput(
    job: JobSpec, gpus: int, batch: int, cluster: ClusterProfile, *, nodes: int | None = None
) -> float:
    """Samples per second of ``job`` with global ``batch`` on ``gpus`` GPUs (on ``nodes``)."""
    return batch / step_time(job, gpus, batch, cluster, nodes=nodes)


def single_gpu_throughput(job: JobSpec, cluster: ClusterProfile) -> float:
    """``X1``: samples per second on one GPU at ``job.x1_batch = min(b_max, m_max)``."""
    return throughput(job, 1, job.x1_batch, cluster)
