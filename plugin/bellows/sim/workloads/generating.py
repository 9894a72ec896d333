"""Synthetic workloads of the paper's Section IV-A: Poisson arrivals of categorized jobs.

Rates. The paper's base rate ``λ`` is the reciprocal of the expected single-GPU length (at
max batch) of a job drawn uniformly from the categories in the mix; *high* is ``k_max·λ``,
*low* ``k_max·λ/4``, *bursty* alternates high and low every 60 or 120 minutes, starting high.
Those literal rates do not depend on the cluster: on a 40-GPU cluster with ``k_max = 8``
they offer a load of only ``8/40 = 0.2`` at the high rate, which leaves both policies idle
most of the time, while the paper's curves (baseline queues growing for hours) show clusters
far busier. So the high rate is set by the *offered load* it puts on the cluster,

    high = load_high * G / E[single-GPU length],      low = high / 4,

(offered load = GPU-time asked at one GPU per job / GPU-time available). The default
``load_high = 1`` (:data:`DEFAULT_LOAD_HIGH`) is the paper's ``k_max * lambda`` with the
cluster size ``G`` in place of ``k_max``: at the high rate the cluster is exactly busy if
every job runs on one GPU at its largest batch. It was calibrated on the paper's Table III
picture (``docs/simulator.md``); ``load_high = k_max / G`` gives back the literal rates.

Randomness comes only from the ``numpy.random.Generator`` passed in.

Bounds. Every parameter that scales the work has a documented maximum (:data:`MAX_MINUTES`,
:data:`MAX_LOAD_HIGH`, :data:`bellows.jobs.MAX_GPUS`, at most :data:`MAX_PIECES` bursty
periods), and a workload expected to hold more than
:data:`~bellows.sim.workloads.traces.MAX_TRACE_JOBS` jobs is refused before any is drawn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

import numpy as np

from bellows.inputs import check_float, check_int
from bellows.jobs import MAX_GPUS, SpecError
from bellows.scaling import ClusterProfile, single_gpu_throughput
from bellows.sim.workloads.categories import CATEGORIES, K_MAX, Category, category
from bellows.sim.workloads.traces import MAX_TRACE_JOBS, TraceJob

__all__ = [
    "DEFAULT_LOAD_HIGH",
    "MAX_LOAD_HIGH",
    "MAX_MINUTES",
    "MAX_PIECES",
    "BatchChoice",
    "Pattern",
    "WorkloadSpec",
    "arrival_rates",
    "expected_jobs",
    "generate",
    "literal_load_high",
    "mean_length_s",
    "with_batch",
]

DEFAULT_LOAD_HIGH = 1.0
"""Offered load of the high arrival rate (low = a quarter of it); see the module docstring."""

MAX_MINUTES = 525_600.0
"""Longest arrival window, in minutes (a year); also the longest bursty period."""

MAX_LOAD_HIGH = 1_000.0
"""Largest offered load of the high rate (the paper's clusters are busy at 1 to 4)."""

MAX_PIECES = 100_000
"""Most bursty periods in one window (``minutes / period_min``)."""


class Pattern(StrEnum):
    LOW = "low"
    HIGH = "high"
    BURSTY = "bursty"


class BatchChoice(StrEnum):
    """The batch the fixed-batch baseline runs each job with."""

    MAX = "max"
    MIN = "min"
    RANDOM = "random"  # uniform integer in [b_min, b_max]


@dataclass(frozen=True)
class WorkloadSpec:
    """What to generate. ``minutes`` is the arrival window; ``gpus`` the cluster size."""

    pattern: Pattern
    minutes: float
    categories: tuple[int, ...]
    gpus: int
    baseline_batch: BatchChoice = BatchChoice.RANDOM
    period_min: float = 60.0
    load_high: float = DEFAULT_LOAD_HIGH

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", _enum(Pattern, "pattern", self.pattern))
        choice = _enum(BatchChoice, "baseline_batch", self.baseline_batch)
        object.__setattr__(self, "baseline_batch", choice)
        for name, maximum in (
            ("minutes", MAX_MINUTES), ("period_min", MAX_MINUTES), ("load_high", MAX_LOAD_HIGH)
        ):  # fmt: skip
            value = check_float(name, getattr(self, name), minimum=0.0, maximum=maximum,
                                open_min=True)  # fmt: skip
            object.__setattr__(self, name, value)
        if not isinstance(self.categories, tuple | list) or not self.categories:
            raise SpecError("categories", self.categories, "distinct numbers from 1-4")
        numbers = tuple(
            check_int(f"categories[{i}]", n, minimum=1, maximum=len(CATEGORIES))
            for i, n in enumerate(self.categories)
        )
        if len(set(numbers)) != len(numbers):
            raise SpecError("categories", self.categories, "distinct numbers from 1-4")
        object.__setattr__(self, "categories", numbers)
        check_int("gpus", self.gpus, minimum=1, maximum=MAX_GPUS)
        if self.pattern is Pattern.BURSTY and self.minutes / self.period_min > MAX_PIECES:
            raise SpecError(
                "period_min", self.period_min,
                f"a period of at least minutes/{MAX_PIECES} = {self.minutes / MAX_PIECES:g}",
            )  # fmt: skip
        expected = expected_jobs(self)
        if expected > MAX_TRACE_JOBS:
            raise SpecError(
                "minutes", self.minutes,
                f"a window holding at most {MAX_TRACE_JOBS} jobs (these settings expect "
                f"{expected:.3g}: fewer minutes, GPUs or a lower load_high)",
            )  # fmt: skip

    @property
    def mixed(self) -> bool:
        """More than one category: the paper's mixed lengths (16/21/41/27 min) apply."""
        return len(self.categories) > 1

    def length_s(self, cat: Category) -> float:
        """Single-GPU length at max batch of a job of ``cat`` in this workload."""
        return 60.0 * (cat.mixed_minutes if self.mixed else cat.single_minutes)


_E = TypeVar("_E", bound=StrEnum)


def _enum(kind: type[_E], name: str, value: object) -> _E:
    try:
        return kind(str(value))
    except ValueError:
        raise SpecError(name, value, f"one of {[m.value for m in kind]}") from None


def mean_length_s(spec: WorkloadSpec) -> float:
    """``E[single-GPU length]`` of a job drawn uniformly from the mix (the paper's ``1/λ``)."""
    return sum(spec.length_s(category(c)) for c in spec.categories) / len(spec.categories)


def arrival_rates(spec: WorkloadSpec) -> tuple[float, float]:
    """``(high, low)`` arrivals per second for ``spec``."""
    high = spec.load_high * spec.gpus / mean_length_s(spec)
    return high, high / 4.0


def expected_jobs(spec: WorkloadSpec) -> float:
    """How many jobs ``spec`` yields on average (Poisson arrivals over its pieces)."""
    return sum(rate * (stop - start) for start, stop, rate in _pieces(spec))


def literal_load_high(spec: WorkloadSpec) -> float:
    """The offered load of the paper's literal high rate ``k_max·λ`` on this cluster."""
    return K_MAX / spec.gpus


def _pieces(spec: WorkloadSpec) -> list[tuple[float, float, float]]:
    """``(start_s, end_s, rate)`` pieces of the arrival window."""
    high, low = arrival_rates(spec)
    end = spec.minutes * 60.0
    if spec.pattern is not Pattern.BURSTY:
        return [(0.0, end, high if spec.pattern is Pattern.HIGH else low)]
    period = spec.period_min * 60.0
    pieces = []
    start, index = 0.0, 0
    while start < end:
        stop = min(start + period, end)
        pieces.append((start, stop, high if index % 2 == 0 else low))
        start, index = stop, index + 1
    return pieces


def arrival_times(spec: WorkloadSpec, rng: np.random.Generator) -> list[float]:
    """Poisson arrival times (seconds), piece by piece (memorylessness makes this exact)."""
    times: list[float] = []
    for start, stop, rate in _pieces(spec):
        t = start
        while True:
            t += float(rng.exponential(1.0 / rate))
            if t >= stop:
                break
            times.append(t)
            if len(times) > MAX_TRACE_JOBS:  # the expectation is bounded; a draw is not
                raise SpecError(
                    "minutes", spec.minutes, f"a window holding at most {MAX_TRACE_JOBS} jobs"
                )
    return times


def generate(
    spec: WorkloadSpec, rng: np.random.Generator, *, cluster: ClusterProfile
) -> tuple[TraceJob, ...]:
    """A workload: jobs drawn uniformly from ``spec.categories``, arriving as Poisson."""
    jobs: list[TraceJob] = []
    templates: dict[int, tuple[Category, float]] = {}
    for c in spec.categories:
        cat = category(c)
        probe = cat.job("probe", batch_size=cat.b_max, work=1.0)
        templates[c] = (cat, spec.length_s(cat) * single_gpu_throughput(probe, cluster))
    for i, t in enumerate(arrival_times(spec, rng)):
        cat, work = templates[_pick(spec.categories, rng)]
        batch = _batch(cat, spec.baseline_batch, rng)
        spec_i = cat.job(f"c{cat.number}-{i:05d}", batch_size=batch, work=work)
        jobs.append(TraceJob(round(t, 3), spec_i, cat.model_name))
    return tuple(jobs)


def _pick(categories: Sequence[int], rng: np.random.Generator) -> int:
    if len(categories) == 1:
        return categories[0]
    return categories[int(rng.integers(len(categories)))]


def _batch(cat: Category, choice: BatchChoice, rng: np.random.Generator) -> int:
    if choice is BatchChoice.MAX:
        return cat.b_max
    if choice is BatchChoice.MIN:
        return cat.b_min
    return int(rng.integers(cat.b_min, cat.b_max + 1))


def with_batch(job: TraceJob, batch: int) -> TraceJob:
    """``job`` with another baseline batch (same arrival, work and profile)."""
    return dataclasses.replace(job, spec=dataclasses.replace(job.spec, batch_size=batch))
