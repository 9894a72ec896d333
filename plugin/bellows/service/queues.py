"""Kueue's queues as the controller routes jobs by them: job -> LocalQueue -> ClusterQueue.

With ``controller.kueue.enabled`` every ClusterQueue is a pool of its own (its GPU
``nominalQuota``, :func:`bellows.kube.kueue.read_cluster_queue`), and the jobs without a
queue name share the default pool (the nodes' GPUs). :class:`QueueIndex` lists the
LocalQueues (of the managed namespaces) and the ClusterQueues, then watches them from the
lists' resourceVersion, as :mod:`bellows.service.capacity` does for the nodes: a 410 lists
again, an API error is logged and the watch resumes after a back-off. It keeps

* LocalQueue ``(namespace, name)`` -> the ClusterQueue it points at, and
* ClusterQueue name -> its :class:`~bellows.kube.kueue.ClusterQueueView`,

* namespace -> its labels (the managed namespaces'), which a ClusterQueue's
  ``namespaceSelector`` must match for the queue to admit the namespace's jobs (one list
  and watch of the namespaces, never a read per job),
* ResourceFlavor -> whether it has a topology (``spec.topologyName``): a job whose
  ClusterQueue's flavors all do is placed by Kueue's topology-aware scheduling
  (:meth:`QueueIndex.topology_aware`; the flavors are listed and watched too, and while they
  cannot be read, a 403 from an older chart's Role, no flavor counts as one),

answers :meth:`QueueIndex.pool_of` for a job (``None``: no queue name, the default pool; a
ClusterQueue's name; or a :class:`QueueProblem` saying why the job's queue cannot be
resolved), and tells its subscribers each :class:`QueueChange`: a ClusterQueue created,
changed (quota or strategy) or gone (deleted, or now malformed), or a LocalQueue that now
routes jobs to a ClusterQueue (or one whose namespace's labels, or whose ClusterQueue's
selector, changed whether it admits them).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
import urllib3
from kubernetes.client.rest import ApiException

from bellows.inputs import DATA_ERRORS, brief, shown
from bellows.kube import ConflictError, ExpiredError, JobView, KubeApi, NotFoundError
from bellows.kube.kinds import GPU
from bellows.kube.kueue import (
    CLUSTER_QUEUES,
    GROUP,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    VERSION,
    ClusterQueueView,
    queue_name,
    read_cluster_queue,
)

__all__ = ["QueueChange", "QueueIndex", "QueueProblem", "Route"]

_log = structlog.get_logger("bellows.queues")

# What a failed request may raise: the API server down, answering 5xx, or refusing (403)
NAMESPACES = "namespaces"  # the plural followed beside Kueue's two
_TRANSIENT = (ApiException, urllib3.exceptions.HTTPError, OSError, NotFoundError, ConflictError)
RETRY_S = (1.0, 30.0)  # first and longest wait after a failed list or watch


@dataclass(frozen=True)
class QueueProblem:
    """Why a job's queue cannot be resolved to a ClusterQueue (the Event's message)."""

    message: str


Route = str | QueueProblem | None
"""Where a job goes: ``None`` (the default pool), a ClusterQueue's name, or a problem."""


@dataclass(frozen=True)
class QueueChange:
    """What changed in the index: ``view`` is the ClusterQueue now (``None``: gone or
    malformed), ``was`` before; ``routed`` marks a change of the LocalQueues that point at
    it (one created, whose jobs may have arrived before it; or one deleted, whose jobs
    leave the pool)."""

    cluster_queue: str
    view: ClusterQueueView | None
    was: ClusterQueueView | None
    routed: bool = False


Listener = Callable[[QueueChange], Awaitable[None]]


def _same(a: ClusterQueueView | None, b: ClusterQueueView | None) -> bool:
    """Whether two views size and order a pool alike (the cohort does not matter)."""
    if a is None or b is None:
        return a is b
    return (a.gpus, a.strategy) == (b.gpus, b.strategy)


def _name(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not isinstance(labels, Mapping):
        return {}
    return {str(k): str(v) for k, v in labels.items()}


def _target(obj: Mapping[str, Any]) -> str | QueueProblem:
    """The ClusterQueue a LocalQueue points at, or what is wrong with it."""
    namespace, name = _name(obj)
    spec = obj.get("spec")
    target = spec.get("clusterQueue") if isinstance(spec, Mapping) else None
    if isinstance(target, str) and target:
        return target
    return QueueProblem(
        f"LocalQueue {namespace}/{name} has no spec.clusterQueue (got {shown(target)})"
    )


def _view(obj: Mapping[str, Any], resource: str) -> ClusterQueueView | QueueProblem:
    _, name = _name(obj)
    try:
        return read_cluster_queue(obj, resource)
    except DATA_ERRORS as err:
        return QueueProblem(f"ClusterQueue {name} cannot be read: {brief(err)}")


class QueueIndex:
    """LocalQueues and ClusterQueues as last listed or watched; see the module docstring.

    ``namespaces``: the managed namespaces (``(None,)``: all); only their LocalQueues are
    listed (the ClusterQueues are cluster-scoped). ``resource``: the quota counted as GPUs
    (``controller.capacity.resourceName``). :meth:`sync` lists both once (the
    controller routes by that); :meth:`watch` keeps them until cancelled.
    """

    def __init__(
        self,
        api: KubeApi,
        *,
        namespaces: Sequence[str | None] = (None,),
        resource: str = GPU,
        timeout_s: int = 300,
        retry_s: tuple[float, float] = RETRY_S,
    ) -> None:
        self._api = api
        self._namespaces = tuple(namespaces) if None not in namespaces else (None,)
        self._resource = resource
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._locals: dict[tuple[str, str], str | QueueProblem] = {}
        self._queues: dict[str, ClusterQueueView | QueueProblem] = {}
        self._labels: dict[str, Mapping[str, str]] = {}  # managed namespace -> its labels
        self._flavors: dict[str, bool] = {}  # ResourceFlavor -> whether it has a topology
        self._flavor_labels: dict[str, dict[str, str]] = {}  # ResourceFlavor -> nodeLabels
        self._versions: dict[tuple[str, str | None], str] = {}  # (plural, namespace) -> rv
        self._listeners: list[Listener] = []
        self.synced = False

    # ------------------------------------------------------------------ reading
    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` with every :class:`QueueChange` from now on."""
        self._listeners.append(listener)

    @property
    def cluster_queues(self) -> dict[str, ClusterQueueView]:
        """The readable ClusterQueues by name (a copy)."""
        return {n: v for n, v in self._queues.items() if isinstance(v, ClusterQueueView)}

    def cluster_queue(self, name: str) -> ClusterQueueView | None:
        view = self._queues.get(name)
        return view if isinstance(view, ClusterQueueView) else None

    def local_queue(self, namespace: str, name: str) -> str | QueueProblem | None:
        """The ClusterQueue LocalQueue ``namespace/name`` points at, what is wrong with it,
        or ``None`` when there is no such LocalQueue."""
        return self._locals.get((namespace, name))

    def topology_aware(self, job: JobView | Mapping[str, Any]) -> bool:
        """Whether Kueue places ``job`` by topology-aware scheduling: its ClusterQueue's
        GPU flavors all have a topology (Kueue then picks its nodes, and a topology
        request is how to ask for them; a flavor not read counts as none)."""
        route = self.pool_of(job)
        view = self.cluster_queue(route) if isinstance(route, str) else None
        flavors = view.flavors if view is not None else ()
        return bool(flavors) and all(self._flavors.get(f, False) for f in flavors)

    def flavor_gpus(self, view: ClusterQueueView, label: str) -> list[tuple[str | None, int]]:
        """The GPU quota of each of ``view``'s flavors, in its order, beside the value its
        ResourceFlavor's ``nodeLabels`` give node label ``label`` (a GPU type's label:
        ``None`` where it gives none, or the flavor was not read)."""
        out: list[tuple[str | None, int]] = []
        for flavor, quota in zip(view.flavors, view.quotas, strict=False):
            out.append(((self._flavor_labels.get(flavor) or {}).get(label), quota))
        return out

    def pool_of(self, job: JobView | Mapping[str, Any]) -> Route:
        """The pool of ``job`` (a view, or the raw object): see :data:`Route`."""
        if isinstance(job, JobView):
            namespace, queue = job.ref.namespace, job.queue
        else:
            namespace, queue = _name(job)[0], queue_name(job)
        if queue is None:
            return None
        if not self.synced:
            return QueueProblem("Bellows has not read Kueue's queues yet")
        target = self._locals.get((namespace, queue))
        if target is None:
            return QueueProblem(f"LocalQueue {namespace}/{queue} does not exist")
        if isinstance(target, QueueProblem):
            return target
        view = self._queues.get(target)
        if view is None:
            return QueueProblem(
                f"ClusterQueue {target} (of LocalQueue {namespace}/{queue}) does not exist"
            )
        if isinstance(view, QueueProblem):
            return view
        labels = self._labels.get(namespace)
        if labels is None:
            return QueueProblem(f"namespace {namespace} has not been read yet")
        if not view.namespaces.admits(labels):
            shown_labels = ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "none"
            return QueueProblem(
                f"ClusterQueue {target} (of LocalQueue {namespace}/{queue}) does not admit "
                f"namespace {namespace}: its namespaceSelector ({view.namespaces}) does not "
                f"match the namespace's labels ({shown_labels}), so Kueue never admits the job"
            )
        return target

    # ------------------------------------------------------------------ listing and watching
    async def sync(self) -> None:
        """List every LocalQueue and ClusterQueue (API errors propagate; a 404, Kueue's
        CRDs not installed, says so), and the namespaces; tells the changes from the state
        before, if any."""
        items, version = await self._list(NAMESPACES, None)
        await self._relisted_namespaces(items)
        self._versions[NAMESPACES, None] = version
        for namespace in self._namespaces:
            items, version = await self._list(LOCAL_QUEUES, namespace)
            await self._relisted_locals(namespace, items)
            self._versions[LOCAL_QUEUES, namespace] = version
        items, version = await self._list(CLUSTER_QUEUES, None)
        await self._relisted_queues(items)
        self._versions[CLUSTER_QUEUES, None] = version
        try:  # only to know where Kueue places by topology: the watch lists them later
            items, version = await self._list(RESOURCE_FLAVORS, None)
            self._relisted_flavors(items)
            self._versions[RESOURCE_FLAVORS, None] = version
        except _TRANSIENT as err:
            _log.warning("queues.flavors_unread", error=brief(err))
        self.synced = True
        _log.info("queues.listed", cluster_queues=len(self._queues), local_queues=len(self._locals))

    async def _list(self, plural: str, namespace: str | None) -> tuple[list[Any], str]:
        if plural == NAMESPACES:
            return await self._api.list_namespaces()
        try:
            return await self._api.list_kueue(plural, namespace)
        except NotFoundError as err:
            raise NotFoundError(
                f"{plural}.{GROUP}/{VERSION} is not served ({err}): install Kueue v0.19 or "
                "later, or turn controller.kueue.enabled off"
            ) from err

    async def watch(self) -> None:
        """Until cancelled: follow every LocalQueue and ClusterQueue (see the module
        docstring); lists first unless :meth:`sync` did."""
        follows = [self._follow(LOCAL_QUEUES, namespace) for namespace in self._namespaces]
        follows.append(self._follow(CLUSTER_QUEUES, None))
        follows.append(self._follow(NAMESPACES, None))
        follows.append(self._follow(RESOURCE_FLAVORS, None))
        tasks = [asyncio.create_task(f) for f in follows]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _follow(self, plural: str, namespace: str | None) -> None:
        first, longest = self._retry_s
        wait = first
        version = self._versions.get((plural, namespace))
        while True:
            try:
                if version is None:
                    items, version = await self._list(plural, namespace)
                    if plural == LOCAL_QUEUES:
                        await self._relisted_locals(namespace, items)
                    elif plural == NAMESPACES:
                        await self._relisted_namespaces(items)
                    elif plural == RESOURCE_FLAVORS:
                        self._relisted_flavors(items)
                    else:
                        await self._relisted_queues(items)
                    wait = first  # the API server answers again
                stream = (
                    self._api.watch_namespaces(version, timeout_s=self._timeout_s)
                    if plural == NAMESPACES
                    else self._api.watch_kueue(
                        plural, namespace, version, timeout_s=self._timeout_s
                    )
                )
                async for event, obj in stream:
                    meta = obj.get("metadata") or {}
                    version = str(meta.get("resourceVersion") or version)
                    gone = event == "DELETED"
                    if plural == LOCAL_QUEUES:
                        await self._local(obj, gone=gone)
                    elif plural == NAMESPACES:
                        await self._namespace(obj, gone=gone)
                    elif plural == RESOURCE_FLAVORS:
                        self._flavor(obj, gone=gone)
                    else:
                        await self._queue(obj, gone=gone)
                    wait = first  # the watch works again
            except ExpiredError:
                version = None  # too old: list again
            except Exception as err:
                if isinstance(err, _TRANSIENT):
                    _log.warning("queues.watch_failed", kind=plural, error=brief(err), retry_s=wait)
                else:  # a listener failed, or a fault no one foresaw: list again
                    _log.exception("queues.update_failed", kind=plural, retry_s=wait)
                    version = None
                await asyncio.sleep(wait)
                wait = min(wait * 2, longest)

    # ------------------------------------------------------------------ state changes
    async def _relisted_locals(self, namespace: str | None, items: list[dict[str, Any]]) -> None:
        before = {k: v for k, v in self._locals.items() if namespace in (None, k[0])}
        now = {_name(obj): _target(obj) for obj in items}
        for key in before:
            self._locals.pop(key, None)
        self._locals.update(now)
        for key in sorted(set(before) | set(now)):
            if before.get(key) != now.get(key):
                await self._routed(before.get(key))
                await self._routed(now.get(key))

    async def _relisted_queues(self, items: list[dict[str, Any]]) -> None:
        before = self._queues
        self._queues = {_name(obj)[1]: _view(obj, self._resource) for obj in items}
        for name in sorted(set(before) | set(self._queues)):
            await self._changed(name, before.get(name), self._queues.get(name))

    def _relisted_flavors(self, items: list[dict[str, Any]]) -> None:
        self._flavors, self._flavor_labels = {}, {}
        for obj in items:
            self._flavor(obj, gone=False)

    def _flavor(self, obj: Mapping[str, Any], *, gone: bool) -> None:
        name = _name(obj)[1]
        spec = obj.get("spec")
        topology = spec.get("topologyName") if isinstance(spec, Mapping) else None
        labels = spec.get("nodeLabels") if isinstance(spec, Mapping) else None
        if gone:
            self._flavors.pop(name, None)
            self._flavor_labels.pop(name, None)
        else:
            self._flavors[name] = bool(topology)
            self._flavor_labels[name] = {
                str(k): str(v) for k, v in (labels or {}).items() if isinstance(v, str)
            } if isinstance(labels, Mapping) else {}  # fmt: skip

    def _managed(self, namespace: str) -> bool:
        return None in self._namespaces or namespace in self._namespaces

    async def _relisted_namespaces(self, items: list[dict[str, Any]]) -> None:
        now = {_name(obj)[1]: _labels_of(obj) for obj in items}
        now = {name: labels for name, labels in now.items() if self._managed(name)}
        before, self._labels = self._labels, now
        for name in sorted(set(before) | set(now)):
            await self._relabelled(name, before.get(name), now.get(name))

    async def _namespace(self, obj: Mapping[str, Any], *, gone: bool) -> None:
        name = _name(obj)[1]
        if not self._managed(name):
            return
        was = self._labels.get(name)
        now = None if gone else _labels_of(obj)
        if now is None:
            self._labels.pop(name, None)
        else:
            self._labels[name] = now
        await self._relabelled(name, was, now)

    async def _relabelled(
        self, namespace: str, was: Mapping[str, str] | None, now: Mapping[str, str] | None
    ) -> None:
        """Namespace ``namespace``'s labels changed: every ClusterQueue one of its
        LocalQueues points at whose selector now admits it differently is told routed."""
        if was == now:
            return
        targets = {t for (ns, _), t in self._locals.items() if ns == namespace}
        for target in sorted(t for t in targets if isinstance(t, str)):
            view = self.cluster_queue(target)
            if view is None:
                continue
            before = was is not None and view.namespaces.admits(was)
            after = now is not None and view.namespaces.admits(now)
            if before != after:
                _log.info(
                    "queues.namespace_admission",
                    namespace=namespace,
                    cluster_queue=target,
                    admitted=after,
                )
                await self._routed(target)

    async def _local(self, obj: Mapping[str, Any], *, gone: bool) -> None:
        key = _name(obj)
        was = self._locals.get(key)
        if gone:
            self._locals.pop(key, None)
            await self._routed(was)  # its jobs leave that pool
            return
        target = _target(obj)
        if was != target:
            self._locals[key] = target
            await self._routed(was)
            await self._routed(target)

    async def _queue(self, obj: Mapping[str, Any], *, gone: bool) -> None:
        name = _name(obj)[1]
        was = self._queues.get(name)
        if gone:
            self._queues.pop(name, None)
            await self._changed(name, was, None)
        else:
            self._queues[name] = view = _view(obj, self._resource)
            await self._changed(name, was, view)

    async def _changed(
        self,
        name: str,
        was: ClusterQueueView | QueueProblem | None,
        now: ClusterQueueView | QueueProblem | None,
    ) -> None:
        before = was if isinstance(was, ClusterQueueView) else None
        after = now if isinstance(now, ClusterQueueView) else None
        if isinstance(now, QueueProblem) and now != was:
            _log.warning("queues.cluster_queue_invalid", cluster_queue=name, problem=now.message)
        if _same(before, after):
            if before is not None and after is not None and before.namespaces != after.namespaces:
                _log.info(
                    "queues.cluster_queue_namespaces",
                    cluster_queue=name,
                    selector=str(after.namespaces),
                    was=str(before.namespaces),
                )
                await self._tell(QueueChange(name, after, before, routed=True))
            return
        _log.info(
            "queues.cluster_queue",
            cluster_queue=name,
            gpus=None if after is None else after.gpus,
            strategy=None if after is None else after.strategy,
            was=None if before is None else before.gpus,
        )
        await self._tell(QueueChange(name, after, before))

    async def _routed(self, target: str | QueueProblem | None) -> None:
        if isinstance(target, str) and (view := self.cluster_queue(target)) is not None:
            await self._tell(QueueChange(target, view, view, routed=True))

    async def _tell(self, change: QueueChange) -> None:
        if not self.synced:
            return  # the first list: whoever routes by it reads the whole state after it
        for listener in self._listeners:
            await listener(change)
