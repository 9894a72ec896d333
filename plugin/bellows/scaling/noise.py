"""The online efficiency fit: a job's :class:`EfficiencyProfile` learned from its reports.

A job that reports its gradient statistics (progress payload version 2,
:mod:`bellows.bus.progress`: ``grad_sqr = |G|^2`` and ``grad_var = tr(Sigma)``, the
per-sample gradient variance) says its gradient noise scale ``phi = grad_var / grad_sqr``
(samples) at the batch it runs with and the progress it made. :class:`NoiseLog` keeps one
job's newest :data:`NOISE_KEPT` such points and the samples it trained at each batch (the
segments from which its progress in reference samples is computed);
:func:`refit_efficiency` fits the published form (:mod:`bellows.scaling.efficiency`)::

    log phi = log noise_scale + growth * log(s / PROGRESS_UNIT) + batch_exponent * log(b / M0)

by least squares on the logarithm (each point's spread :data:`NOISE_SPREAD`), with Gaussian
priors on ``growth`` and ``batch_exponent`` (:data:`GROWTH_PRIOR`, :data:`EXPONENT_PRIOR`:
the medians and spreads of the six fitted models of
:data:`bellows.scaling.MODEL_EFFICIENCY`; a given prior profile's own values instead), so that
a run at one batch over a short span of progress still gets a profile, near the models'
usual growth, while a long run at several batches decides all three. A closed-form maximum a
posteriori estimate: three normal equations, no iteration.

Progress ``s`` is in reference samples: the samples of each segment weighted by the
efficiency the current fit gives them (:meth:`NoiseLog.progress`), so the fit and the
progress it is stated against are refined together, one refit after the other.

Every value is a hint from the job (``docs/security.md``): points are bounded
(:data:`bellows.bus.progress.MAX_GRAD_STAT`, a noise scale within :data:`NOISE_RANGE`), the
fitted profile is bounded like any other, and the log keeps a bounded number of points and
segments. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from bellows.inputs import check_float, check_int
from bellows.jobs import MAX_BATCH, MAX_WORK
from bellows.scaling.efficiency import MAX_GROWTH, PROGRESS_UNIT, EfficiencyProfile
from bellows.scaling.reference import MODEL_EFFICIENCY

__all__ = [
    "EXPONENT_PRIOR",
    "GROWTH_PRIOR",
    "MAX_NOISE_CHANGE",
    "MIN_NOISE_POINTS",
    "NOISE_KEPT",
    "NOISE_RANGE",
    "NOISE_SPREAD",
    "REFIT_PASSES",
    "SEGMENTS_KEPT",
    "NoiseLog",
    "NoisePoint",
    "efficiency_moved",
    "refit_efficiency",
]

NOISE_KEPT: Final = 64
"""Newest points kept per job."""
SEGMENTS_KEPT: Final = 64
"""Batch segments kept per job; past it the two oldest merge (at their mean batch)."""
MIN_NOISE_POINTS: Final = 3
"""Points a job must have reported before its efficiency is used (none: as today)."""
NOISE_SPREAD: Final = 0.5
"""Standard deviation of one point's ``log phi`` about the fit (a smoothed estimate)."""
NOISE_RANGE: Final = (1e-3, 1e12)
"""Noise scales (samples) a point may claim; outside, the point is refused."""


F64 = npt.NDArray[np.float64]


def _prior(values: Sequence[float], floor: float) -> tuple[float, float]:
    return statistics.median(values), max(floor, statistics.pstdev(values))


GROWTH_PRIOR: Final = _prior([p.growth for p in MODEL_EFFICIENCY.values()], 0.25)
"""``(mean, standard deviation)`` of ``growth`` under the prior: the six models' own."""
EXPONENT_PRIOR: Final = _prior([p.batch_exponent for p in MODEL_EFFICIENCY.values()], 0.1)
"""``(mean, standard deviation)`` of ``batch_exponent`` under the prior."""
REFIT_PASSES: Final = 4
"""Fits per refit, each with the progress under the one before (the two are refined together)."""
MAX_NOISE_CHANGE: Final = 4.0
"""The most a job's noise scale may move from one point to the next at the same batch."""
_LOG_SCALE_SPREAD: Final = 10.0  # the noise scale itself: the reports decide


@dataclass(frozen=True)
class NoisePoint:
    """One report's gradient statistics: ``grad_sqr`` (``|G|^2``, > 0) and ``grad_var``
    (``tr(Sigma)``, >= 0) measured at global ``batch`` after ``samples`` samples."""

    batch: int
    samples: float
    grad_sqr: float
    grad_var: float

    def __post_init__(self) -> None:
        check_int("batch", self.batch, minimum=1, maximum=MAX_BATCH)
        check_float("samples", self.samples, minimum=0.0, maximum=MAX_WORK)
        check_float("grad_sqr", self.grad_sqr, minimum=0.0, maximum=1e30, open_min=True)
        check_float("grad_var", self.grad_var, minimum=0.0, maximum=1e30)

    @property
    def noise_scale(self) -> float:
        """``grad_var / grad_sqr``: the gradient noise scale, in samples."""
        return self.grad_var / self.grad_sqr


@dataclass
class NoiseLog:
    """One job's gradient statistics and the samples it trained at each batch."""

    points: deque[NoisePoint] = field(default_factory=lambda: deque(maxlen=NOISE_KEPT))
    segments: list[tuple[int, float]] = field(default_factory=list)  # (batch, samples)
    samples: float = 0.0  # the samples the segments add up to

    def trained(self, batch: int, samples: float) -> None:
        """The job is at ``samples`` samples seen, the samples since the last call trained at
        ``batch`` (fewer than before: nothing, a report of the past)."""
        gained = samples - self.samples
        if gained <= 0:
            return
        self.samples = samples
        if self.segments and self.segments[-1][0] == batch:
            self.segments[-1] = (batch, self.segments[-1][1] + gained)
        else:
            self.segments.append((batch, gained))
        if len(self.segments) > SEGMENTS_KEPT:
            (b1, n1), (b2, n2) = self.segments[0], self.segments[1]
            mean = math.exp((n1 * math.log(b1) + n2 * math.log(b2)) / (n1 + n2))
            self.segments[:2] = [(min(MAX_BATCH, max(1, round(mean))), n1 + n2)]

    def add(self, point: NoisePoint) -> str | None:
        """Keep ``point``; why it was refused (its noise scale out of range, or moved more
        than :data:`MAX_NOISE_CHANGE` from the previous point at the same batch), or ``None``."""
        low, high = NOISE_RANGE
        phi = point.noise_scale
        if not low <= phi <= high:
            return f"gradient noise scale {phi:.4g} samples outside [{low:g}, {high:g}]"
        if self.points and self.points[-1].batch == point.batch:  # a rescale moves phi too
            change = phi / self.points[-1].noise_scale
            if not 1.0 / MAX_NOISE_CHANGE <= change <= MAX_NOISE_CHANGE:
                last = self.points[-1].noise_scale
                return (
                    f"gradient noise scale {phi:.4g} moved {change:.3g}x from {last:.4g} in "
                    f"one report (at most {MAX_NOISE_CHANGE:g}x)"
                )
        self.points.append(point)
        return None

    def progress(self, profile: EfficiencyProfile | None, samples: float | None = None) -> float:
        """Reference samples after ``samples`` samples seen (default: all of them), the
        segments weighted by ``profile``'s efficiency (``None``: one sample, one reference
        sample, as without efficiency)."""
        upto = self.samples if samples is None else samples
        return float(self.progress_at(profile, np.array([upto]))[0])

    def progress_at(self, profile: EfficiencyProfile | None, samples: npt.ArrayLike) -> F64:
        """:meth:`progress` at each of ``samples``: one pass over the segments, integrating
        ``d progress / d samples = E(b, progress)`` (:func:`_advance`)."""
        seen = np.minimum(np.asarray(samples, dtype=np.float64), self.samples)
        if profile is None:
            return seen
        out = np.zeros_like(seen)
        order = np.argsort(seen, kind="stable")
        segments = self.segments or [(profile.reference_batch, 0.0)]
        done, at, start, k = 0.0, 0.0, 0.0, 0  # progress at sample ``at``; next point ``k``
        for i, (batch, count) in enumerate(segments):
            end = math.inf if i == len(segments) - 1 else start + count
            while k < len(order) and seen[order[k]] <= end:
                # past the last segment only if adopted mid-run: its batch
                done = _advance(profile, batch, done, seen[order[k]] - at)
                at = float(seen[order[k]])
                out[order[k]] = done
                k += 1
            if i < len(segments) - 1:
                done = _advance(profile, batch, done, end - at)
                at = end
            start = end
        return np.minimum(out, MAX_WORK)

    def __len__(self) -> int:
        return len(self.points)


_RK_STEPS: Final = 16  # classical Runge-Kutta steps per stretch of samples


def _advance(profile: EfficiencyProfile, batch: int, start: float, samples: float) -> float:
    """Progress after ``samples`` more samples at ``batch`` from ``start`` reference samples:
    ``d s / d n = E(b, s)`` by :data:`_RK_STEPS` Runge-Kutta steps, spaced quadratically from
    the start (``E`` moves fastest early). What :meth:`EfficiencyProfile.progress_after` gives
    within 0.15 % (the six models of ``MODEL_EFFICIENCY``, batches up to 64 ``M0``, up to 1e8
    samples), far below the fit's own spread, at a few hundredths of its cost."""
    if samples <= 0:
        return start
    m0, scale = float(profile.reference_batch), profile.noise_scale
    growth, exponent = profile.growth, profile.batch_exponent
    at_batch = scale * math.pow(batch / m0, exponent)

    def rate(s: float) -> float:
        phi = at_batch * math.pow(max(s, 0.0) / PROGRESS_UNIT, growth) if growth else at_batch
        return (phi + m0) / (phi + batch)

    s, last = start, 0.0
    for i in range(1, _RK_STEPS + 1):
        n = samples * (i / _RK_STEPS) ** 2
        h = n - last
        k1 = rate(s)
        k2 = rate(s + h * k1 / 2)
        k3 = rate(s + h * k2 / 2)
        k4 = rate(s + h * k3)
        s += h * (k1 + 2 * k2 + 2 * k3 + k4) / 6
        last = n
    return min(s, MAX_WORK)


def refit_efficiency(
    log: NoiseLog,
    reference_batch: int,
    current: EfficiencyProfile | None = None,
    *,
    prior: EfficiencyProfile | None = None,
    source: str = "",
) -> EfficiencyProfile | None:
    """The job's efficiency relative to ``reference_batch`` fitted to ``log``'s points
    (``None`` with fewer than :data:`MIN_NOISE_POINTS`: the job is decided as today).

    The points' progress is taken under ``current`` (the previous fit; ``None``: samples),
    then under each new fit, up to :data:`REFIT_PASSES` times or until the noise scale
    moves by less than 1 %. ``prior``: a profile whose ``growth`` and ``batch_exponent``
    centre the priors (a model the job declared); its reference batch must be
    ``reference_batch``.
    """
    fit = current
    for _ in range(REFIT_PASSES):
        new = _refit_once(log, reference_batch, fit, prior=prior, source=source)
        if new is None:
            return None
        done = fit is not None and abs(math.log(new.noise_scale / fit.noise_scale)) < 0.01
        fit = new
        if done:
            break
    return fit


def _refit_once(
    log: NoiseLog,
    reference_batch: int,
    current: EfficiencyProfile | None,
    *,
    prior: EfficiencyProfile | None,
    source: str,
) -> EfficiencyProfile | None:
    """One least-squares pass with the points' progress under ``current``."""
    check_int("reference_batch", reference_batch, minimum=1, maximum=MAX_BATCH)
    points = [p for p in log.points if p.samples > 0]
    if len(points) < MIN_NOISE_POINTS:
        return None
    growth0, growth_sd = GROWTH_PRIOR
    exponent0, exponent_sd = EXPONENT_PRIOR
    if prior is not None:
        if prior.reference_batch != reference_batch:
            raise ValueError(f"prior at batch {prior.reference_batch}, not {reference_batch}")
        growth0, exponent0 = prior.growth, prior.batch_exponent
    s = np.maximum(log.progress_at(current, [p.samples for p in points]), 1.0)
    b = np.array([float(p.batch) for p in points])
    y = np.log(np.array([p.noise_scale for p in points]))
    x = np.stack([np.ones_like(s), np.log(s / PROGRESS_UNIT), np.log(b / reference_batch)], 1)
    scale0 = (
        math.log(prior.noise_scale)
        if prior is not None
        else float(np.mean(y - growth0 * x[:, 1] - exponent0 * x[:, 2]))
    )
    mean = np.array([scale0, growth0, exponent0])
    precision = np.diag([_LOG_SCALE_SPREAD**-2, growth_sd**-2, exponent_sd**-2])
    weight = NOISE_SPREAD**-2
    theta = np.linalg.solve(weight * x.T @ x + precision, weight * x.T @ y + precision @ mean)
    growth = float(np.clip(theta[1], 0.0, MAX_GROWTH))
    exponent = float(np.clip(theta[2], 0.0, 0.99))
    # the scale again with the clipped slopes, so the fit still passes through the points
    if (growth, exponent) != (float(theta[1]), float(theta[2])):
        residual = y - growth * x[:, 1] - exponent * x[:, 2]
        theta[0] = (weight * residual.sum() + scale0 / _LOG_SCALE_SPREAD**2) / (
            weight * len(y) + _LOG_SCALE_SPREAD**-2
        )
    low, high = NOISE_RANGE
    phi = float(np.clip(math.exp(float(np.clip(theta[0], -700.0, 700.0))), low, high))
    return EfficiencyProfile(reference_batch, phi, growth, exponent, source)


def efficiency_moved(
    before: EfficiencyProfile | None, now: EfficiencyProfile | None, *, tolerance: float
) -> bool:
    """Whether a revision is worth a round: efficiency first known (or lost), its noise
    scale moved by more than ``tolerance`` on a log scale, or its growth or batch exponent
    by more than ``tolerance`` (absolute)."""
    if before is None or now is None:
        return (before is None) != (now is None)
    return (
        abs(math.log(now.noise_scale / before.noise_scale)) > tolerance
        or abs(now.growth - before.growth) > tolerance
        or abs(now.batch_exponent - before.batch_exponent) > tolerance
    )
