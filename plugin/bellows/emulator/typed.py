"""Emulated training on a cluster of several GPU types (issue 39): each job at its type's speed.

A typed cluster's nodes carry a label (``nvidia.com/gpu.product`` by default, as NVIDIA's GPU
feature discovery sets it) whose value is a type's ``product``
(:class:`~bellows.scaling.gpu_types.GpuType`; :func:`typed_nodes` makes such nodes). A job
the emulated operators start there trains at the speed of the type its pods run on: its
section on that type (:meth:`~bellows.jobs.JobSpec.on`) under that type's Allreduce model,
as the simulator charges a job on a type. Which type:

* the one its GPU pod templates' ``nodeSelector`` names on the label, when they name one:
  kube-scheduler binds the pods to that type's nodes only, so the speed is known when the
  job starts (with no nodes at all, too);
* else the type of the nodes its pods were bound to, read when the last one binds: until
  then the job is held (``training.pods_waited``), so it makes no progress at any other
  speed (:meth:`Speeds.settle`). Pods on nodes of several types train at the slowest
  type's speed (a data-parallel step waits for its slowest GPU; the links between types
  are not modelled). Pods on nodes without the label, or with a value of no type, leave the
  job untyped: its own spec on the operator's one cluster profile, as on a one-type
  cluster.

A job with no section for its type (or none that fits there) trains as its untyped spec
(its annotated profile, weights and ``max-batch-per-gpu``) under the type's Allreduce
model, the simulator's rule for a job without sections. The per-GPU batch is held to the
type's ``maxLocalBatch`` where the job has a section there (else its
``max-batch-per-gpu``): above it the job fails as out of memory, at its start or when its
pods bind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bellows.emulator.scheduling import Placer
from bellows.emulator.training import Training, settle, start
from bellows.jobs import JobSpec
from bellows.kube import keys
from bellows.kube.nodes import pod_gpus
from bellows.scaling import ClusterProfile, throughput
from bellows.scaling.gpu_types import GpuType, TypedCluster

__all__ = ["GPU_PRODUCT", "NodeTypes", "Speeds", "typed_nodes"]

GPU_PRODUCT: Final = "nvidia.com/gpu.product"


def typed_nodes(
    typed: TypedCluster, label: str = GPU_PRODUCT
) -> tuple[dict[str, int], dict[str, dict[str, str]]]:
    """``typed``'s nodes for :class:`~bellows.emulator.EmulatedCluster`: GPUs by node name
    (``<type>-<index>``: ``t4-0`` …) and each node's ``label`` at its type's ``product``
    (``labels_by_node``)."""
    gpus: dict[str, int] = {}
    labels: dict[str, dict[str, str]] = {}
    for gpu in typed.types:
        for i in range(gpu.nodes):
            gpus[f"{gpu.name}-{i}"] = gpu.gpus_per_node
            labels[f"{gpu.name}-{i}"] = {label: gpu.product or gpu.name}
    return gpus, labels


@dataclass(frozen=True)
class NodeTypes:
    """``cluster``'s GPU types as the nodes' ``label`` names them (each type's ``product``,
    its name where it has none)."""

    cluster: TypedCluster
    label: str = GPU_PRODUCT

    def named(self, value: str | None) -> GpuType | None:
        """The type whose label value is ``value`` (``None``: none is)."""
        found = (t for t in self.cluster.types if value and value == (t.product or t.name))
        return next(found, None)

    def selected(self, pods: Iterable[Mapping[str, Any]]) -> GpuType | None:
        """The type the ``nodeSelector`` of every GPU pod spec in ``pods`` names (``None``:
        one names none, or they disagree)."""
        values = {
            str((spec.get("nodeSelector") or {}).get(self.label, ""))
            for spec in pods
            if pod_gpus(spec) > 0
        }
        return self.named(values.pop()) if len(values) == 1 else None

    def bound(self, labels: Iterable[Mapping[str, str]]) -> tuple[GpuType, ...]:
        """The types of the nodes whose ``labels`` these are (in the cluster's order)."""
        found = {self.named(node.get(self.label)) for node in labels}
        return tuple(t for t in self.cluster.types if t in found)


@dataclass(frozen=True)
class _Run:
    """What a job trains as: ``spec`` on ``cluster``, its per-GPU batch held to
    ``spec.m_max`` (``limit`` says whose)."""

    spec: JobSpec
    cluster: ClusterProfile
    limit: str

    def out_of_memory(self, gpus: int, batch: int) -> str | None:
        local = -(-batch // gpus)
        if local <= self.spec.m_max:
            return None
        return f"CUDA out of memory: per-GPU batch {local} > {self.limit} {self.spec.m_max}"


class Speeds:
    """The speed the emulated operators' jobs train at: on ``cluster`` (one GPU type), or
    with ``types`` at the type their pods run on (the module docstring; ``placer``: where
    they are bound)."""

    def __init__(
        self,
        cluster: ClusterProfile,
        types: NodeTypes | None = None,
        placer: Placer | None = None,
    ) -> None:
        self._cluster = cluster
        self._types = types
        self._placer = placer

    def _run(
        self, job: JobSpec, types: Sequence[GpuType], gpus: int, batch: int
    ) -> tuple[_Run, str | None]:
        """``job`` on ``types``' GPUs: the slowest type's run (untyped with none), and why
        it fails (out of memory on one of them), if it does."""
        if not types:
            run = _Run(job, self._cluster, keys.MAX_BATCH_PER_GPU)
            return run, run.out_of_memory(gpus, batch)
        runs = []
        for gpu in types:
            on = job.on(gpu.name) if job.section(gpu.name) is not None else None
            limit = f"the maxLocalBatch of its {gpu.name} section" if on else keys.MAX_BATCH_PER_GPU
            runs.append(_Run(on or job, gpu.cluster, limit))
        failures = [f for r in runs if (f := r.out_of_memory(gpus, batch)) is not None]
        slowest = min(runs, key=lambda r: throughput(r.spec, gpus, batch, r.cluster))
        return slowest, (failures[0] if failures else None)

    def start(
        self,
        state: Training,
        job: JobSpec,
        *,
        gpus: int,
        batch: int,
        pods: Iterable[Mapping[str, Any]],
        now: float,
    ) -> Training | str:
        """``state`` started at ``now`` on ``gpus`` GPUs at ``batch`` (``pods``: its pod
        templates' specs), or why it fails (out of memory)."""
        chosen = None if self._types is None else self._types.selected(pods)
        run, failure = self._run(job, () if chosen is None else (chosen,), gpus, batch)
        if failure is not None:
            return failure
        # no type pinned on a typed cluster: the nodes its pods bind to will say
        unsettled = job if self._types is not None and chosen is None else None
        return start(
            state, run.spec, gpus=gpus, batch=batch, cluster=run.cluster, now=now,
            unsettled=unsettled,
        )  # fmt: skip

    def settle(self, training: dict[str, Training], uid: str) -> str | None:
        """Once every pod of ``uid`` is bound, its speed on their nodes' type, if not known
        yet; returns why it fails there (out of memory), if it does."""
        state = training.get(uid)
        seg = None if state is None else state.segment
        if state is None or seg is None or seg.unsettled is None:
            return None
        if self._types is None or self._placer is None or self._placer.pending(uid):
            return None
        labels = self._placer.node_labels(uid)
        if not labels:  # nothing placed (a cluster without nodes): it keeps its speed
            return None
        types = self._types.bound(labels.values())
        run, failure = self._run(seg.unsettled, types, seg.gpus, seg.batch)
        if failure is None:
            training[uid] = settle(state, run.spec, run.cluster)
        return failure
