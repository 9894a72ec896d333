"""The cluster's generic Allreduce model, fitted to measured Allreduce times.

``bellows calibrate`` times one Allreduce of ``w`` float32 weights across ``k`` processes
for several ``w`` and ``k`` (see :mod:`bellows.profiling.allreduce`). This module fits the
ring model the JSA uses (:class:`bellows.scaling.ClusterProfile`)::

    t_ar(w, k) = latency * (k - 1) + per_weight * w * 2 (k - 1) / k

by least squares on the *relative* error (each row divided by its time), so that small
buffers, whose time is nearly all latency, weigh as much as large ones; both coefficients
are kept non-negative. Pure NumPy, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bellows.jobs import SpecError
from bellows.scaling import ClusterProfile, LinkCost

__all__ = ["AllreduceSample", "LinkFit", "cluster_profile", "fit_link"]


@dataclass(frozen=True)
class AllreduceSample:
    """One measured Allreduce: ``weights`` float32 values over ``processes`` ranks."""

    processes: int
    weights: int
    seconds: float

    def __post_init__(self) -> None:
        if isinstance(self.processes, bool) or self.processes < 2:
            raise SpecError("processes", self.processes, "an integer >= 2 (1 needs no Allreduce)")
        if isinstance(self.weights, bool) or self.weights < 1:
            raise SpecError("weights", self.weights, "an integer >= 1")
        if not math.isfinite(self.seconds) or self.seconds <= 0:
            raise SpecError("seconds", self.seconds, "a finite number > 0")


@dataclass(frozen=True)
class LinkFit:
    """A fitted link and how well it explains the samples it was fitted to."""

    link: LinkCost
    median_relative_error: float
    max_relative_error: float

    def predict(self, processes: int, weights: int) -> float:
        k = processes
        return self.link.latency * (k - 1) + self.link.per_weight * weights * 2 * (k - 1) / k


def _solve(columns: np.ndarray, target: np.ndarray) -> np.ndarray:
    solution, *_ = np.linalg.lstsq(columns, target, rcond=None)
    return np.asarray(solution, dtype=np.float64)


def fit_link(samples: Sequence[AllreduceSample]) -> LinkFit:
    """Non-negative relative least squares of the ring model over ``samples``."""
    if len(samples) < 2:
        raise SpecError("samples", len(samples), "at least two Allreduce measurements")
    k = np.array([s.processes for s in samples], dtype=np.float64)
    w = np.array([s.weights for s in samples], dtype=np.float64)
    t = np.array([s.seconds for s in samples], dtype=np.float64)
    design = np.stack([k - 1.0, w * 2.0 * (k - 1.0) / k], axis=1) / t[:, None]
    ones = np.ones_like(t)
    coef = _solve(design, ones)
    # Active-set step for non-negativity: a negative coefficient is pinned at zero and the
    # other one refitted alone (two unknowns, so one pass is exact).
    if coef[0] < 0 or coef[1] < 0:
        keep = 1 if coef[0] < 0 else 0
        alone = _solve(design[:, [keep]], ones)
        coef = np.zeros(2)
        coef[keep] = max(float(alone[0]), 0.0)
    link = LinkCost(latency=float(coef[0]), per_weight=float(coef[1]))
    fit = LinkFit(link, 0.0, 0.0)
    errors = [abs(fit.predict(s.processes, s.weights) / s.seconds - 1.0) for s in samples]
    return LinkFit(link, float(np.median(errors)), float(max(errors)))


def cluster_profile(
    intra: LinkFit,
    *,
    inter: LinkCost | None,
    gpus_per_node: int,
    overlap: float = 1.0,
    source: str = "",
) -> ClusterProfile:
    """The cluster profile; without a measured ``inter`` link the intra-node one stands in."""
    return ClusterProfile(
        intra_node=intra.link,
        inter_node=intra.link if inter is None else inter,
        overlap=overlap,
        gpus_per_node=gpus_per_node,
        source=source,
    )
