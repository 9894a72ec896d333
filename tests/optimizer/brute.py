"""Brute force, an exact MILP, and random value tables for the optimizer tests."""

from __future__ import annotations

import itertools

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_matrix


def brute_force(values: np.ndarray, capacity: int) -> tuple[float, tuple[int, ...] | None]:
    """Best objective and the allocation the documented tie rule picks (None: infeasible).

    Objectives are summed left to right, as the DP does, so dyadic values tie exactly.
    Tie rule: fewest GPUs in total, then the smallest count for the last job, then for the
    one before, and so on.
    """
    best = -np.inf
    chosen: tuple[int, ...] | None = None
    choices = [np.flatnonzero(np.isfinite(row)).tolist() for row in values]
    for gpus in itertools.product(*choices):
        if sum(gpus) > capacity:
            continue
        total = 0.0
        for j, k in enumerate(gpus):
            total += values[j, k]
        key = (sum(gpus), gpus[::-1])
        if total > best or (total == best and chosen is not None and key < _key(chosen)):
            best, chosen = total, tuple(gpus)
    return best, chosen


def _key(gpus: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    return sum(gpus), gpus[::-1]


def milp_objective(values: np.ndarray, capacity: int) -> float | None:
    """Exact optimum by HiGHS (mip_rel_gap 0), None when infeasible."""
    jobs = values.shape[0]
    j, k = np.nonzero(np.isfinite(values))
    m = j.size
    if m == 0 or jobs == 0:
        return 0.0 if jobs == 0 else None
    rows = np.concatenate([j, np.full(m, jobs)])
    cols = np.concatenate([np.arange(m), np.arange(m)])
    data = np.concatenate([np.ones(m), k.astype(float)])
    matrix = csr_matrix((data, (rows, cols)), shape=(jobs + 1, m))
    lower = np.concatenate([np.ones(jobs), [-np.inf]])
    upper = np.concatenate([np.ones(jobs), [capacity]])
    result = milp(
        -values[j, k],
        constraints=LinearConstraint(matrix, lower, upper),
        integrality=np.ones(m),
        bounds=Bounds(0, 1),
        options={"mip_rel_gap": 0.0},
    )
    return None if result.x is None else -float(result.fun)


def random_table(
    rng: np.random.Generator,
    jobs: int,
    k_max: int,
    *,
    holes: float = 0.3,
    dyadic: bool = False,
    must_run: float = 0.5,
) -> np.ndarray:
    """Non-concave values with ``-inf`` holes; dyadic values make ties exact and frequent."""
    values = (
        rng.integers(0, 8, (jobs, k_max + 1)) / 2.0
        if dyadic
        else rng.random((jobs, k_max + 1)) * rng.uniform(0.1, 10.0)
    )
    values[rng.random(values.shape) < holes] = -np.inf
    values[rng.random(jobs) < must_run, 0] = -np.inf
    return values


def objective(values: np.ndarray, gpus: np.ndarray) -> float:
    total = 0.0
    for j, k in enumerate(gpus):
        total += values[j, k]
    return total
