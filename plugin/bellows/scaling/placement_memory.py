"""What the step times jobs measured on their GPUs teach about their class (issue 36).

The JSA predicts a step time for every GPU count from a job's one-GPU times and one
Allreduce weight; the cluster may disagree at some counts (on the Pollux artifact's
measurements, 8 GPUs over two nodes take 1.4-1.8x the JSA's time, three and four nodes
0.9-1.2x). A :class:`PlacementMemory` keeps, per *class* of jobs (those with the same JSA
profile: one model, one annotation) and GPU count, the ratio of the step time measured on
the fewest nodes to the JSA's, at each per-GPU batch it was seen. As a
:data:`~bellows.scaling.measured_rows.StepTimes` source it answers the JSA's time times the
ratio seen at the nearest per-GPU batch of that count (the JSA's own where the count was
never seen), and ``None`` for a class it has seen nothing of, whose rows stay the JSA's bit
for bit. So one job's run at 8 GPUs teaches every job of its class what 8 GPUs are worth.

* Only placements on the fewest nodes are kept (a job spread over more nodes measures
  another placement); a measurement within :data:`TOLERANCE` of what is kept (the JSA's,
  for a point never seen) changes nothing.
* Each class has a version, bumped at every change, that a core's row caches key on
  (:meth:`PlacementMemory.version`).
* Bounded: at most :data:`MAX_POINTS` points in all; past it, a new point is not kept.

Pure: no I/O, no clock; facts in through :meth:`PlacementMemory.observe`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bellows.jobs import JobSpec
from bellows.scaling.profiles import ClusterProfile
from bellows.scaling.timing import step_time

__all__ = ["MAX_POINTS", "TOLERANCE", "ObservedStep", "PlacementMemory", "job_class"]

TOLERANCE = 0.05
"""A measured ratio within 5 % of the kept one (of 1, where none is kept) teaches nothing:
the online fit's own revision tolerance (:data:`bellows.scaling.online.REVISE_TOLERANCE`)."""

MAX_POINTS = 65_536
"""Points (class, GPU count, per-GPU batch) kept at most: ~10 MiB."""


@dataclass(frozen=True)
class ObservedStep:
    """A step measured where a job ran: ``seconds`` at global ``batch`` on ``gpus`` GPUs
    over ``nodes`` nodes (``None``: not known, taken as the fewest)."""

    gpus: int
    batch: int
    seconds: float
    nodes: int | None = None


def job_class(job: JobSpec) -> tuple[object, ...]:
    """The jobs a measurement speaks for: those with the same JSA profile."""
    return (job.profile, job.weights)


def _fewest(gpus: int, per_node: int) -> int:
    return -(-gpus // per_node)


@dataclass
class PlacementMemory:
    """Measured-to-JSA step-time ratios per class, GPU count and per-GPU batch (module
    docstring)."""

    cluster: ClusterProfile
    _ratios: dict[tuple[object, ...], dict[int, dict[int, float]]] = field(default_factory=dict)
    _versions: dict[tuple[object, ...], int] = field(default_factory=dict)
    _points: int = 0

    def copy(self) -> PlacementMemory:
        """An independent memory holding the same points (a core's fork)."""
        ratios = {c: {k: dict(p) for k, p in counts.items()} for c, counts in self._ratios.items()}
        return PlacementMemory(self.cluster, ratios, dict(self._versions), self._points)

    def observe(self, job: JobSpec, step: ObservedStep) -> bool:
        """A step of ``job`` measured. Returns whether the memory changed."""
        gpus, nodes, batch, seconds = step.gpus, step.nodes, step.batch, step.seconds
        per_node = self.cluster.gpus_per_node
        fewest = _fewest(gpus, per_node)
        if gpus < 1 or batch < 1 or (nodes is not None and nodes != fewest):
            return False
        if not (math.isfinite(seconds) and seconds > 0):
            return False
        ratio = seconds / step_time(job, gpus, batch, self.cluster, nodes=fewest)
        kind = job_class(job)
        local = -(-batch // gpus)
        points = self._ratios.get(kind, {}).get(gpus, {})
        kept = points.get(local, 1.0)
        if abs(ratio / kept - 1.0) <= TOLERANCE:
            return False
        if local not in points:
            if self._points >= MAX_POINTS:
                return False
            self._points += 1
        self._ratios.setdefault(kind, {}).setdefault(gpus, {})[local] = ratio
        self._versions[kind] = self._versions.get(kind, 0) + 1
        return True

    def version(self, job: JobSpec) -> int:
        """How many times what is known of the job's class changed (0: nothing known)."""
        return self._versions.get(job_class(job), 0)

    def knows(self, job: JobSpec) -> bool:
        return job_class(job) in self._ratios

    def __call__(self, job: JobSpec, gpus: int, batch: int) -> float | None:
        """Seconds of one step on ``gpus`` GPUs on the fewest nodes, as measured for the
        job's class (``None``: nothing measured of it)."""
        counts = self._ratios.get(job_class(job))
        if counts is None:
            return None
        fewest = _fewest(gpus, self.cluster.gpus_per_node)
        seconds = step_time(job, gpus, batch, self.cluster, nodes=fewest)
        points = counts.get(gpus)
        if not points:
            return seconds
        local = -(-batch // gpus)
        near = min(points, key=lambda m: (abs(math.log(m / local)), m))
        return seconds * points[near]
