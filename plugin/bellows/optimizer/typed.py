"""``allocate_typed``: the exact allocation of GPUs of several types (issue 39, item 2).

Each job gets a GPU type and a count of that type, or none: ``values[j, t, k]`` is the worth
of giving job ``j`` exactly ``k`` GPUs of type ``t`` (``-inf`` where not allowed); column 0 is
the worth of no GPU and is the same for every type (``-inf``: the job must be placed). The
allocation maximises the sum of the chosen values with at most ``capacities[t]`` GPUs of each
type used. One type is :func:`bellows.optimizer.allocate`'s problem, and is solved by it
(the same allocation, bit for bit).

Several types make it a multiple-choice knapsack with one capacity per type, which the
one-capacity DP cannot carry (a DP over the capacity vector has ``prod(C_t + 1)`` states:
10^9 for three types of 1 000 GPUs). It is solved exactly in three steps:

Fewer than :data:`DIRECT_BELOW` finite choices go straight to step 3 over all of them.

1. **A bound.** For prices ``lam[t] >= 0`` per GPU of each type, every job alone takes the
   choice of the best ``values[j, t, k] - lam[t] * k``, and ``D(lam) = sum_t lam[t] * C_t +
   sum_j best_j(lam)`` bounds every feasible allocation from above (the Lagrangian dual of
   the capacities). ``D`` is convex and piecewise linear in ``T`` variables; Kelley's
   cutting planes minimise it over a box (a linear program in ``T + 1`` variables a step).
   Any ``lam`` gives a valid bound: how well it is minimised decides the speed, never the
   answer.
2. **An allocation.** Each job is put on the type of its best priced choice, and each type's
   jobs are allocated its GPUs by the exact one-type DP: a feasible allocation, ``lower``.
3. **Fixing, then an exact search.** A choice whose priced value falls short of its job's
   best by more than ``D(lam) - lower`` is in no allocation better than ``lower`` (the bound
   of any allocation holding it is below ``lower``: reduced-cost fixing), so it is dropped.
   What is left (usually a few choices of a few jobs) is solved as a 0-1 program by HiGHS
   (``scipy.optimize.milp``, relative gap 0). When the gap is already 0, ``lower`` is the
   answer.

Exact to HiGHS' tolerances (1e-6 absolute on the objective): :func:`allocate_typed_reference`
solves the whole 0-1 program, and tests hold both to brute force on small instances. Among
allocations of the same value, which one is returned is not specified (unlike the one-type
DP's tie rules). SciPy is imported the first time several types are allocated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from bellows.jobs import SpecError
from bellows.optimizer.errors import NO_FIT, Infeasible, check_capacity
from bellows.optimizer.solving import allocate

__all__ = ["TypedAllocation", "allocate_typed", "allocate_typed_reference", "check_typed"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

KELLEY_STEPS = 60
"""Most cutting-plane steps of the bound (each one evaluation of ``D`` and one small LP)."""

DIRECT_BELOW = 2000
"""Fewer finite choices than this go straight to the exact search: HiGHS solves them sooner
than the bound's cutting planes run (benchmarks/typed_optimizer.py)."""

_TOLERANCE = 1e-9  # relative: a choice within it of the gap is kept, a gap within it is 0


@dataclass(frozen=True)
class TypedAllocation:
    """Per job its type (``-1``: none) and its GPUs of that type (0 where none); the sum of
    the chosen values (``objective``); ``searched``, how many choices the exact search
    weighed after fixing (0: the bound closed the gap, or one type)."""

    types: I64
    gpus: I64
    objective: float
    searched: int = 0


def check_typed(values: object, capacities: object) -> tuple[F64, I64]:
    """``values`` as float64 ``[jobs, types, k_max+1]`` and ``capacities`` as int64 ``[types]``,
    or :class:`~bellows.jobs.SpecError` naming what is wrong."""
    try:
        array = np.ascontiguousarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise SpecError("values", values, "a real array [jobs, types, k_max + 1]") from None
    if array.ndim != 3 or array.shape[1] < 1 or array.shape[2] < 1:
        raise SpecError("values.shape", array.shape, "(jobs, types >= 1, k_max + 1 >= 1)")
    bad = np.isnan(array) | (array == np.inf)
    if bad.any():
        j, t, k = (int(i) for i in np.argwhere(bad)[0])
        raise SpecError(f"values[{j}, {t}, {k}]", float(array[j, t, k]), "finite or -inf")
    if array.shape[0]:
        differs = np.flatnonzero(np.any(array[:, :, 0] != array[:, :1, 0], axis=1))
        if differs.size:
            j = int(differs[0])
            raise SpecError(f"values[{j}, :, 0]", array[j, :, 0].tolist(),
                            "one worth of no GPU, the same for every type")  # fmt: skip
    if not isinstance(capacities, (list, tuple, np.ndarray)) or np.ndim(capacities) != 1:
        raise SpecError("capacities", capacities, "a sequence of GPU counts, one per type")
    counts = []
    for t, cap in enumerate(capacities):
        try:
            counts.append(check_capacity(cap))
        except SpecError:
            raise SpecError(f"capacities[{t}]", cap, "an integer number of GPUs >= 0") from None
    caps = np.array(counts, dtype=np.int64)
    if caps.size != array.shape[1]:
        raise SpecError("capacities", caps.tolist(), f"{array.shape[1]} counts, one per type")
    return array, caps


def allocate_typed(values: object, capacities: object) -> TypedAllocation:
    """The exact allocation (module docstring); raises :class:`Infeasible` where no
    allocation gives every job a finite value, :class:`~bellows.jobs.SpecError` on bad
    input."""
    array, caps = check_typed(values, capacities)
    n, types, _ = array.shape
    if n == 0:
        return TypedAllocation(np.zeros(0, np.int64), np.zeros(0, np.int64), 0.0)
    if types == 1:  # today's problem: today's DP, bit for bit
        gpus = allocate(array[:, 0, :], int(caps[0]))
        objective = float(array[np.arange(n), 0, gpus].sum())
        return TypedAllocation(np.where(gpus > 0, 0, -1).astype(np.int64), gpus, objective)
    choices = _Choices.of(array)
    _check_feasible(choices, caps)
    if choices.size < DIRECT_BELOW:
        return _solved(choices, caps)
    lam, upper = _bound(choices, caps)
    lower = _split(choices, caps, lam)
    if lower is not None and upper - lower.objective <= _TOLERANCE * max(1.0, abs(upper)):
        return lower
    floor = -np.inf if lower is None else lower.objective
    kept = choices.within(lam, upper - floor + _TOLERANCE * max(1.0, abs(upper)))
    found = _search(choices, caps, kept)
    if lower is not None and (found is None or found.objective <= lower.objective):
        # the kept choices hold every allocation better than lower: none is
        return TypedAllocation(lower.types, lower.gpus, lower.objective, int(kept.sum()))
    if found is None:
        raise Infeasible(int(min(choices.least.sum(), NO_FIT)), int(caps.sum()))
    return TypedAllocation(found.types, found.gpus, found.objective, int(kept.sum()))


def allocate_typed_reference(values: object, capacities: object) -> TypedAllocation:
    """The same problem as one 0-1 program over every choice (HiGHS, gap 0): what the tests
    and the benchmark hold :func:`allocate_typed` to."""
    array, caps = check_typed(values, capacities)
    if array.shape[0] == 0:
        return TypedAllocation(np.zeros(0, np.int64), np.zeros(0, np.int64), 0.0)
    choices = _Choices.of(array)
    _check_feasible(choices, caps)
    return _solved(choices, caps)


def _solved(choices: _Choices, caps: I64) -> TypedAllocation:
    """The exact search over every choice, or :class:`Infeasible`."""
    found = _search(choices, caps, np.ones(choices.size, dtype=bool))
    if found is None:
        raise Infeasible(int(min(choices.least.sum(), NO_FIT)), int(caps.sum()))
    return found


@dataclass(frozen=True)
class _Choices:
    """Every finite ``(job, type, k >= 1)`` of ``values`` as flat arrays, with each job's
    worth of no GPU (``none``, ``-inf`` where it must be placed)."""

    values: F64
    job: I64
    type: I64
    k: I64
    value: F64
    none: F64

    @classmethod
    def of(cls, values: F64) -> _Choices:
        job, type_, k = np.nonzero(np.isfinite(values[:, :, 1:]))
        k = k + 1
        return cls(values, job.astype(np.int64), type_.astype(np.int64), k.astype(np.int64),
                   values[job, type_, k], values[:, 0, 0].copy())  # fmt: skip

    @property
    def size(self) -> int:
        return int(self.job.size)

    @property
    def jobs(self) -> int:
        return int(self.values.shape[0])

    @property
    def least(self) -> I64:
        """Each job's fewest GPUs of any type where it must be placed, else 0."""
        out = np.full(self.jobs, NO_FIT, dtype=np.int64)
        np.minimum.at(out, self.job, self.k)
        return np.where(np.isfinite(self.none), 0, out)

    def best(self, lam: F64, *, none: bool = True) -> tuple[F64, I64]:
        """Per job the best priced value and the choice that takes it (``-1``: none), no
        GPU counted as a choice unless ``none`` is false."""
        priced = self.value - lam[self.type] * self.k
        best = self.none.copy() if none else np.full(self.jobs, -np.inf)
        np.maximum.at(best, self.job, priced)
        at = np.full(self.jobs, -1, dtype=np.int64)
        hit = np.flatnonzero(priced >= best[self.job])
        at[self.job[hit[::-1]]] = hit[::-1]  # the first choice of each job's best
        if none:
            at[np.isfinite(self.none) & (self.none >= best)] = -1
        return best, at

    def within(self, lam: F64, slack: float) -> npt.NDArray[np.bool_]:
        """The choices whose priced value is within ``slack`` of their job's best."""
        best, _ = self.best(lam)
        return np.asarray(best[self.job] - (self.value - lam[self.type] * self.k) <= slack)


def _check_feasible(choices: _Choices, caps: I64) -> None:
    """Raise :class:`Infeasible` where a job that must be placed has no choice at all, or the
    jobs that must be placed need more GPUs than the cluster has (necessary, not sufficient:
    the search says the rest)."""
    least = choices.least
    if least.max(initial=0) >= NO_FIT or int(least.sum()) > int(caps.sum()):
        raise Infeasible(int(min(least.sum(), NO_FIT)), int(caps.sum()))


def _dual(choices: _Choices, caps: I64, lam: F64) -> tuple[float, F64]:
    """``D(lam)`` and a subgradient (capacity less the GPUs the best choices take)."""
    best, at = choices.best(lam)
    used = np.zeros(caps.size)
    taken = at[at >= 0]
    np.add.at(used, choices.type[taken], choices.k[taken].astype(np.float64))
    return float(lam @ caps + best.sum()), caps - used


def _bound(choices: _Choices, caps: I64) -> tuple[F64, float]:
    """Prices ``lam`` and ``D(lam)``, minimised by Kelley's cutting planes over a box."""
    from scipy.optimize import linprog  # noqa: PLC0415 - SciPy on first use (docstring)

    types = caps.size
    span = np.abs(choices.value[np.isfinite(choices.value)]).max(initial=0.0)
    floor = np.abs(choices.none[np.isfinite(choices.none)]).max(initial=0.0)
    top = 2.0 * (span + floor) + 1.0  # above every value per GPU: no job takes a GPU there
    lam = np.zeros(types)
    value, grad = _dual(choices, caps, lam)
    best_lam, best_value = lam, value
    cuts_a: list[F64] = []
    cuts_b: list[float] = []
    for _ in range(KELLEY_STEPS):
        # z >= value + grad . (x - lam)  as  grad . x - z <= grad . lam - value
        cuts_a.append(np.r_[grad, -1.0])
        cuts_b.append(float(grad @ lam - value))
        result: Any = linprog(
            np.r_[np.zeros(types), 1.0], A_ub=np.array(cuts_a), b_ub=np.array(cuts_b),
            bounds=[(0.0, top)] * types + [(None, None)], method="highs",
        )  # fmt: skip
        if result.status != 0:
            break
        model = float(result.x[-1])
        if best_value - model <= _TOLERANCE * max(1.0, abs(best_value)):
            break
        lam = np.asarray(result.x[:types], dtype=np.float64)
        value, grad = _dual(choices, caps, lam)
        if value < best_value:
            best_lam, best_value = lam, value
    return best_lam, best_value


def _split(choices: _Choices, caps: I64, lam: F64) -> TypedAllocation | None:
    """Each job on the type of its best priced choice of a GPU or more, each type's jobs
    allocated by the one-type DP; ``None`` where a type cannot hold the jobs it was given
    that must be placed."""
    _, at = choices.best(lam, none=False)
    home = np.full(choices.jobs, -1, dtype=np.int64)
    home[at >= 0] = choices.type[at[at >= 0]]
    types = np.full(choices.jobs, -1, dtype=np.int64)
    gpus = np.zeros(choices.jobs, dtype=np.int64)
    for t in range(caps.size):
        members = np.flatnonzero(home == t)
        if members.size == 0:
            continue
        try:
            got = allocate(choices.values[members, t, :], int(caps[t]), method="numpy")
        except Infeasible:
            return None
        gpus[members] = got
        types[members[got > 0]] = t
    objective = _objective(choices, types, gpus)
    return None if not np.isfinite(objective) else TypedAllocation(types, gpus, objective)


def _objective(choices: _Choices, types: I64, gpus: I64) -> float:
    rows = np.arange(choices.jobs)
    placed = types >= 0
    worth = np.where(placed, choices.values[rows, np.maximum(types, 0), gpus], choices.none)
    return float(worth.sum())


def _search(choices: _Choices, caps: I64, kept: npt.NDArray[np.bool_]) -> TypedAllocation | None:
    """The best allocation using only the ``kept`` choices (and none), as a 0-1 program;
    ``None`` where the kept choices hold no feasible allocation."""
    from scipy import sparse  # noqa: PLC0415 - SciPy on first use (docstring)
    from scipy.optimize import Bounds, LinearConstraint, milp  # noqa: PLC0415

    at = np.flatnonzero(kept)
    n = at.size
    job, type_, k = choices.job[at], choices.type[at], choices.k[at]
    must = ~np.isfinite(choices.none)
    if n == 0:
        if must.any():
            return None
        none = np.full(choices.jobs, -1, dtype=np.int64)
        return TypedAllocation(none, np.zeros(choices.jobs, np.int64), float(choices.none.sum()))
    floor = np.where(must, 0.0, choices.none)
    cost = -(choices.value[at] - floor[job])
    cols = np.arange(n)
    one = sparse.csr_matrix((np.ones(n), (job, cols)), shape=(choices.jobs, n))
    room = sparse.csr_matrix((k.astype(np.float64), (type_, cols)), shape=(caps.size, n))
    matrix = sparse.vstack([one, room]).tocsr()
    low = np.r_[must.astype(np.float64), np.full(caps.size, -np.inf)]
    high = np.r_[np.ones(choices.jobs), caps.astype(np.float64)]
    result: Any = milp(
        cost, constraints=LinearConstraint(matrix, low, high), integrality=np.ones(n),
        bounds=Bounds(0.0, 1.0), options={"mip_rel_gap": 0.0},
    )  # fmt: skip
    if result.status != 0 or result.x is None:
        return None
    taken = at[np.asarray(result.x) > 0.5]
    types = np.full(choices.jobs, -1, dtype=np.int64)
    gpus = np.zeros(choices.jobs, dtype=np.int64)
    types[choices.job[taken]] = choices.type[taken]
    gpus[choices.job[taken]] = choices.k[taken]
    return TypedAllocation(types, gpus, _objective(choices, types, gpus), n)
