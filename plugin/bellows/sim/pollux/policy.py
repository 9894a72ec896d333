"""The Pollux reference policy (OSDI'21, §4.2), reimplemented from the paper and its public
artifact for the simulator: it stands where the autoscaler core stands in a run and is used
only to compare (``bellows simulate --policy pollux``, ``benchmarks/policies.py --pollux``).

Every ``interval_s`` (Pollux's 60 s; the config's ``delta_s``) it re-optimises every job:

* **Speedup.** A job's goodput on ``k`` GPUs (throughput x statistical efficiency at its
  progress, at the best batch in ``[b_min, b_max]``; :mod:`bellows.sim.pollux.speedups`)
  over its goodput on its *fair share*, ``ceil(GPUs / jobs)`` GPUs, scaled as Pollux scales
  it (``nodes / GPUs``, so that one node's share is about 1).
* **Restart penalty.** A job whose allocation changes (a start included) has its speedup
  multiplied by Pollux's ``REALLOC_FACTOR = max(T - S·δ, 0) / (T + δ)``: ``T`` its age,
  ``S`` its re-allocations since it first started, ``δ`` its restart cost (what the simulator
  charges it). A job that keeps its placement keeps its speedup.
* **Fairness.** The allocation maximises the power mean of ``speedup + 1e-3`` with exponent
  ``p = -1`` (Pollux's default), i.e. minimises ``sum_j 1 / (speedup_j + 1e-3)``: separable,
  so the exact DP (:func:`bellows.optimizer.allocate`) solves it exactly with value tables of
  ``-1 / (speedup + 1e-3)``, where Pollux searches with a genetic algorithm. A job given no
  GPUs costs ``1 / 1e-3``, as in Pollux: every job that can run gets GPUs before any job
  gets more.
* **Nodes.** The counts are placed per node (:mod:`bellows.sim.pollux.packing`): jobs that
  keep their count keep their nodes, the others go largest first on one node if they fit,
  else spread under Pollux's interference rule (at most one distributed job per node); a job
  that cannot be placed at its count takes the largest count that can be, and waiting jobs
  then start on what is left at their smallest count. The batch follows the placement.
* **Batch.** A job that keeps its placement but whose best batch moved (its progress step
  changed) retunes in place (:class:`Retune`), without a restart, as AdaptDL does.
  ``retune=False`` holds it to the job constraints Bellows mode has (a batch change is a
  restart, docs/training-contract.md): keeping its placement is then worth its goodput at
  the batch it runs, and moving to the new best batch on the same nodes is a re-allocation
  like any other, its speedup multiplied by the restart factor and, when chosen, charged a
  restart (a :class:`~bellows.autoscaler.decisions.Rescale` onto the same placement).
* **Exploration cap** (``explore``, on by default). A job gets at most twice the most GPUs
  it has run on (before its first start: its smallest feasible count, 1 mostly), as Pollux's
  scheduler and simulator bound its ``max_replicas``: its throughput model is fitted online
  and not trusted far beyond what it has seen. Here the model is the true one from the
  start, so the cap only reproduces how Pollux ramps a job up.

Jobs are never rejected (a queue); progress is what the running jobs report each round
(``step(now, steps)``: the step of its work each has reached, as AdaptDL's agents report
progress). No I/O, no wall clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from bellows.autoscaler import AutoscalerConfig, ClockError
from bellows.autoscaler.config import restart_s
from bellows.autoscaler.decisions import Decision, Preempt, Rescale, Start
from bellows.jobs import JobSpec, SpecError
from bellows.optimizer import allocate
from bellows.scaling import ClusterProfile, EfficiencyProfile, throughput
from bellows.sim.pollux.packing import Packer, Placement, node_sizes
from bellows.sim.pollux.speedups import STEPS, RowCache, Rows, StepSeconds

__all__ = ["FAIRNESS_P", "POLLUX_INTERVAL_S", "SPEEDUP_OFFSET", "PolluxPolicy", "Retune"]

POLLUX_INTERVAL_S: Final = 60.0
"""Pollux's scheduling interval: every job is re-optimised this often."""
FAIRNESS_P: Final = -1.0
"""The power mean's exponent (Pollux's default): the harmonic mean of the speedups."""
SPEEDUP_OFFSET: Final = 1e-3
"""Added to every speedup before the power mean, as Pollux does: a job with no GPUs counts."""


@dataclass(frozen=True)
class Retune:
    """Job ``job`` keeps its GPUs and nodes and runs at global batch ``batch`` from now on:
    AdaptDL changes a running job's batch in place, so this is no restart."""

    job: str
    batch: int


@dataclass(eq=False)
class _Job:
    spec: JobSpec
    arrival_s: float
    restart_s: float
    gpus: int = 0
    batch: int = 0
    placement: Placement = ()
    step: int = 0  # progress step as last reported (speedups.progress_step)
    started: bool = False
    restarts: int = 0  # Pollux's S_j: re-allocations since the first start
    most: int = 0  # the most GPUs it has run on (the exploration cap's measure)


class PolluxPolicy:
    """The Pollux reference in a simulation run (module docstring); the simulator drives it
    as it drives :class:`bellows.autoscaler.Autoscaler`, and takes its placements."""

    def __init__(
        self,
        config: AutoscalerConfig,
        *,
        capacity: int,
        cluster: ClusterProfile,
        explore: bool = True,
        retune: bool = True,
        measured: StepSeconds | None = None,
    ) -> None:
        if not config.delta_s > 0:
            raise SpecError("delta_s", config.delta_s, "seconds > 0 between Pollux's rounds")
        self._config = config
        self.interval_s = config.delta_s
        self.explore = explore
        self.retune = retune
        self._cluster = cluster
        self._capacity = capacity
        self._sizes = node_sizes(capacity, cluster.gpus_per_node)
        self._cache = RowCache(cluster, measured)
        self._jobs: dict[str, _Job] = {}  # unfinished, in arrival order
        self._known: set[str] = set()
        self._profiles: dict[str, EfficiencyProfile] = {}
        self._now = float("-inf")
        self._last = -1  # index of the last round on the interval grid
        self.rounds = 0

    # ------------------------------------------------------------------ facts in
    def charge(self, name: str, profile: EfficiencyProfile | None) -> None:
        """Decide job ``name`` by goodput with ``profile`` (``None``: by throughput, E = 1)."""
        if profile is None:
            self._profiles.pop(name, None)
        else:
            self._profiles[name] = profile

    def tabulate(self, jobs: Iterable[JobSpec]) -> int:
        """Nothing ahead: Pollux's rows depend on each job's progress, made as rounds need them."""
        return 0

    def arrive(self, job: JobSpec, now: float) -> bool:
        self._advance(now)
        if job.name in self._known:
            return False
        self._known.add(job.name)
        self._jobs[job.name] = _Job(job, now, restart_s(job, self._config))
        return True

    def finish(self, name: str, now: float) -> bool:
        self._advance(now)
        if self._jobs.pop(name, None) is None:
            return False
        self._cache.forget(name)
        return True

    def set_capacity(self, gpus: int, now: float) -> None:
        if gpus != self._capacity:
            raise SpecError("capacity", gpus, f"{self._capacity}: the Pollux reference models "
                            "a fixed cluster (no capacity changes)")  # fmt: skip

    # ------------------------------------------------------------------ queries
    def next_round_at(self) -> float | None:
        """The next point of the interval grid not yet stepped, while any job is unfinished."""
        if not self._jobs:
            return None
        at = max(math.ceil(self._now / self.interval_s), self._last + 1)
        return at * self.interval_s

    def restart_s(self, name: str) -> float:
        return self._jobs[name].restart_s

    def placement(self, name: str) -> Placement:
        """The nodes and GPUs job ``name`` holds after the last round."""
        return self._jobs[name].placement

    def restarts(self, name: str) -> int:
        return self._jobs[name].restarts

    # ------------------------------------------------------------------ a round
    def step(self, now: float, steps: Callable[[str], int]) -> list[Decision | Retune]:
        """Re-optimise every job at ``now``; ``steps(name)``: a running job's progress step
        (:func:`bellows.sim.pollux.speedups.progress_step`, the resolution rows use)."""
        self._advance(now)
        self._last = max(self._last, round(now / self.interval_s))
        self.rounds += 1
        jobs = list(self._jobs.values())
        for job in jobs:
            if job.gpus:
                job.step = steps(job.spec.name)
        if not jobs:
            return []
        rows = self._cache.rows(
            [j.spec for j in jobs], {j.spec.name: j.step for j in jobs}, self._profiles
        )
        counts = allocate(self._values(jobs, rows, now), self._capacity, method="numpy")
        placements = self._place(jobs, rows, [int(k) for k in counts])
        return self._decide(jobs, rows, placements)

    def _values(self, jobs: Sequence[_Job], rows: Sequence[Rows], now: float) -> np.ndarray:
        """``-1 / (scaled speedup x restart factor + offset)`` per job and GPU count."""
        fair = max(1, math.ceil(self._capacity / len(jobs)))
        scale = len(self._sizes) / max(self._capacity, 1)
        width = max(j.spec.k_max for j in jobs)
        values = np.full((len(jobs), width + 1), -np.inf)
        for i, (job, row) in enumerate(zip(jobs, rows, strict=True)):
            good = row.packed
            share = good[1 : min(fair, job.spec.k_max) + 1]
            feasible = np.flatnonzero(good > 0)
            if not feasible.size:
                values[i, 0] = -1.0 / SPEEDUP_OFFSET
                continue
            base = (
                float(share.max()) if share.size and share.max() > 0 else float(good[feasible[0]])
            )
            factor = _restart_factor(job, now)
            speed = good / base * scale * factor
            row_values = np.where(good > 0, -1.0 / (speed + SPEEDUP_OFFSET), -np.inf)
            if job.gpus:  # kept where it is: no restart, at the goodput of its placement
                kept = row.goodput(job.gpus, len(job.placement)) / base * scale
                if not self.retune:  # at the batch it runs, or retuned at a restart
                    kept = max(self._held_goodput(job) / base * scale, kept * factor)
                row_values[job.gpus] = -1.0 / (kept + SPEEDUP_OFFSET)
            row_values[0] = -1.0 / SPEEDUP_OFFSET
            if self.explore:  # at most twice the most GPUs it has run on, or its least
                row_values[max(2 * job.most, int(feasible[0]), job.gpus) + 1 :] = -np.inf
            values[i, : row_values.size] = row_values
        return values

    def _place(
        self, jobs: Sequence[_Job], rows: Sequence[Rows], counts: Sequence[int]
    ) -> list[Placement]:
        """Counts on nodes (module docstring): kept jobs first, then largest first, then the
        waiting jobs on what is left."""
        packer = Packer(self._sizes)
        out: list[Placement] = [()] * len(jobs)
        for i, job in enumerate(jobs):
            if job.gpus and counts[i] == job.gpus:
                packer.keep(job.placement)
                out[i] = job.placement
        moving = sorted((i for i, job in enumerate(jobs) if counts[i] and not out[i]),
                        key=lambda i: (-counts[i], i))  # fmt: skip
        for i in moving:
            job, good = jobs[i], rows[i].packed
            for k in range(counts[i], 0, -1):
                if good[k] <= 0:
                    continue
                if k == job.gpus and packer.fits(job.placement):
                    packer.keep(job.placement)
                    out[i] = job.placement
                    break
                placed = packer.place(k)
                if placed is not None:
                    out[i] = placed
                    break
        for i in range(len(jobs)):
            feasible = np.flatnonzero(rows[i].packed > 0)
            if not out[i] and feasible.size:
                placed = packer.place(int(feasible[0]))
                out[i] = placed or ()
        return out

    def _decide(
        self, jobs: Sequence[_Job], rows: Sequence[Rows], placements: Sequence[Placement]
    ) -> list[Decision | Retune]:
        """Decisions that take every job from its placement to its new one."""
        halts: list[Decision | Retune] = []
        moves: list[Decision | Retune] = []
        for job, row, placed in zip(jobs, rows, placements, strict=True):
            name, gpus = job.spec.name, sum(g for _, g in placed)
            batch = row.batch(gpus, len(placed)) if placed else 0
            if job.gpus and not placed:
                halts.append(Preempt(name, "suspended by the Pollux reference's round"))
            elif placed and not job.gpus:
                moves.append(Start(name, gpus, batch, "started by the Pollux reference"))
                job.restarts += job.started
                job.started = True
            elif placed != job.placement:
                moves.append(Rescale(name, job.gpus, job.batch, gpus, batch,
                                     "re-allocated by the Pollux reference"))  # fmt: skip
                job.restarts += 1
            elif batch != job.batch and self.retune:
                moves.append(Retune(name, batch))
            elif batch != job.batch:  # a restart onto the same nodes, where it pays
                factor = _restart_factor(job, self._now)
                if self._held_goodput(job) >= row.goodput(gpus, len(placed)) * factor:
                    batch = job.batch
                else:
                    moves.append(Rescale(name, job.gpus, job.batch, gpus, batch,
                                         "batch changed by the Pollux reference"))  # fmt: skip
                    job.restarts += 1
            job.gpus, job.batch, job.placement = gpus, batch, placed
            job.most = max(job.most, gpus)
        return halts + moves

    def _held_goodput(self, job: _Job) -> float:
        """Goodput of ``job`` at the batch it runs on its placement, in its progress step."""
        profile = self._profiles.get(job.spec.name)
        nodes = len(job.placement)
        rate = throughput(job.spec, job.gpus, job.batch, self._cluster, nodes=nodes)
        if profile is None:
            return rate
        middle = job.spec.work * (job.step + 0.5) / STEPS
        return rate * float(profile.efficiency(job.batch, middle))

    def _advance(self, now: float) -> None:
        if now < self._now:
            raise ClockError(f"t={now!r} is before the last fact or step (t={self._now!r})")
        self._now = now


def _restart_factor(job: _Job, now: float) -> float:
    """Pollux's ``REALLOC_FACTOR`` of a job re-allocated at ``now`` (module docstring)."""
    age, delay = max(now - job.arrival_s, 0.0), job.restart_s
    return max(age - job.restarts * delay, 0.0) / (age + delay) if age + delay else 1.0
