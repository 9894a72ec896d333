"""A Tiresias reference policy for the simulator (issue 36): used only to compare.

Our own implementation of the Tiresias baseline that the Pollux artifact runs (Gu et al.,
"Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI'19, discretized
two-queue least-attained-service, as the Pollux OSDI'21 artifact's ``simulator/tiresias.py``
configures it; read, not copied). Tiresias depends on little but the simulator's physics (it
never looks at a job's speed), so it is the cleanest check of the simulator against the
artifact's published results (``benchmarks/fidelity.py``).

* **Rigid jobs.** Every job runs at its trace GPU count (``JobSpec.gpus``) and batch
  (``JobSpec.batch_size``), or not at all.
* **Two queues.** A job enters queue 0 at its arrival. Each round, a running job's attained
  service grows by the time since the last round times its GPUs; once it reaches
  :data:`QUEUE_THRESHOLD_GPU_S` (the artifact's 16 GPU-hours) the job is demoted to the end
  of queue 1, for good. Within a queue jobs keep their order (arrival order in queue 0,
  demotion order in queue 1): the discretized LAS of Tiresias, not a sort by service.
* **Preemptive greedy admission.** Each round walks queue 0 then queue 1; a job runs if its
  GPUs fit in what the jobs before it left, else it waits (and is preempted if it ran):
  a later, smaller job may pass a larger one that does not fit (backfill).
* **Starvation** (``starvation``, the artifact's ``_solve_starvation``): a job in queue 1
  waiting, since it last ran, at least ``starvation`` times its service in queue 1 goes
  back to queue 0 with that service reset. The artifact sets it to 0, off; so does the
  default here.
* **Placement.** A job that keeps running keeps its GPUs; a job started this round takes,
  repeatedly, as many GPUs as it still needs from the node with the most free (the lowest
  numbered among equals), as the artifact places them.

Rounds every ``config.delta_s`` (60 s) on the grid while any job is unfinished, as
:class:`bellows.sim.pollux.PolluxPolicy`; the simulator charges the restart cost on every
restart after a preemption. A job whose GPU count is above the cluster's is rejected.
No I/O, no wall clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from bellows.autoscaler import AutoscalerConfig, ClockError
from bellows.autoscaler.config import restart_s
from bellows.autoscaler.decisions import Decision, Preempt, Reject, Start
from bellows.jobs import JobSpec, SpecError
from bellows.scaling import ClusterProfile, EfficiencyProfile
from bellows.sim.pollux.packing import Placement, node_sizes

__all__ = ["QUEUE_THRESHOLD_GPU_S", "TIRESIAS_INTERVAL_S", "TiresiasPolicy"]

TIRESIAS_INTERVAL_S: Final = 60.0
"""The scheduling interval the Pollux artifact runs Tiresias at."""
QUEUE_THRESHOLD_GPU_S: Final = 16 * 3600.0
"""Attained service (GPU-seconds) at which a job leaves queue 0 (the artifact's threshold)."""


@dataclass(eq=False)
class _Job:
    spec: JobSpec
    restart_s: float
    queue: int = 0
    running: bool = False
    executed_s: float = 0.0  # run time counted toward demotion (reset by a promotion)
    pending_s: float = 0.0  # waiting time since it last ran, once it has run
    checked_s: float = 0.0  # when the last round counted it
    placement: Placement = ()


class TiresiasPolicy:
    """The Tiresias reference in a simulation run (module docstring); the simulator drives
    it as it drives :class:`bellows.autoscaler.Autoscaler`, and takes its placements."""

    def __init__(
        self,
        config: AutoscalerConfig,
        *,
        capacity: int,
        cluster: ClusterProfile,
        threshold_gpu_s: float = QUEUE_THRESHOLD_GPU_S,
        starvation: float = 0.0,
    ) -> None:
        if not config.delta_s > 0:
            raise SpecError("delta_s", config.delta_s, "seconds > 0 between Tiresias' rounds")
        if not threshold_gpu_s > 0:
            raise SpecError("threshold_gpu_s", threshold_gpu_s, "GPU-seconds > 0")
        if not starvation >= 0:
            raise SpecError("starvation", starvation, "a factor >= 0 (0: off)")
        self._config = config
        self.interval_s = config.delta_s
        self.threshold_gpu_s = threshold_gpu_s
        self.starvation = starvation
        self._capacity = capacity
        self._sizes = node_sizes(capacity, cluster.gpus_per_node)
        self._jobs: dict[str, _Job] = {}  # unfinished, in arrival order
        self._queues: tuple[list[str], list[str]] = ([], [])
        self._known: set[str] = set()
        self._now = float("-inf")
        self._last = -1
        self.rounds = 0

    # ------------------------------------------------------------------ facts in
    def charge(self, name: str, profile: EfficiencyProfile | None) -> None:
        """Nothing: Tiresias never looks at a job's speed (the simulator still charges it)."""

    def tabulate(self, jobs: Iterable[JobSpec]) -> int:
        """Nothing ahead: Tiresias needs no rows."""
        return 0

    def arrive(self, job: JobSpec, now: float) -> bool:
        self._advance(now)
        if job.name in self._known:
            return False
        self._known.add(job.name)
        self._jobs[job.name] = _Job(job, restart_s(job, self._config), checked_s=now)
        self._queues[0].append(job.name)
        return True

    def finish(self, name: str, now: float) -> bool:
        self._advance(now)
        job = self._jobs.pop(name, None)
        if job is None:
            return False
        self._queues[job.queue].remove(name)
        return True

    def set_capacity(self, gpus: int, now: float) -> None:
        if gpus != self._capacity:
            raise SpecError("capacity", gpus, f"{self._capacity}: the Tiresias reference "
                            "models a fixed cluster (no capacity changes)")  # fmt: skip

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

    def queue_of(self, name: str) -> int:
        """The queue (0 or 1) job ``name`` is in."""
        return self._jobs[name].queue

    # ------------------------------------------------------------------ a round
    def step(self, now: float) -> list[Decision]:
        """Count service, demote and promote, then admit and place (module docstring)."""
        self._advance(now)
        self._last = max(self._last, round(now / self.interval_s))
        self.rounds += 1
        decisions: list[Decision] = self._reject_oversized()
        for job in self._jobs.values():
            self._count(job, now)
        running = self._admit()
        halts: list[Decision] = []
        free = list(self._sizes)
        for job in self._jobs.values():
            if job.running and job.spec.name not in running:
                halts.append(Preempt(job.spec.name, "preempted by the Tiresias reference"))
                job.placement = ()
            for node, gpus in job.placement:
                free[node] -= gpus
            job.running = job.spec.name in running
        starts: list[Decision] = []
        for name in [*self._queues[0], *self._queues[1]]:
            job = self._jobs[name]
            if job.running and not job.placement:
                job.placement = _take(free, job.spec.gpus)
                starts.append(Start(name, job.spec.gpus, job.spec.batch_size,
                                    "started by the Tiresias reference"))  # fmt: skip
        return decisions + halts + starts

    def _reject_oversized(self) -> list[Decision]:
        out: list[Decision] = []
        for job in list(self._jobs.values()):
            if job.spec.gpus > self._capacity:
                out.append(Reject(job.spec.name, f"{job.spec.gpus} GPUs on a cluster of "
                                  f"{self._capacity}"))  # fmt: skip
                self._queues[job.queue].remove(job.spec.name)
                del self._jobs[job.spec.name]
        return out

    def _count(self, job: _Job, now: float) -> None:
        """Service since the last round, demotion at the threshold, promotion of the starved."""
        elapsed = now - job.checked_s
        job.checked_s = now
        if job.running:
            job.executed_s += elapsed
            if job.queue == 0 and job.executed_s * job.spec.gpus >= self.threshold_gpu_s:
                self._move(job, 1)
            return
        if job.executed_s > 0:
            job.pending_s += elapsed
        if (
            self.starvation > 0
            and job.queue == 1
            and job.executed_s > 0
            and job.pending_s >= job.executed_s * self.starvation
        ):
            job.executed_s = job.pending_s = 0.0
            self._move(job, 0)

    def _move(self, job: _Job, queue: int) -> None:
        self._queues[job.queue].remove(job.spec.name)
        self._queues[queue].append(job.spec.name)
        job.queue = queue

    def _admit(self) -> set[str]:
        """The jobs that run this round: queue 0 then queue 1, each while its GPUs fit."""
        left = self._capacity
        running: set[str] = set()
        for name in [*self._queues[0], *self._queues[1]]:
            gpus = self._jobs[name].spec.gpus
            if gpus <= left:
                running.add(name)
                left -= gpus
        return running

    def _advance(self, now: float) -> None:
        if now < self._now:
            raise ClockError(f"t={now!r} is before the last fact or step (t={self._now!r})")
        self._now = now


def _take(free: list[int], gpus: int) -> Placement:
    """``gpus`` GPUs from the nodes with the most free, the lowest numbered among equals."""
    held: dict[int, int] = {}
    while gpus:
        node = max(range(len(free)), key=lambda n: (free[n], -n))
        take = min(free[node], gpus)
        if take <= 0:
            raise SpecError("gpus", gpus, "at most the free GPUs")  # admission makes it fit
        free[node] -= take
        held[node] = held.get(node, 0) + take
        gpus -= take
    return tuple(sorted(held.items()))
