"""An emulated kube-scheduler's scoring: where each pod of a job would be bound.

In memory (pods are not emulated objects: see ``docs/kube.md``, "Placement"); the emulated
operators bind a job's pods through a :class:`Placer` when they start it and release them
when it stops. One pod at a time, as kube-scheduler does: *filter* the nodes with room for
the pod's GPUs, *score* each with the default plugins' weights, bind to the best (ties: the
first node by name, where kube-scheduler picks at random among ties):

* ``NodeResourcesFit`` with ``LeastAllocated`` (weight 1): ``100 * free / allocatable``
  after the pod, on the GPU resource (the default scores cpu and memory; GPU pods here
  request only GPUs, so GPUs stand in for them), which spreads pods over the emptiest nodes;
* ``InterPodAffinity`` (weight 2): for each preferred pod-affinity term of the incoming pod,
  its weight for every bound pod the term's labels match on a node of the same topology
  value (and symmetrically the bound pods' terms matching the incoming pod), normalised to
  0-100 over the feasible nodes (``(s - min) / (max - min)``, 0 when all are equal);
* ``NodeAffinity`` (weight 2): the summed weights of the pod's preferred node affinity terms
  a node matches, normalised to 0-100 by the highest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bellows.emulator.affinity import ANY_NODE, NodeRequirement

__all__ = [
    "AFFINITY_WEIGHT",
    "FIT_WEIGHT",
    "Placer",
    "Pod",
    "PodSink",
    "Scheduler",
    "fewest_nodes",
    "preferred_terms",
]

FIT_WEIGHT = 1
AFFINITY_WEIGHT = 2
NODE_AFFINITY_WEIGHT = 2
MAX_SCORE = 100
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True)
class Term:
    """One preferred pod-affinity term: ``weight`` toward pods with ``labels`` on the same
    ``topology_key`` value."""

    weight: int
    labels: Mapping[str, str]
    topology_key: str


@dataclass(frozen=True, eq=False)
class Pod:
    """A pod to place: its job, labels, GPUs, preferred pod-affinity terms, the nodes it
    may go to (``nodeSelector`` and required node affinity) and, where the pod is published
    as an object (:class:`PodSink`), the Pod to create (``manifest``: metadata and spec,
    without ``nodeName``). Pods are compared by identity: two replicas are two pods."""

    job: str
    labels: Mapping[str, str]
    gpus: int
    terms: Sequence[Term] = ()
    required: NodeRequirement = ANY_NODE
    manifest: Mapping[str, Any] | None = None


class PodSink(Protocol):
    """Where the placed pods are published (the emulated API server's Pods)."""

    def bound(self, pod: Pod, node: str) -> None:
        """``pod`` was bound to ``node`` (created there, or its pending object bound)."""

    def pending(self, pod: Pod) -> None:
        """``pod`` fits no node: created Pending (Unschedulable)."""

    def released(self, pods: Sequence[Pod]) -> None:
        """``pods`` stopped (their job was suspended, finished or deleted): gone."""


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

    def sync(self, nodes: Mapping[str, tuple[int, Mapping[str, str]]]) -> None:
        """Take the nodes as they are now (added, resized, relabelled, gone): the pods bound
        to a node that stays stay bound (running pods are never moved). A node left out (it
        is gone, or takes no new pods: cordoned, not ready) is forgotten with its pods."""
        self._nodes = {
            n: _Node(g, dict(lb), self._nodes[n].pods if n in self._nodes else [])
            for n, (g, lb) in sorted(nodes.items())
        }

    def _by_topology(self, pod: Pod) -> dict[tuple[str, str], int]:
        """The affinity weight ``pod`` would meet in each topology domain ``(key, value)``:
        its terms matching bound pods, and bound pods' terms matching it, each counted in
        the domain of the bound pod's node (one pass over the bound pods)."""
        out: dict[tuple[str, str], int] = {}
        for other in self._nodes.values():
            for bound in other.pods:
                for term in pod.terms:
                    if term.topology_key in other.labels and _matches(term, bound):
                        domain = (term.topology_key, other.labels[term.topology_key])
                        out[domain] = out.get(domain, 0) + term.weight
                for term in bound.terms:
                    if term.topology_key in other.labels and _matches(term, pod):
                        domain = (term.topology_key, other.labels[term.topology_key])
                        out[domain] = out.get(domain, 0) + term.weight
        return out

    def scores(self, pod: Pod) -> dict[str, float]:
        """The total score of every node that fits ``pod``."""
        feasible = {
            n: node
            for n, node in self._nodes.items()
            if node.free >= pod.gpus and pod.required.allows(n, node.labels)
        }
        domains = self._by_topology(pod)
        keys = {key for key, _ in domains}
        raw = {
            n: sum(domains.get((k, node.labels[k]), 0) for k in keys if k in node.labels)
            for n, node in feasible.items()
        }
        low, high = min(raw.values(), default=0), max(raw.values(), default=0)
        liked = {n: pod.required.preference(n, node.labels) for n, node in feasible.items()}
        most = max(liked.values(), default=0)
        out = {}
        for n, node in feasible.items():
            fit = MAX_SCORE * (node.free - pod.gpus) / node.gpus if node.gpus else 0.0
            aff = MAX_SCORE * (raw[n] - low) / (high - low) if high > low else 0.0
            near = MAX_SCORE * liked[n] / most if most else 0.0
            out[n] = FIT_WEIGHT * fit + AFFINITY_WEIGHT * aff + NODE_AFFINITY_WEIGHT * near
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

    def placement(self, job: str) -> dict[str, int]:
        """The GPUs the pods of ``job`` hold on each node that has one."""
        out = {n: sum(p.gpus for p in node.pods if p.job == job) for n, node in self._nodes.items()}
        return {n: g for n, g in out.items() if any(p.job == job for p in self._nodes[n].pods)}

    def labels_of(self, job: str) -> dict[str, Mapping[str, str]]:
        """The labels of each node holding a pod of ``job``."""
        return {n: self._nodes[n].labels for n in sorted(self.nodes_of(job))}


def fewest_nodes(gpus: int, sizes: Sequence[int]) -> int:
    """The fewest nodes of ``sizes`` (GPUs each) that hold ``gpus`` GPUs: the largest first
    (``ceil(gpus / per_node)`` on uniform nodes, the JSA's price); every node when they
    cannot."""
    held = count = 0
    for size in sorted(sizes, reverse=True):
        if held >= gpus:
            break
        held += size
        count += 1
    return max(count, 1 if gpus > 0 else 0)


@dataclass
class _Segment:
    started: float
    spread: bool  # on more nodes than the job's GPUs need


class Placer:
    """The pods the emulated operators run, bound to the cluster's nodes as kube-scheduler
    would bind them, and how long each job spent spread over more nodes than it needed.

    ``nodes()`` gives the nodes that take new pods now (name -> GPUs, labels); with none
    (a cluster without Node objects) nothing is placed and nothing counted. Jobs are keyed
    by uid. A pod no node fits stays Pending (:meth:`pending`) and holds its job's training
    (the operators start it when the last pod binds); the scheduler tries the pending pods
    again, oldest job first, whenever pods are released or :meth:`retry` is called (a node
    came or was uncordoned), and tells :meth:`on_ready`'s listeners which jobs now have all
    their pods bound. A job's pods bound while others wait keep their GPUs, as on a real
    cluster. ``sink``: where the pods are published as objects (``None``: in memory only).
    """

    def __init__(
        self,
        nodes: Callable[[], Mapping[str, tuple[int, Mapping[str, str]]]],
        sink: PodSink | None = None,
    ) -> None:
        self._read_nodes = nodes
        self._sink = sink
        self._scheduler = Scheduler({})
        self._segments: dict[str, _Segment] = {}
        self._pods: dict[str, list[Pod]] = {}  # job -> all its pods
        self._waiting: dict[str, list[Pod]] = {}  # job -> its pods not bound, oldest job first
        self._sizes: dict[str, int] = {}
        self._listeners: list[Callable[[str], None]] = []
        self.held_s = 0.0  # job-time with all pods bound (emulated seconds)
        self.spread_s = 0.0  # of it, on more nodes than needed

    def on_ready(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(job)`` when a job's last pending pod is bound."""
        self._listeners.append(listener)

    def place(self, job: str, pods: Sequence[Pod], now: float) -> dict[str, int]:
        """Bind every pod of ``job`` (released first, if bound); its GPUs per node."""
        self.release(job, now)
        nodes = self._read_nodes()
        if not nodes:
            return {}
        self._sync(nodes)
        self._pods[job] = list(pods)
        waiting = self._bind(pods, first=True)
        if waiting:
            self._waiting[job] = waiting
        else:
            self._begin(job, now)
        return self.placement(job)

    def _sync(self, nodes: Mapping[str, tuple[int, Mapping[str, str]]]) -> None:
        self._scheduler.sync(nodes)
        self._sizes = {n: g for n, (g, _) in nodes.items()}

    def _bind(self, pods: Sequence[Pod], *, first: bool = False) -> list[Pod]:
        """Bind what fits of ``pods``, publishing each (a pod left Pending is published
        when it is ``first`` placed); the pods left Pending."""
        waiting = []
        for pod in pods:
            node = self._scheduler.bind(pod)
            if node is None:
                waiting.append(pod)
                if first and self._sink is not None:
                    self._sink.pending(pod)
            elif self._sink is not None:
                self._sink.bound(pod, node)
        return waiting

    def _begin(self, job: str, now: float) -> None:
        placed = self.placement(job)
        if placed:
            gpus = sum(placed.values())
            spread = len(placed) > fewest_nodes(gpus, list(self._sizes.values()))
            self._segments[job] = _Segment(now, spread)

    def retry(self, now: float) -> None:
        """Try the pending pods again, oldest job first (the nodes may have changed)."""
        if not self._waiting:
            return
        self._sync(self._read_nodes())
        ready = []
        for job, waiting in list(self._waiting.items()):
            left = self._bind(waiting)
            if left:
                self._waiting[job] = left
            else:
                del self._waiting[job]
                self._begin(job, now)
                ready.append(job)
        for job in ready:
            for listener in self._listeners:
                listener(job)

    def release(self, job: str, now: float) -> None:
        """Unbind ``job``'s pods (stopped, finished or deleted), its time counted, and try
        the pending pods of other jobs on the GPUs freed."""
        segment = self._segments.pop(job, None)
        if segment is not None:
            self._count(segment, now)
        self._waiting.pop(job, None)
        self._scheduler.release(job)
        pods = self._pods.pop(job, [])
        if pods and self._sink is not None:
            self._sink.released(pods)
        if pods:
            self.retry(now)

    def _count(self, segment: _Segment, now: float) -> None:
        span = max(0.0, now - segment.started)
        self.held_s += span
        self.spread_s += span if segment.spread else 0.0

    def placement(self, job: str) -> dict[str, int]:
        """The GPUs ``job``'s bound pods hold on each node."""
        return self._scheduler.placement(job)

    def node_labels(self, job: str) -> dict[str, Mapping[str, str]]:
        """The labels of each node ``job``'s bound pods are on (its GPU type, on a cluster of
        several: ``typed.py``)."""
        return self._scheduler.labels_of(job)

    def waiting(self) -> bool:
        """Whether any pod is Pending."""
        return bool(self._waiting)

    def pending(self, job: str) -> int:
        """How many of ``job``'s pods no node could take (yet)."""
        return len(self._waiting.get(job, ()))

    def spread_job_time_share(self, now: float) -> float:
        """The share of the job-time so far (running segments up to ``now``) spent on more
        nodes than the job's GPUs need: the simulator's ``spread_job_time_share``."""
        held, spread = self.held_s, self.spread_s
        for segment in self._segments.values():
            span = max(0.0, now - segment.started)
            held += span
            spread += span if segment.spread else 0.0
        return round(spread / held, 6) if held > 0 else 0.0
