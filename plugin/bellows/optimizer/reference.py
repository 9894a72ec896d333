"""NumPy float64 reference for the allocation DP and for FIFO admission.

The plain recurrence, one layer per job, every float layer kept: what the tests hold every
path to (nothing in production runs it; ``method="numpy"`` is the lean engine of
:mod:`bellows.optimizer.windowed`). It follows the same arithmetic, in the same order, as
:mod:`bellows.optimizer.kernels` and the engine, so all return the very same allocation.

DP over jobs and GPUs used *exactly* (``E_j(g)``; ``E_0(0) = 0``, ``-inf`` elsewhere):
``E_j(g) = max_k E_{j-1}(g - k) + values[j, k]``. The optimum is ``max_{g <= capacity}
E_n(g)``. Ties (see ``docs/optimizer.md``): the fewest GPUs in total, then, backtracking
from the last job, the smallest count for each job — earlier rows (running jobs, earlier
arrivals) get the GPUs a tie leaves over.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from bellows.optimizer.errors import (
    Infeasible,
    Values,
    check_capacity,
    check_required,
    check_values,
    min_gpus,
)
from bellows.optimizer.results import Admission

__all__ = ["admit_reference", "allocate_reference", "solve_reference"]

Row = npt.NDArray[np.float64]


def _layer(prev: Row, value_row: Row) -> Row:
    """``E_j`` from ``E_{j-1}``: one DP layer (max over k of a shifted ``prev`` plus v[k])."""
    new: Row = prev + value_row[0]  # [capacity+1]
    shifted = np.empty_like(prev)
    for k in range(1, min(value_row.shape[0], prev.shape[0])):
        shifted[:k] = -np.inf
        np.add(prev[:-k], value_row[k], out=shifted[k:])
        # `where(c > new)` (not np.maximum): the kernel uses it too; only "strictly better".
        np.copyto(new, shifted, where=shifted > new)
    return new


def _backtrack(layers: list[Row], rows: Values, gpus_used: int) -> npt.NDArray[np.int64]:
    """GPUs per row from the stored layers ``layers[j] = E_j`` (before row ``j``)."""
    n = rows.shape[0]
    gpus = np.zeros(n, dtype=np.int64)
    g = gpus_used
    for j in range(n - 1, -1, -1):
        ks = np.arange(min(rows.shape[1] - 1, g) + 1)
        candidates = layers[j][g - ks] + rows[j, ks]  # [k]
        k = int(np.argmax(candidates))  # first maximum: the smallest k
        gpus[j] = k
        g -= k
    return gpus


def solve_reference(rows: Values, capacity: int) -> tuple[npt.NDArray[np.int64], float]:
    """Optimal allocation of validated, feasible ``rows`` and its objective (the DP's sum)."""
    layer = np.full(capacity + 1, -np.inf)
    layer[0] = 0.0
    layers = [layer]
    for value_row in rows:
        layer = _layer(layer, value_row)
        layers.append(layer)
    used = int(np.argmax(layer))  # first maximum: the fewest GPUs in total
    return _backtrack(layers, rows, used), float(layer[used])


def allocate_reference(values: object, capacity: object) -> npt.NDArray[np.int64]:
    """Same contract as :func:`bellows.optimizer.allocate`, by the plain NumPy DP."""
    array = check_values(values)
    cap = check_capacity(capacity)
    needed = int(min_gpus(array).sum())
    if needed > cap:
        raise Infeasible(needed, cap)
    return solve_reference(array, cap)[0]


def admit_reference(
    values: object, capacity: object, *, required: object, backfill: bool = False
) -> Admission:
    """Same contract as :func:`bellows.optimizer.admit`, literally: one DP layer per row.

    Each candidate's layer is added and kept only if the best reachable value is still
    finite; this does not use the fewest-GPUs shortcut the fast path relies on, so it checks it.
    """
    array = check_values(values)
    cap = check_capacity(capacity)
    req = check_required(required, array.shape[0])
    layer = np.full(cap + 1, -np.inf)
    layer[0] = 0.0
    for value_row in array[:req]:
        layer = _layer(layer, value_row)
    if req and not np.isfinite(layer).any():
        raise Infeasible(int(min_gpus(array[:req]).sum()), cap, "the required rows")
    admitted = list(range(req))
    for j in range(req, array.shape[0]):
        trial = _layer(layer, array[j])
        if np.isfinite(trial).any():
            layer = trial
            admitted.append(j)
        elif not backfill:
            break
    gpus = np.zeros(array.shape[0], dtype=np.int64)
    chosen, objective = solve_reference(array[admitted], cap)
    gpus[admitted] = chosen
    return Admission(admitted=tuple(admitted), gpus=gpus, objective=objective)
