"""The online JSA: a job's step-time model refitted from what the job reports while it runs.

Same model family as the offline fit (:mod:`bellows.scaling.fitting`): a step takes
``combine(t_proc(ceil(b/k)), t_ar(w, k))`` under the cluster's Allreduce and overlap model.
The prior is the job's :class:`JobProfile` (from its annotation, or a default); the online fit
adjusts two numbers of it, each a factor on a log scale:

* ``compute`` multiplies every profiled single-GPU time ``t_proc(m)`` (the job computes
  faster or slower than profiled, e.g. another GPU model or input pipeline);
* ``communication`` multiplies the parameter count that drives the Allreduce
  (``commWeights``: gradient bucketing, fp16 gradients, a slower network).

Both are fitted by least squares on the logarithm of the reported median step times (relative
error), each residual divided by :data:`REPORT_SPREAD` (the relative noise of one configuration's
median), plus a Gaussian prior ``(log factor / PRIOR_SPREAD)**2`` per factor that pulls them
to 1 when the reports cannot tell them apart (e.g. all at one ``(k, b)``): a maximum a
posteriori estimate. The result is again
a :class:`JobProfile`, so the simulator, the tables and the controller use it unchanged.

:class:`ProgressLog` holds one job's accepted reports. A report is a hint, never an order:
non-finite or non-positive step times, configurations outside the domain bounds and samples
seen going backwards are rejected with a reason, and the log of one job never sees another
job's reports (the caller keys logs by job).

When a refit is worth a revision of the job in the autoscaler core is decided here too, so
that the live controller (:mod:`bellows.service.progress_loop`) and the simulator
(:mod:`bellows.sim.learning`) decide alike: :func:`moved` (what was learned moved by more than
:data:`REVISE_TOLERANCE`) and :func:`drifted` (the core's estimate of the samples done is off
the reported ones). Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from bellows.inputs import check_float, check_int
from bellows.jobs import (
    MAX_BATCH,
    MAX_GPUS,
    MAX_STEP_SECONDS,
    MAX_WEIGHTS,
    MAX_WORK,
    StepProfile,
)
from bellows.scaling.fitting import levenberg_marquardt
from bellows.scaling.profiles import ClusterProfile, JobProfile
from bellows.scaling.timing import local_batch, processing_seconds

__all__ = [
    "FIT_BOUND",
    "MAX_FACTOR",
    "PRIOR_SPREAD",
    "REPORT_SPREAD",
    "REVISE_TOLERANCE",
    "WINDOW",
    "Learned",
    "OnlineFit",
    "ProgressLog",
    "ProgressReport",
    "SpeedFactors",
    "drifted",
    "moved",
    "refit_log",
    "refit_profile",
]

REPORT_SPREAD: Final = 0.05
"""Relative noise of one configuration's median step time (5 %, the spread of repeated rows)."""
PRIOR_SPREAD: Final = 0.5
"""Standard deviation of each log factor under the prior (a factor of e^0.5 = 1.65 is 1 sigma)."""
MAX_FACTOR: Final = 100.0
"""A job's true speed factors lie within ``[1/MAX_FACTOR, MAX_FACTOR]`` of its profile."""
FIT_BOUND: Final = 32.0
"""The fitted factors stay within ``[1/FIT_BOUND, FIT_BOUND]`` of the prior: reports may
correct a profile that far, as an annotation wrong by as much would have, and no further
(the trust model in ``docs/security.md``)."""
WINDOW: Final = 16
"""Reports kept per configuration ``(k, b)``: the fit uses the median of the newest ones."""
REVISE_TOLERANCE: Final = 0.05
"""Relative move of a factor or restart cost (or drift of the samples done, as a share of the
job's work) worth a revision of the job in the core."""

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ProgressReport:
    """One progress report of a running job: where it ran and how fast.

    ``step_seconds`` is the median step time over the report's window on ``gpus`` GPUs with
    global batch ``batch``; ``samples`` the samples seen since the job began;
    ``grad_sqr``/``grad_var`` the gradient statistics it carried, if any
    (:class:`bellows.scaling.noise.NoisePoint` checks them).
    """

    gpus: int
    batch: int
    step_seconds: float
    samples: float
    grad_sqr: float | None = None
    grad_var: float | None = None

    def __post_init__(self) -> None:
        check_int("gpus", self.gpus, minimum=1, maximum=MAX_GPUS)
        check_int("batch", self.batch, minimum=1, maximum=MAX_BATCH)
        seconds = check_float(
            "step_seconds", self.step_seconds, minimum=0.0, maximum=MAX_STEP_SECONDS, open_min=True
        )
        samples = check_float("samples", self.samples, minimum=0.0, maximum=MAX_WORK)
        object.__setattr__(self, "step_seconds", seconds)
        object.__setattr__(self, "samples", samples)


@dataclass(frozen=True)
class SpeedFactors:
    """How a job really runs against its profile: ``compute`` multiplies every ``t_proc(m)``,
    ``communication`` the Allreduce size. What the online fit estimates, and what the
    emulated cluster trains at (a job whose true speed differs from its annotation)."""

    compute: float = 1.0
    communication: float = 1.0

    def __post_init__(self) -> None:
        low, high = 1.0 / MAX_FACTOR, MAX_FACTOR
        for name in ("compute", "communication"):
            check_float(name, getattr(self, name), minimum=low, maximum=high)

    def apply(self, profile: JobProfile, *, source: str | None = None) -> JobProfile:
        """``profile`` with these factors applied (the same profile when both are 1)."""
        if (self.compute, self.communication) == (1.0, 1.0) and source is None:
            return profile
        step = StepProfile(
            profile.step.local_batches,
            tuple(min(s * self.compute, MAX_STEP_SECONDS) for s in profile.step.seconds),
        )
        comm = min(MAX_WEIGHTS, max(1, round(profile.effective_weights * self.communication)))
        return JobProfile(
            weights=profile.weights,
            step=step,
            source=profile.source if source is None else source,
            comm_weights=comm,
        )


@dataclass(frozen=True)
class OnlineFit:
    """A refitted profile and the factors that made it from the prior."""

    profile: JobProfile
    factors: SpeedFactors
    configurations: int
    reports: int

    @property
    def compute(self) -> float:
        return self.factors.compute

    @property
    def communication(self) -> float:
        return self.factors.communication


@dataclass
class ProgressLog:
    """One job's accepted progress reports, newest :data:`WINDOW` per configuration."""

    by_config: dict[tuple[int, int], deque[float]] = field(default_factory=dict)
    samples: float = 0.0
    reports: int = 0

    def add(self, report: ProgressReport) -> str | None:
        """Record ``report``; returns why it was rejected, or ``None`` when accepted."""
        if report.samples < self.samples:
            return f"samples went backwards ({report.samples:g} < {self.samples:g})"
        key = (report.gpus, report.batch)
        window = self.by_config.get(key)
        if window is None:
            window = self.by_config[key] = deque(maxlen=WINDOW)
        window.append(report.step_seconds)
        self.samples = report.samples
        self.reports += 1
        return None

    def medians(self) -> dict[tuple[int, int], float]:
        """Median reported step time per configuration ``(gpus, batch)``."""
        return {key: statistics.median(times) for key, times in self.by_config.items()}


def _predict(compute: F64, gpus: Iterable[int], weights: float, cluster: ClusterProfile) -> F64:
    return np.array(
        [
            cluster.combine(float(c), cluster.allreduce_seconds(max(1, round(weights)), k))
            for c, k in zip(compute, gpus, strict=True)
        ]
    )


def refit_profile(
    prior: JobProfile,
    cluster: ClusterProfile,
    observed: Mapping[tuple[int, int], float],
    *,
    reports: int = 0,
    bound: float = FIT_BOUND,
) -> OnlineFit:
    """Refit ``prior`` to median step times ``observed`` at configurations ``(gpus, batch)``.

    With nothing observed the prior comes back unchanged (both factors 1). The factors stay
    within ``[1/bound, bound]`` (:data:`FIT_BOUND`).
    """
    configs = sorted(observed)
    if not configs:
        return OnlineFit(prior, SpeedFactors(), 0, reports)
    gpus = [k for k, _ in configs]
    compute = np.array([processing_seconds(prior.step, local_batch(k, b)) for k, b in configs])
    measured = np.log(np.array([observed[c] for c in configs], dtype=np.float64))
    weights = float(prior.effective_weights)
    log_bound = math.log(bound)

    def clip(theta: F64) -> F64:
        return np.clip(theta, -log_bound, log_bound)

    def residual(theta: F64) -> F64:
        a, c = clip(theta)
        predicted = _predict(compute * math.exp(a), gpus, weights * math.exp(c), cluster)
        fit = (np.log(predicted) - measured) / REPORT_SPREAD
        return np.concatenate([fit, clip(theta) / PRIOR_SPREAD])

    theta = clip(levenberg_marquardt(residual, np.zeros(2)))
    compute_factor, comm_factor = (min(max(math.exp(t), 1.0 / bound), bound) for t in theta)
    factors = SpeedFactors(compute_factor, comm_factor)
    source = f"online fit of {len(configs)} configurations to {prior.source or 'the prior'}"
    return OnlineFit(factors.apply(prior, source=source), factors, len(configs), reports)


def refit_log(prior: JobProfile, cluster: ClusterProfile, log: ProgressLog) -> OnlineFit:
    """:func:`refit_profile` on the medians of one job's :class:`ProgressLog`."""
    return refit_profile(prior, cluster, log.medians(), reports=log.reports)


@dataclass(frozen=True)
class Learned:
    """What a revision of a job used: its fitted factors and measured restart cost."""

    compute: float = 1.0
    communication: float = 1.0
    restart_s: float | None = None


def moved(before: Learned | None, now: Learned, *, tolerance: float = REVISE_TOLERANCE) -> bool:
    """Whether a revision is worth a round: the first fit that is not the prior (``before``
    ``None``: nothing revised yet), a factor moved by more than ``tolerance`` on a log scale,
    a first or changed restart measurement."""
    if before is None:
        before = Learned()
    for old, new in ((before.compute, now.compute), (before.communication, now.communication)):
        if abs(math.log(new / old)) > tolerance:
            return True
    if now.restart_s is None:
        return False
    if before.restart_s is None:
        return True
    return abs(now.restart_s - before.restart_s) > tolerance * max(before.restart_s, 1.0)


def drifted(
    estimate: float, done: float, work: float, *, tolerance: float = REVISE_TOLERANCE
) -> bool:
    """Whether the core's ``estimate`` of the samples done is off the reported ``done`` by
    more than ``tolerance`` of the job's ``work`` (restart pricing needs them)."""
    return abs(estimate - done) > tolerance * work
