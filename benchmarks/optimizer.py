"""Optimizer benchmark: JAX vs the NumPy reference vs an exact MILP (HiGHS via SciPy).

    python benchmarks/optimizer.py            # the table in docs/optimizer.md
    python benchmarks/optimizer.py --quick    # tiny sizes, a few repeats (used by the tests)

Prints, from one run, median wall time per call and the ratios side by side, the objective
each method found (all must agree), peak traced NumPy memory and the process's max RSS, and
``admit()`` timings at simulator-like sizes with the path "auto" picks.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_matrix

from bellows.optimizer import admit, allocate, allocate_reference
from bellows.optimizer.solving import solve_rows

SIZES = [(50, 40, 8), (500, 2048, 32), (1000, 10000, 64)]
QUICK_SIZES = [(12, 10, 4), (40, 64, 8)]
ADMIT_SIZES = [(20, 40, 8), (50, 40, 16), (100, 400, 16), (100, 400, 64)]
MILP_LIMIT_S = 60.0


def tsf_table(jobs: int, k_max: int, rng: np.random.Generator) -> np.ndarray:
    """TSF-like rows: sublinear speedup up to a per-job k_max, holes, noise, some rigid.

    Rows past 40 % of the table may get 0 GPUs (column 0 = 0, a queued job); the first
    40 % must run (column 0 = -inf), like running jobs in the autoscaler.
    """
    ks = np.arange(k_max + 1)
    own_max = rng.integers(1, k_max + 1, jobs)
    comm = rng.uniform(0.0, 0.4, jobs)[:, None]
    values = ks / (1.0 + comm * np.maximum(ks - 1, 0)) * rng.uniform(0.5, 2.0, jobs)[:, None]
    values += rng.normal(0.0, 0.05, values.shape)  # measured TSFs are not concave
    values[(ks > own_max[:, None]) | (rng.random(values.shape) < 0.15)] = -np.inf
    rigid = rng.random(jobs) < 0.1
    values[rigid] = -np.inf
    values[rigid, own_max[rigid]] = own_max[rigid].astype(float)
    stuck = ~np.isfinite(values[:, 1:]).any(axis=1)
    values[stuck, 1] = 1.0  # holes took every count: leave the job one GPU
    values[:, 0] = np.where(np.arange(jobs) < 0.4 * jobs, -np.inf, 0.0)
    return values


def uniform_table(jobs: int, k_max: int, rng: np.random.Generator) -> np.ndarray:
    """Independent uniform values in [0, 1): no structure at all; column 0 as tsf_table."""
    values = rng.random((jobs, k_max + 1))
    values[:, 0] = np.where(np.arange(jobs) < 0.4 * jobs, -np.inf, 0.0)
    return values


def identical_table(jobs: int, k_max: int, rng: np.random.Generator) -> np.ndarray:
    """One TSF row for every job (one model, one profile): ties everywhere, the worst case
    for the band bounds, which then cannot narrow the DP (the dense path runs)."""
    row = tsf_table(1, k_max, rng)[0]
    row[1] = 1.0
    values = np.tile(row, (jobs, 1))
    values[:, 0] = np.where(np.arange(jobs) < 0.4 * jobs, -np.inf, 0.0)
    return values


def solve_milp(values: np.ndarray, capacity: int, time_limit: float) -> tuple[float, bool]:
    """Exact MILP (mip_rel_gap 0): one binary per finite (job, k), one choice per job."""
    jobs = values.shape[0]
    j, k = np.nonzero(np.isfinite(values))
    m = j.size
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
        options={"mip_rel_gap": 0.0, "time_limit": time_limit},
    )
    return (-float(result.fun) if result.x is not None else float("nan")), result.status == 0


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median seconds over ``repeats`` calls after one warm-up (compile) call."""
    out = fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def numpy_peak(fn: Callable[[], Any]) -> float:
    """Peak MiB NumPy allocated during one call (tracemalloc)."""
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def objective(values: np.ndarray, gpus: np.ndarray) -> float:
    return float(values[np.arange(values.shape[0]), gpus].sum())


def bench_allocate(sizes: list[tuple[int, int, int]], repeats: int, milp_limit: float) -> None:
    print("allocate(values, capacity): median ms per call; ratios = other / JAX (auto path)")
    header = (
        f"{'table':9} {'jobs':>5} {'GPUs':>6} {'k_max':>5} | {'JAX':>8} {'path':>5}"
        f" {'dense':>8} {'NumPy':>9} {'MILP':>9} | {'NumPy/JAX':>9} {'MILP/JAX':>9}"
        f" | objective agree | NumPy peak MiB"
    )
    print(header)
    print("-" * len(header))
    families = (("tsf", tsf_table), ("uniform", uniform_table), ("identical", identical_table))
    for family, make in families:
        for jobs, gpus, k_max in sizes:
            rng = np.random.default_rng(jobs * 7919 + gpus)
            values = make(jobs, k_max, rng)
            t_jax, got = timed(lambda v=values, g=gpus: allocate(v, g), repeats)
            slow = jobs * gpus * k_max > 5_000_000
            reps = max(1, repeats // 5) if slow else repeats
            t_dense, _ = timed(lambda v=values, g=gpus: allocate(v, g, method="dense"), reps)
            t_np, ref = timed(lambda v=values, g=gpus: allocate_reference(v, g), reps)
            peak = numpy_peak(lambda v=values, g=gpus: allocate_reference(v, g))
            t_milp, (best, exact) = timed(
                lambda v=values, g=gpus: solve_milp(v, g, milp_limit), 1 if slow else reps
            )
            agree = objective(values, got) == objective(values, ref) and (
                abs(best - objective(values, got)) <= 1e-9 * (1 + abs(best))
            )
            path = solve_rows(values, gpus).path
            milp_note = f"{t_milp * 1e3:9.1f}" if exact else f"{'>limit':>9}"
            print(
                f"{family:9} {jobs:5d} {gpus:6d} {k_max:5d} | {t_jax * 1e3:8.2f} {path:>5}"
                f" {t_dense * 1e3:8.2f} {t_np * 1e3:9.1f} {milp_note}"
                f" | {t_np / t_jax:9.1f} {t_milp / t_jax:9.1f}"
                f" | {'yes' if agree else 'NO':>15} | {peak:14.1f}"
            )


def bench_admit(sizes: list[tuple[int, int, int]], repeats: int) -> None:
    print()
    print("admit(values, capacity, required=n//4): median ms per call, simulator-like sizes")
    header = (
        f"{'jobs':>5} {'GPUs':>5} {'k_max':>5} | {'auto':>7} {'numpy':>7} {'dense':>7}"
        f" {'band':>7} | admitted"
    )
    print(header)
    print("-" * len(header))
    for jobs, gpus, k_max in sizes:
        rng = np.random.default_rng(jobs + gpus + k_max)
        values = tsf_table(jobs, k_max, rng)
        values[:, 0] = -np.inf  # every candidate must run to be admitted
        required = jobs // 4
        cells = []
        admitted = 0
        for method in ("auto", "numpy", "dense", "band"):
            seconds, result = timed(
                lambda m=method, v=values, g=gpus, r=required: admit(v, g, required=r, method=m),
                repeats,
            )
            cells.append(f"{seconds * 1e3:7.2f}")
            admitted = len(result.admitted)
        print(f"{jobs:5d} {gpus:5d} {k_max:5d} | {' '.join(cells)} | {admitted}/{jobs}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the tests")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    repeats = args.repeats or (3 if args.quick else 15)
    print(f"jax {jax.__version__}, numpy {np.__version__}, {jax.devices()[0].platform}")
    bench_allocate(QUICK_SIZES if args.quick else SIZES, repeats, MILP_LIMIT_S)
    bench_admit(QUICK_SIZES if args.quick else ADMIT_SIZES, repeats)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nprocess max RSS: {rss:.0f} MiB (JAX buffers included)")


if __name__ == "__main__":
    main()
