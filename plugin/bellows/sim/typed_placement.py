"""A cluster of several GPU types in a simulation run (issue 39): each type's nodes and its
GPUs now, where a job is placed on a type and how fast it runs there.

:class:`TypedPlacement` is what :func:`bellows.sim.run` keeps of a typed cluster beside its
jobs: per type a :class:`~bellows.sim.nodes.Nodes` (on nodes) and the GPUs it has now
(capacity changes name their type), the truth a job runs at on a type (the step times
measured there, :class:`~bellows.sim.measured_steps.TypedMeasuredSteps`, else the JSA of the
job's section on the type's Allreduce model), and, for the type-blind Pollux reference, the
cluster as equal virtual nodes (:mod:`bellows.sim.blind`). It holds no job: the engine
passes what a job is and keeps what it gets back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass

from bellows.autoscaler.straddle import FreeNodes
from bellows.jobs import JobSpec, SpecError
from bellows.scaling import throughput
from bellows.scaling.gpu_types import TypedCluster
from bellows.sim.blind import VirtualNodes, blind_run
from bellows.sim.measured_steps import TypedMeasuredSteps
from bellows.sim.nodes import Nodes, Placement

__all__ = ["BlindPlaced", "Placed", "TypedPlacement"]


@dataclass(frozen=True)
class Placed:
    """A job placed on a type: its GPUs per node, the nodes beyond the fewest, its rate."""

    held: Placement
    extra_nodes: int
    rate: float


@dataclass(frozen=True)
class BlindPlaced:
    """A type-blind job on the virtual nodes it holds: the type and batch it runs at, the
    GPUs it holds idle on other types, the nodes beyond the fewest, its rate."""

    gpu_type: str
    batch: int
    idle_gpus: int
    extra_nodes: int
    rate: float


class TypedPlacement:
    """``typed``'s types in a run (module docstring): ``nodes`` places jobs on each type's
    nodes; ``blind`` keeps the virtual nodes the type-blind Pollux reference places on;
    ``type_steps`` is the measured truth per type (``None``: each type's JSA)."""

    def __init__(
        self,
        typed: TypedCluster,
        *,
        nodes: bool,
        blind: bool,
        type_steps: TypedMeasuredSteps | None = None,
    ) -> None:
        self.typed = typed
        self.type_steps = type_steps
        self.virtual = VirtualNodes.of(typed) if blind else None
        self.nodes = (
            {t.name: Nodes(t.gpus, t.gpus_per_node) for t in typed.types}
            if nodes and self.virtual is None else {}
        )  # fmt: skip
        self.capacity = {t.name: t.gpus for t in typed.types}

    def resize(self, gpu_type: str, gpus: int) -> int:
        """Type ``gpu_type`` now has ``gpus`` GPUs (its nodes resized); the cluster's total."""
        self.capacity[gpu_type] = gpus
        if self.nodes:
            self.nodes[gpu_type].resize(gpus)
        return sum(self.capacity.values())

    def views(
        self, placed: Mapping[str, Placement], spread: Set[str], type_of: Callable[[str], str]
    ) -> dict[str, FreeNodes]:
        """Per type, where its GPUs sit (what Bellows mode prices straddles by): ``placed``
        the running jobs' placements, ``spread`` those on more than one node, ``type_of``
        the type a job runs on."""
        out = {}
        for name, nodes in self.nodes.items():
            here = {job: held for job, held in placed.items() if type_of(job) == name}
            on_more = frozenset(job for job in spread if job in here)
            out[name] = FreeNodes(tuple(nodes.free), here, on_more)
        return out

    def rate(
        self, model: str, spec: JobSpec, gpu_type: str, held: Placement, *, gpus: int, batch: int
    ) -> float:
        """Samples per second of ``spec`` (its section on the type already taken) on ``held``
        GPUs of ``gpu_type``: the truth measured there, else (or where it measured nothing
        near) the JSA on the type's Allreduce model."""
        if self.type_steps is not None and held:
            seconds = self.type_steps(model, gpu_type, spec, held, batch)
            if seconds is not None and math.isfinite(seconds) and seconds > 0:
                return batch / seconds
        cluster = self.typed.type(gpu_type).cluster
        return throughput(spec, gpus, batch, cluster, nodes=len(held) if held else None)

    def section(self, spec: JobSpec, gpu_type: str) -> JobSpec:
        """``spec`` as a one-type job on ``gpu_type`` (itself where it has no sections);
        :class:`SpecError` where no batch of it fits there."""
        on = spec.on(gpu_type)
        if on is None:
            raise SpecError(f"{spec.name}.gpu_type", gpu_type, "a type where a batch fits")
        return on

    def place(self, spec: JobSpec, model: str, gpu_type: str, *, gpus: int, batch: int) -> Placed:
        """``spec`` on ``gpus`` GPUs of ``gpu_type`` at ``batch``, on the fewest of the type's
        nodes with room (:class:`SpecError` when it has too few free)."""
        held: Placement = ()
        extra = 0
        if self.nodes:
            nodes = self.nodes[gpu_type]
            held = nodes.place(gpus)
            extra = len(held) - nodes.fewest(gpus)
        on = self.section(spec, gpu_type)
        return Placed(held, extra, self.rate(model, on, gpu_type, held, gpus=gpus, batch=batch))

    def release(self, gpu_type: str, held: Placement) -> None:
        """A job placed on ``gpu_type`` gave ``held`` back."""
        if self.nodes and held:
            self.nodes[gpu_type].release(held)

    def blind(
        self, spec: JobSpec, model: str, held: Placement, *, gpus: int, batch: int
    ) -> BlindPlaced:
        """A type-blind job given ``held`` virtual GPUs (``gpus`` of them) at ``batch``: run on
        its primary type (:func:`~bellows.sim.blind.blind_run`), the others idle."""
        assert self.virtual is not None
        run = blind_run(spec, held, batch, self.virtual, self.typed)
        gpu = self.typed.type(run.gpu_type)
        on = tuple(sorted(self.virtual.by_type(held)[run.gpu_type].items()))
        rate = self.rate(model, run.spec, run.gpu_type, on, gpus=run.gpus, batch=run.batch)
        extra = run.nodes - -(-run.gpus // gpu.gpus_per_node)
        return BlindPlaced(run.gpu_type, run.batch, gpus - run.gpus, extra, rate)
