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

Beside Kueue's topology-aware scheduling (a job whose ClusterQueue admits on TAS flavors
only: Kueue, not kube-scheduler, then picks its nodes and gives each pod its node's
selector), ``nodes`` asks Kueue instead (:class:`KueueTopology`): the pod template
annotation ``kueue.x-k8s.io/podset-preferred-topology`` at the node level (Kueue's BestFit
then takes the fewest nodes that hold the job: one whenever one does, as the core priced
it), or ``podset-required-topology`` when asked to require it (admitted only where one
node holds it all), and the annotation :data:`TOPOLOGY_REQUEST` naming the one Bellows
wrote, so that the next sizing patch replaces exactly its own. A topology annotation the
owner set stands, and Bellows then writes none (Kueue refuses two); a node pin Bellows
wrote before is taken out.

With a node view (``controller.placement: nodes``: ``pack``'s term, and more), the
controller also pins the job to the nodes its placement rule picked (:class:`Pinned`,
``bellows.autoscaler.placing``): a *required* node affinity, one ``nodeSelectorTerms``
entry per pinned node and term of the owner's (``metadata.name In [node]``, the API
server's one value per field requirement, ANDed into the owner's term; the terms are
ORed), and the pod template annotation ``bellows.io/pinned-nodes`` naming the nodes it
required, so that the next sizing patch replaces exactly those requirements (a pin it no
longer wants is taken out, the owner's terms stay as they were).

The patch merges, it never clobbers: the owner's affinity terms, annotations and every
other field stay, Bellows' term is appended once (an equal term already there is not added
again), and an annotation the owner set is kept as they set it. :func:`placed_template` is a
function of one pod template and the labels of the job's pods, so that any kind whose pod
templates Bellows can patch (a TrainJob's ``runtimePatches``, later) can use it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

__all__ = [
    "HOSTNAME",
    "KUEUE_PREFERRED_TOPOLOGY",
    "KUEUE_REQUIRED_TOPOLOGY",
    "KUEUE_UNCONSTRAINED_TOPOLOGY",
    "PACK_WEIGHT",
    "PINNED_NODES",
    "TOPOLOGY_REQUEST",
    "Ask",
    "KueueTopology",
    "Pinned",
    "Placement",
    "pack_term",
    "pinned_expression",
    "placed_template",
]

HOSTNAME: Final = "kubernetes.io/hostname"
KUEUE_PREFERRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_REQUIRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-required-topology"
KUEUE_UNCONSTRAINED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-unconstrained-topology"
_KUEUE_TOPOLOGY: Final = (
    KUEUE_REQUIRED_TOPOLOGY, KUEUE_PREFERRED_TOPOLOGY, KUEUE_UNCONSTRAINED_TOPOLOGY
)  # fmt: skip
TOPOLOGY_REQUEST: Final = "bellows.io/topology-request"  # template annotation: the one we set
PACK_WEIGHT: Final = 100  # the most a preferred term may weigh (1-100)
PINNED_NODES: Final = "bellows.io/pinned-nodes"  # template annotation: the nodes required
_PREFERRED: Final = "preferredDuringSchedulingIgnoredDuringExecution"
_REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"


class Placement(StrEnum):
    """How Bellows asks for its jobs' pods to be placed (``controller.placement``)."""

    PACK = "pack"
    NODES = "nodes"  # pack, and pin each job to the nodes the controller's node view picks
    KUEUE_TOPOLOGY = "kueue-topology"
    NONE = "none"


@dataclass(frozen=True)
class Pinned:
    """``base``'s placement, and the job's pods on ``nodes``: required, or only preferred
    (``required=False``: a job Kueue starts, which a stale pin must never hold back)."""

    base: Placement
    nodes: tuple[str, ...]
    required: bool = True


@dataclass(frozen=True)
class KueueTopology:
    """``base``'s placement, and Kueue's topology-aware scheduling asked for the job's pods
    on the fewest nodes of ``level`` (a node label): on one, ``required``, or preferred."""

    base: Placement
    level: str
    required: bool


Ask = Placement | Pinned | KueueTopology
"""What a sizing patch asks of the scheduler."""


def pinned_expression(node: str) -> dict[str, Any]:
    """The node affinity field requirement of one pinned node: by name (``metadata.name``,
    the one field a node selector may match, with one value, as the DaemonSet controller
    pins its pods; a node's hostname label need not be its name)."""
    return {"key": "metadata.name", "operator": "In", "values": [node]}


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
    placement: Ask,
    topology_key: str = HOSTNAME,
) -> dict[str, Any]:
    """The part of a merge patch of ``template`` (a PodTemplateSpec) that asks for
    ``placement``; ``{}`` when nothing needs to change.

    ``selector``: labels every pod of the job carries and no other pod does (the operator's).
    Lists are replaced whole by a merge patch, so the preferred terms are sent in full: the
    owner's first, in their order, then Bellows' term. A pin Bellows wrote before and
    ``placement`` no longer asks for is taken out.
    """
    if isinstance(placement, KueueTopology):
        based = _based(template, selector, placement.base, topology_key)
        asked = _topology(template, placement.level, required=placement.required)
        return _merged(_merged(based, _pin(template, ())), asked)
    base = placement if isinstance(placement, Placement) else placement.base
    # a topology annotation Bellows wrote is taken out (kueue-topology writes its own)
    dropped = {} if base is Placement.KUEUE_TOPOLOGY else _topology(template, None)
    based = _merged(_based(template, selector, base, topology_key), dropped)
    if not isinstance(placement, Pinned):
        return _merged(based, _pin(template, ()))
    return _merged(based, _pin(template, placement.nodes, required=placement.required))


def _topology(
    template: Mapping[str, Any], level: str | None, *, required: bool = False
) -> dict[str, Any]:
    """The annotations that ask Kueue for ``level`` (``None``: for nothing) in place of the
    one :data:`TOPOLOGY_REQUEST` says Bellows wrote; ``{}`` when the template says so. A
    topology annotation of the owner's stands (then Bellows writes none)."""
    notes = (template.get("metadata") or {}).get("annotations") or {}
    ours = notes.get(TOPOLOGY_REQUEST)
    ours = ours if ours in _KUEUE_TOPOLOGY else None  # another value names nothing of ours
    owners = [k for k in _KUEUE_TOPOLOGY if k in notes and k != ours]
    key = KUEUE_REQUIRED_TOPOLOGY if required else KUEUE_PREFERRED_TOPOLOGY
    want = None if level is None or owners else key
    patch: dict[str, str | None] = {}
    if ours is not None and ours != want:
        patch[ours] = None
    if want is not None and (notes.get(want) != level or ours != want):
        patch[want] = level
    mark = want
    if notes.get(TOPOLOGY_REQUEST) != mark and (mark is not None or TOPOLOGY_REQUEST in notes):
        patch[TOPOLOGY_REQUEST] = mark
    return {"metadata": {"annotations": patch}} if patch else {}


def _based(
    template: Mapping[str, Any], selector: Mapping[str, str], base: Placement, topology_key: str
) -> dict[str, Any]:
    if base is Placement.NONE:
        return {}
    if base is Placement.KUEUE_TOPOLOGY:
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


def _pin(
    template: Mapping[str, Any], nodes: Sequence[str], *, required: bool = True
) -> dict[str, Any]:
    """The patch that pins the pods on ``nodes`` (none: no pin; ``required`` or preferred) in
    place of the pin the template's annotation names; ``{}`` when the template says so."""
    notes = (template.get("metadata") or {}).get("annotations") or {}
    previous = notes.get(PINNED_NODES)
    if previous is None and not nodes:
        return {}
    node_affinity = ((template.get("spec") or {}).get("affinity") or {}).get("nodeAffinity")
    had = [copy.deepcopy(t) for t in ((node_affinity or {}).get(_REQUIRED) or {}).get(
        "nodeSelectorTerms"
    ) or []]  # fmt: skip
    liked = [copy.deepcopy(t) for t in (node_affinity or {}).get(_PREFERRED) or []]
    owners, owners_liked = had, liked
    if isinstance(previous, str):  # Bellows' requirements out, as they were written
        old = [pinned_expression(n) for n in previous.split(",") if n]
        owners = []
        for term in (_without(t, old) for t in had):
            if term and term not in owners:
                owners.append(term)
        owners_liked = [t for t in liked if t not in [_preferred(e) for e in old]]
    note = ",".join(sorted(nodes)) if nodes else None
    terms, prefer = owners, owners_liked
    if nodes and required:  # one term per node and owner's term: (owner's AND node), ORed
        terms = [
            {**t, "matchFields": [*(t.get("matchFields") or []), pinned_expression(n)]}
            for t in owners or [{}]
            for n in sorted(nodes)
        ]
    elif nodes:
        prefer = [*owners_liked, *(_preferred(pinned_expression(n)) for n in sorted(nodes))]
    if terms == had and prefer == liked and note == previous:
        return {}
    affinity: dict[str, Any] = {}
    if terms != had:
        affinity[_REQUIRED] = {"nodeSelectorTerms": terms} if terms else None
    if prefer != liked:
        affinity[_PREFERRED] = prefer or None
    return {
        "metadata": {"annotations": {PINNED_NODES: note}},
        "spec": {"affinity": {"nodeAffinity": affinity}} if affinity else {},
    }


def _preferred(requirement: Mapping[str, Any]) -> dict[str, Any]:
    """The preferred node affinity term of one pinned node's requirement."""
    return {"weight": PACK_WEIGHT, "preference": {"matchFields": [dict(requirement)]}}


def _without(term: Mapping[str, Any], ours: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``term`` without the requirements ``ours``; ``{}`` when only they made the term."""
    kept = [r for r in term.get("matchFields") or [] if r not in ours]
    out = {k: v for k, v in term.items() if k != "matchFields"}
    out |= {"matchFields": kept} if kept else {}
    return out if out.get("matchExpressions") or out.get("matchFields") else {}


def _merged(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two patches in one (objects merged key by key)."""
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _same_term(term: Mapping[str, Any], ours: Mapping[str, Any]) -> bool:
    """Whether ``term`` already draws the same pods together on the same topology (its
    weight aside: an owner's weight for the same term is theirs to choose)."""
    return isinstance(term, Mapping) and bool(
        term.get("podAffinityTerm") == ours["podAffinityTerm"]
    )
