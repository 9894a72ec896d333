"""Fitting the JSA's models to measurements: ``t_proc`` per job, ``t_ar`` per cluster.

* :func:`fit_step_profile` — single-GPU rows only. On one GPU there is no Allreduce, so the
  whole measured ``step_time`` is ``t_proc(m)`` (the tiny ``sync_time`` reported there is the
  framework's local gradient hook and is part of the iteration either way); repeated
  measurements at one batch are averaged.
* :func:`fit_cluster_profile` — multi-GPU rows of several jobs at once: the ring-Allreduce
  coefficients of both links and the overlap exponent, by least squares on the log of the step
  time (relative error, so fast and slow models weigh alike). Plain NumPy Levenberg-Marquardt:
  five parameters, a few thousand rows.
* :func:`fit_job_profile` — a job's profile plus, when its rows include multi-GPU ones, the
  parameter count that makes the cluster model match them best (``comm_weights``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bellows.inputs import check_int
from bellows.jobs import MAX_WEIGHTS, SpecError, StepProfile
from bellows.scaling.measurements import StepMeasurement
from bellows.scaling.profiles import MAX_OVERLAP, ClusterProfile, JobProfile, LinkCost
from bellows.scaling.timing import processing_seconds

__all__ = [
    "FitSample",
    "fit_cluster_profile",
    "fit_job_profile",
    "fit_step_profile",
    "levenberg_marquardt",
    "predict_step_time",
]

F64 = npt.NDArray[np.float64]


def fit_step_profile(rows: Sequence[StepMeasurement]) -> StepProfile:
    """``t_proc(m)`` points from the single-GPU rows of ``rows`` (others are ignored)."""
    points = [(r.local_batch, r.step_time) for r in rows if r.gpus == 1]
    if not points:
        raise SpecError("rows", f"{len(rows)} rows, none on 1 GPU", "at least one 1-GPU row")
    return StepProfile.from_points(points)


def predict_step_time(
    profile: JobProfile, cluster: ClusterProfile, row: StepMeasurement, *, generic: bool = False
) -> float:
    """Predicted ``step_time`` of a measured configuration, on the nodes it actually used.

    ``generic=True`` ignores the job's fitted ``comm_weights`` (the cluster model alone).
    """
    weights = profile.weights if generic else profile.effective_weights
    compute = processing_seconds(profile.step, row.local_batch)
    return cluster.combine(compute, cluster.allreduce_seconds(weights, row.gpus, nodes=row.nodes))


def _step_times(
    rows: Sequence[StepMeasurement], step: StepProfile, cluster: ClusterProfile
) -> Callable[[int], F64]:
    """:func:`predict_step_time` of every row for a given parameter count, vectorized.

    The same operations in the same order as ``ClusterProfile.allreduce_seconds`` and
    ``ClusterProfile.combine``, on arrays: what the ``commWeights`` search evaluates a few
    hundred times over all of a job's multi-GPU rows.
    """
    compute = np.array([processing_seconds(step, r.local_batch) for r in rows])
    gpus = np.array([float(r.gpus) for r in rows])
    one_node = np.array([r.nodes == 1 for r in rows])
    latency = np.where(one_node, cluster.intra_node.latency, cluster.inter_node.latency)
    per_weight = np.where(one_node, cluster.intra_node.per_weight, cluster.inter_node.per_weight)
    g = cluster.overlap

    def times(weights: int) -> F64:
        comm = latency * (gpus - 1) + per_weight * weights * 2.0 * (gpus - 1) / gpus
        comm = np.where(gpus > 1, comm, 0.0)
        combined = compute + comm if g == 1.0 else (compute**g + comm**g) ** (1.0 / g)
        return np.asarray(np.where(comm > 0.0, combined, compute), dtype=np.float64)

    return times


@dataclass(frozen=True)
class FitSample:
    """One job's measured rows with what the cluster fit needs to know about the job."""

    weights: int
    step: StepProfile
    rows: tuple[StepMeasurement, ...]


def _design(samples: Sequence[FitSample]) -> tuple[F64, F64, F64, F64, F64, F64]:
    """Column arrays over every multi-GPU row: compute, weights, gpus, inter?, step time."""
    compute, weights, gpus, inter, measured = [], [], [], [], []
    for sample in samples:
        for row in sample.rows:
            if row.gpus == 1:
                continue
            compute.append(processing_seconds(sample.step, row.local_batch))
            weights.append(float(sample.weights))
            gpus.append(float(row.gpus))
            inter.append(1.0 if row.nodes > 1 else 0.0)
            measured.append(row.step_time)
    if not measured:
        raise SpecError("samples", len(samples), "at least one multi-GPU row among them")
    arrays = (compute, weights, gpus, inter, measured)
    c, w, k, x, y = (np.array(a, dtype=np.float64) for a in arrays)
    return c, w, k, x, y, 2.0 * (k - 1) / k


def levenberg_marquardt(residual: Callable[[F64], F64], theta: F64, *, steps: int = 200) -> F64:
    """Minimise ``sum(residual(theta)**2)``; forward-difference Jacobian, adaptive damping."""
    damping = 1e-3
    r = residual(theta)
    cost = float(r @ r)
    for _ in range(steps):
        jac = np.empty((r.size, theta.size))
        for i in range(theta.size):
            bumped = theta.copy()
            bumped[i] += 1e-6
            jac[:, i] = (residual(bumped) - r) / 1e-6
        grad = jac.T @ r
        normal = jac.T @ jac
        improved = False
        while damping < 1e10:
            step = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-12), -grad)
            trial = theta + step
            r_trial = residual(trial)
            cost_trial = float(r_trial @ r_trial)
            if cost_trial < cost:
                improved = True
                theta, r, damping = trial, r_trial, max(damping / 3.0, 1e-12)
                converged = cost - cost_trial < 1e-12 * max(cost, 1e-30)
                cost = cost_trial
                break
            damping *= 4.0
        if not improved or converged:
            break
    return theta


def fit_cluster_profile(
    samples: Sequence[FitSample],
    *,
    overlap: bool = True,
    gpus_per_node: int = 4,
    source: str = "",
) -> ClusterProfile:
    """Fit the cluster's Allreduce links (and overlap exponent) to several jobs' rows.

    Coefficients are kept positive by fitting their logarithms; ``overlap=False`` pins the
    exponent to 1 (the paper's additive model ``T = t_proc + t_ar``).
    """
    c, w, k, x, y, share = _design(samples)
    log_y = np.log(y)

    def unpack(theta: F64) -> tuple[F64, float]:
        coef = np.exp(theta[:4])
        gamma = 1.0 + (MAX_OVERLAP - 1.0) / (1.0 + math.exp(-theta[4])) if overlap else 1.0
        return coef, gamma

    def residual(theta: F64) -> F64:
        (a_n, b_n, a_r, b_r), g = unpack(theta)
        t_ar = np.where(x > 0, a_r * (k - 1) + b_r * w * share, a_n * (k - 1) + b_n * w * share)
        # Scale before the power so that large exponents do not overflow.
        top = np.maximum(c, t_ar)
        t = top * ((c / top) ** g + (t_ar / top) ** g) ** (1.0 / g)
        return np.asarray(np.log(t) - log_y, dtype=np.float64)

    start = np.array([math.log(1e-3), math.log(1e-9), math.log(1e-3), math.log(5e-9), -2.0])
    theta = levenberg_marquardt(residual, start)
    (a_n, b_n, a_r, b_r), gamma = unpack(theta)
    return ClusterProfile(
        intra_node=LinkCost(float(a_n), float(b_n)),
        inter_node=LinkCost(float(a_r), float(b_r)),
        overlap=gamma,
        gpus_per_node=gpus_per_node,
        source=source,
    )


def fit_job_profile(
    rows: Sequence[StepMeasurement],
    *,
    weights: int,
    cluster: ClusterProfile | None = None,
    source: str = "",
) -> JobProfile:
    """A job's profile from its rows; with ``cluster`` and multi-GPU rows, also ``comm_weights``.

    ``comm_weights`` is the parameter count whose Allreduce time, under ``cluster``, best
    explains the job's own multi-GPU step times (least squares on their logarithm, searched
    over four decades around ``weights``). It absorbs what the generic model cannot know about
    the job: gradient bucketing, fp16 gradients, extra collectives.
    """
    check_int("weights", weights, minimum=1, maximum=MAX_WEIGHTS)
    step = fit_step_profile(rows)
    profile = JobProfile(weights=weights, step=step, source=source)
    multi = [r for r in rows if r.gpus > 1]
    if cluster is None or not multi:
        return profile
    measured = np.log(np.array([r.step_time for r in multi]))
    predict = _step_times(multi, step, cluster)

    def loss(log_w: float) -> float:
        predicted = predict(max(1, round(math.exp(log_w))))
        return float(np.sum((np.log(predicted) - measured) ** 2))

    # the fitted count stays a valid profile value: at most MAX_WEIGHTS, at least 1
    grid = np.linspace(
        max(math.log(weights) - 2 * math.log(10), 0.0),
        min(math.log(weights) + 2 * math.log(10), math.log(MAX_WEIGHTS)),
        81,
    )
    best = int(np.argmin([loss(g) for g in grid]))
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, grid.size - 1)]
    # Golden-section refinement inside the bracketing grid cells.
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(30):
        a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        if loss(a) <= loss(b):
            hi = b
        else:
            lo = a
    fitted = min(MAX_WEIGHTS, max(1, round(math.exp((lo + hi) / 2.0))))
    return JobProfile(weights=weights, step=step, source=source, comm_weights=fitted)
