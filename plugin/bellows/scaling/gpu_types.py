"""GPU types in the model (issue 39, item 1): a cluster of several types, and a job's
sections per type, measured or imputed.

A :class:`TypedCluster` is its :class:`GpuType` s, each with its nodes, GPUs per node and its
own Allreduce model (:class:`~bellows.scaling.profiles.ClusterProfile`: NVLink on a DGX A100
is not PCIe on a T4 box). A job's :class:`~bellows.jobs.TypeSection` per type carries what
the JSA knows of it there (one-GPU step times, Allreduce weights, the largest per-GPU batch
the type's memory holds); :meth:`bellows.jobs.JobSpec.on` makes it a one-type job, which
every one-type part of Bellows (the JSA, the rows, the one-type DP) takes as it is.

:func:`impute` fills a type a job was not measured on, as Sia does: the job's one-GPU speed
on a type it was measured on, scaled by the ratio other jobs of its model class measured
between the two types (the median over them), marked ``imputed``.

:func:`sia_mix` is Sia's 64-GPU cluster (SOSP'23): 6 nodes of 4 T4, 2 of 8 A100, 3 of 8
RTX 2080 Ti, each type's Allreduce model fitted to the six Pollux models' measurements on
it (``../shared/data/sia/``; :func:`bellows.scaling.accuracy.fit_type_cluster` recomputes
them, and a test holds the embedded numbers to it). Pure: no I/O here.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bellows.jobs import MAX_LOCAL_BATCH, MAX_WEIGHTS, SpecError, StepProfile, TypeSection
from bellows.scaling.profiles import ClusterProfile, LinkCost
from bellows.scaling.timing import processing_seconds

__all__ = [
    "SIA_MIX_SOURCE",
    "SIA_TYPES",
    "GpuType",
    "TypedCluster",
    "impute",
    "sia_mix",
]


@dataclass(frozen=True)
class GpuType:
    """One GPU type of a cluster: its name (what job sections and node labels map to),
    ``nodes`` of ``cluster.gpus_per_node`` GPUs each, its Allreduce model, and the node label
    value that marks it (``product``, e.g. ``nvidia.com/gpu.product``'s)."""

    name: str
    nodes: int
    cluster: ClusterProfile
    product: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SpecError("name", self.name, "a non-empty GPU type name")
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or self.nodes < 0:
            raise SpecError(f"types[{self.name}].nodes", self.nodes, "an integer >= 0")
        if not isinstance(self.cluster, ClusterProfile):
            raise SpecError(f"types[{self.name}].cluster", self.cluster, "a ClusterProfile")

    @property
    def gpus_per_node(self) -> int:
        return self.cluster.gpus_per_node

    @property
    def gpus(self) -> int:
        """Every GPU of the type."""
        return self.nodes * self.cluster.gpus_per_node


@dataclass(frozen=True)
class TypedCluster:
    """A cluster of several GPU types (in the order given; names unique)."""

    types: tuple[GpuType, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.types, tuple) or not self.types:
            raise SpecError("types", self.types, "a non-empty tuple of GpuType")
        names = [t.name for t in self.types]
        if len(set(names)) != len(names):
            raise SpecError("types", names, "unique GPU type names")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.types)

    @property
    def capacities(self) -> tuple[int, ...]:
        """GPUs per type, in :attr:`names`' order."""
        return tuple(t.gpus for t in self.types)

    @property
    def products(self) -> dict[str, str]:
        """Each type's node label value (``product``), for the types that have one."""
        return {t.name: t.product for t in self.types if t.product}

    @property
    def total(self) -> int:
        return sum(self.capacities)

    def type(self, name: str) -> GpuType:
        """The type named ``name``, or SpecError naming the types there are."""
        for found in self.types:
            if found.name == name:
                return found
        raise SpecError("gpu_type", name, f"one of {', '.join(self.names)}")


def _speed(section: TypeSection, local: int) -> float:
    """One-GPU samples per second of ``section`` at per-GPU batch ``local``."""
    return local / processing_seconds(section.profile, local)


def impute(
    own: Sequence[TypeSection], target: str, peers: Sequence[Sequence[TypeSection]]
) -> TypeSection | None:
    """The job's section on ``target``, from its sections ``own`` and its model class's
    ``peers`` (other jobs' sections), or ``None`` where no peer was measured on ``target`` and
    on a type the job was measured on.

    For each of the job's measured types ``s`` (in order) and each peer measured on ``s`` and
    ``target``: the ratio of the peer's one-GPU speed on ``target`` to that on ``s`` (each at
    the larger of the two types' per-GPU batches that fits both), its ratio of ``m_max`` and of
    weights. The medians over peers scale the job's section on ``s``: step times divided by the
    speed ratio, ``m_max`` and weights multiplied by theirs. The first ``s`` with a peer wins.
    """
    for source in (t for t in own if not t.imputed):
        speed, room, weight = [], [], []
        for peer in peers:
            there = {t.gpu_type: t for t in peer if not t.imputed}
            a, b = there.get(source.gpu_type), there.get(target)
            if a is None or b is None:
                continue
            local = min(a.m_max, b.m_max)
            speed.append(_speed(b, local) / _speed(a, local))
            room.append(b.m_max / a.m_max)
            weight.append(b.weights / a.weights)
        if not speed:
            continue
        ratio = statistics.median(speed)
        seconds = tuple(float(s) / ratio for s in source.profile.seconds)
        m_max = int(np.clip(round(source.m_max * statistics.median(room)), 1, MAX_LOCAL_BATCH))
        locals_ = tuple(m for m in source.profile.local_batches if m <= m_max) or (
            source.profile.local_batches[0],
        )
        profile = StepProfile(locals_, seconds[: len(locals_)])
        weights = int(np.clip(round(source.weights * statistics.median(weight)), 1, MAX_WEIGHTS))
        return TypeSection(target, profile, weights, m_max, imputed=True)
    return None


SIA_MIX_SOURCE = (
    "fitted by bellows.scaling.accuracy.fit_type_cluster to every multi-GPU row of the six "
    "Pollux models measured on the type (Sia SOSP'23 artifact, siasosp23/artifacts "
    "sia-simulator/traces, ../shared/data/sia/); python benchmarks/jsa_accuracy.py --types"
)

SIA_TYPES: Mapping[str, str] = {"t4": "aws", "a100": "dgx-ext", "rtx2080ti": "rtx"}
"""Bellows' type names and the suffix of Sia's files measured on each."""


def sia_mix() -> TypedCluster:
    """Sia's 64-GPU cluster: 6 x 4 T4 (AWS g4dn.12xlarge), 2 x 8 A100 (DGX A100),
    3 x 8 RTX 2080 Ti, each type's Allreduce model fitted to its measurements."""
    return TypedCluster(
        (
            GpuType("t4", 6, ClusterProfile(
                LinkCost(0.0, 2.673e-9), LinkCost(3.842e-4, 7.180e-9), 1.498, 4,
                SIA_MIX_SOURCE,
            ), "Tesla-T4"),
            GpuType("a100", 2, ClusterProfile(
                LinkCost(9.059e-5, 1.076e-10), LinkCost(2.869e-5, 1.435e-10), 1.0, 8,
                SIA_MIX_SOURCE,
            ), "NVIDIA-A100-SXM4-40GB"),
            GpuType("rtx2080ti", 3, ClusterProfile(
                LinkCost(9.132e-4, 2.586e-9), LinkCost(6.798e-4, 3.421e-9), 1.316, 8,
                SIA_MIX_SOURCE,
            ), "NVIDIA-GeForce-RTX-2080-Ti"),
        )
    )  # fmt: skip
