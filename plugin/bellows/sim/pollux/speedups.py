"""Goodput rows for the Pollux reference: per GPU count, packed and spread over nodes.

Pollux's speedup of a job is a function of the nodes and the GPUs its placement spans,
each at the batch that maximises goodput there (throughput x statistical efficiency at the
job's progress). The JSA's step time only tells one node from several (intra- or inter-node
Allreduce), so two rows per job cover every placement: ``packed[k]``, on the fewest nodes
that hold ``k`` GPUs, and ``spread[k]``, on more than one node (the same as packed once
``k`` needs more than one node). Rows are computed with :func:`bellows.scaling.tsf_tables`
(goodput rows where the job has an efficiency profile, throughput rows where not) at the
middle of each ``1 / GOODPUT_STEPS`` of the job's work, as Bellows mode's core computes its
own, and cached per job template and progress step.

With ``measured`` (issue 36, opt in: a :data:`StepSeconds` truth, as the simulator charges with
``run(step_seconds=...)``) the rows are goodputs at those step times instead of the JSA's, so
that the reference decides on the speeds it is charged (the artifact's Pollux fits its model
online to what it measures): per GPU count, the best of a grid of per-GPU batches, packed on
whole nodes, spread over two.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bellows.autoscaler.core import GOODPUT_STEPS
from bellows.jobs import JobSpec
from bellows.scaling import ClusterProfile, EfficiencyProfile, tsf_tables
from bellows.scaling.measured_rows import per_gpu_grid
from bellows.sim.metrics import template
from bellows.sim.nodes import packed

__all__ = ["STEPS", "RowCache", "Rows", "StepSeconds", "progress_step"]

StepSeconds = Callable[[str, JobSpec, tuple[tuple[int, int], ...], int], float]
"""A measured truth of step times: ``(model, spec, placement, batch)`` to the seconds one step
of ``batch`` takes on that placement (``(node, GPUs)`` pairs)."""

_GRID = 12  # per-GPU batches tried per GPU count with measured step times

STEPS = GOODPUT_STEPS
"""Progress steps of a job's work: rows are made at the middle of each, as Bellows mode's."""

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class Rows:
    """One job's goodput (reference samples/s, or samples/s uncharged) and batch per k."""

    packed: F64  # [k_max+1], 0 where no batch is feasible (always at k = 0)
    packed_batch: tuple[int, ...]
    spread: F64  # the same on more than one node
    spread_batch: tuple[int, ...]

    def goodput(self, gpus: int, nodes: int) -> float:
        return float((self.spread if nodes > 1 else self.packed)[gpus])

    def batch(self, gpus: int, nodes: int) -> int:
        return (self.spread_batch if nodes > 1 else self.packed_batch)[gpus]


def progress_step(done: float, work: float) -> int:
    """Which ``1 / GOODPUT_STEPS`` of its work a job with ``done`` of ``work`` is in."""
    return min(STEPS - 1, int(STEPS * max(done, 0.0) / work))


class RowCache:
    """:class:`Rows` per (job template, efficiency profile, progress step), computed in one
    table per call for every key not seen before."""

    def __init__(self, cluster: ClusterProfile, measured: StepSeconds | None = None) -> None:
        self._cluster = cluster
        self._measured = measured
        # the same cluster with inter-node links everywhere: a placement over several nodes
        self._spread = dataclasses.replace(cluster, intra_node=cluster.inter_node)
        self._rows: dict[tuple[object, ...], Rows] = {}
        self._templates: dict[str, JobSpec] = {}

    def rows(
        self,
        jobs: Sequence[JobSpec],
        steps: Mapping[str, int],
        profiles: Mapping[str, EfficiencyProfile],
    ) -> list[Rows]:
        """Each job's rows in its progress step (:func:`progress_step`; 0 if none given)."""
        keys: list[tuple[object, ...]] = []
        todo: dict[tuple[object, ...], tuple[JobSpec, EfficiencyProfile | None, float]] = {}
        for job in jobs:
            kind = self._templates.get(job.name)
            if kind is None:
                kind = self._templates[job.name] = template(job)
            profile = profiles.get(job.name)
            step = steps.get(job.name, 0) if profile else 0
            key = (kind, profile, step)
            keys.append(key)
            if key not in self._rows:
                todo.setdefault(key, (job, profile, job.work * (step + 0.5) / STEPS))
        if todo and self._measured is not None:
            for new, (spec, charged, middle) in todo.items():
                self._rows[new] = self._measured_rows(spec, charged, middle)
        elif todo:
            self._compute(todo)
        return [self._rows[key] for key in keys]

    def _measured_rows(
        self, job: JobSpec, profile: EfficiencyProfile | None, progress: float
    ) -> Rows:
        """Rows at the measured step times (module docstring); the model is the job's
        category (an imported Pollux job's model)."""
        assert self._measured is not None
        per_node = self._cluster.gpus_per_node
        rows: list[list[float]] = [[0.0] * (job.k_max + 1), [0.0] * (job.k_max + 1)]
        batches: list[list[int]] = [[0] * (job.k_max + 1), [0] * (job.k_max + 1)]
        for k in range(1, job.k_max + 1):
            grid = per_gpu_grid(job, k, _GRID)
            if not grid:
                continue
            fewest = packed(k, per_node)
            half = (k + 1) // 2
            spread = fewest if k > per_node or k == 1 else ((0, half), (1, k - half))
            for row, placement in enumerate((fewest, spread)):
                for m in grid:
                    batch = k * m
                    seconds = self._measured(str(job.category), job, placement, batch)
                    gain = 1.0 if profile is None else float(profile.efficiency(batch, progress))
                    good = batch / seconds * gain
                    if good > rows[row][k]:
                        rows[row][k], batches[row][k] = good, batch
        return Rows(
            packed=np.array(rows[0]), packed_batch=tuple(batches[0]),
            spread=np.array(rows[1]), spread_batch=tuple(batches[1]),
        )  # fmt: skip

    def forget(self, name: str) -> None:
        self._templates.pop(name, None)

    def _compute(
        self, todo: Mapping[tuple[object, ...], tuple[JobSpec, EfficiencyProfile | None, float]]
    ) -> None:
        parts = list(todo.values())
        specs = [p[0] for p in parts]
        width = max(job.k_max for job in specs)
        charged = [p[1] for p in parts]
        progress = [p[2] for p in parts]
        # a spread placement differs from a packed one only up to one node's GPUs
        narrow = min(width, self._cluster.gpus_per_node)
        tables = [
            tsf_tables(specs, cluster, fixed_batch=False, width=w, efficiency=charged,
                       progress=progress)
            for cluster, w in ((self._cluster, width), (self._spread, narrow))
        ]  # fmt: skip
        packed, spread = (np.where(t.batch > 0, t.goodput, 0.0) for t in tables)
        for j, (key, job) in enumerate(zip(todo, specs, strict=True)):
            end, cut = job.k_max + 1, min(job.k_max, narrow) + 1
            batch = tables[0].batch[j, :end]
            self._rows[key] = Rows(
                packed=np.ascontiguousarray(packed[j, :end], dtype=np.float64),
                packed_batch=tuple(int(b) for b in batch),
                spread=np.concatenate([spread[j, :cut], packed[j, cut:end]]),
                spread_batch=tuple(int(b) for b in [*tables[1].batch[j, :cut], *batch[cut:]]),
            )
