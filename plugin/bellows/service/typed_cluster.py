"""The cluster's GPU types as the controller decides over them (issue 39, "Live").

The capacity watch names each node's GPU type by a node label (``controller.capacity.
gpuTypeLabel``, ``nvidia.com/gpu.product`` by default; ``gpuTypes`` maps the label's values
to profile type names). Where the nodes a new leader lists have two types or more, Bellows
mode decides each job's type and count (:class:`~bellows.autoscaler.TypedAutoscaler`) over a
:class:`~bellows.scaling.gpu_types.TypedCluster` made here from them:

* a type's nodes and GPUs per node are the listed nodes' (its largest node);
* its Allreduce model is the one fitted to Sia's measurements where the type is one of
  Sia's (``t4``, ``a100``, ``rtx2080ti``: :func:`~bellows.scaling.gpu_types.sia_mix`), else
  the configured cluster profile's, at the type's GPUs per node;
* its ``product`` is the label value the pods of a job given the type select (the one value
  ``gpuTypes`` maps to it, or the type's own name where none does; none where several do:
  then only a node pin places the job).

Nodes without the label are not decided over beside typed ones (logged): a job pinned to no
type could land anywhere. The types are read when a leader starts; nodes of a new type are
counted from the next leader on (their GPUs per type are followed meanwhile). Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from bellows.scaling import ClusterProfile
from bellows.scaling.gpu_types import GpuType, TypedCluster, sia_mix

__all__ = ["products", "typed_cluster"]


def products(names: Mapping[str, str], types: Mapping[str, str]) -> dict[str, str]:
    """Per type name (``types``' values, and each node's type in ``names``: node -> type),
    the one label value that marks it: ``types`` maps label values to type names."""
    out: dict[str, str] = {}
    for kind in sorted(set(names.values()) - {""}):
        marks = [value for value, name in types.items() if name == kind]
        if len(marks) == 1:
            out[kind] = marks[0]
        elif not marks:
            out[kind] = kind  # a value not mapped is its own type
    return out


def typed_cluster(
    per_node: Mapping[str, int],
    node_types: Mapping[str, str],
    types: Mapping[str, str],
    base: ClusterProfile,
) -> TypedCluster | None:
    """The cluster of the nodes ``per_node`` (GPUs of each) of types ``node_types`` (node ->
    type, ``""`` untyped), ``types`` the label values' names; ``None`` below two types."""
    nodes: dict[str, list[int]] = {}
    for name, gpus in sorted(per_node.items()):
        kind = node_types.get(name, "")
        if kind and gpus > 0:
            nodes.setdefault(kind, []).append(gpus)
    if len(nodes) < 2:
        return None
    known = {t.name: t.cluster for t in sia_mix().types}
    marks = products(node_types, types)
    return TypedCluster(
        tuple(
            GpuType(
                kind,
                len(sizes),
                _profile(known.get(kind, base), max(sizes)),
                marks.get(kind, ""),
            )
            for kind, sizes in sorted(nodes.items())
        )
    )


def _profile(profile: ClusterProfile, gpus_per_node: int) -> ClusterProfile:
    """``profile`` on nodes of ``gpus_per_node`` GPUs."""
    if profile.gpus_per_node == gpus_per_node:
        return profile
    return dataclasses.replace(profile, gpus_per_node=gpus_per_node)
