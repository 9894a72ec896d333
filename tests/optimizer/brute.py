"""Brute force, an exact MILP, and random value tables for the optimizer tests."""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import numpy as np

from tests.conftest import REPO, load_script


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


@functools.cache
def benchmark() -> Any:
    """benchmarks/optimizer.py, loaded by path (it is a script, not a package): its table
    generators and its MILP."""
    return load_script(REPO / "benchmarks" / "optimizer.py")


def milp_objective(values: np.ndarray, capacity: int) -> float | None:
    """Exact optimum by HiGHS (the benchmark's MILP, mip_rel_gap 0), None when infeasible."""
    jobs = values.shape[0]
    if jobs == 0:
        return 0.0
    if not np.isfinite(values).any():
        return None
    value, _ = benchmark().solve_milp(values, capacity, time_limit=math.inf)
    return None if math.isnan(value) else float(value)


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
