"""What the step times jobs measured on their GPUs teach about their class (issue 36).

The JSA predicts a step time for every GPU count from a job's one-GPU times and one
Allreduce weight; the cluster may disagree at some counts (on the Pollux artifact's
measurements, 8 GPUs over two nodes take 1.4-1.8x the JSA's time, three and four nodes
0.9-1.2x). A :class:`PlacementMemory` keeps, per *class* of jobs (those that arrived with
the same JSA profile: one model, one annotation; a job refitted online stays in its class) and GPU
count, the step time measured on the fewest nodes at each per-GPU batch it was seen. As a
:data:`~bellows.scaling.measured_rows.StepTimes` source it answers, for a count measured,
the time at the nearest per-GPU batch moved to the batch asked by the job's own JSA (the
ratio of its predictions at the two); for a count never measured, what its profile's
measured placements say (:mod:`bellows.scaling.placement_steps`), else the JSA's; for a
class it has seen nothing of, those placements' (``None`` without: those rows stay the JSA's
bit for bit). So one job's run at
8 GPUs teaches every job of its class what 8 GPUs are worth.

* Only placements on the fewest nodes are kept (a job spread over more nodes measures
  another placement); a measurement within :data:`TOLERANCE` of what the memory would
  answer (the JSA's, for a class never seen) changes nothing.
* Each class has a version, bumped at every change, that a core's row caches key on with
  the class (:meth:`PlacementMemory.stamp`).
* Bounded: at most :data:`MAX_POINTS` points in all (past it, a new point is not kept) and
  :data:`MAX_NAMES` names' classes.

Pure: no I/O, no clock; facts in through :meth:`PlacementMemory.observe`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bellows.jobs import JobSpec
from bellows.scaling.placement_steps import PlacementSteps
from bellows.scaling.profiles import ClusterProfile
from bellows.scaling.timing import step_time

__all__ = ["MAX_NAMES", "MAX_POINTS", "TOLERANCE", "ObservedStep", "PlacementMemory", "job_class"]

TOLERANCE = 0.05
"""A measured ratio within 5 % of the kept one (of 1, where none is kept) teaches nothing:
the online fit's own revision tolerance (:data:`bellows.scaling.online.REVISE_TOLERANCE`)."""

MAX_POINTS = 65_536
"""Points (class, GPU count, per-GPU batch) kept at most: ~10 MiB."""

MAX_NAMES = 100_000
"""Job names whose class is remembered (the oldest forgotten first): ~20 MiB."""


@dataclass(frozen=True)
class ObservedStep:
    """A step measured where a job ran: ``seconds`` at global ``batch`` on ``gpus`` GPUs
    over ``nodes`` nodes (``None``: not known, taken as the fewest)."""

    gpus: int
    batch: int
    seconds: float
    nodes: int | None = None


def job_class(job: JobSpec) -> tuple[object, ...]:
    """The jobs a measurement speaks for: those with the same JSA profile and measured
    placements."""
    return (job.profile, job.weights, job.placements)


def _fewest(gpus: int, per_node: int) -> int:
    return -(-gpus // per_node)


@dataclass
class PlacementMemory:
    """Step times measured on the fewest nodes, per class, GPU count and per-GPU batch
    (module docstring)."""

    cluster: ClusterProfile
    _seconds: dict[tuple[object, ...], dict[int, dict[int, float]]] = field(default_factory=dict)
    _versions: dict[tuple[object, ...], int] = field(default_factory=dict)
    _classes: dict[str, tuple[object, ...]] = field(default_factory=dict)
    _points: int = 0
    _declared: PlacementSteps | None = None

    def __post_init__(self) -> None:
        if self._declared is None:
            self._declared = PlacementSteps(self.cluster)

    def copy(self) -> PlacementMemory:
        """An independent memory holding the same points (a core's fork)."""
        seconds = {c: {k: dict(p) for k, p in ks.items()} for c, ks in self._seconds.items()}
        return PlacementMemory(
            self.cluster,
            seconds,
            dict(self._versions),
            dict(self._classes),
            self._points,
            self._declared,
        )

    def class_of(self, job: JobSpec) -> tuple[object, ...]:
        """The job's class: that of the first spec of its name seen here (a job refitted
        online stays in the class it arrived in)."""
        kind = self._classes.get(job.name)
        if kind is None:
            if len(self._classes) >= MAX_NAMES:  # the oldest names first
                del self._classes[next(iter(self._classes))]
            kind = self._classes[job.name] = job_class(job)
        return kind

    def observe(self, job: JobSpec, step: ObservedStep) -> bool:
        """A step of ``job`` measured. Returns whether the memory changed."""
        gpus, nodes, batch, seconds = step.gpus, step.nodes, step.batch, step.seconds
        fewest = _fewest(gpus, self.cluster.gpus_per_node)
        if gpus < 1 or batch < 1 or (nodes is not None and nodes != fewest):
            return False
        if not (math.isfinite(seconds) and seconds > 0):
            return False
        expected = self(job, gpus, batch)
        if expected is None:
            expected = step_time(job, gpus, batch, self.cluster, nodes=fewest)
        if abs(seconds / expected - 1.0) <= TOLERANCE:
            return False
        kind = self.class_of(job)
        local = -(-batch // gpus)
        points = self._seconds.get(kind, {}).get(gpus, {})
        if local not in points:
            if self._points >= MAX_POINTS:
                return False
            self._points += 1
        self._seconds.setdefault(kind, {}).setdefault(gpus, {})[local] = seconds
        self._versions[kind] = self._versions.get(kind, 0) + 1
        return True

    def stamp(self, job: JobSpec) -> tuple[object, int]:
        """The job's class and its :meth:`version`: what a core's rows of it are cached by."""
        kind = self.class_of(job)
        return kind, self._versions.get(kind, 0)

    def version(self, job: JobSpec) -> int:
        """How many times what is known of the job's class changed (0: nothing known)."""
        return self._versions.get(self.class_of(job), 0)

    def __call__(self, job: JobSpec, gpus: int, batch: int) -> float | None:
        """Seconds of one step on ``gpus`` GPUs on the fewest nodes, as measured for the
        job's class (``None``: nothing measured of it): the time measured at the nearest
        per-GPU batch of that count, moved to ``batch`` by what is known before (its measured
        placements', else its JSA's); that at a count never measured."""
        counts = self._seconds.get(self.class_of(job))
        assert self._declared is not None
        if counts is None:
            return self._declared(job, gpus, batch)
        seconds = self._base(job, gpus, batch)
        points = counts.get(gpus)
        if not points:
            return seconds
        local = -(-batch // gpus)
        near = min(points, key=lambda m: (abs(math.log(m / local)), m))
        if near == local:
            return points[near]
        return points[near] * seconds / self._base(job, gpus, near * gpus)

    def _base(self, job: JobSpec, gpus: int, batch: int) -> float:
        """What is known before any measurement: the job's measured placements where it
        carries them, else the JSA's."""
        assert self._declared is not None
        declared = self._declared(job, gpus, batch)
        if declared is not None:
            return declared
        fewest = _fewest(gpus, self.cluster.gpus_per_node)
        return float(step_time(job, gpus, batch, self.cluster, nodes=fewest))
