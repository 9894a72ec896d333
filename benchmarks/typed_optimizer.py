"""The (type, count) optimizer against the whole 0-1 program (issue 39 item 2).

    python benchmarks/typed_optimizer.py            # the table in docs/optimizer.md
    python benchmarks/typed_optimizer.py --quick    # small sizes, few repeats (the tests)

Prints, from one run, per size and kind of table: the median wall time of
``allocate_typed`` and of ``allocate_typed_reference`` (HiGHS on every choice), their ratio,
whether their objectives agree (1e-6), and how many choices the exact search weighed after
the fixing; then one type through ``allocate_typed`` beside today's ``allocate`` (the same
call underneath); then whole processes, cold: a fresh interpreter that imports Bellows and
solves the largest typed size once, beside one that does the same with one type.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bellows.optimizer import allocate
from bellows.optimizer.typed import TypedAllocation, allocate_typed, allocate_typed_reference

Table = npt.NDArray[np.float64]

# (jobs, GPUs per type, k_max): Sia's 64-GPU mix (24 T4, 16 A100, 24 2080 Ti), a mid size,
# and issue 39's target, 1 000 jobs on 3 types x 3 000 GPUs
SIZES = [(160, (24, 16, 24), 16), (300, (200, 100, 200), 32), (1000, (1000, 1000, 1000), 64)]
QUICK_SIZES = [(20, (8, 4, 8), 4), (60, (24, 16, 24), 8)]
ONE_TYPE = (1000, 10000, 64)
QUICK_ONE_TYPE = (40, 64, 8)
TYPE_SPEED = (1.0, 4.0, 1.6)  # per type, times a per-job factor: A100 2.5-7x a T4 in Sia's data


def typed_table(jobs: int, types: int, k_max: int, rng: np.random.Generator) -> Table:
    """TSF-like rows per type: sublinear speedups to a per-job, per-type k_max, a speed per
    job and type, noise and holes; 40 % of the jobs must run (column 0 ``-inf``), the rest
    may wait (0), the same for every type."""
    ks = np.arange(k_max + 1, dtype=float)
    comm = rng.uniform(0.0, 0.4, (jobs, types, 1))
    speed = np.array(TYPE_SPEED[:types]) * rng.uniform(0.4, 1.8, (jobs, types))
    values = ks / (1.0 + comm * np.maximum(ks - 1, 0)) * speed[:, :, None]
    values += rng.normal(0.0, 0.05, values.shape)
    own_max = rng.integers(1, k_max + 1, (jobs, types, 1))
    values[(ks > own_max) | (rng.random(values.shape) < 0.15)] = -np.inf
    values[:, :, 1] = np.maximum(values[:, :, 1], 0.5 * speed)  # every job fits one GPU
    values[:, :, 0] = np.where(np.arange(jobs) < 0.4 * jobs, -np.inf, 0.0)[:, None]
    return values


def uniform_typed(jobs: int, types: int, k_max: int, rng: np.random.Generator) -> Table:
    """Independent uniform values: no structure for the bound to use; column 0 as above."""
    values = rng.random((jobs, types, k_max + 1))
    values[:, :, 0] = np.where(np.arange(jobs) < 0.4 * jobs, -np.inf, 0.0)[:, None]
    return values


def _median_s(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _timed(
    solve: Callable[[Table, list[int]], TypedAllocation],
    values: Table,
    caps: list[int],
    repeats: int,
) -> tuple[float, TypedAllocation]:
    """The median seconds of ``repeats`` calls, and the last call's allocation."""
    got: list[TypedAllocation] = []
    return _median_s(lambda: got.append(solve(values, caps)), repeats), got[-1]


def _cold_s(jobs: int, caps: tuple[int, ...], k_max: int) -> float:
    """A fresh interpreter: import, build the table, solve once (what one controller round
    after a start pays)."""
    code = (
        "import sys, time, numpy as np; t = time.perf_counter(); "
        f"sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        "from typed_optimizer import typed_table; "
        "from bellows.optimizer.typed import allocate_typed; "
        f"v = typed_table({jobs}, {len(caps)}, {k_max}, np.random.default_rng(1)); "
        f"allocate_typed(v, {list(caps)}); print(time.perf_counter() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=600)  # fmt: skip
    return float(out.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    args = parser.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else SIZES
    repeats = 3 if args.quick else 7
    rng = np.random.default_rng(7)
    print(
        "table   | jobs x types x GPUs      | k_max | typed s  | reference s | ref/typed | "
        "agree | searched / choices"
    )
    for kind, make in (("tsf", typed_table), ("uniform", uniform_typed)):
        for jobs, caps, k_max in sizes:
            values = make(jobs, len(caps), k_max, rng)
            t_fast, fast = _timed(allocate_typed, values, list(caps), repeats)
            few = max(1, repeats // 3)
            t_slow, slow = _timed(allocate_typed_reference, values, list(caps), few)
            agree = abs(fast.objective - slow.objective) <= 1e-6
            print(f"{kind:7s} | {jobs:5d} x {len(caps)} x {'+'.join(map(str, caps)):14s} | "
                  f"{k_max:5d} | {t_fast:8.4f} | {t_slow:11.4f} | {t_slow / t_fast:9.1f} | "
                  f"{'yes' if agree else 'NO':5s} | {fast.searched} / {slow.searched}")  # fmt: skip
    jobs, gpus, k_max = QUICK_ONE_TYPE if args.quick else ONE_TYPE
    one = typed_table(jobs, 1, k_max, rng)
    t_typed = _median_s(lambda: allocate_typed(one, [gpus]), repeats)
    t_plain = _median_s(lambda: allocate(one[:, 0, :], gpus), repeats)
    same = (allocate_typed(one, [gpus]).gpus == allocate(one[:, 0, :], gpus)).all()
    print(
        f"one type {jobs} x {gpus} x {k_max}: allocate_typed {t_typed:.4f} s, allocate "
        f"{t_plain:.4f} s (ratio {t_typed / t_plain:.2f}); same allocation: "
        f"{'yes' if same else 'NO'}"
    )
    jobs, caps, k_max = sizes[-1]
    cold = [_cold_s(jobs, caps, k_max) for _ in range(1 if args.quick else 3)]
    print(
        f"whole process, cold, {jobs} x {len(caps)} x {'+'.join(map(str, caps))}: "
        f"median {statistics.median(cold):.2f} s (import, table, one allocation)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
