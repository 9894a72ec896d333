"""Where GPUs are free, node by node, as the controller sees them (``controller.placement:
nodes``), and the nodes each job it sizes is pinned to.

The controller places a job it sizes as the simulator does (``bellows.autoscaler.placing``:
the fewest nodes the free GPUs allow, the fullest first) and pins it there with a required
node affinity (``bellows.kube.placement.Pinned``), so that the placement the core's prices
assume is the one the job gets. For that it keeps:

* the GPUs of each node that takes new pods, from the capacity watch
  (``capacity.watch_capacity``'s ``on_nodes``: needs ``controller.capacity.gpus: 0``);
* every pod that holds GPUs in the namespaces it manages (:func:`watch_pods`: a list, then
  a watch from it, of their pods not finished: on the nodes it shares, as its capacity
  already assumes, no one else's pods hold GPUs, so it reads no other namespace), with its
  node and the job it belongs to: its controller
  owner (``<kind>/<namespace>/<name>``, as the core names jobs) or, for a TrainJob's pods,
  the JobSet label (the TrainJob's name);
* the pin of each job it sized, until the job's pods are seen bound (as many GPUs as the
  pin: there, unless something else placed them).

A node's free GPUs, for job ``J``: its GPUs, less those held by pods of workloads Bellows
does not run (another scheduler's, a job that did not opt in), less, for each other job
Bellows runs now, its pin there if it has one (it is being placed there: its old pods are
going), else its bound pods. The pods of a job Bellows
halted, or saw finish, are counted free (they are going: the round places the jobs that
take their GPUs before the watch tells their pods gone), and ``J``'s own are too (a resize
places the job afresh). Pending pods hold nothing.
No room for ``J`` (the view lags, or other workloads took the GPUs): no pin, and the
scheduler places the job's pods as it would without the view.

On a cluster of several GPU types (:meth:`NodeView.set_node_types`: each node's type, from
the capacity watch's type label), a job the core gave a type is placed on that type's nodes
only, and :meth:`NodeView.free_nodes_by_type` tells a typed core where each type's GPUs sit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import structlog

from bellows.autoscaler.placing import best_fit
from bellows.autoscaler.straddle import FreeNodes
from bellows.inputs import DATA_ERRORS, brief
from bellows.kube import ExpiredError, KubeApi
from bellows.kube.nodes import pod_gpus
from bellows.refs import job_key

__all__ = ["ACTIVE_PODS", "NodeView", "pod_job", "watch_pods"]

_log = structlog.get_logger("bellows.node_view")

ACTIVE_PODS: Final = "status.phase!=Succeeded,status.phase!=Failed"  # the pods that hold GPUs
JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
_KINDS: Final = ("PyTorchJob", "MPIJob")
RETRY_S: Final = (1.0, 30.0)  # first and longest wait after a failed list or watch
STALE_ROUNDS: Final = 5  # rounds after which a pin its pods never came to is dropped


def pod_job(pod: Mapping[str, Any]) -> str:
    """The core's name of the job ``pod`` belongs to (``""``: none Bellows sizes)."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") is True and ref.get("kind") in _KINDS:
            return job_key(str(ref["kind"]), namespace, str(ref.get("name", "")))
    jobset = (meta.get("labels") or {}).get(JOBSET_NAME)
    return job_key("TrainJob", namespace, jobset) if jobset else ""


@dataclass(frozen=True)
class _Pod:
    """A GPU pod as the view keeps it (``node`` empty while it is Pending)."""

    job: str
    node: str
    gpus: int
    namespace: str


@dataclass
class _Pin:
    """Where a job was pinned (GPUs per node), in which round, and whether only by
    preference (``soft``: a job Kueue starts, whose pods may land elsewhere)."""

    nodes: dict[str, int]
    round: int
    soft: bool = False

    def spoken_for(self, on: Mapping[str, int]) -> bool:
        """Whether the job's bound pods (``on``) now say where it is: all where it was
        pinned, or, pinned by preference only, as many GPUs wherever they landed."""
        there = all(on.get(n, 0) >= g for n, g in self.nodes.items())
        return there or (self.soft and sum(on.values()) >= sum(self.nodes.values()))


class NodeView:
    """Free GPUs per node and the jobs' pins (see the module docstring).

    ``gpus_per_node``: the cluster profile's (what the core prices a node as).
    ``running()``: the jobs Bellows runs now and the GPUs each may hold (the rosters'
    ``held``): set with :meth:`follow` once the controllers exist. A job the view saw
    running and no longer does was halted or finished: its pods are going. (A job Bellows
    only queues may run all the same: one Kueue admitted first holds its GPUs.)
    """

    def __init__(
        self,
        resource: str = "nvidia.com/gpu",
        *,
        gpus_per_node: int = 8,
        type_gpus_per_node: Mapping[str, int] | None = None,
    ) -> None:
        self._resource = resource
        self._gpus_per_node = gpus_per_node  # the cluster profile's node
        self._type_node = dict(type_gpus_per_node or {})  # per GPU type: its node's GPUs
        self._nodes: dict[str, int] = {}
        self._node_type: dict[str, str] = {}  # node -> its GPU type ("": untyped)
        self._pods: dict[str, _Pod] = {}  # by pod uid
        self._on: dict[str, dict[str, int]] = {}  # job -> GPUs its bound pods hold per node
        self._pins: dict[str, _Pin] = {}  # by job
        self._ran: set[str] = set()  # jobs seen running: their pods are Bellows' to count
        self._round = 0  # rounds placed (place_round)
        self._running: Callable[[], Mapping[str, int]] = dict

    def follow(self, running: Callable[[], Mapping[str, int]]) -> None:
        """Take the running jobs from ``running`` (the controllers')."""
        self._running = running

    @property
    def nodes(self) -> dict[str, int]:
        """The GPUs of each node that takes new pods."""
        return dict(self._nodes)

    def set_nodes(self, gpus: Mapping[str, int]) -> None:
        """The nodes that take new pods now, and their GPUs."""
        self._nodes = {n: g for n, g in gpus.items() if g > 0}

    @property
    def node_types(self) -> dict[str, str]:
        """Each node's GPU type, as last set."""
        return dict(self._node_type)

    def set_node_types(
        self, types: Mapping[str, str], gpus_per_node: Mapping[str, int] | None = None
    ) -> None:
        """Each node's GPU type (the capacity watch's, ``""``: untyped); ``gpus_per_node``:
        per type, the GPUs of its node as the core prices it (default: as before)."""
        self._node_type = dict(types)
        if gpus_per_node is not None:
            self._type_node = dict(gpus_per_node)

    def _of_type(self, free: Mapping[str, int], gpu_type: str) -> dict[str, int]:
        """``free`` on the nodes of ``gpu_type`` only (``""``: every node)."""
        if not gpu_type:
            return dict(free)
        return {n: g for n, g in free.items() if self._node_type.get(n, "") == gpu_type}

    def put_pod(self, pod: Mapping[str, Any]) -> None:
        """A pod as it is now (added or changed); one without GPUs, or finished, is dropped."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        self._forget(uid)
        phase = (pod.get("status") or {}).get("phase")
        try:
            gpus = pod_gpus(pod.get("spec") or {}, self._resource)
        except DATA_ERRORS as err:  # a quantity the API server should never have stored
            _log.warning("node_view.pod_invalid", pod=meta.get("name"), error=brief(err))
            gpus = 0
        if not uid or gpus < 1 or phase in ("Succeeded", "Failed"):
            return
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        job = pod_job(pod)
        self._pods[uid] = _Pod(job, node, gpus, str(meta.get("namespace") or ""))
        if not node:
            return  # Pending: holds nothing yet
        on = self._on.setdefault(job, {})
        on[node] = on.get(node, 0) + gpus
        pin = self._pins.get(job)
        if pin is not None and pin.spoken_for(on):
            del self._pins[job]  # its pods are where it was pinned: they speak for it

    def _forget(self, uid: str) -> None:
        gone = self._pods.pop(uid, None)
        if gone is None or not gone.node:
            return
        job, node, gpus = gone.job, gone.node, gone.gpus
        on = self._on[job]
        on[node] -= gpus
        if not on[node]:
            del on[node]
        if not on:
            del self._on[job]

    def remove_pod(self, pod: Mapping[str, Any]) -> None:
        """A pod deleted."""
        self._forget(str((pod.get("metadata") or {}).get("uid") or ""))

    def replace_pods(self, pods: list[Mapping[str, Any]], namespace: str | None = None) -> None:
        """Every pod of ``namespace`` (``None``: of every namespace), from a full list (the
        ones not in it are gone)."""
        for pod in pods:
            self.put_pod(pod)
        self.keep_only({str((p.get("metadata") or {}).get("uid") or "") for p in pods}, namespace)

    def keep_only(self, uids: set[str], namespace: str | None = None) -> None:
        """Forget the pods of ``namespace`` (``None``: every namespace) not in ``uids`` (a
        full list's: they are gone)."""
        for uid, pod in list(self._pods.items()):
            if (namespace is None or pod.namespace == namespace) and uid not in uids:
                self._forget(uid)

    def free(self, job: str, going: frozenset[str] = frozenset()) -> dict[str, int]:
        """The GPUs of each node free for ``job`` (see the module docstring); the pods of
        the jobs ``going`` are going too (the round resizes them)."""
        running = self._running()
        self._ran.update(running)
        self._ran &= running.keys() | self._on.keys()  # forgotten once its pods are gone
        for owner in [o for o in self._pins if o not in running]:
            del self._pins[owner]  # halted or gone: its pin is spent
        used: dict[str, int] = {}
        for owner, on in self._on.items():
            if (job and owner == job) or owner in going or owner in self._pins:
                continue  # its own; resized this round or pinned: counted where pinned
            if owner not in running and owner in self._ran:
                continue  # halted or finished: going
            for node, gpus in on.items():
                used[node] = used.get(node, 0) + gpus
        for owner, pin in self._pins.items():
            if owner != job:
                for node, gpus in pin.nodes.items():
                    used[node] = used.get(node, 0) + gpus
        return {n: max(0, g - used.get(n, 0)) for n, g in self._nodes.items()}

    def place_round(
        self, claims: Sequence[tuple[str, int]], types: Mapping[str, str] | None = None
    ) -> None:
        """Pin the jobs a round starts or resizes (``(job, GPUs)``, one GPU a pod; ``types``:
        the GPU type of each job given one), before any of them is driven: all at once, the
        largest first, each job's pods now counted as going (it halts before it resumes
        where it is pinned). :meth:`pin` then hands each its pin."""
        types = types or {}
        self._round += 1
        for owner, pin in list(self._pins.items()):
            if self._round - pin.round > STALE_ROUNDS:
                del self._pins[owner]  # no pod ever came where it was pinned: its pods speak
        going = frozenset(job for job, _ in claims)
        for job in going:
            self._pins.pop(job, None)
        for job, gpus in sorted(claims, key=lambda c: (-c[1], c[0])):
            self._place(job, gpus, 1, going, gpu_type=types.get(job, ""))

    def pin(
        self, job: str, gpus: int, gpus_per_pod: int, *, required: bool = True, gpu_type: str = ""
    ) -> tuple[str, ...] | None:
        """The nodes ``job``, sized to ``gpus`` in pods of ``gpus_per_pod``, is pinned to:
        its round's pin when it has one of that size, else one placed now (kept as its pin);
        ``None`` when the view has no room for it (no pin). ``required=False`` (a job
        Kueue starts): only preferred there, so its pods speak for it as soon as they are
        bound, wherever they landed. ``gpu_type``: on that type's nodes only."""
        pin = self._pins.get(job)
        if pin is not None and sum(pin.nodes.values()) == gpus:
            pin.soft = not required
            return tuple(pin.nodes)
        return self._place(
            job, gpus, gpus_per_pod, frozenset(), soft=not required, gpu_type=gpu_type
        )

    def free_nodes(self) -> FreeNodes | None:
        """Where the GPUs sit now, as the simulator tells the core before each step
        (``Autoscaler.see_nodes``): each node's free GPUs (by name order) and each running
        job's GPUs per node (its pin while it has one, else its bound pods). ``None``
        without nodes, or with a node of more GPUs than the cluster profile's node (the
        core's pricing has no such node)."""
        if not self._nodes or max(self._nodes.values()) > self._gpus_per_node:
            return None
        return self._seen(sorted(self._nodes), self.free(""))  # no job's own GPUs free

    def free_nodes_by_type(self) -> dict[str, FreeNodes] | None:
        """:meth:`free_nodes` per GPU type (``Autoscaler.see_nodes`` of a typed core): each
        type's nodes, and the running jobs on them. ``None`` without nodes; a type whose
        node has more GPUs than its profile's is left out (its counts priced on the fewest
        nodes)."""
        if not self._nodes:
            return None
        free = self.free("")
        by_type: dict[str, list[str]] = {}
        for name in sorted(self._nodes):
            by_type.setdefault(self._node_type.get(name, ""), []).append(name)
        out: dict[str, FreeNodes] = {}
        for gpu_type, names in by_type.items():
            largest = self._type_node.get(gpu_type, self._gpus_per_node)
            if gpu_type and max(self._nodes[n] for n in names) <= largest:
                out[gpu_type] = self._seen(names, free)
        return out

    def _seen(self, names: Sequence[str], free: Mapping[str, int]) -> FreeNodes:
        """The free GPUs of nodes ``names`` and each running job's GPUs on them."""
        index = {name: i for i, name in enumerate(names)}
        held: dict[str, tuple[tuple[int, int], ...]] = {}
        for job in self._running():
            pin = self._pins.get(job)
            on = pin.nodes if pin is not None else self._on.get(job) or {}
            placed = tuple(sorted((index[n], g) for n, g in on.items() if n in index and g > 0))
            if placed:
                held[job] = placed
        return FreeNodes(tuple(free[n] for n in names), held)

    def job_type(self, job: str) -> str | None:
        """The GPU type of the nodes ``job``'s bound pods are on (``None``: none bound, or
        on nodes of several types or untyped ones)."""
        kinds = {self._node_type.get(n, "") for n in self._on.get(job) or {}}
        return kinds.pop() if len(kinds) == 1 and "" not in kinds else None

    def moves(self, job: str, gpus: int) -> bool:
        """Whether ``job``, kept on ``gpus`` (a move the core decided), is pinned elsewhere
        than its bound pods are: then it must halt and resume there."""
        pin = self._pins.get(job)
        return (
            pin is not None
            and sum(pin.nodes.values()) == gpus
            and pin.nodes != self._on.get(job, {})
        )

    def _place(
        self,
        job: str,
        gpus: int,
        gpus_per_pod: int,
        going: frozenset[str],
        *,
        soft: bool = False,
        gpu_type: str = "",
    ) -> tuple[str, ...] | None:
        if not self._nodes or gpus < 1:
            return None
        free = self._of_type(self.free(job, going), gpu_type)
        placed = best_fit(free, -(-gpus // gpus_per_pod), gpus_per_pod)
        if placed is None:
            self._pins.pop(job, None)
            _log.info("node_view.no_room", job=job, gpus=gpus)
            return None
        self._pins[job] = _Pin(placed, self._round, soft)
        return tuple(placed)


async def watch_pods(
    api: KubeApi,
    view: NodeView,
    namespaces: Sequence[str | None] = (None,),
    *,
    timeout_s: int = 300,
    retry_s: tuple[float, float] = RETRY_S,
    listed: asyncio.Event | None = None,
) -> None:
    """Until cancelled: keep ``view``'s pods of ``namespaces`` (``None``: every namespace;
    the controller's watched namespaces), not finished, through a list and a watch from it
    per namespace; a 410 lists again, an API error backs off and lists again. ``listed`` is
    set once every namespace has been listed."""
    left = set(dict.fromkeys(namespaces))

    def done(namespace: str | None) -> None:
        left.discard(namespace)
        if not left and listed is not None:
            listed.set()

    watches = [
        asyncio.create_task(
            _watch_namespace(api, view, ns, timeout_s=timeout_s, retry_s=retry_s, listed=done)
        )
        for ns in dict.fromkeys(namespaces)
    ]
    try:
        await asyncio.gather(*watches)
    finally:
        for watch in watches:
            watch.cancel()
        await asyncio.gather(*watches, return_exceptions=True)


async def _watch_namespace(
    api: KubeApi,
    view: NodeView,
    namespace: str | None,
    *,
    timeout_s: int,
    retry_s: tuple[float, float],
    listed: Callable[[str | None], None],
) -> None:
    wait, longest = retry_s
    version: str | None = None
    while True:
        try:
            if version is None:  # page by page: no list of every pod held at once
                seen: set[str] = set()
                async for page, page_version in api.list_pods(namespace, ACTIVE_PODS):
                    for pod in page:
                        view.put_pod(pod)
                        seen.add(str((pod.get("metadata") or {}).get("uid") or ""))
                    version = page_version
                view.keep_only(seen, namespace)
                listed(namespace)
                wait = retry_s[0]
            assert version is not None
            events = api.watch_pods(namespace, ACTIVE_PODS, version, timeout_s=timeout_s)
            async for event, pod in events:
                version = str((pod.get("metadata") or {}).get("resourceVersion") or version)
                if event == "DELETED":
                    view.remove_pod(pod)
                else:
                    view.put_pod(pod)
                wait = retry_s[0]
        except ExpiredError:
            version = None
        except Exception as err:  # the API server down or refusing: back off, list again
            _log.warning(
                "node_view.watch_failed", namespace=namespace, error=brief(err), retry_s=wait
            )
            version = None
            await asyncio.sleep(wait)
            wait = min(wait * 2, longest)
