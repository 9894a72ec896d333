"""Errors the optimizer raises, and the validation that decides between them.

Bad input (wrong shape, NaN, ``+inf``, negative capacity) is a :class:`bellows.jobs.SpecError`
(a ``ValueError`` naming the argument, the value and what would be valid): it is the caller's
bug. :class:`Infeasible` is a fact about valid input: no allocation has a finite value.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from bellows.jobs import SpecError

__all__ = [
    "NO_FIT",
    "Infeasible",
    "check_capacity",
    "check_required",
    "check_values",
    "finite_counts",
    "min_gpus",
]

Values = npt.NDArray[np.float64]
Counts = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]  # finite_counts: (least, most)

# The "fewest GPUs" of a row with no finite column: more than any cluster has, yet small
# enough that summing it over millions of rows cannot overflow int64.
NO_FIT = 2**40


class Infeasible(Exception):  # noqa: N818 - the contract (DESIGN.md §5) names it so
    """No allocation of at most ``capacity`` GPUs gives every placed job a finite value.

    ``needed`` is the fewest GPUs the jobs that must be placed could run on (the sum of each
    one's smallest allowed count), ``capacity`` the GPUs there were.
    """

    def __init__(self, needed: int, capacity: int, what: str = "the jobs") -> None:
        self.needed = needed
        self.capacity = capacity
        if needed >= NO_FIT:
            need = "a GPU count, but some row of values is -inf in every column"
        else:
            need = f"at least {needed} GPUs (each at its smallest allowed count)"
        super().__init__(f"{what} need {need}; capacity={capacity}")


def check_values(values: object) -> Values:
    """``values`` as a C-contiguous float64 ``[jobs, k_max+1]`` array, or SpecError."""
    try:
        array = np.ascontiguousarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise SpecError("values", values, "a real array of shape (n_jobs, k_max + 1)") from None
    if array.ndim != 2 or array.shape[1] < 1:
        raise SpecError("values.shape", array.shape, "(n_jobs, k_max + 1) with at least one column")
    bad = np.isnan(array) | (array == np.inf)
    if bad.any():
        j, k = (int(i) for i in np.argwhere(bad)[0])
        raise SpecError(
            f"values[{j}, {k}]", float(array[j, k]), "a finite number, or -inf for not allowed"
        )
    return array


def check_capacity(capacity: object) -> int:
    """``capacity`` as a non-negative int (bools and floats are refused), or SpecError."""
    if isinstance(capacity, bool) or not isinstance(capacity, int | np.integer):
        raise SpecError("capacity", capacity, "an integer number of GPUs >= 0")
    if capacity < 0:
        raise SpecError("capacity", capacity, "an integer number of GPUs >= 0")
    return int(capacity)


def check_required(required: object, jobs: int) -> int:
    """``required`` as an int in ``[0, jobs]``, or SpecError."""
    if isinstance(required, bool) or not isinstance(required, int | np.integer):
        raise SpecError("required", required, f"an integer in [0, {jobs}]")
    if not 0 <= required <= jobs:
        raise SpecError("required", required, f"an integer in [0, {jobs}] (rows of values)")
    return int(required)


def min_gpus(values: Values) -> npt.NDArray[np.int64]:
    """Smallest allowed GPU count of each row (:data:`NO_FIT` where no column is finite).

    A set of rows has an allocation with a finite sum within ``capacity`` exactly when these
    counts sum to at most ``capacity`` (give every row its smallest count): feasibility, and
    so FIFO admission, needs no DP at all.
    """
    return finite_counts(values)[0]


def finite_counts(values: Values) -> Counts:
    """Each row's smallest allowed GPU count (:func:`min_gpus`) and largest (-1 where no
    column is finite), from one pass of ``isfinite``."""
    finite = np.isfinite(values)  # [jobs, k_max+1]
    first = np.argmax(finite, axis=1).astype(np.int64)
    last = values.shape[1] - 1 - np.argmax(finite[:, ::-1], axis=1).astype(np.int64)
    some = finite.any(axis=1)
    return np.where(some, first, np.int64(NO_FIT)), np.where(some, last, np.int64(-1))
