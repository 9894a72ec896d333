"""What each allocation is worth to the optimizer: restarts priced in, ties made exact.

Two rules turn the JSA's TSF rows into the values a round maximises:

* **A move must pay for its restart.** Moving a running job to ``k`` GPUs finishes its
  remaining work ``W`` in ``W/X(k) + c·h`` seconds instead of ``W/X(k)``, where ``c`` is the
  job's restart cost and ``h = max(1, hysteresis)``: the effective rate ``W / (W/X(k) + c·h)``
  replaces ``X(k)`` for every ``k`` but the current one. Pricing inside the optimizer keeps
  the result exact and feasible, which skipping rescales after the fact would not.
* **Ties are exact, and a running job keeps its GPUs on a tie.** Values are put on a fixed
  grid (:data:`GRID` steps per unit of TSF) and scaled to integers, so that sums are exact in
  float64 whatever their order: jobs of one template have equal values, and equal
  allocations have equal sums. One more unit (below a grid step, :data:`KEEP`) goes to each
  running job's current GPU count: among allocations worth the same, the optimizer picks the
  one that moves the fewest jobs, and never swaps two identical jobs.

Exactness holds while a round's best sum stays below 2**53 / (GRID * KEEP) = 2**20 TSF units;
a TSF is at most about ``k``, so any cluster of up to a million GPUs.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["GRID", "KEEP", "exact", "kept", "priced"]

F64 = npt.NDArray[np.float64]

GRID = float(1 << 16)  # grid steps per unit of TSF: differences below 1.5e-5 are ties
KEEP = float(1 << 17)  # grid values are scaled by this; a running job's own k gets +1


def priced(
    rows: F64,
    rates: F64,
    *,
    current: npt.NDArray[np.int64],
    remaining: F64,
    restart_s: F64,
    x1: F64,
) -> F64:
    """``rows`` (TSF per GPU count, ``[jobs, width+1]``) of running jobs, their moves priced.

    Per job ``i``: ``current[i]`` GPUs now, ``rates[i]`` samples/s per GPU count (0 past its
    row), ``remaining[i]`` samples left, ``restart_s[i]`` the restart cost times the
    hysteresis factor (a job at 0 is left as it is), ``x1[i]`` its one-GPU rate (TSF's unit).
    All jobs in one vectorized pass; each value is the one the scalar rule gives.
    """
    out = rows.copy()
    left = remaining[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        effective = left / (left / rates + restart_s[:, None]) / x1[:, None]
    cols = np.arange(rows.shape[1])[None, :]
    move = np.isfinite(rows) & (cols != current[:, None]) & (rates > 0) & (restart_s[:, None] > 0)
    out[move] = effective[move]
    return out


def exact(values: F64, keep: npt.NDArray[np.int64]) -> F64:
    """``values`` on the integer grid, with the keep bonus at ``keep[i]`` (-1: none).

    ``values`` is ``[jobs, width+1]`` with ``-inf`` where not allowed; ``keep[i]`` is the GPU
    count job ``i`` runs at now (-1 for a job not running, or running wider than the table).
    """
    finite = np.isfinite(values)
    out = np.where(finite, np.floor(np.where(finite, values, 0.0) * GRID + 0.5) * KEEP, -np.inf)
    kept(out, np.arange(out.shape[0]), keep)
    return np.asarray(out, dtype=np.float64)


def kept(graded: F64, rows: npt.NDArray[np.int64], keep: npt.NDArray[np.int64]) -> None:
    """Add the keep bonus to grid values in place: at ``graded[rows[i], keep[i]]`` where
    ``keep[i] >= 0`` and the value is allowed (what :func:`exact` adds)."""
    rows, keep = rows[keep >= 0], keep[keep >= 0]
    bonus = np.isfinite(graded[rows, keep])
    graded[rows[bonus], keep[bonus]] += 1.0
