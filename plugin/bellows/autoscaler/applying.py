"""Applying a round's or a fill's GPU counts: the decisions, and the notes on jobs kept.

:func:`apply` turns the counts the optimizer chose into typed decisions (starts, rescales,
migrations onto one node) and takes them as applied on the core's
:class:`~bellows.autoscaler.state.State`: allocations, rates, progress estimates, restart
pauses, GPUs in use. A batch change on the GPUs a job holds is applied only when it pays
for its restart (:func:`batch_move_pays`). :func:`kept` says why a round left running jobs
as they were (``Autoscaler.note_keeps``). :func:`adopted` and :func:`revised` apply what a
controller tells of a job it found running or learned about. Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from bellows.autoscaler.config import AutoscalerConfig, restart_s
from bellows.autoscaler.decisions import Decision, Keep, Rescale, Start
from bellows.autoscaler.progress import RunningJob, middle_gain, shown_share, work_left
from bellows.autoscaler.reasons import (
    batch_keep_reason,
    keep_reason,
    min_runtime_reason,
    reasoned,
)
from bellows.autoscaler.state import State
from bellows.jobs import Allocation, JobSpec, SpecError, is_feasible
from bellows.scaling import EfficiencyProfile

__all__ = ["RateOf", "adopted", "apply", "batch_move_pays", "check_adoptable", "kept", "revised"]

RateOf = Callable[[JobSpec, int, int], float]
"""Samples per second of a job at ``(gpus, batch)`` (the core's tables: measured or the JSA's)."""


def apply(
    s: State,
    config: AutoscalerConfig,
    capacity: int,
    gpus: Mapping[str, int],
    now: float,
    *,
    moved: frozenset[str] = frozenset(),
    batch_kept: dict[str, int],
) -> list[Decision]:
    """The decisions that put the jobs on ``gpus``, applied to ``s``; ``moved``: jobs that
    keep their count but restart onto other nodes
    (:meth:`bellows.autoscaler.valuing.Pricing.paying_migrations`); a batch change on the
    same GPUs that would not pay is noted in ``batch_kept`` instead."""
    downs: list[Rescale] = []
    ups: list[Rescale] = []
    starts: list[Start] = []
    resumed: set[str] = set()
    faster_alone: set[str] = set()
    rows, jobs = s.rows, s.running
    for name, k in gpus.items():
        row = rows[name]
        batch = row.batch[k]
        running = jobs.get(name)
        held = None if running is None else running.allocation
        if held is not None and held.gpus == k and held.batch == batch and name not in moved:
            continue  # the common case in a round: the job keeps what it has
        alloc = Allocation(k, batch)
        rate = float(row.rate[k])
        cost = restart_s(s.jobs[name], config)
        if running is None:
            if _start(s, name, alloc, rate, cost=cost, now=now):
                resumed.add(name)
            starts.append(Start(name, alloc.gpus, alloc.batch))
        elif running.allocation != alloc or name in moved:
            old = running.allocation
            same = old.gpus == k and name not in moved
            if same and not batch_move_pays(
                s, config, name, running, rate=rate, cost=cost, now=now
            ):
                batch_kept[name] = alloc.batch
                continue  # same GPUs, another batch: a restart that would not pay
            s.running[name] = running.moved_to(alloc, rate, now, restart_s=cost)
            s.resumed[name] = now
            s.moves[name] = s.moves.get(name, 0) + 1
            s.in_use += k - old.gpus
            change = Rescale(name, old.gpus, old.batch, alloc.gpus, alloc.batch)
            (downs if alloc.gpus < old.gpus else ups).append(change)
            if alloc.gpus < old.gpus and row.values[k] > row.values[old.gpus]:
                faster_alone.add(name)
    # scale-downs free GPUs before scale-ups and starts claim them
    return reasoned(
        downs,
        ups,
        starts,
        resumed=frozenset(resumed),
        faster_alone=frozenset(faster_alone),
        capacity=capacity,
    )


def _start(s: State, name: str, alloc: Allocation, rate: float, *, cost: float, now: float) -> bool:
    """Start waiting job ``name`` at ``alloc``; whether it resumes (it was halted by a
    capacity drop: it restarts from its checkpoint, and pays its restart again)."""
    s.arrived.remove(name)
    done = s.carried.pop(name, None)
    pause = 0.0 if done is None else cost
    charge, work = s.charged.get(name), s.jobs[name].work
    seen = (0.0, now) if done is None else None  # a fresh job has done nothing yet
    s.running[name] = RunningJob(alloc, rate, done or 0.0, now, now + pause, charge, work, seen)
    s.resumed[name] = now
    s.in_use += alloc.gpus
    return done is not None


def kept(
    s: State,
    config: AutoscalerConfig,
    capacity: int,
    decisions: Sequence[Decision],
    floors: Mapping[str, int],
    *,
    priced: tuple[list[str], np.ndarray] | None,
    batch_kept: Mapping[str, int],
) -> tuple[Keep, ...]:
    """The running jobs this round left as they were, and why (one note per job), from the
    values it ``priced`` (its jobs' names and rows):

    * GPUs it left free would have run them faster (higher TSF on the exact grid, so not
      a tie): the optimizer is exact, so only the restart priced into the move kept them;
    * the optimizer chose another batch on their GPUs, which would not pay for its
      restart (:func:`batch_move_pays`);
    * their minimum runtime (:func:`bellows.autoscaler.admission.protected`) kept the round
      from shrinking them while jobs still wait after it.
    """
    moved = {d.job for d in decisions}
    out: dict[str, Keep] = {}
    names, values = priced or ([], np.zeros((0, 0)))
    free = capacity - s.in_use
    for i, name in enumerate(names):
        running = s.running.get(name)
        if running is None or name in moved or not np.isfinite(values[i]).any():
            continue
        grid, k = s.rows[name].grid, running.allocation.gpus
        if k >= grid.size:
            continue
        reach = grid[1 : min(grid.size, k + free + 1)]
        best = int(np.argmax(reach)) + 1
        if reach[best - 1] > grid[k] and best != k:
            reason = keep_reason(k, best)
            out[name] = Keep(name, k, running.allocation.batch, best, reason)
    for name, batch in batch_kept.items():
        running = s.running.get(name)
        if running is None or name in out or name in moved:
            continue
        held = running.allocation
        if held.batch != batch:
            reason = batch_keep_reason(held.gpus, held.batch, batch)
            out[name] = Keep(name, held.gpus, held.batch, held.gpus, reason)
    waiting = bool(s.arrived)
    for name in floors if waiting else ():
        running = s.running.get(name)
        if running is None or name in out or name in moved:
            continue
        own = s.jobs[name].min_runtime_s
        least = config.min_runtime_s if own is None else own
        held = running.allocation
        reason = min_runtime_reason(held.gpus, least)
        out[name] = Keep(name, held.gpus, held.batch, held.gpus, reason)
    return tuple(out.values())


def batch_move_pays(
    s: State,
    config: AutoscalerConfig,
    name: str,
    running: RunningJob,
    *,
    rate: float,
    cost: float,
    now: float,
) -> bool:
    """Whether moving a running job to another batch on the GPUs it holds finishes it
    sooner, its restart included (``cost`` times the hysteresis, as the pricing charges
    a move). The pricing charges no restart at the job's own GPU count, where it assumes
    the row's batch: a job adopted at another batch (found running, admitted by Kueue at
    its owner's size) or whose row a revision changed would otherwise be restarted for a
    batch change that gains nothing, its restart unpriced."""
    left = float(work_left(s.jobs[name].work, running.done_at(now)))
    if running.rate <= 0.0:
        return True
    if rate <= 0.0:
        return False
    keep = left / running.rate
    move = left / rate + cost * max(1.0, config.hysteresis)
    return move < keep


def check_adoptable(job: JobSpec, allocation: Allocation) -> None:
    """:class:`SpecError` for an allocation job ``job``'s bounds rule out (a controller's
    journal that is wrong: the tables, sized by ``k_max``, have no row for it)."""
    if not (is_feasible(job, allocation) or is_feasible(job, allocation, fixed_batch=True)):
        raise SpecError(
            "allocation",
            f"k={allocation.gpus},b={allocation.batch}",
            f"a size job {job.name}'s bounds allow",
        )


def adopted(
    s: State,
    config: AutoscalerConfig,
    rate_of: RateOf,
    job: JobSpec,
    allocation: Allocation,
    *,
    now: float,
    done: float,
    since: float | None,
) -> None:
    """Job ``job`` (its row in ``s.rows`` already) running at ``allocation`` with ``done``
    samples as of ``since`` (default ``now``): from then at the allocation's rate, after the
    restart a resume costs (none for a job that did nothing yet)."""
    rate = rate_of(job, allocation.gpus, allocation.batch)
    done = min(max(done, 0.0), job.work)
    charge = s.charged.get(job.name)
    if charge is not None:  # reference samples per s, at its step's E (its row's)
        rate *= middle_gain(charge, allocation.batch, done, job.work)
    start = now if since is None else min(since, now)
    pause = restart_s(job, config) if done > 0 else 0.0  # a resume, not a start
    s.running[job.name] = RunningJob(allocation, rate, done, start, start + pause, charge, job.work)
    s.resumed[job.name] = start
    s.in_use += allocation.gpus


def revised(
    s: State,
    rate_of: RateOf,
    job: JobSpec,
    profile: EfficiencyProfile | None,
    *,
    now: float,
    done: float | None,
    since: float | None,
) -> None:
    """A running job's estimate at its revised spec ``job`` (charged ``profile``): its
    progress kept at the revised rate from ``now``, or ``done`` as of ``since`` (default
    ``now``); a job halted by a capacity drop keeps ``done`` for its resume."""
    name = job.name
    at = now if since is None else min(since, now)
    running = s.running.get(name)
    if running is not None:
        alloc = running.allocation
        rate = rate_of(job, alloc.gpus, alloc.batch)
        if profile is not None:  # reference samples per s
            at_done = running.done_at(now) if done is None else min(max(done, 0.0), job.work)
            rate *= middle_gain(profile, alloc.batch, at_done, job.work)  # its row's E
        if done is None:  # keep the estimate, at the revised rate from now on
            update = RunningJob(alloc, rate, running.done_at(now), now, running.paused_until,
                                profile, job.work, running.seen,
                                running.rerated(rate, running.done_at(now)))  # fmt: skip
        else:  # a report means the job was stepping then: no pause left to wait out
            done = min(max(done, 0.0), job.work)
            shown = shown_share(dataclasses.replace(running, charge=profile), rate, done, at)
            here = at >= s.resumed.get(name, at)  # not a report from before this allocation
            seen = (done, at) if here else None
            update = RunningJob(alloc, rate, done, at, at, profile, job.work, seen, shown)
        s.running[name] = update
    elif done is not None and name in s.carried:
        s.carried[name] = min(max(done, 0.0), job.work)
