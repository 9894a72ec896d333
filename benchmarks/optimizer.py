"""Optimizer benchmark: NumPy engine vs JAX vs the NumPy reference vs an exact MILP (HiGHS).

    python benchmarks/optimizer.py            # the tables in docs/optimizer.md
    python benchmarks/optimizer.py --quick    # tiny sizes, a few repeats (used by the tests)

Prints, from one run: the median wall time per call of every method side by side, with
ratios; whether they all found the same allocation and objective; the peak memory
``tracemalloc`` saw in the NumPy methods; ``admit()`` timings at simulator-like sizes; and
the max RSS of this process (JAX loaded) beside that of fresh processes that run only
``method="numpy"`` (what the live controller pays) or that import JAX.
"""

from __future__ import annotations

import argparse
import functools
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bellows.optimizer import admit, allocate, allocate_reference
from bellows.optimizer.solving import Method, RentRule, solve_rows

Table = npt.NDArray[np.float64]
Gpus = npt.NDArray[np.int64]

SIZES = [(50, 40, 8), (500, 2048, 32), (1000, 10000, 64)]
QUICK_SIZES = [(12, 10, 4), (40, 64, 8)]
ADMIT_SIZES = [(20, 40, 8), (50, 40, 16), (100, 400, 16), (100, 400, 64)]
MILP_LIMIT_S = 60.0
SLOW_CELLS = 5_000_000  # jobs*GPUs*k_max from which the dense methods run fewer repeats


def tsf_table(jobs: int, k_max: int, rng: np.random.Generator) -> Table:
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


def uniform_table(jobs: int, k_max: int, rng: np.random.Generator) -> Table:
    """Independent uniform values in [0, 1): no structure at all; column 0 as tsf_table."""
    values = rng.random((jobs, k_max + 1))
    values[:, 0] = np.where(np.arange(jobs) < 0.4 * jobs, -np.inf, 0.0)
    return values


def identical_table(jobs: int, k_max: int, rng: np.random.Generator) -> Table:
    """One TSF row for every job (one model, one profile): ties everywhere, the worst case
    for the band bounds, which then cannot narrow the DP much."""
    row = tsf_table(1, k_max, rng)[0]
    row[1] = 1.0
    values = np.tile(row, (jobs, 1))
    values[:, 0] = np.where(np.arange(jobs) < 0.4 * jobs, -np.inf, 0.0)
    return values


FAMILIES: tuple[tuple[str, Callable[[int, int, np.random.Generator], Table]], ...] = (
    ("tsf", tsf_table),
    ("uniform", uniform_table),
    ("identical", identical_table),
)


def solve_milp(values: Table, capacity: int, time_limit: float) -> tuple[float, bool]:
    """Exact MILP (mip_rel_gap 0): one binary per finite (job, k), one choice per job."""
    from scipy.optimize import Bounds, LinearConstraint, milp  # noqa: PLC0415
    from scipy.sparse import csr_matrix  # noqa: PLC0415

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


def traced_peak(fn: Callable[[], Any]) -> float:
    """Peak MiB that Python allocations (NumPy arrays included) reached during one call."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def objective(values: Table, gpus: Gpus) -> float:
    """The sum in row order, as the DP forms it."""
    total = 0.0
    for j, k in enumerate(gpus.tolist()):
        total += float(values[j, k])
    return total


# As one long-lived caller (a simulation, the controller): one rent rule for every call, so
# that "auto" rents across them and the band path keeps its width guesses.
RENT = RentRule()


def bench_allocate(sizes: list[tuple[int, int, int]], repeats: int, milp_limit: float) -> None:
    print("allocate(values, capacity): median ms per call, all methods in this one run")
    print(
        "  auto: allocate() as shipped (path: what it ran); dense/band: the JAX paths;"
        " numpy: the NumPy engine (its compiled layers);\n  layers: the NumPy engine on its"
        " NumPy layers (where the compiled ones are not built); reference: the plain NumPy DP"
        " (every float layer);"
        " MILP: SciPy milp/HiGHS, exact; agree: same allocation, same objective"
    )
    header = (
        f"{'table':9} {'jobs':>5} {'GPUs':>6} {'k_max':>5} | {'auto':>7} {'path':>5}"
        f" | {'dense':>8} {'band':>7} | {'numpy':>7} {'layers':>7} {'reference':>9} {'MILP':>8}"
        f" | {'numpy/band':>10} {'layers/numpy':>12} {'ref/numpy':>9} {'MILP/auto':>9} | agree"
        f" | {'peak MiB numpy':>14} {'ref':>6}"
    )
    print(header)
    print("-" * len(header))
    for family, make in FAMILIES:
        for jobs, gpus, k_max in sizes:
            values = make(jobs, k_max, np.random.default_rng(jobs * 7919 + gpus))
            slow = jobs * gpus * k_max > SLOW_CELLS
            few = max(1, repeats // 5) if slow else repeats

            def run(
                method: Method, v: Table = values, g: int = gpus, compiled: bool = True
            ) -> Gpus:
                return allocate(v, g, method=method, rent=RENT, compiled=compiled)

            t_auto, got = timed(functools.partial(run, "auto"), repeats)
            t_dense, dense = timed(functools.partial(run, "dense"), few)
            t_band, band = timed(functools.partial(run, "band"), repeats)
            t_numpy, lean = timed(functools.partial(run, "numpy"), repeats)
            t_layers, layered = timed(functools.partial(run, "numpy", compiled=False), repeats)
            reference = functools.partial(allocate_reference, values, gpus)
            t_ref, ref = timed(reference, few)
            peak_numpy = traced_peak(functools.partial(run, "numpy"))
            peak_ref = traced_peak(reference)
            t_milp, (best, exact) = timed(
                functools.partial(solve_milp, values, gpus, milp_limit), 1 if slow else few
            )
            expected = objective(values, ref)
            agree = all(
                np.array_equal(other, ref) and objective(values, other) == expected
                for other in (got, dense, band, lean, layered)
            ) and abs(best - expected) <= 1e-9 * (1 + abs(best))
            path = solve_rows(values, gpus, rent=RENT).path
            milp_note = f"{t_milp * 1e3:8.1f}" if exact else f"{'>limit':>8}"
            print(
                f"{family:9} {jobs:5d} {gpus:6d} {k_max:5d} | {t_auto * 1e3:7.2f} {path:>5}"
                f" | {t_dense * 1e3:8.2f} {t_band * 1e3:7.2f}"
                f" | {t_numpy * 1e3:7.2f} {t_layers * 1e3:7.2f} {t_ref * 1e3:9.1f} {milp_note}"
                f" | {t_numpy / t_band:10.1f} {t_layers / t_numpy:12.1f} {t_ref / t_numpy:9.1f}"
                f" {t_milp / t_auto:9.1f}"
                f" | {'yes' if agree else 'NO':>5} | {peak_numpy:14.2f} {peak_ref:6.1f}"
            )


def bench_admit(sizes: list[tuple[int, int, int]], repeats: int) -> None:
    print()
    print("admit(values, capacity, required=n//4): median ms per call, simulator-like sizes")
    header = (
        f"{'jobs':>5} {'GPUs':>5} {'k_max':>5} | {'auto':>7} {'path':>5} | {'numpy':>7}"
        f" {'dense':>7} {'band':>7} | admitted"
    )
    print(header)
    print("-" * len(header))
    for jobs, gpus, k_max in sizes:
        values = tsf_table(jobs, k_max, np.random.default_rng(jobs + gpus + k_max))
        values[:, 0] = -np.inf  # every candidate must run to be admitted
        required = jobs // 4
        cells = []
        admitted = 0
        for method in ("auto", "numpy", "dense", "band"):
            call = functools.partial(
                admit, values, gpus, required=required, method=method, rent=RENT
            )
            seconds, result = timed(call, repeats)
            cells.append(f"{seconds * 1e3:7.2f}")
            admitted = len(result.admitted)
        path = solve_rows(values[:admitted], gpus, rent=RENT).path
        print(
            f"{jobs:5d} {gpus:5d} {k_max:5d} | {cells[0]} {path:>5} | {' '.join(cells[1:])}"
            f" | {admitted}/{jobs}"
        )


# Children report VmHWM (peak RSS of their own address space): ru_maxrss would carry over
# the peak of this process, which they were forked from.
PEAK_RSS = """
def peak_mib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""

NUMPY_ONLY = """
import sys
import numpy as np
from bellows.optimizer import allocate
values = np.load(sys.argv[1])
before = peak_mib()
allocate(values, int(sys.argv[2]), method="numpy")
print(before, peak_mib(), "jax" in sys.modules)
"""

WITH_JAX = """
import sys
import numpy as np
from bellows.optimizer import allocate
values = np.load(sys.argv[1])
allocate(values, int(sys.argv[2]), method="band")
print(peak_mib())
"""


def bench_rss(jobs: int, gpus: int, k_max: int) -> None:
    """Max RSS of fresh processes: the NumPy engine alone, and the JAX band path."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nprocess max RSS: {rss:.0f} MiB (this process: JAX buffers, every method)")
    values = tsf_table(jobs, k_max, np.random.default_rng(jobs * 7919 + gpus))
    with tempfile.TemporaryDirectory() as folder:
        table = Path(folder) / "values.npy"
        np.save(table, values)
        argv = [str(table), str(gpus)]
        run = functools.partial(subprocess.run, capture_output=True, text=True, check=True)
        before, after, jax_loaded = run(
            [sys.executable, "-c", PEAK_RSS + NUMPY_ONLY, *argv]
        ).stdout.split()
        with_jax = float(run([sys.executable, "-c", PEAK_RSS + WITH_JAX, *argv]).stdout)
    print(
        f"fresh process, tsf {jobs}x{gpus}x{k_max}, method='numpy': max RSS"
        f" {float(after):.0f} MiB ({float(before):.0f} after imports), JAX imported: {jax_loaded}"
    )
    print(f"fresh process, same table, method='band' (imports JAX, compiles): {with_jax:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the tests")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    repeats = args.repeats or (3 if args.quick else 15)
    import jax  # noqa: PLC0415 - only to name the version; the methods load it themselves

    print(f"jax {jax.__version__}, numpy {np.__version__}, {jax.devices()[0].platform}")
    sizes = QUICK_SIZES if args.quick else SIZES
    bench_allocate(sizes, repeats, MILP_LIMIT_S)
    bench_admit(QUICK_SIZES if args.quick else ADMIT_SIZES, repeats)
    bench_rss(*sizes[-1])


if __name__ == "__main__":
    main()
