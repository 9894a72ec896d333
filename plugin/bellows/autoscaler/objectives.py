"""What a round maximises: the per-job speedup table turned into the DP's value table.

The exact DP (:func:`bellows.optimizer.allocate`) maximises a *separable* sum, one term per
job and GPU count; each objective here maps a job's (restart-priced) speedup ``S(k)`` to such
a term, so every one of them is solved exactly:

* :attr:`Objective.SPEEDUP` (the paper's): ``S(k)``. The sum of speedups gives each next GPU
  to the job that scales best, whatever its size: it concentrates GPUs on the most scalable
  jobs and starves the ones that scale poorly.
* :attr:`Objective.FAIR`: ``-1 / S(k)``, Pollux's generalised mean of speedups with exponent
  ``p = -1`` (OSDI'21, eq. 11; with ``p = -1`` the mean is ``n / sum(1/S)``, so maximising it
  is maximising ``sum(-1/S)``). A GPU is worth ``S(k+1) - S(k)`` over ``S(k) S(k+1)``: the
  less a job has, the more its next GPU counts. No job of a round gets 0 GPUs (admission
  places every admitted job on at least its smallest count), so the ``-inf`` Pollux gives
  an unplaced job never arises; a queued job that does not fit is not in the sum at all.
* :attr:`Objective.REMAINING`: ``S(k) * T_min / T``, the speedup weighted by the inverse of
  the job's remaining one-GPU time ``T`` (``T_min`` the round's shortest, so every weight is
  in ``(0, 1]`` and sums stay in the exact grid's range). Each GPU goes where it shortens
  the most remaining time per job: shortest-remaining-first among jobs that scale alike.

Values that are ``-inf`` (counts a job may not take) stay ``-inf``.
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np
import numpy.typing as npt

__all__ = ["Objective", "objective_values"]

F64 = npt.NDArray[np.float64]


class Objective(StrEnum):
    """The sum a round maximises (see the module docstring)."""

    SPEEDUP = "speedup"  # sum of S(k): the paper's
    FAIR = "fair"  # sum of -1/S(k): Pollux's p = -1 fairness
    REMAINING = "remaining"  # sum of S(k) weighted by 1 / remaining one-GPU time


def objective_values(values: F64, objective: Objective, remaining_s: F64 | None = None) -> F64:
    """``values`` (speedups ``[jobs, width+1]``, ``-inf`` where not allowed) as the terms of
    ``objective``; ``remaining_s[j]`` is job ``j``'s remaining one-GPU seconds (needed by
    :attr:`Objective.REMAINING` only; clipped to at least one second)."""
    if objective is Objective.SPEEDUP:
        return values
    finite = np.isfinite(values) & (values > 0)
    if objective is Objective.FAIR:
        with np.errstate(divide="ignore"):
            fair = -1.0 / np.where(finite, values, 1.0)
        return np.asarray(np.where(finite, fair, -np.inf), dtype=np.float64)
    if remaining_s is None or remaining_s.shape != (values.shape[0],):
        raise ValueError("remaining_s: one remaining time per row is needed")
    left = np.maximum(remaining_s, 1.0)
    weight = float(left.min()) / left if left.size else left
    return np.asarray(np.where(finite, values * weight[:, None], -np.inf), dtype=np.float64)
