"""FIFO admission: the longest prefix of arrivals that fits, and its optimal allocation.

A set of rows is feasible exactly when the rows' smallest allowed GPU counts sum to at most
the capacity (:func:`bellows.optimizer.errors.min_gpus`), so which candidates are admitted
follows from one running sum, in arrival order, with no DP at all. The DP then runs once,
over the admitted rows in order: each admitted job is one layer added to the running jobs'
layers, nothing is solved twice. :func:`bellows.optimizer.admit_reference` does the literal
layer-by-layer version and the tests hold the two equal.
"""

from __future__ import annotations

import numpy as np

from bellows.jobs import SpecError
from bellows.optimizer.errors import (
    Infeasible,
    check_capacity,
    check_required,
    check_values,
    finite_counts,
)
from bellows.optimizer.results import Admission
from bellows.optimizer.solving import METHODS, Method, RentRule, solve_rows

__all__ = ["admit"]


def admit(
    values: object,
    capacity: object,
    *,
    required: object,
    backfill: bool = False,
    method: Method = "auto",
    rent: RentRule | None = None,
    compiled: bool = True,
) -> Admission:
    """Place rows ``[0, required)`` and admit later rows in order while they fit.

    ``values`` as for :func:`bellows.optimizer.allocate`; rows ``[0, required)`` are the
    running jobs and must all be placed (:class:`Infeasible` otherwise); the rest are
    candidates in arrival order. Admission stops at the first candidate that no longer fits
    (FIFO) or, with ``backfill``, skips it and goes on. The allocation is the optimum over
    the admitted rows. (A candidate with a finite column 0 always fits: put ``-inf`` there
    for jobs that must run to be admitted.) ``method``, ``rent`` and ``compiled``: as
    :func:`bellows.optimizer.solving.solve_rows` takes them.
    """
    array = check_values(values)
    cap = check_capacity(capacity)
    req = check_required(required, array.shape[0])
    if method not in METHODS:
        raise SpecError("method", method, " or ".join(repr(m) for m in METHODS))
    least, most = finite_counts(array)
    needed = int(least[:req].sum())
    if needed > cap:
        raise Infeasible(needed, cap, "the required rows")
    admitted = list(range(req))
    free = cap - needed
    for j in range(req, array.shape[0]):
        if least[j] <= free:
            free -= int(least[j])
            admitted.append(j)
        elif not backfill:
            break
    gpus = np.zeros(array.shape[0], dtype=np.int64)
    rows = np.asarray(admitted, dtype=np.int64)
    solution = solve_rows(
        array[rows],
        cap,
        method=method,
        counts=(least[rows], most[rows]),
        rent=rent,
        compiled=compiled,
    )
    gpus[admitted] = solution.gpus
    return Admission(admitted=tuple(admitted), gpus=gpus, objective=solution.objective)
