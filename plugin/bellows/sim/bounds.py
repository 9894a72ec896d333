"""How low any policy's average JCT can go on a trace: two idealised schedulers of a run's jobs.

Both take each job's GPU-seconds from a run (:class:`Demand`, :func:`demands`) and schedule
those jobs again, clairvoyantly (each job's size known on arrival):

* :func:`fluid_srpt` pools the cluster into one machine of ``capacity`` GPUs and serves the
  job with the least GPU-seconds left first, preempting for free. A job may use the whole
  cluster and scales perfectly, so on the same GPU-seconds no schedule finishes jobs sooner
  on average (shortest remaining processing time is optimal for the mean on one machine:
  Schrage, 1968). It is a lower bound for the work the run did, not for every batch choice.
* :func:`elastic_srpt` is the fluid one with each job held to the most GPUs it may use
  (``most_gpus``): still perfect scaling (every GPU-second as useful as at the count it ran
  at), least work left first, free preemption. Not a bound (the greedy is not optimal once
  jobs are capped), but what the most an elastic scheduler could hope for looks like.
* :func:`rigid_srpt` keeps each job at the GPU count it ran at on average and packs the
  cluster at every arrival and completion, the least GPU-seconds left first (past a job that
  does not fit), preempting any running job that is no longer chosen at ``restart_s`` of lost
  progress. It is what the most aggressive preemptive shortest-first scheduler gets on
  those jobs, without elasticity: a yardstick, not a bound.

Used by ``benchmarks/bursty_bounds.py`` (why issue 29's bursty target is out of reach).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bellows.sim.metrics import JobRecord

__all__ = ["Demand", "demands", "elastic_srpt", "fluid_srpt", "rigid_srpt"]


@dataclass(frozen=True)
class Demand:
    """One job as an idealised scheduler sees it."""

    arrival_s: float
    gpu_s: float  # GPU-seconds of work
    gpus: int  # GPUs it runs on (rigid_srpt)
    most_gpus: int  # the most GPUs it may use (elastic_srpt)

    def __post_init__(self) -> None:
        if self.gpu_s <= 0 or not 1 <= self.gpus <= self.most_gpus:
            raise ValueError(f"a demand needs gpu_s > 0 and 1 <= gpus <= most_gpus, not {self}")


def demands(records: Sequence[JobRecord], most_gpus: Mapping[str, int]) -> list[Demand]:
    """The finished jobs of a run, each with the GPU-seconds it used, its average GPU count
    over its running time (at least 1) and ``most_gpus[name]`` (at least that average)."""
    out = []
    for r in records:
        if r.finish_s is None or r.start_s is None or r.gpu_seconds <= 0:
            continue
        running = sum(s.end_s - s.start_s for s in r.segments)
        gpus = max(1, round(r.gpu_seconds / running))
        out.append(Demand(r.arrival_s, r.gpu_seconds, gpus, max(gpus, most_gpus[r.name])))
    return out


def _check(capacity: int) -> None:
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1 GPU, not {capacity}")


class _Arrivals:
    """The jobs' indices in arrival order, handed out as the clock passes them."""

    def __init__(self, jobs: Sequence[Demand]) -> None:
        self._jobs = jobs
        self._order = sorted(range(len(jobs)), key=lambda i: jobs[i].arrival_s)
        self._next = 0

    def pending(self) -> bool:
        return self._next < len(self._order)

    def next_s(self) -> float:
        """When the next job arrives (infinity when none is left)."""
        return self._jobs[self._order[self._next]].arrival_s if self.pending() else math.inf

    def due(self, now: float) -> list[int]:
        """The jobs that arrived by ``now`` and were not handed out yet."""
        out = []
        while self.pending() and self.next_s() <= now:
            out.append(self._order[self._next])
            self._next += 1
        return out


def fluid_srpt(jobs: Sequence[Demand], capacity: int) -> list[float]:
    """Each job's JCT (seconds, in the order of ``jobs``) on one machine of ``capacity`` GPUs under
    preemptive shortest-remaining-GPU-seconds first."""
    _check(capacity)
    arrivals, jct = _Arrivals(jobs), [0.0] * len(jobs)
    left: list[tuple[float, int]] = []  # (GPU-seconds left, job)
    now = 0.0
    while arrivals.pending() or left:
        if not left:
            now = max(now, arrivals.next_s())
        for i in arrivals.due(now):
            heapq.heappush(left, (jobs[i].gpu_s, i))
        rem, i = left[0]
        arrival = arrivals.next_s()
        if now + rem / capacity <= arrival:
            heapq.heappop(left)
            now += rem / capacity
            jct[i] = now - jobs[i].arrival_s
        else:
            heapq.heapreplace(left, (rem - (arrival - now) * capacity, i))
            now = arrival
    return jct


def elastic_srpt(jobs: Sequence[Demand], capacity: int) -> list[float]:
    """Each job's JCT (seconds, in the order of ``jobs``) when at every instant the jobs with
    the least GPU-seconds left get up to ``most_gpus`` each (fractions of a GPU allowed), a
    GPU-second doing as much work at any count."""
    _check(capacity)
    arrivals, jct = _Arrivals(jobs), [0.0] * len(jobs)
    left: dict[int, float] = {}  # job -> GPU-seconds left
    now = 0.0
    while arrivals.pending() or left:
        if not left:
            now = max(now, arrivals.next_s())
        for i in arrivals.due(now):
            left[i] = jobs[i].gpu_s
        free, rates = float(capacity), {}
        for i in sorted(left, key=lambda i: (left[i], i)):
            if free <= 0:
                break
            rates[i] = min(float(jobs[i].most_gpus), free)
            free -= rates[i]
        step = min(arrivals.next_s() - now, *(left[i] / g for i, g in rates.items()))
        now += step
        for i, g in rates.items():
            left[i] -= g * step
            if left[i] <= 1e-6 * jobs[i].gpu_s:
                del left[i]
                jct[i] = now - jobs[i].arrival_s
    return jct


def rigid_srpt(jobs: Sequence[Demand], capacity: int, restart_s: float) -> tuple[list[float], int]:
    """Each job's JCT (seconds, in the order of ``jobs``) and the preemptions, packing ``capacity``
    GPUs at every event with rigid jobs, least GPU-seconds left first."""
    _check(capacity)
    if any(j.gpus > capacity for j in jobs):
        raise ValueError(f"a job needs more than the {capacity} GPUs there are")
    arrivals, jct = _Arrivals(jobs), [0.0] * len(jobs)
    left: dict[int, float] = {}  # job -> seconds of running left at its width
    running: set[int] = set()
    preemptions, now = 0, 0.0
    while arrivals.pending() or left:
        if not left:
            now = max(now, arrivals.next_s())
        for i in arrivals.due(now):
            left[i] = jobs[i].gpu_s / jobs[i].gpus
        free, chosen = capacity, set()
        for i in sorted(left, key=lambda i: (left[i] * jobs[i].gpus, i)):
            if jobs[i].gpus <= free:
                chosen.add(i)
                free -= jobs[i].gpus
        for i in running - chosen:
            left[i] += restart_s
            preemptions += 1
        running = chosen
        step = min(arrivals.next_s() - now, *(left[i] for i in running))
        now += step
        for i in list(running):
            left[i] -= step
            if left[i] <= 1e-9:
                del left[i]
                running.discard(i)
                jct[i] = now - jobs[i].arrival_s
    return jct, preemptions
