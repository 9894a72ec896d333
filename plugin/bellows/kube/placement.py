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

On a cluster of several GPU types, a job the controller gave a type is also asked onto
that type's nodes (:class:`OnType`): the pod template's ``nodeSelector`` takes the node
label that names the type (``nvidia.com/gpu.product`` by default) at the type's value, and
the annotation :data:`GPU_TYPE` (``<type> (<label>=<value>)``) says Bellows wrote it, so
that the next sizing patch replaces exactly its own (and ``bellows status`` shows the type:
:func:`template_type`). An owner's selector on that label stands (the
job then runs on the owner's type; Bellows writes none), and a selector Bellows wrote is
taken out when the ask carries no type. :func:`template_product` reads the selector back,
whoever wrote it: it is what the scheduler obeys, so it says where the job's pods can run.

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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

__all__ = [
    "GPU_TYPE",
    "HOSTNAME",
    "KUEUE_PREFERRED_TOPOLOGY",
    "KUEUE_REQUIRED_TOPOLOGY",
    "KUEUE_UNCONSTRAINED_TOPOLOGY",
    "PACK_WEIGHT",
    "PINNED_NODES",
    "TOPOLOGY_REQUEST",
    "Ask",
    "KueueTopology",
    "OnType",
    "Pinned",
    "Placement",
    "pack_term",
    "pinned_expression",
    "placed_template",
    "template_product",
    "template_type",
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
GPU_TYPE: Final = "bellows.io/gpu-type"  # template annotation: the type selector we wrote
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


@dataclass(frozen=True)
class OnType:
    """``ask``, and the job's pods on the nodes whose GPU-type ``label`` is ``product``:
    the nodes of GPU type ``name``."""

    ask: Placement | Pinned | KueueTopology
    label: str
    product: str
    name: str = ""


Ask = Placement | Pinned | KueueTopology | OnType
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
    owner's first, in their order, then Bellows' term. A pin or a type selector Bellows
    wrote before and ``placement`` no longer asks for is taken out.
    """
    if isinstance(placement, OnType):
        placed = _placed(template, selector, placement.ask, topology_key)
        on = _on_type(template, placement.label, placement.product, placement.name)
        return _merged(placed, on)
    return _merged(_placed(template, selector, placement, topology_key), _on_type(template))


def template_product(template: Mapping[str, Any], label: str) -> str | None:
    """The value the pod template's ``nodeSelector`` requires of node label ``label`` (the
    GPU type its pods can run on, whoever asked for it), or ``None``."""
    value = ((template.get("spec") or {}).get("nodeSelector") or {}).get(label)
    return value if isinstance(value, str) and value else None


def template_type(template: Mapping[str, Any]) -> str | None:
    """The GPU type Bellows gave the pods of ``template`` (its :data:`GPU_TYPE` annotation,
    while the node selector it wrote is there), or ``None``."""
    found = _written(template)
    return None if found is None else found[0]


_NOTE = re.compile(r"([a-z0-9-]{0,63}) \(([^=()\s]+)=([^()\s]*)\)")


def _written(template: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(type, label, value) of the selector the :data:`GPU_TYPE` annotation says Bellows
    wrote, while the template's selector still says so; else ``None``."""
    notes = (template.get("metadata") or {}).get("annotations") or {}
    chosen = (template.get("spec") or {}).get("nodeSelector") or {}
    note = notes.get(GPU_TYPE)
    found = _NOTE.fullmatch(note) if isinstance(note, str) else None
    if found is None or chosen.get(found[2]) != found[3]:
        return None
    return found[1], found[2], found[3]


def _on_type(
    template: Mapping[str, Any],
    label: str | None = None,
    product: str | None = None,
    name: str = "",
) -> dict[str, Any]:
    """The patch that selects nodes of ``label=product`` (type ``name``; ``None``: no type)
    in place of the selector :data:`GPU_TYPE` says Bellows wrote; ``{}`` when the template
    says so. A selector of the owner's on ``label`` stands (then Bellows writes none)."""
    notes = (template.get("metadata") or {}).get("annotations") or {}
    chosen = (template.get("spec") or {}).get("nodeSelector") or {}
    note = notes.get(GPU_TYPE)
    written = _written(template)
    ours = None if written is None else written[1:]
    if ours is not None and chosen.get(ours[0]) != ours[1]:
        ours = None  # the selector is no longer what we wrote: someone else's now
    owners = label is not None and label in chosen and (ours is None or ours[0] != label)
    want = None if label is None or product is None or owners else (label, product)
    patch_selector: dict[str, str | None] = {}
    if ours is not None and ours != want and (want is None or want[0] != ours[0]):
        patch_selector[ours[0]] = None
    if want is not None and chosen.get(want[0]) != want[1]:
        patch_selector[want[0]] = want[1]
    mark = None if want is None else f"{name} ({want[0]}={want[1]})"
    out: dict[str, Any] = {}
    if patch_selector:
        out["spec"] = {"nodeSelector": patch_selector}
    if note != mark and (mark is not None or GPU_TYPE in notes):
        out["metadata"] = {"annotations": {GPU_TYPE: mark}}
    return out


def _placed(
    template: Mapping[str, Any],
    selector: Mapping[str, str],
    placement: Placement | Pinned | KueueTopology,
    topology_key: str,
) -> dict[str, Any]:
    """:func:`placed_template` of an ask without a type."""
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
