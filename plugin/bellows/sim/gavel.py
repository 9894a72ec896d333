"""A Gavel-like reference on a cluster of several GPU types (issue 39, ``--policy gavel``).

Gavel (OSDI'20) is heterogeneity-aware and rigid: each job keeps the GPU count and batch its
owner asked for, and the policy gives it a GPU type. Sia's paper (SOSP'23) compares against
its max-sum-throughput policy, throughputs normalised by each job's best type. Here that
policy is decided by the same typed rounds Bellows mode uses
(:class:`bellows.autoscaler.typed.TypedAutoscaler`) with every job rigid at its trace's GPUs
and batch and the ``speedup`` objective: the sum of throughputs over each job's best, which
is Gavel's objective, exact, but not Gavel's code nor its round-robin leases (a job here
keeps its type until a round finds a better sum; Gavel time-slices). A job asking more GPUs
than any one type has (imagenet's 32 and 48 on Sia's mix) asks the most one type has, its
batch held to what they fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from bellows.autoscaler import AutoscalerConfig, Objective
from bellows.jobs import JobSpec
from bellows.scaling.gpu_types import TypedCluster
from bellows.sim.workloads.traces import TraceJob

__all__ = ["gavel_config", "gavel_jobs", "rigid"]


def rigid(spec: JobSpec, most: int) -> JobSpec:
    """``spec`` rigid at its trace's GPUs and batch, at most ``most`` GPUs (the batch held
    to what those fit)."""
    gpus = min(spec.gpus, most)
    batch = max(spec.b_min, min(spec.batch_size, gpus * spec.m_max))
    return replace(spec, elastic=False, gpus=gpus, batch_size=batch)


def gavel_jobs(trace: Sequence[TraceJob], typed: TypedCluster) -> tuple[TraceJob, ...]:
    """Every job of ``trace`` rigid (:func:`rigid`) within the largest type of ``typed``."""
    most = max(typed.capacities)
    return tuple(replace(job, spec=rigid(job.spec, most)) for job in trace)


def gavel_config(config: AutoscalerConfig) -> AutoscalerConfig:
    """``config`` maximising the sum of normalised throughputs, Gavel's objective."""
    return replace(config, objective=Objective.SPEEDUP)
