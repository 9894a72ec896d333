"""Which waiting jobs a step offers and admits, which running jobs it halts or protects.

Pure functions over the core's :class:`~bellows.autoscaler.state.State` (the core,
:mod:`bellows.autoscaler.core`, calls them at each step): the FIFO candidates of a round,
the jobs FIFO admission takes on free GPUs (:func:`fitting`, the rule of
:func:`bellows.optimizer.admit`), preemption of the newest running jobs when the capacity
falls below what they hold, the minimum-runtime protection (:func:`protected`) and no-queue
rejection; and the optimizer's admission and placement itself (:func:`solve`, or
:func:`solve_lone` for a lone candidate). The functions that halt or drop a job update the
state; none does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from bellows.autoscaler.config import AutoscalerConfig
from bellows.autoscaler.decisions import Decision, Preempt, Reject
from bellows.autoscaler.engines import Engines
from bellows.autoscaler.objectives import Objective
from bellows.autoscaler.reasons import preempt_reason, reject_reason
from bellows.autoscaler.state import Row, State
from bellows.autoscaler.valuing import Pricing
from bellows.optimizer import admit, best_count

__all__ = [
    "STRADDLE_PASSES",
    "candidates",
    "fitting",
    "floor_need",
    "halt_newest",
    "preempt_to_fit",
    "protected",
    "protected_until",
    "reject",
    "solve",
    "solve_lone",
]

STRADDLE_PASSES = 8  # rounds solved again while their placement squeezes a job (see_nodes)


def candidates(s: State, capacity: int, slots: int, *, backfill: bool) -> list[str]:
    """Arrived jobs offered to a round's optimizer, in FIFO order.

    Jobs that could not run even on an empty cluster are passed over (they wait for the
    cluster to grow, and never block the queue). Each admitted job takes at least one
    GPU, so without backfill no more than ``slots`` can be admitted; the rest of the
    queue is not even looked at.
    """
    fit = [n for n in s.arrived if s.rows[n].min_gpus <= capacity]
    return fit if backfill else fit[: max(0, slots)]


def fitting(
    s: State, waiting: Sequence[str], free: int, capacity: int, *, backfill: bool
) -> list[str]:
    """The ``waiting`` jobs admission takes on ``free`` GPUs, in FIFO order: each while
    its smallest allocation fits in what is left (past one that does not, with
    backfill) — the admission rule of :func:`bellows.optimizer.admit`, so a long queue
    costs the DP nothing."""
    out: list[str] = []
    for name in waiting:
        if free <= 0:
            break
        least = s.rows[name].min_gpus
        if least > capacity:
            continue  # never fits this cluster: it must not block the queue either
        if least <= free:
            out.append(name)
            free -= least
        elif not backfill:
            break
    return out


def halt_newest(s: State, capacity: int, now: float) -> list[Decision]:
    """Halt the newest running jobs until the rest fit in the capacity (at its drop)."""
    out: list[Decision] = []
    while s.running and s.in_use > capacity:
        out.append(_preempt(s, next(reversed(s.running)), capacity, now))
    return out


def preempt_to_fit(s: State, capacity: int, now: float) -> list[Decision]:
    """If the running jobs alone no longer fit even at their smallest, halt the newest."""
    out: list[Decision] = []
    while s.running and s.min_need(list(s.running)) > capacity:
        out.append(_preempt(s, next(reversed(s.running)), capacity, now))
    return out


def _preempt(s: State, name: str, capacity: int, now: float) -> Decision:
    running = s.running.pop(name)
    s.resumed.pop(name, None)
    s.in_use -= running.allocation.gpus
    s.arrived.insert(0, name)
    # the job resumes later from its checkpoint, with the progress it had
    s.carried[name] = running.done_at(now)
    return Preempt(name, preempt_reason(capacity))


def protected(s: State, config: AutoscalerConfig, capacity: int, now: float) -> dict[str, int]:
    """The running jobs a round may not shrink, each to the GPUs it holds: those that
    (re)started less than their minimum runtime ago (``JobSpec.min_runtime_s``, else
    ``AutoscalerConfig.min_runtime_s``). None while the running jobs hold more GPUs
    than the cluster has: a capacity loss still shrinks and preempts them."""
    default = config.min_runtime_s
    if s.in_use > capacity:
        return {}
    floors: dict[str, int] = {}
    for name, run in s.running.items():
        own = s.jobs[name].min_runtime_s
        if now - s.resumed.get(name, run.since) < (default if own is None else own):
            floors[name] = run.allocation.gpus
    return floors


def protected_until(
    s: State, config: AutoscalerConfig, floors: Mapping[str, int], now: float
) -> float:
    """When the first of the protected jobs still running may be shrunk again."""
    default = config.min_runtime_s
    ends = []
    for name in floors:
        if (run := s.running.get(name)) is not None:
            own = s.jobs[name].min_runtime_s
            ends.append(s.resumed.get(name, run.since) + (default if own is None else own))
    return max(now, min(ends, default=now))


def floor_need(s: State, floors: Mapping[str, int]) -> int:
    """GPUs the protected jobs hold beyond their smallest allocation."""
    rows = s.rows
    return sum(max(0, k - rows[n].min_gpus) for n, k in floors.items())


def reject(s: State, config: AutoscalerConfig, capacity: int) -> list[Reject]:
    """No-queue mode: every arrived job the round did not start is dropped from the queue
    (the caller forgets them).

    Jobs halted by a capacity drop were running, and running jobs are never rejected:
    they keep their place at the head of the queue.
    """
    if config.queue:
        return []
    kept = [n for n in s.arrived if n in s.carried]
    dropped = [n for n in s.arrived if n not in s.carried]
    s.arrived[:] = kept
    return [Reject(name, reject_reason(capacity)) for name in dropped]


def solve_lone(
    pricing: Pricing, name: str, row: Row, capacity: int, now: float
) -> tuple[int, float] | None:
    """A lone waiting job on ``capacity`` free GPUs (most fills), placed without the DP:
    its best count and that count's value, or ``None`` when it does not fit."""
    if row.min_gpus > capacity:
        return None
    worth, grid = row.values, row.grid
    if pricing.nodes is not None:  # a copy: the row is shared
        worth, grid = worth[None, :].copy(), grid[None, :].copy()
        pricing.straddled([name], worth, grid, [None])
        worth, grid = worth[0], grid[0]
    if pricing.config.objective is not Objective.SPEEDUP:  # its terms, on their grid
        terms, graded = pricing.objective([name], worth[None, :], grid[None, :], [None], now)
        worth, grid = terms[0], graded[0]
    k = best_count(grid, row.min_gpus, capacity)
    return k, float(worth[k])


def solve(
    pricing: Pricing,
    names: list[str],
    capacity: int,
    now: float,
    *,
    required: int,
    floors: Mapping[str, int] | None,
    engines: Engines,
) -> tuple[dict[str, int], np.ndarray, float, int]:
    """Admit and place ``names`` (the ``required`` running jobs first) on ``capacity`` with
    the optimizer (:func:`bellows.optimizer.admit`), a job in ``floors`` on at least that
    many GPUs (:func:`protected`); solved again while the placement squeezes a job
    (:meth:`Pricing.restraddled`). Returns the admitted jobs' counts, the priced values,
    the objective and how many were admitted."""
    config = pricing.config
    for _ in range(STRADDLE_PASSES):  # more than one only on nodes
        values, graded = pricing.values(names, capacity, now)
        for i, name in enumerate(names[:required]):
            if floors and (floor := floors.get(name, 0)) > 1:
                values[i, 1:floor] = -np.inf
                graded[i, 1:floor] = -np.inf
        taken = admit(
            graded,
            capacity,
            required=required,
            backfill=config.backfill,
            method=config.optimizer,
            rent=engines.rent,
            compiled=engines.compiled_layers,
        )
        rows = np.asarray(taken.admitted, dtype=np.int64)
        chosen = taken.gpus[rows]
        gpus = dict(zip([names[i] for i in taken.admitted], chosen.tolist(), strict=True))
        if not pricing.restraddled(gpus):
            break
    return gpus, values, float(values[rows, chosen].sum()), len(taken.admitted)
