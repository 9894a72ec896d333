"""The placement Bellows asks for when it sizes a job: its pods on the fewest nodes.

The JSA prices ``k`` GPUs on ``ceil(k / gpus_per_node)`` nodes (``bellows.scaling``), but
nothing made the scheduler place them so: kube-scheduler's default scoring
(``NodeResourcesFit`` with ``LeastAllocated``) spreads pods over the emptiest nodes. So,
while a job is suspended and Bellows rewrites its replicas, it also asks for packing, in one
of two ways (``controller.placement``):

* ``pack``: a *preferred* pod affinity on the job's own pods by ``kubernetes.io/hostname``,
  weight 100 (kube-scheduler's ``InterPodAffinity`` score then outweighs the spreading one);
  preferred, never required, so a job whose pods cannot share a node still runs;
* ``kueue-topology``: where Kueue's topology-aware scheduling is on, the pod template
  annotation ``kueue.x-k8s.io/podset-preferred-topology`` naming the node-level topology
  label (Kueue then picks the fewest domains of that level for the pod set);
* ``none``: the templates are left as they are.

The patch merges, it never clobbers: the owner's affinity terms, annotations and every
other field stay, Bellows' term is appended once (an equal term already there is not added
again), and an annotation the owner set is kept as they set it. :func:`placed_template` is a
function of one pod template and the labels of the job's pods, so that any kind whose pod
templates Bellows can patch (a TrainJob's ``runtimePatches``, later) can use it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

__all__ = [
    "HOSTNAME",
    "KUEUE_PREFERRED_TOPOLOGY",
    "PACK_WEIGHT",
    "Placement",
    "pack_term",
    "placed_template",
]

HOSTNAME: Final = "kubernetes.io/hostname"
KUEUE_PREFERRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_REQUIRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-required-topology"
PACK_WEIGHT: Final = 100  # the most a preferred term may weigh (1-100)
_PREFERRED: Final = "preferredDuringSchedulingIgnoredDuringExecution"


class Placement(StrEnum):
    """How Bellows asks for its jobs' pods to be placed (``controller.placement``)."""

    PACK = "pack"
    KUEUE_TOPOLOGY = "kueue-topology"
    NONE = "none"


def pack_term(selector: Mapping[str, str], topology_key: str = HOSTNAME) -> dict[str, Any]:
    """The preferred pod-affinity term that draws the job's pods (``selector``) together."""
    return {
        "weight": PACK_WEIGHT,
        "podAffinityTerm": {
            "labelSelector": {"matchLabels": dict(selector)},
            "topologyKey": topology_key,
        },
    }


def placed_template(
    template: Mapping[str, Any],
    *,
    selector: Mapping[str, str],
    placement: Placement,
    topology_key: str = HOSTNAME,
) -> dict[str, Any]:
    """The part of a merge patch of ``template`` (a PodTemplateSpec) that asks for
    ``placement``; ``{}`` when nothing needs to change.

    ``selector``: labels every pod of the job carries and no other pod does (the operator's).
    Lists are replaced whole by a merge patch, so the preferred terms are sent in full: the
    owner's first, in their order, then Bellows' term.
    """
    if placement is Placement.NONE:
        return {}
    if placement is Placement.KUEUE_TOPOLOGY:
        notes = (template.get("metadata") or {}).get("annotations") or {}
        if KUEUE_PREFERRED_TOPOLOGY in notes or KUEUE_REQUIRED_TOPOLOGY in notes:
            return {}  # the owner chose a topology: theirs stands
        return {"metadata": {"annotations": {KUEUE_PREFERRED_TOPOLOGY: topology_key}}}
    affinity = (template.get("spec") or {}).get("affinity") or {}
    pod_affinity = affinity.get("podAffinity") or {}
    terms = [copy.deepcopy(t) for t in pod_affinity.get(_PREFERRED) or []]
    ours = pack_term(selector, topology_key)
    if any(_same_term(t, ours) for t in terms):
        return {}
    return {"spec": {"affinity": {"podAffinity": {_PREFERRED: [*terms, ours]}}}}


def _same_term(term: Mapping[str, Any], ours: Mapping[str, Any]) -> bool:
    """Whether ``term`` already draws the same pods together on the same topology (its
    weight aside: an owner's weight for the same term is theirs to choose)."""
    return isinstance(term, Mapping) and bool(
        term.get("podAffinityTerm") == ours["podAffinityTerm"]
    )
