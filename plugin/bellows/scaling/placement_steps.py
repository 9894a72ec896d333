"""Step times from the placements a job's profile says were measured (issue 36).

The JSA predicts every (GPUs, batch) from a job's one-GPU times and one Allreduce weight.
Where a job's profile also carries step times *measured* on several GPUs
(:attr:`bellows.jobs.JobSpec.placements`, the profile document's ``placements``: the Pollux
artifact's ``placements.csv`` and ``scalability.csv`` are such measurements), the core
decides the job's packed placements by them instead (:mod:`bellows.scaling.measured_rows`),
as the Pollux reference decides with what was measured. On Pollux's workloads, with the
artifact's physics, that is what brings Bellows mode to 0.90x the published Pollux on the
median workload (docs/simulator.md, "Deciding with the measured placements").

:class:`PlacementSteps` answers, for a job and ``gpus`` GPUs on the fewest nodes of the
cluster:

* ``None`` for a job with no measured placements (its rows stay the JSA's, bit for bit);
* at a (nodes, GPUs) measured: linear in the per-GPU batch between the measured ones; beyond
  them, the nearest one's moved by the JSA's own ratio between the two batches;
* at another (nodes, GPUs): interpolated linearly in (nodes, GPUs, per-GPU batch) over all the
  job's measured points (SciPy's ``LinearNDInterpolator``, as the artifact's simulator
  interpolates its measurements); where they do not span the point, the JSA's;
* **gradient accumulation**: a per-GPU share beyond the largest per-GPU batch one pass takes
  (the job's ``m_max`` or its profile's largest measured one-GPU batch, the smaller) runs in
  passes; each extra pass costs the step less its synchronisation;
* **never faster than the job's own one GPU** at that per-GPU batch (its measured placement
  of one GPU, else its profile's ``step``; once per pass; less :data:`FLOOR`'s slack for
  measurement noise): about what a profile claiming no communication at all would give. The
  placements are the owner's word, as its one-GPU times are (docs/security.md): this bounds
  what a wrong one buys a job to what a wrong profile could, and a progress report off them
  revokes them (:meth:`bellows.autoscaler.rows.Tables.observe`).

Pure: no I/O; interpolators are built once per set of placements (at most
:data:`TABLES_KEPT` kept).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from scipy.interpolate import LinearNDInterpolator
from scipy.spatial import QhullError

from bellows.jobs import JobSpec, MeasuredPlacement, check_placements
from bellows.scaling.measurements import StepMeasurement
from bellows.scaling.profiles import ClusterProfile
from bellows.scaling.timing import processing_seconds, step_time

__all__ = [
    "DECLARED_TOLERANCE",
    "FLOOR",
    "TABLES_KEPT",
    "PlacementSteps",
    "PlacementTable",
    "measured_placements",
    "packed",
    "pass_limit",
    "refuted",
]

FLOOR = 0.9
"""A placement's step is never below this share of the job's one-GPU step at its per-GPU
batch: measurements of two GPUs come out up to 5 % below one (bert on the Pollux artifact's
T4s), a claim of more is refused."""

DECLARED_TOLERANCE = 0.25
"""A step measured where a job runs that is off what its profile's measured placements say by
more than a quarter refutes them (:func:`refuted`; the core then revokes them,
:meth:`bellows.autoscaler.rows.Tables.observe`): wider than the noise of one cluster's step
times (a shared node, a slow input pipeline), narrower than any lie worth telling (a claimed
speed-up of 1.33x at least is refused at the job's first reports)."""

TABLES_KEPT = 64
"""Sets of measured placements whose interpolators a :class:`PlacementSteps` keeps, by value
(jobs of one profile share one) and by identity (the last ones asked): at most 1 024 points
each (:data:`bellows.jobs.MAX_PLACEMENT_POINTS`), ~30 ms to build and 0.5 MiB, so at most
~64 MiB however many jobs a tenant submits (the Pollux models: 0.05-0.2 MiB)."""


def pass_limit(job: JobSpec) -> int:
    """The largest per-GPU batch one pass of ``job`` takes: its ``m_max``, or its profile's
    largest measured one-GPU batch where that is smaller (beyond it, it accumulates)."""
    return min(job.m_max, job.profile.local_batches[-1])


def packed(counts: Sequence[int], per_node: int) -> bool:
    """Whether GPUs ``counts`` per node sit on the fewest nodes of ``per_node`` GPUs, all
    of them full but one (the placement the core runs a job on)."""
    parts = sorted(c for c in counts if c)
    return bool(parts) and all(c == per_node for c in parts[1:]) and parts[0] <= per_node


def measured_placements(
    rows: Iterable[StepMeasurement], per_node: int, spread: Iterable[StepMeasurement] = ()
) -> tuple[MeasuredPlacement, ...]:
    """A profile's ``placements`` from measured rows: those of ``rows`` packed on the fewest
    nodes of ``per_node`` GPUs (a row that names its placement, as ``placements.csv`` does,
    by it; else by its node count), and those of ``spread`` (``scalability.csv``: more nodes
    than needed) beyond the largest packed count, where only they say anything. One entry
    per (nodes, GPUs); several measurements of one batch averaged, a sync at most its step."""
    kept = [
        r for r in rows
        if (packed([int(c) for c in r.placement], per_node) if r.placement
            else r.nodes == -(-r.gpus // per_node))
    ]  # fmt: skip
    largest = max((r.gpus for r in kept), default=0)
    kept += [r for r in spread if r.gpus > largest]
    points: dict[tuple[int, int], dict[int, list[tuple[float, float]]]] = {}
    for r in kept:
        by_local = points.setdefault((r.nodes, r.gpus), {})
        by_local.setdefault(r.local_batch, []).append((r.step_time, r.sync_time))
    out = []
    for (nodes, gpus), by_local in sorted(points.items()):
        batches = sorted(by_local)
        steps = [float(np.mean([t for t, _ in by_local[m]])) for m in batches]
        syncs = [float(np.mean([y for _, y in by_local[m]])) for m in batches]
        syncs = [min(y, t) for y, t in zip(syncs, steps, strict=True)]
        out.append(MeasuredPlacement(nodes, gpus, tuple(batches), tuple(steps), tuple(syncs)))
    placements = tuple(out)
    check_placements(placements)
    return placements


def refuted(job: JobSpec, steps: Mapping[tuple[int, int], float], said: PlacementSteps) -> bool:
    """Whether a step time the job measured (``steps``: seconds by ``(GPUs, batch)``, on the
    fewest nodes) is off what its measured placements say there by more than
    :data:`DECLARED_TOLERANCE` (``said``: the source that reads them)."""
    if not job.placements:
        return False
    for (gpus, batch), seconds in steps.items():
        expected = said(job, gpus, batch)
        off = expected is not None and abs(seconds / expected - 1.0) > DECLARED_TOLERANCE
        if off and math.isfinite(seconds):
            return True
    return False


class PlacementTable:
    """One job's measured placements, ready to answer (module docstring)."""

    def __init__(self, placements: Sequence[MeasuredPlacement]) -> None:
        self.exact = {(p.nodes, p.gpus): p for p in placements}
        points = [
            (p.nodes, p.gpus, m, s, y)
            for p in placements
            for m, s, y in zip(p.local_batches, p.seconds, p.syncs, strict=True)
        ]
        grid = np.array(points, dtype=np.float64)
        self._spread: LinearNDInterpolator | None = None
        if len(points) >= 4:
            try:
                self._spread = LinearNDInterpolator(grid[:, :3], grid[:, 3:])
            except QhullError:  # all in one plane (one node count, say): exact rows only
                self._spread = None

    def compute(self, job: JobSpec, local: int) -> float:
        """The least one pass at per-GPU batch ``local`` may take: one GPU's step there, as
        measured (the placement of one GPU), else as the job's profile has it."""
        one = self.exact.get((1, 1))
        if one is not None and one.local_batches[0] <= local <= one.local_batches[-1]:
            return float(np.interp(local, one.local_batches, one.seconds))
        return processing_seconds(job.profile, local)

    def step(self, nodes: int, gpus: int, local: int) -> tuple[float, float] | None:
        """Seconds of one step and of its synchronisation at per-GPU batch ``local`` on
        ``gpus`` GPUs over ``nodes`` nodes: exact, or between the measured batches; ``None``
        where the measurements do not say (beyond a measured placement's batches, or
        outside what they span)."""
        found = self.exact.get((nodes, gpus))
        if found is not None:
            at = found.local_batches
            if not at[0] <= local <= at[-1]:
                return None
            return (
                float(np.interp(local, at, found.seconds)),
                float(np.interp(local, at, found.syncs)),
            )
        if self._spread is None:
            return None
        step, sync = self._spread([nodes, gpus, local])[0]
        if not (math.isfinite(step) and step > 0):
            return None
        return float(step), float(min(max(sync, 0.0), step))


class PlacementSteps:
    """A :data:`~bellows.scaling.measured_rows.StepTimes` source: the seconds of one step of
    a job's global batch on ``gpus`` GPUs packed on the fewest nodes, from its measured
    placements (module docstring); ``None`` for a job that carries none."""

    def __init__(self, cluster: ClusterProfile) -> None:
        self.cluster = cluster
        # by value (jobs of one profile share a table), and by the identity of the tuple
        # last asked (hashing a few thousand numbers at every call cost more than the answer)
        self._by_value: OrderedDict[tuple[MeasuredPlacement, ...], PlacementTable] = OrderedDict()
        self._by_id: OrderedDict[int, tuple[tuple[MeasuredPlacement, ...], PlacementTable]] = (
            OrderedDict()
        )

    def table(self, placements: tuple[MeasuredPlacement, ...]) -> PlacementTable:
        """The interpolators of ``placements`` (built once while kept, the least recent
        dropped past :data:`TABLES_KEPT`)."""
        key = id(placements)
        kept = self._by_id.get(key)
        if kept is not None and kept[0] is placements:
            return kept[1]
        table = self._by_value.get(placements)
        if table is None:
            table = self._by_value[placements] = PlacementTable(placements)
            if len(self._by_value) > TABLES_KEPT:
                self._by_value.popitem(last=False)
        else:
            self._by_value.move_to_end(placements)
        self._by_id[key] = (placements, table)
        if len(self._by_id) > TABLES_KEPT:
            self._by_id.popitem(last=False)
        return table

    def __call__(self, job: JobSpec, gpus: int, batch: int) -> float | None:
        if not job.placements or gpus < 1 or batch < 1:
            return None
        nodes = -(-gpus // self.cluster.gpus_per_node)
        local = -(-batch // gpus)
        passes = -(-local // pass_limit(job))
        share = -(-local // passes)
        table = self.table(job.placements)
        found = table.step(nodes, gpus, share)
        if found is None:
            exact = table.exact.get((nodes, gpus))
            if exact is None:
                return step_time(job, gpus, batch, self.cluster, nodes=nodes)
            at = exact.local_batches  # beyond the measured batches: the nearest, moved by the JSA
            end = at[0] if share < at[0] else at[-1]
            found = table.step(nodes, gpus, end)
            assert found is not None
            ratio = step_time(job, gpus, share * gpus, self.cluster, nodes=nodes) / step_time(
                job, gpus, end * gpus, self.cluster, nodes=nodes
            )
            found = (found[0] * ratio, min(found[1], found[0] * ratio))
        step, sync = found
        floor = FLOOR * passes * table.compute(job, share)
        return max(step + (passes - 1) * (step - sync), floor)
