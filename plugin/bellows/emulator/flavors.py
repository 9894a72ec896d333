"""The emulated Kueue's ResourceFlavors: the ClusterQueues as its scheduler reads them, the
flavor it assigns each podSet, and the node selectors an assigned flavor puts on the job.

What Kueue v0.19.2 does (``pkg/scheduler/flavorassigner``, ``pkg/podset``,
``pkg/controller/jobframework``), for the one resource the emulator counts
(``nvidia.com/gpu``) and without cohorts:

* **flavor assignment** (:func:`assign`): each podSet asking for GPUs tries the
  ClusterQueue's GPU flavors in their order and takes the first whose remaining nominal quota
  (``nominalQuota`` less what admitted Workloads hold on it, less what this Workload's earlier
  podSets took) holds the podSet's request: the default ``flavorFungibility`` (the next flavor
  when one does not fit). A flavor is skipped when it does not match the podSet's pod template:
  its ``nodeSelector`` or required node affinity, each read only on the keys of the flavor's
  own ``nodeLabels`` (a ``nodeSelector`` naming one of them with another value; no term of
  the affinity holding on them), or its topology support (a podSet with a topology request
  fits only a TAS flavor, one without only a flavor without a topology). On a TAS flavor the
  topology is then placed (``tas.py``): a podSet that fits the flavor's quota but not its
  topology leaves the Workload pending. Every podSet must be assigned; the assignment is
  written as the Workload's ``status.admission.podSetAssignments[]`` (``flavors``,
  ``resourceUsage``, ``count``, ``topologyAssignment``); when no flavor fits, the reasons
  of each flavor tried, in Kueue's words;
* **the node selectors** (:func:`flavor_selectors`, :func:`inject`, :func:`restore`): when
  Kueue starts an admitted PyTorchJob or MPIJob, it merges the assigned flavors'
  ``nodeLabels`` into the ``nodeSelector`` of each podSet's pod template (``podset.Merge``,
  the template's own keys first); when it suspends it again it puts each template's
  ``nodeSelector`` back as the Workload's podSet records it (``RestorePodSetsInfo``: the
  Workload was made from the job before anything was injected), so the injected keys go and
  the owner's stay. A running job matches its Workload when its podSets equal the Workload's
  with those selectors merged in (:func:`running_pod_sets`, ``expectedRunningPodSets``).

Left out here: a flavor's ``nodeTaints`` and ``tolerations``; a TrainJob's selectors (Kueue
patches them in through ``spec.runtimePatches``, which the emulator does not write); the
selectors of a podSet placed by TAS (its pods get their domain's selector instead, and the
job's template is left as it is: ``tas.py``).
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bellows.emulator import tas
from bellows.emulator.affinity import node_requirement
from bellows.emulator.topology import Request, read_request
from bellows.inputs import DATA_ERRORS, parse_quantity
from bellows.kube.kinds import GPU
from bellows.kube.kueue import NamespaceSelector, pod_set_gpus, read_cluster_queue, workload_gpus

__all__ = [
    "Place",
    "Queue",
    "assign",
    "flavor_selectors",
    "inject",
    "injects",
    "node_labels",
    "read_queues",
    "reserved",
    "restore",
    "running_pod_sets",
    "usage",
]

Place = Callable[[tas.TasFlavor, Mapping[str, Any], Request], dict[str, Any] | str | None]
"""Where TAS puts a podSet on a flavor: its ``topologyAssignment``, why it does not fit, or
``None`` (a podSet without GPUs)."""

# The replica specs whose pod templates Kueue's Kubeflow integrations patch, by kind (the
# podSet of a replica type is named as the type, lower case).
_REPLICA_SPECS = {"PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}


@dataclass(frozen=True)
class Queue:
    """A ClusterQueue as the scheduler reads it."""

    quota: int  # GPU nominalQuota over every flavor
    strict: bool  # StrictFIFO
    flavors: tuple[tuple[str, int], ...]  # (flavor, GPU nominalQuota), in order
    inactive: str | None  # why it admits nothing (a flavor is missing), else None
    namespaces: NamespaceSelector  # the namespaces it admits from
    tas_flavors: Mapping[str, tas.TasFlavor]  # its flavors with a topology, by name
    node_labels: Mapping[str, Mapping[str, str]]  # each of its flavors' nodeLabels, by name

    @property
    def tas_only(self) -> bool:
        """Whether every flavor has a topology (a podSet without a request is then
        unconstrained: Kueue's implicit default)."""
        return bool(self.flavors) and all(f in self.tas_flavors for f, _ in self.flavors)


def node_labels(flavor: Mapping[str, Any]) -> dict[str, str]:
    """A ResourceFlavor's ``spec.nodeLabels``."""
    labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def read_queues(
    flavor_objs: Iterable[Mapping[str, Any]],
    queue_objs: Iterable[Mapping[str, Any]],
    topologies: Mapping[str, Sequence[str]],
    invalid: Callable[[str, Exception], None],
) -> dict[str, Queue]:
    """Every valid ClusterQueue of ``queue_objs`` by name, its flavors read from
    ``flavor_objs`` (``invalid(name, error)`` is told of each one that is not valid: it
    admits nothing)."""
    flavors: dict[str, Mapping[str, Any]] = {}
    for obj in flavor_objs:
        flavors[str(obj["metadata"]["name"])] = obj
    queues: dict[str, Queue] = {}
    for obj in queue_objs:
        name = str(obj["metadata"]["name"])
        try:
            view = read_cluster_queue(obj)
            quotas = _flavor_quotas(obj)
        except DATA_ERRORS as err:
            invalid(name, err)
            continue
        lost = ", ".join(sorted({f for f, _ in quotas} - set(flavors)))
        inactive = f"ClusterQueue {name} is inactive: flavor {lost} not found" if lost else None
        read = [tas.read_flavor(flavors[f], topologies) for f, _ in quotas if f in flavors]
        topo = {t.name: t for t in read if isinstance(t, tas.TasFlavor)}
        unknown = next((t for t in read if isinstance(t, str)), None)
        if inactive is None and unknown is not None:  # Kueue's TopologyNotFound
            inactive = f"ClusterQueue {name} is inactive: {unknown}"
        labels = {f: node_labels(flavors[f]) for f, _ in quotas if f in flavors}
        strict = view.strategy == "StrictFIFO"
        queues[name] = Queue(
            view.gpus, strict, tuple(quotas), inactive, view.namespaces, topo, labels
        )
    return queues


def _flavor_quotas(cq: Mapping[str, Any]) -> list[tuple[str, int]]:
    """``(flavor, GPU nominalQuota)`` of each flavor of the ClusterQueue that covers GPUs
    (already checked by :func:`read_cluster_queue`)."""
    out: list[tuple[str, int]] = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in (group or {}).get("flavors") or []:
            for entry in (flavor or {}).get("resources") or []:
                if (entry or {}).get("name") == GPU:
                    quota = parse_quantity("nominalQuota", str(entry.get("nominalQuota", "0")))
                    out.append((str(flavor.get("name")), int(quota)))
    return out


def reserved(wl: Mapping[str, Any]) -> list[tuple[str, int]]:
    """``(flavor, GPUs)`` a Workload holding a reservation counts against its ClusterQueue:
    its admission's ``resourceUsage`` (its podSets, on no flavor, when admitted without
    one)."""
    admission = (wl.get("status") or {}).get("admission") or {}
    assignments = admission.get("podSetAssignments")
    if not assignments:
        return [("", workload_gpus((wl.get("spec") or {}).get("podSets") or []))]
    return usage(assignments)


def usage(assignments: Iterable[Mapping[str, Any]]) -> list[tuple[str, int]]:
    """``(flavor, GPUs)`` of each of ``podSetAssignments`` that uses GPUs."""
    out = []
    for entry in assignments:
        usage = (entry.get("resourceUsage") or {}).get(GPU)
        if usage is None:
            continue
        amount = parse_quantity("resourceUsage", str(usage))
        out.append((str((entry.get("flavors") or {}).get(GPU, "")), int(amount)))
    return out


# ----- flavor assignment ---------------------------------------------------------------------


def assign(
    pod_sets: Sequence[Mapping[str, Any]],
    queue: Queue,
    used: Mapping[str, int],
    place: Place,
) -> list[dict[str, Any]] | str:
    """The ``podSetAssignments`` of a Workload of ``pod_sets`` in ``queue``, where ``used``
    GPUs of each flavor are reserved already, or why a podSet fits no flavor (see the module
    docstring; ``place`` puts a podSet on a TAS flavor)."""
    taken: dict[str, int] = defaultdict(int)  # what this Workload's podSets took, by flavor
    assignments: list[dict[str, Any]] = []
    for pod_set in pod_sets:
        name, count = pod_set.get("name", "main"), int(pod_set.get("count", 1))
        gpus = count * pod_set_gpus(pod_set)
        entry: dict[str, Any] = {"name": name, "count": count, "flavors": {}, "resourceUsage": {}}
        request = read_request(pod_set, implied=queue.tas_only)
        if gpus and queue.flavors:
            chosen = _first_fit(pod_set, request, gpus=gpus, queue=queue, used=used, taken=taken)
            if isinstance(chosen, list):
                return f"couldn't assign flavors to pod set {name}: " + ", ".join(sorted(chosen))
            entry["flavors"] = {GPU: chosen}
            entry["resourceUsage"] = {GPU: str(gpus)}
            taken[chosen] += gpus
            if request is not None:
                placed = place(queue.tas_flavors[chosen], pod_set, request)
                if isinstance(placed, str):
                    return f"couldn't assign flavors to pod set {name}: {placed}"
                if placed is not None:
                    entry["topologyAssignment"] = placed
        assignments.append(entry)
    return assignments


def _first_fit(
    pod_set: Mapping[str, Any],
    request: Request | None,
    *,
    gpus: int,
    queue: Queue,
    used: Mapping[str, int],
    taken: Mapping[str, int],
) -> str | list[str]:
    """The first flavor of ``queue`` that takes ``pod_set`` (``gpus``), or why each does not."""
    reasons: list[str] = []
    pod_spec = (pod_set.get("template") or {}).get("spec") or {}
    for flavor, quota in queue.flavors:
        if (flavor in queue.tas_flavors) != (request is not None):
            how = "does not support" if request is not None else "supports only"
            reasons.append(f"flavor {flavor} {how} TopologyAwareScheduling")
            continue
        if not _matches_affinity(pod_spec, queue.node_labels.get(flavor) or {}):
            reasons.append(f"flavor {flavor} doesn't match node affinity")
            continue
        before = taken.get(flavor, 0)
        wanted = before + gpus
        available = max(0, quota - used.get(flavor, 0))
        if wanted <= available:
            return flavor
        if wanted > quota:
            reasons.append(
                f"insufficient quota for {GPU} in flavor {flavor}, previously considered "
                f"podsets requests ({before}) + current podset request ({gpus}) > maximum "
                f"capacity ({quota})"
            )
        else:
            reasons.append(
                f"insufficient unused quota for {GPU} in flavor {flavor}, "
                f"{wanted - available} more needed"
            )
    return reasons


def _matches_affinity(pod_spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a flavor of node ``labels`` matches the pod's ``nodeSelector`` and required
    node affinity, each cut to the keys of ``labels`` (Kueue's ``flavorSelector``: a term
    left with no expression matches every flavor)."""
    if not labels:
        return True
    wanted = node_requirement(pod_spec)
    if any(k in labels and labels[k] != v for k, v in wanted.selector):
        return False
    if wanted.terms is None:
        return True
    terms = []
    for term in wanted.terms:
        kept = [e for e in term.labels if e.key in labels]
        if not kept:
            return True
        terms.append(kept)
    return not terms or any(all(e.holds(labels) for e in term) for term in terms)


# ----- the node selectors a flavor injects ---------------------------------------------------


def injects(job: Mapping[str, Any]) -> bool:
    """Whether Kueue puts the flavors' node labels on ``job``'s pod templates (a
    PyTorchJob or MPIJob; a TrainJob gets them through its runtime patches: left out)."""
    return job.get("kind") in _REPLICA_SPECS


def flavor_selectors(
    wl: Mapping[str, Any], labels: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str]] | str:
    """The node selector the admission of ``wl`` adds to each podSet, by podSet name, from
    each flavor's nodeLabels in ``labels`` (``getPodSetsInfoFromStatus``; a podSet placed by
    TAS gets none), or the name of an assigned flavor that is not there (Kueue cannot
    start the job then)."""
    admission = (wl.get("status") or {}).get("admission") or {}
    out: dict[str, dict[str, str]] = {}
    for entry in admission.get("podSetAssignments") or []:
        if entry.get("topologyAssignment"):
            continue
        selector: dict[str, str] = {}
        for flavor in dict.fromkeys((entry.get("flavors") or {}).values()):
            if flavor not in labels:
                return str(flavor)
            selector = {**labels[flavor], **selector}  # the first flavor's value kept
        if selector:
            out[str(entry.get("name", "main"))] = selector
    return out


def running_pod_sets(
    pod_sets: Sequence[Mapping[str, Any]], selectors: Mapping[str, Mapping[str, str]]
) -> list[dict[str, Any]]:
    """``pod_sets`` (a Workload's) as its job runs them: ``selectors`` merged into their
    templates (``expectedRunningPodSets``)."""
    out = []
    for pod_set in pod_sets:
        copied = copy.deepcopy(dict(pod_set))
        extra = selectors.get(str(copied.get("name", "main")))
        if extra:
            _merge(copied.setdefault("template", {}), extra)
        out.append(copied)
    return out


def inject(job: dict[str, Any], selectors: Mapping[str, Mapping[str, str]]) -> None:
    """Merge ``selectors`` into ``job``'s pod templates (``RunWithPodSetsInfo``), in place."""
    for name, template in _templates(job).items():
        extra = selectors.get(name)
        if extra:
            _merge(template, extra)


def restore(job: dict[str, Any], wl: Mapping[str, Any]) -> None:
    """Put the ``nodeSelector`` of ``job``'s pod templates back as ``wl``'s podSets record
    them (``RestorePodSetsInfo``), in place; podSets ``wl`` does not know are left."""
    recorded = {
        str(p.get("name", "main")): ((p.get("template") or {}).get("spec") or {}).get(
            "nodeSelector"
        )
        or {}
        for p in (wl.get("spec") or {}).get("podSets") or []
    }
    for name, template in _templates(job).items():
        if name not in recorded:
            continue
        spec = template.get("spec")
        if not isinstance(spec, dict) or (spec.get("nodeSelector") or {}) == recorded[name]:
            continue
        if recorded[name]:
            spec["nodeSelector"] = copy.deepcopy(dict(recorded[name]))
        else:
            spec.pop("nodeSelector", None)


def _templates(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``job``'s pod templates by podSet name (none for a kind Kueue does not patch here)."""
    field = _REPLICA_SPECS.get(str(job.get("kind", "")))
    specs = (job.get("spec") or {}).get(field) if field else None
    if not isinstance(specs, dict):
        return {}
    return {
        str(rtype).lower(): spec["template"]
        for rtype, spec in specs.items()
        if isinstance(spec, dict) and isinstance(spec.get("template"), dict)
    }


def _merge(template: dict[str, Any], selector: Mapping[str, str]) -> None:
    """``podset.Merge`` of a node selector: the template's own keys kept."""
    spec = template.setdefault("spec", {})
    spec["nodeSelector"] = {**selector, **(spec.get("nodeSelector") or {})}
