"""The typed round's values (:class:`~bellows.autoscaler.typed.TypedAutoscaler`): each job's
rates on each GPU type, and each (type, count) as the configured objective's term.

:func:`type_rates` puts every job's row on every type whose GPUs hold one of its batches in one
``[jobs, types, width+1]`` array (rates in samples per second, reference samples where the
job is charged efficiency, at its progress); :func:`round_values` makes them comparable
across types (each job's speedup over its best one-GPU rate on any type), prices a running
job's move (to another count or another type) as the core prices a restart, and weighs them
by the objective; :func:`bellows.optimizer.typed.allocate_typed` solves the result.
:func:`fits_on` says on which types a job may run, :func:`left_after` what a core holds of
a job Kueue relocated, :func:`with_type` marks a core's decision with its type. Pure: no I/O,
no clock, no state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from bellows.autoscaler.config import AutoscalerConfig, restart_s_each
from bellows.autoscaler.decisions import Decision, Rescale, Start
from bellows.autoscaler.objectives import objective_values
from bellows.autoscaler.pricing import priced
from bellows.autoscaler.progress import work_left
from bellows.autoscaler.rows import Tables
from bellows.autoscaler.straddle import FreeNodes
from bellows.jobs import JobSpec, least_gpus
from bellows.scaling import EfficiencyProfile
from bellows.scaling.gpu_types import TypedCluster

__all__ = [
    "NEUTRAL",
    "SOLVER_ABS",
    "SOLVER_REL",
    "best_per_gpu",
    "fastest",
    "fits_on",
    "graded",
    "left_after",
    "released",
    "round_values",
    "rows_on",
    "type_rates",
    "with_type",
]

SOLVER_ABS = 1e-6
""":func:`~bellows.optimizer.typed.allocate_typed`'s absolute tolerance on a sum (HiGHS')."""
SOLVER_REL = 1e-9
"""Its relative one (a bound within it of an allocation closes the search)."""

NEUTRAL = EfficiencyProfile(1, 1e12, 0.0, 0.0)
"""E = 1 everywhere: the goodput row of a job not charged, by throughput (beside charged ones)."""


def rows_on(
    tables: Tables,
    charged: Mapping[str, EfficiencyProfile],
    specs: Sequence[JobSpec],
    names: Sequence[str],
    done: Mapping[str, float],
) -> list[np.ndarray]:
    """Per job (its one-type spec on the type of ``tables``) its rates by GPU count there:
    reference samples per second where ``charged``, at its progress ``done``; 0 where not
    allowed."""
    profiles = [charged.get(n) for n in names]
    if any(p is not None for p in profiles):
        goodput = [(p if p is not None else NEUTRAL, done.get(n, 0.0))
                   for p, n in zip(profiles, names, strict=True)]  # fmt: skip
        rows = tables.compute(list(specs), goodput)
    else:
        rows = tables.compute(list(specs))
    return [np.where(np.isfinite(r.values), r.rate, 0.0) for r in rows]


def best_per_gpu(rate: np.ndarray) -> float:
    """The most a row's counts do per GPU (a rigid job: at its one count)."""
    return float((rate[1:] / np.arange(1, rate.size)).max(initial=0.0))


def fastest(
    tables: Mapping[str, Tables],
    charged: Mapping[str, EfficiencyProfile],
    name: str,
    fits: Mapping[str, JobSpec],
) -> str:
    """The type of ``fits`` (job ``name``'s one-type specs) where it runs fastest per GPU
    (goodput at its start where ``charged``; a rigid job at its one count): where an
    arriving job goes."""
    rates = {t: best_per_gpu(rows_on(tables[t], charged, [spec], [name], {})[0])
             for t, spec in fits.items()}  # fmt: skip
    return max(rates, key=lambda t: rates[t])


def type_rates(
    tables: Mapping[str, Tables],
    charged: Mapping[str, EfficiencyProfile],
    fits: Sequence[Mapping[str, JobSpec]],
    names: Sequence[str],
    *,
    done: Mapping[str, float],
    width: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``rates`` and ``allowed``, ``[jobs, types, width+1]`` (types in ``tables``' order): job
    ``names[i]``'s :func:`rows_on` each type of ``fits[i]`` (its one-type specs), 0 and not
    allowed elsewhere and past its row."""
    rates = np.zeros((len(names), len(tables), width + 1))
    allowed = np.zeros(rates.shape, dtype=bool)
    for t, (type_name, table) in enumerate(tables.items()):
        fitting = [(i, fit.get(type_name)) for i, fit in enumerate(fits)]
        here = [(i, s) for i, s in fitting if s is not None]
        if not here:
            continue
        rows = rows_on(table, charged, [s for _, s in here], [names[i] for i, _ in here], done)
        for (i, _), rate in zip(here, rows, strict=True):
            rates[i, t, : rate.size] = rate
            allowed[i, t, 1 : rate.size] = rate[1:] > 0
    return rates, allowed


def round_values(
    config: AutoscalerConfig,
    types: Sequence[str],
    *,
    jobs: Sequence[JobSpec],
    homes: Sequence[str],
    held: Sequence[int],
    rates: np.ndarray,
    allowed: np.ndarray,
    done: Sequence[float],
    restarts: Sequence[int],
) -> np.ndarray:
    """``[jobs, types, width+1]``: each (type, count) as the objective's term of its speedup
    over the job's best one-GPU rate, moves priced as restarts, on the exact grid with each
    running job's current (type, count) kept on a tie (:func:`graded`). Per job: its spec
    as it arrived (``jobs``), the type whose core holds it (``homes``), the GPUs it runs on
    there (``held``; 0: waiting), the work it has done (``done``) and the restarts it has
    made (``restarts``: rescales and changes of type). A running job keeps a type (column
    0 not allowed); a waiting one may get none (0 there).

    The one-type core's rules (:mod:`bellows.autoscaler.valuing`), on (type, count): a move
    pays for its restart (times ``max(1, hysteresis)``, dearer by ``restart_growth`` for
    each restart the job made), and ties are broken as the core breaks them
    (:func:`graded`)."""
    width = rates.shape[2]
    per_gpu = rates[:, :, 1:] / np.arange(1, width, dtype=np.float64)
    best_one = np.maximum(per_gpu.max(axis=(1, 2)), 1e-12)  # the best one GPU does
    left = work_left([j.work for j in jobs], list(done))
    speed = np.where(allowed, rates / best_one[:, None, None], -np.inf)
    penalty = np.array(restart_s_each(jobs, config)) * max(1.0, config.hysteresis)
    if config.restart_growth:  # each earlier restart makes the next move dearer
        penalty *= 1.0 + config.restart_growth * np.asarray(restarts, dtype=np.float64)
    running = np.array([k > 0 for k in held])
    remaining = left / best_one
    out = np.empty_like(speed)
    for t, type_name in enumerate(types):
        current = np.array([k if k > 0 and h == type_name else -1
                            for k, h in zip(held, homes, strict=True)])  # fmt: skip
        rows = speed[:, t, :].copy()
        if running.any():
            at = np.flatnonzero(running)
            rows[at] = priced(rows[at], rates[at, t, :], current=current[at],
                              remaining=left[at], restart_s=penalty[at],
                              x1=best_one[at])  # fmt: skip
        out[:, t, :] = objective_values(rows, config.objective, remaining,
                                        exponent=config.remaining_exponent)  # fmt: skip
    out[:, :, 0] = np.where(~running, 0.0, -np.inf)[:, None]  # running jobs keep a type
    home = np.array([types.index(h) for h in homes], dtype=np.int64)
    return graded(out, np.where(running, home, -1), np.asarray(held, dtype=np.int64))


def graded(values: np.ndarray, home: np.ndarray, held: np.ndarray) -> np.ndarray:
    """``values`` ``[jobs, types, width+1]`` on an exact grid with a keep bonus at each running
    job's current (type, count) (``home[i]`` its type's index, -1: waiting; ``held[i]`` its
    GPUs there), as the one-type core's :func:`~bellows.autoscaler.pricing.exact`, but with
    a grid :func:`~bellows.optimizer.typed.allocate_typed` resolves: the bonus is a power of
    two at least ten times the solver's tolerances (:data:`SOLVER_ABS`, and
    :data:`SOLVER_REL` of the largest sum), and the grid step is the bonus times a power of
    two above the running jobs' count. Every sum is then exact, differences between two
    allocations' sums of values are whole grid steps, and all the bonuses together are less
    than one: among allocations worth the same the best keeps the most running jobs where
    they are, and a move gaining less than a grid step (about 2e-3 of a one-GPU speedup for
    64 running jobs of speedups up to 24) is not made."""
    columns = values.shape[2]
    finite = np.isfinite(values)
    worth = np.where(finite, values, 0.0)
    largest = float(np.abs(worth).max(axis=(1, 2), initial=0.0).sum())  # bounds any sum
    unit = 2.0 ** np.ceil(np.log2(10.0 * max(SOLVER_ABS, SOLVER_REL * largest)))
    running = (home >= 0) & (held < columns)
    step = unit * 2.0 ** np.ceil(np.log2(int(running.sum()) + 1))
    out = np.where(finite, np.floor(worth / step + 0.5) * step, -np.inf)
    at = np.flatnonzero(running)
    cells = (at, home[at], held[at])
    out[cells] = out[cells] + unit  # -inf stays -inf: no bonus where not allowed
    return out


def most_free(free: Mapping[str, int], fits: Mapping[str, JobSpec]) -> str:
    """Of the types a job fits (``fits``), the one with the most ``free`` GPUs (the first
    on a tie), as a type-blind placement finds room."""
    return max(fits, key=lambda n: free.get(n, 0))


def first_with_room(free: Mapping[str, int], fits: Mapping[str, JobSpec]) -> str:
    """Of the types a job fits (``fits``, in the cluster's order), the first whose ``free``
    GPUs hold its smallest count, as Kueue tries a ClusterQueue's flavors in order; the
    first it fits at all when none has room now."""
    for name, spec in fits.items():
        if free.get(name, 0) >= (least_gpus(spec) or 1):
            return name
    return next(iter(fits))


def fits_on(cluster: TypedCluster, job: JobSpec, keep: str | None = None) -> dict[str, JobSpec]:
    """``job`` as a one-type job on each type of ``cluster`` whose GPUs hold one of its
    batches (every type, for a job without sections: the same spec everywhere), in the
    cluster's order; and on type ``keep`` wherever it has a section there (it runs there)."""
    out = {}
    for gpu in cluster.types:
        on = job.on(gpu.name)
        least = None if on is None else least_gpus(on)
        fits = least is not None and least <= gpu.gpus
        if on is not None and (fits or gpu.name == keep):
            out[gpu.name] = on
    return out


def left_after(spec: JobSpec, done: float) -> JobSpec:
    """One-type spec ``spec`` with the work it has left after ``done``
    (:func:`~bellows.autoscaler.progress.work_left`): what a core holds of a job Kueue
    relocated to its type, and, less the spec's work, the most progress a job that moved
    carries (``Autoscaler.carry``)."""
    return dataclasses.replace(spec, work=float(work_left(spec.work, done)))


def released(nodes: FreeNodes, names: Iterable[str]) -> FreeNodes:
    """``nodes`` with the GPUs jobs ``names`` hold there free (the jobs a typed round moved
    off the type: their halt frees them before the type's core starts or grows a job)."""
    gone = [n for n in names if n in nodes.held]
    if not gone:
        return nodes
    free = list(nodes.free)
    for name in gone:
        for node, gpus in nodes.held[name]:
            free[node] += gpus
    held = {n: p for n, p in nodes.held.items() if n not in gone}
    spread = None if nodes.spread is None else nodes.spread.difference(gone)
    return FreeNodes(tuple(free), held, spread)


def with_type(decision: Decision, type_name: str) -> Decision:
    """``decision`` carrying the GPU type of the core that took it."""
    if isinstance(decision, Start | Rescale):
        return dataclasses.replace(decision, gpu_type=type_name)
    return decision
