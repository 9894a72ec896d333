"""The emulated Kueue's topology-aware scheduling against the cluster: capacity and pods.

What ``topology.py`` decides on, read from the API server's objects, and what its decision
does to the pods:

* **a TAS flavor** is a ResourceFlavor with ``spec.topologyName``
  (:func:`read_flavor`). Kueue reads the levels from the Topology object of that name; the
  Topology CRD is not among the pinned CRDs the emulator serves, so the emulated Kueue is
  given its topologies as configuration instead (``EmulatedKueue(topologies=...)``,
  ``EmulatedCluster.add_topology``: name -> node label keys, highest first), as a cluster
  admin would have created them. A flavor naming a topology it does not know makes its
  ClusterQueue inactive, as Kueue's ``TopologyNotFound``;
* **free capacity** per lowest-level domain (:func:`free_gpus`): the allocatable
  ``nvidia.com/gpu`` of the ready, schedulable nodes that carry the flavor's ``nodeLabels``
  and every level's label, less the GPUs of the bound pods not admitted by TAS (no
  :data:`TAS_LABEL`: a DaemonSet's, a job outside Kueue's), less the GPUs the
  ``topologyAssignment`` of every Workload holding a reservation on the flavor assigns
  there (bound or not yet: Kueue counts its own assignments, not their pods);
* **the pods** (:func:`tas_pods`): Kueue starts a TAS-admitted job with the scheduling gate
  ``kueue.x-k8s.io/topology`` and the label :data:`TAS_LABEL` on its pod templates, and its
  ``TopologyUngater`` then removes each pod's gate and adds the node selector of one
  domain of the assignment, the pods taken in the order of their index label
  (``training.kubeflow.org/replica-index``; a TrainJob's
  ``batch.kubernetes.io/job-completion-index``), so many to each domain as its count says.
  The emulated operators create the pods as they are once ungated: the selector set, the
  label on, no gate (the ungater's round trip is not modelled). The job's template itself is
  not changed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from bellows.emulator.nodes import schedulable_nodes
from bellows.emulator.scheduling import Pod
from bellows.emulator.store import Store
from bellows.emulator.topology import (
    HOSTNAME,
    Domain,
    Request,
    decode,
    encode,
    find_assignment,
    topology_request,
)
from bellows.kube.kinds import GPU, conditions
from bellows.kube.kueue import GROUP, JOB_UID, VERSION, WORKLOADS, pod_set_gpus
from bellows.kube.nodes import pod_gpus

__all__ = [
    "TAS_LABEL",
    "TasFlavor",
    "assign",
    "free_gpus",
    "read_flavor",
    "requested",
    "tas_pods",
]

TAS_LABEL: Final = "kueue.x-k8s.io/tas"
_DONE = ("Succeeded", "Failed")


@dataclass(frozen=True)
class TasFlavor:
    """A ResourceFlavor with a topology: its name, the topology's name and levels (node
    label keys, highest first) and the flavor's ``nodeLabels``."""

    name: str
    topology: str
    levels: tuple[str, ...]
    node_labels: Mapping[str, str]


def read_flavor(
    obj: Mapping[str, Any], topologies: Mapping[str, Sequence[str]]
) -> TasFlavor | str | None:
    """The TAS flavor ``obj`` is (``None``: not one; a string: why its ClusterQueue is
    inactive, the topology it names being unknown)."""
    spec = obj.get("spec") or {}
    name = str((obj.get("metadata") or {}).get("name", ""))
    topology = spec.get("topologyName")
    if not topology:
        return None
    if topology not in topologies:
        return f"flavor {name} names topology {topology}, which is not found"
    labels = {str(k): str(v) for k, v in (spec.get("nodeLabels") or {}).items()}
    return TasFlavor(name, str(topology), tuple(topologies[topology]), labels)


def _leaves(
    flavor: TasFlavor, nodes: Iterable[Mapping[str, Any]]
) -> dict[str, tuple[tuple[str, ...], int]]:
    """The flavor's nodes by name: their values per level and allocatable GPUs."""
    out = {}
    for name, (gpus, labels) in schedulable_nodes(nodes).items():
        if any(labels.get(k) != v for k, v in flavor.node_labels.items()):
            continue
        if all(level in labels for level in flavor.levels):
            out[name] = (tuple(labels[level] for level in flavor.levels), gpus)
    return out


def free_gpus(
    flavor: TasFlavor,
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, ...], int]:
    """The free GPUs of each lowest-level domain of ``flavor`` (see the module docstring)."""
    leaves = _leaves(flavor, nodes)
    free: dict[tuple[str, ...], int] = {}
    for values, gpus in leaves.values():
        free[values] = free.get(values, 0) + gpus
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if node not in leaves or TAS_LABEL in labels:
            continue
        if (pod.get("status") or {}).get("phase") not in _DONE:
            free[leaves[node][0]] -= pod_gpus(pod.get("spec") or {})
    by_host = {name: values for name, (values, _) in leaves.items()}
    for pod_set, domains in _assigned(workloads, flavor.name):
        gpus = pod_set_gpus(pod_set)
        for values, count in domains:
            leaf = by_host.get(values[-1]) if len(values) < len(flavor.levels) else values
            if leaf is not None and leaf in free:
                free[leaf] -= count * gpus
    return free


def _assigned(
    workloads: Iterable[Mapping[str, Any]], flavor: str
) -> Iterable[tuple[Mapping[str, Any], list[Domain]]]:
    """Each podSet of a Workload reserving quota with a topology assignment on ``flavor``."""
    for wl in workloads:
        by_type = conditions(wl)
        reserved = by_type.get("QuotaReserved", {}).get("status") == "True"
        if not reserved or by_type.get("Finished", {}).get("status") == "True":
            continue
        pod_sets = {p.get("name"): p for p in (wl.get("spec") or {}).get("podSets") or []}
        admission = (wl.get("status") or {}).get("admission") or {}
        for entry in admission.get("podSetAssignments") or []:
            topology = entry.get("topologyAssignment")
            if topology and (entry.get("flavors") or {}).get(GPU) == flavor:
                pod_set = pod_sets.get(entry.get("name"), {})
                yield pod_set, decode(topology)[1]


def assign(
    flavor: TasFlavor,
    free: dict[tuple[str, ...], int],
    pod_set: Mapping[str, Any],
    request: Request,
) -> dict[str, Any] | str | None:
    """The ``topologyAssignment`` of ``pod_set`` on ``flavor`` given ``free`` (its GPUs
    then taken from ``free``; ``None``: a podSet without GPUs gets none), or Kueue's reason
    it does not fit."""
    gpus = pod_set_gpus(pod_set)
    if gpus < 1:
        return None
    count = int(pod_set.get("count", 1))
    pods = {values: max(0, room) // gpus for values, room in free.items()}
    found = find_assignment(pods, flavor.levels, request, count)
    if isinstance(found, str):
        return f'topology "{flavor.topology}" {found}'
    by_host = {values[-1]: values for values in free}
    for values, taken in found:
        leaf = values if len(values) == len(flavor.levels) else by_host[values[-1]]
        free[leaf] -= taken * gpus
    written = flavor.levels[-1:] if flavor.levels[-1] == HOSTNAME else flavor.levels
    return encode(written, found)


def tas_pods(
    store: Store,
    job: Mapping[str, Any],
    pods: Sequence[Pod],
    *,
    pod_set: Callable[[Pod], str],
    index_label: str,
) -> list[Pod]:
    """``pods`` of ``job`` as Kueue's ungater leaves them where the job's Workload assigned
    their podSet (``pod_set(pod)`` names it) a topology: each with its domain's node
    selector and :data:`TAS_LABEL` (the others unchanged)."""
    res = store.resources.get(f"{GROUP}/{VERSION}/{WORKLOADS}")
    if res is None or not pods:
        return list(pods)
    meta = job["metadata"]
    owned = [
        wl
        for wl in store.list_objects(res, meta["namespace"])[0]
        if (wl["metadata"].get("labels") or {}).get(JOB_UID) == meta["uid"]
        and conditions(wl).get("QuotaReserved", {}).get("status") == "True"
    ]
    if not owned:
        return list(pods)
    out = {id(p): p for p in pods}
    for name in dict.fromkeys(pod_set(p) for p in pods):
        ranked = sorted(
            (p for p in pods if pod_set(p) == name),
            key=lambda p: int(p.labels.get(index_label, "0")),
        )
        for pod, selector in zip(ranked, _selectors(owned[0], name), strict=False):
            out[id(pod)] = _selected(pod, selector)
    return [out[id(p)] for p in pods]


def _selectors(wl: Mapping[str, Any], pod_set: str) -> Iterable[dict[str, str]]:
    """One node selector per pod of ``pod_set``'s assignment, domain by domain."""
    admission = (wl.get("status") or {}).get("admission") or {}
    for entry in admission.get("podSetAssignments") or []:
        if entry.get("name") == pod_set and entry.get("topologyAssignment"):
            levels, domains = decode(entry["topologyAssignment"])
            for values, count in domains:
                yield from [dict(zip(levels, values, strict=True))] * count


def _selected(pod: Pod, selector: Mapping[str, str]) -> Pod:
    """``pod`` ungated onto ``selector``'s domain."""
    chosen = {**dict(pod.required.selector), **selector}
    required = replace(pod.required, selector=tuple(sorted(chosen.items())))
    manifest = None
    if pod.manifest is not None:
        manifest = copy.deepcopy(dict(pod.manifest))
        spec = manifest.setdefault("spec", {})
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **selector}
        meta = manifest.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), TAS_LABEL: "true"}
    labels = {**pod.labels, TAS_LABEL: "true"}
    return replace(pod, labels=labels, required=required, manifest=manifest)


def requested(pod_sets: list[dict[str, Any]], index_label: str) -> list[dict[str, Any]]:
    """``pod_sets`` with the ``topologyRequest`` their templates' TAS annotations make."""
    for pod_set in pod_sets:
        request = topology_request(pod_set.get("template") or {}, index_label)
        if request is not None:
            pod_set["topologyRequest"] = request
    return pod_sets
