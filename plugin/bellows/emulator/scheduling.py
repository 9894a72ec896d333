"""An emulated kube-scheduler's scoring: where each pod of a job would be bound.

Pure and in memory (pods are not emulated objects yet: see ``docs/kube.md``, "Placement").
One pod at a time, as kube-scheduler does: *filter* the nodes with room for the pod's GPUs,
*score* each with the default plugins' weights, bind to the best (ties: the first node by
name, where kube-scheduler picks at random among ties):

* ``NodeResourcesFit`` with ``LeastAllocated`` (weight 1): ``100 * free / allocatable``
  after the pod, on the GPU resource (the default scores cpu and memory; GPU pods here
  request only GPUs, so GPUs stand in for them), which spreads pods over the emptiest nodes;
* ``InterPodAffinity`` (weight 2): for each preferred pod-affinity term of the incoming pod,
  its weight for every bound pod the term's labels match on a node of the same topology
  value (and symmetrically the bound pods' terms matching the incoming pod), normalised to
  0-100 over the feasible nodes (``(s - min) / (max - min)``, 0 when all are equal).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AFFINITY_WEIGHT", "FIT_WEIGHT", "Pod", "Scheduler", "preferred_terms"]

FIT_WEIGHT = 1
AFFINITY_WEIGHT = 2
MAX_SCORE = 100
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True)
class Term:
    """One preferred pod-affinity term: ``weight`` toward pods with ``labels`` on the same
    ``topology_key`` value."""

    weight: int
    labels: Mapping[str, str]
    topology_key: str


@dataclass(frozen=True)
class Pod:
    """A pod to place: its job, labels, GPUs and preferred pod-affinity terms."""

    job: str
    labels: Mapping[str, str]
    gpus: int
    terms: Sequence[Term] = ()


def preferred_terms(template: Mapping[str, Any]) -> tuple[Term, ...]:
    """The preferred pod-affinity terms of a PodTemplateSpec (matchLabels selectors)."""
    affinity = ((template.get("spec") or {}).get("affinity") or {}).get("podAffinity") or {}
    out = []
    for t in affinity.get(_PREFERRED) or []:
        term = t.get("podAffinityTerm") or {}
        labels = (term.get("labelSelector") or {}).get("matchLabels") or {}
        out.append(Term(int(t.get("weight", 0)), dict(labels), str(term.get("topologyKey", ""))))
    return tuple(out)


@dataclass
class _Node:
    gpus: int
    labels: Mapping[str, str]
    pods: list[Pod] = field(default_factory=list)

    @property
    def free(self) -> int:
        return self.gpus - sum(p.gpus for p in self.pods)


def _matches(term: Term, pod: Pod) -> bool:
    return all(pod.labels.get(k) == v for k, v in term.labels.items())


class Scheduler:
    """Nodes by name (allocatable GPUs, labels) and the pods bound to them."""

    def __init__(self, nodes: Mapping[str, tuple[int, Mapping[str, str]]]) -> None:
        self._nodes = {n: _Node(g, dict(lb)) for n, (g, lb) in sorted(nodes.items())}

    def _affinity(self, pod: Pod, node: _Node) -> int:
        total = 0
        for other in self._nodes.values():
            for bound in other.pods:
                for term in pod.terms:
                    key = term.topology_key
                    same = key in node.labels and other.labels.get(key) == node.labels[key]
                    total += term.weight if same and _matches(term, bound) else 0
                for term in bound.terms:
                    key = term.topology_key
                    same = key in node.labels and other.labels.get(key) == node.labels[key]
                    total += term.weight if same and _matches(term, pod) else 0
        return total

    def scores(self, pod: Pod) -> dict[str, float]:
        """The total score of every node that fits ``pod``."""
        feasible = {n: node for n, node in self._nodes.items() if node.free >= pod.gpus}
        raw = {n: self._affinity(pod, node) for n, node in feasible.items()}
        low, high = min(raw.values(), default=0), max(raw.values(), default=0)
        out = {}
        for n, node in feasible.items():
            fit = MAX_SCORE * (node.free - pod.gpus) / node.gpus if node.gpus else 0.0
            aff = MAX_SCORE * (raw[n] - low) / (high - low) if high > low else 0.0
            out[n] = FIT_WEIGHT * fit + AFFINITY_WEIGHT * aff
        return out

    def bind(self, pod: Pod) -> str | None:
        """Bind ``pod`` to the best node; ``None`` when none fits (the pod stays Pending)."""
        scores = self.scores(pod)
        if not scores:
            return None
        best = max(scores, key=lambda n: scores[n])  # first by name among ties
        self._nodes[best].pods.append(pod)
        return best

    def release(self, job: str) -> None:
        """Unbind every pod of ``job`` (it was suspended, finished or deleted)."""
        for node in self._nodes.values():
            node.pods = [p for p in node.pods if p.job != job]

    def nodes_of(self, job: str) -> set[str]:
        """The nodes holding a pod of ``job``."""
        return {n for n, node in self._nodes.items() if any(p.job == job for p in node.pods)}
