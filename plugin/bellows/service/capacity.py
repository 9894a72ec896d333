"""The GPUs the controller shares, read from the nodes and kept current: ``capacity.gpus: 0``.

With ``controller.capacity.gpus`` at 0 the capacity is the allocatable
``controller.capacity.resourceName`` (``nvidia.com/gpu``) of the nodes that match
``controller.capacity.nodeSelector``, counting only nodes that take new pods: a cordoned
node (``spec.unschedulable``) or one whose ``Ready`` condition is not ``True`` counts 0.
Other taints do not matter (GPU nodes are often tainted to keep other pods off them).

:func:`watch_capacity` lists the nodes, then watches them from the list's
resourceVersion (a 410 lists again, as the bridge does for jobs) and calls ``on_change``
with the new total each time it changes: the controller's ``set_capacity``, which halts the
newest jobs when the cluster shrinks below the GPUs in use and starts waiting ones when it
grows. A node whose allocatable is not a whole number of GPUs is logged and counts 0; it
never stops the watch. An API error is logged and the watch resumes after a back-off.

Node flaps: a counted node that turns NotReady, or is deleted, keeps its GPUs counted for
``controller.capacity.nodeGraceSeconds`` (300 s, Kubernetes' own wait before it evicts the
pods of a NotReady or unreachable node); back Ready within that, nothing changed; still out
after it, its GPUs leave the total (log ``capacity.node_lost``) and the controller halts the
newest jobs to fit, as it does at once with a grace of 0. A cordon (``unschedulable``) is an
admin's choice and counts at once. At start a cluster with no node advertising the
resource is :class:`NoGpuNodeError`: the controller waits for one (readiness false).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
import urllib3
from kubernetes.client.rest import ApiException

from bellows.inputs import DATA_ERRORS, SpecError, brief
from bellows.kube import ConflictError, ExpiredError, KubeApi, NotFoundError
from bellows.kube.nodes import node_gpus, node_name, node_type
from bellows.service.config import MAX_CLUSTER_GPUS, CapacitySettings

__all__ = [
    "NoGpuNodeError",
    "NodeGpus",
    "list_capacity",
    "node_gpus",
    "node_gpus_of",
    "node_selector",
    "read_capacity",
    "watch_capacity",
]

_log = structlog.get_logger("bellows.capacity")

# What a failed request may raise: the API server down, answering 5xx, or refusing (403)
_TRANSIENT = (ApiException, urllib3.exceptions.HTTPError, OSError, NotFoundError, ConflictError)
RETRY_S = (1.0, 30.0)  # first and longest wait after a failed list or watch


def node_selector(settings: CapacitySettings) -> str | None:
    """The label selector of the counted nodes (``None``: every node)."""
    return ",".join(f"{k}={v}" for k, v in settings.node_selector.items()) or None


class NoGpuNodeError(SpecError):
    """No selected node has the resource at all (yet): nothing to share."""


class NodeGpus:
    """GPUs per node, as a list and then watch events show them; :attr:`total` is the sum,
    a lapsed node's included while its grace lasts (``grace_s`` on the clock ``now``), and
    :attr:`by_type` the same per GPU type (each node's ``type_label``, named by ``types``:
    :func:`bellows.kube.nodes.node_type`)."""

    def __init__(
        self,
        resource: str,
        *,
        grace_s: float = 0.0,
        now: Callable[[], float] = lambda: 0.0,
        type_label: str = "nvidia.com/gpu.product",
        types: Mapping[str, str] | None = None,
    ) -> None:
        self._resource = resource
        self._grace_s = grace_s
        self._now = now
        self._type_label, self._types = type_label, dict(types or {})
        self._type: dict[str, str] = {}  # node -> its GPU type, counted or lapsed
        self._gpus: dict[str, int] = {}
        self._advertised: set[str] = set()  # nodes with the resource at all, ready or not
        self._bad: dict[str, str] = {}  # node -> the problem last logged for it
        self._lapsed: dict[str, tuple[float, int]] = {}  # NotReady or gone: (since, GPUs)

    @property
    def total(self) -> int:
        """The GPUs to share, at most ``MAX_CLUSTER_GPUS`` (the bound of a fixed capacity)."""
        kept = sum(gpus for _, gpus in self._lapsed.values())
        return min(sum(self._gpus.values()) + kept, MAX_CLUSTER_GPUS)

    @property
    def by_type(self) -> dict[str, int]:
        """:attr:`total` per GPU type (``""``: nodes without the type label), in name order."""
        out: dict[str, int] = {}
        counted = [*self._gpus.items(), *((n, g) for n, (_, g) in self._lapsed.items())]
        for name, gpus in counted:
            kind = self._type.get(name, "")
            out[kind] = out.get(kind, 0) + gpus
        return dict(sorted(out.items()))

    @property
    def per_node(self) -> dict[str, int]:
        """The GPUs of each node that takes new pods now (lapsed nodes not: their grace keeps
        them in :attr:`total`, but no pod goes there)."""
        return {name: gpus for name, gpus in sorted(self._gpus.items()) if gpus > 0}

    @property
    def node_types(self) -> dict[str, str]:
        """The GPU type of each node of :attr:`per_node` (``""``: untyped)."""
        return {name: self._type.get(name, "") for name in self.per_node}

    @property
    def names(self) -> set[str]:
        """The nodes counted or lapsed."""
        return set(self._gpus) | set(self._lapsed)

    def next_expiry(self) -> float | None:
        """When the first lapsed node's grace ends (``None``: none lapsed)."""
        return min((since + self._grace_s for since, _ in self._lapsed.values()), default=None)

    def expire(self) -> None:
        """Drop the lapsed nodes whose grace has ended by now: their GPUs are lost."""
        now = self._now()
        for name, (since, gpus) in sorted(self._lapsed.items()):
            if now - since >= self._grace_s:
                del self._lapsed[name]
                if name not in self._gpus:
                    self._type.pop(name, None)
                _log.warning("capacity.node_lost", node=name, gpus=gpus, after_s=now - since)

    def _lapse(self, name: str, counted: int) -> None:
        """Node ``name`` stopped offering ``counted`` GPUs (NotReady or gone)."""
        if name in self._lapsed:
            return  # the grace runs from the first lapse
        if counted > 0 and self._grace_s > 0:
            _log.info("capacity.node_lapsed", node=name, gpus=counted, grace_s=self._grace_s)
            self._lapsed[name] = (self._now(), counted)

    @property
    def advertised(self) -> bool:
        """Whether some selected node has the resource in its allocatable (ready or not)."""
        return bool(self._advertised)

    def put(self, node: Mapping[str, Any]) -> None:
        """Count ``node`` as it is now (added or changed)."""
        name = node_name(node)
        self._type[name] = node_type(node, self._type_label, self._types)
        advertised = False
        try:
            advertised = self._resource in ((node.get("status") or {}).get("allocatable") or {})
            gpus = node_gpus(node, self._resource)
        except DATA_ERRORS as err:  # a value the API server should never have stored
            problem = brief(err)
            if self._bad.get(name) != problem:
                _log.warning("capacity.node_invalid", node=name, error=problem, counted=0)
            self._bad[name] = problem
            gpus = 0
        else:
            self._bad.pop(name, None)
        counted = self._gpus.get(name, 0)
        if gpus == 0 and not _cordoned(node) and advertised:
            self._lapse(name, counted)  # NotReady: counted for its grace still
        elif self._lapsed.pop(name, None) is not None and gpus:
            _log.info("capacity.node_back", node=name, gpus=gpus)
        self._gpus[name] = gpus
        if advertised:
            self._advertised.add(name)
        else:
            self._advertised.discard(name)

    def remove(self, node: Mapping[str, Any]) -> None:
        """``node`` is gone (or no longer matches the selector)."""
        name = node_name(node)
        self._lapse(name, self._gpus.pop(name, 0))
        if name not in self._lapsed:
            self._type.pop(name, None)
        self._advertised.discard(name)
        self._bad.pop(name, None)


def node_gpus_of(
    settings: CapacitySettings, *, grace_s: float = 0.0, now: Callable[[], float] = lambda: 0.0
) -> NodeGpus:
    """An empty :class:`NodeGpus` counting the nodes as ``settings`` says."""
    return NodeGpus(
        settings.resource_name, grace_s=grace_s, now=now,
        type_label=settings.gpu_type_label, types=settings.gpu_types,
    )  # fmt: skip


def _cordoned(node: Mapping[str, Any]) -> bool:
    return (node.get("spec") or {}).get("unschedulable") is True


async def list_capacity(
    api: KubeApi, settings: CapacitySettings, into: NodeGpus | None = None
) -> tuple[NodeGpus, str]:
    """The selected nodes' GPUs, counted from one full list (into ``into``, where a node
    no longer listed lapses as if deleted), and the list's resourceVersion."""
    gpus = node_gpus_of(settings) if into is None else into
    version = ""
    seen: set[str] = set()
    async for page, page_version in api.list_nodes(node_selector(settings)):
        version = page_version  # the last page's: watch from it
        for node in page:
            gpus.put(node)
            seen.add(node_name(node))
    for name in sorted(gpus.names - seen):
        gpus.remove({"metadata": {"name": name}})
    return gpus, version


async def read_capacity(api: KubeApi, settings: CapacitySettings) -> int:
    """GPUs to share at start: the configured number, else the nodes' (possibly 0 while none
    is ready: the watch raises it). :class:`SpecError` when no selected node has the
    resource at all: a wrong ``resourceName`` or ``nodeSelector`` does not heal by waiting."""
    if settings.gpus:
        return settings.gpus
    gpus, _ = await list_capacity(api, settings)
    if not gpus.advertised:
        raise NoGpuNodeError(
            "controller.capacity.gpus",
            0,
            f"a GPU count, or nodes{_matching(settings)} with allocatable "
            f"{settings.resource_name!r}",
        )
    if gpus.total == 0:
        _log.warning("capacity.none_ready", resource=settings.resource_name)
    return gpus.total


def _matching(settings: CapacitySettings) -> str:
    selector = node_selector(settings)
    return f" matching {selector!r}" if selector else ""


async def watch_capacity(
    api: KubeApi,
    settings: CapacitySettings,
    on_change: Callable[[int], Awaitable[None]],
    *,
    timeout_s: int = 300,
    retry_s: tuple[float, float] = RETRY_S,
    now: Callable[[], float] | None = None,
    speedup: float = 1.0,
    on_types: Callable[[Mapping[str, int]], None] | None = None,
    on_nodes: Callable[[Mapping[str, int]], None] | None = None,
    on_node_types: Callable[[Mapping[str, str]], None] | None = None,
) -> None:
    """Until cancelled: keep the selected nodes' GPUs and call ``on_change(total)`` whenever
    the total differs from the one last told (the first list tells it once, so a change
    between the controller's start and this watch is not missed) or the GPUs per type do,
    ``on_types`` with the GPUs per type (:attr:`NodeGpus.by_type`) whenever those differ
    (before ``on_change``), and ``on_nodes`` with the GPUs per node (:attr:`NodeGpus.per_node`)
    and ``on_node_types`` with their types (:attr:`NodeGpus.node_types`) after every list and
    event. ``now`` is the clock the nodes' grace runs on (default: the loop's), ``speedup``
    its seconds per real second."""
    selector = node_selector(settings)
    clock = now or asyncio.get_running_loop().time
    wait, longest = retry_s
    teller = _Teller(on_change, on_types)
    version: str | None = None
    gpus = node_gpus_of(settings, grace_s=settings.node_grace_s, now=clock)
    expiring = asyncio.create_task(_expire(gpus, teller, clock, speedup))
    try:
        while True:
            try:
                if version is None:
                    gpus, version = await list_capacity(api, settings, into=gpus)
                    _tell_nodes(gpus, on_nodes, on_node_types)
                    await teller.tell(gpus.total, gpus.by_type)
                    wait = retry_s[0]  # the API server answers again
                async for event, node in api.watch_nodes(selector, version, timeout_s=timeout_s):
                    version = str((node.get("metadata") or {}).get("resourceVersion") or version)
                    if event == "DELETED":
                        gpus.remove(node)
                    else:
                        gpus.put(node)
                    _tell_nodes(gpus, on_nodes, on_node_types)
                    await teller.tell(gpus.total, gpus.by_type)
                    wait = retry_s[0]  # the watch works again
            except ExpiredError:
                version = None  # too old: list again
            except Exception as err:
                if isinstance(err, _TRANSIENT):
                    _log.warning("capacity.watch_failed", error=brief(err), retry_s=wait)
                else:  # on_change failed, or a fault no one foresaw: the capacity must keep up
                    _log.exception("capacity.update_failed", retry_s=wait)
                    version = None  # list again, and tell the total again
                    teller.told = None
                await asyncio.sleep(wait)
                wait = min(wait * 2, longest)
    finally:
        expiring.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await expiring


def _tell_nodes(
    gpus: NodeGpus,
    on_nodes: Callable[[Mapping[str, int]], None] | None,
    on_node_types: Callable[[Mapping[str, str]], None] | None,
) -> None:
    if on_node_types is not None:
        on_node_types(gpus.node_types)
    if on_nodes is not None:
        on_nodes(gpus.per_node)


POLL_S = 1.0  # longest real wait between checks of the lapsed nodes' grace


async def _expire(
    gpus: NodeGpus, teller: _Teller, clock: Callable[[], float], speedup: float
) -> None:
    """Until cancelled: at each lapsed node's end of grace, drop it and tell the total."""
    while True:
        due = gpus.next_expiry()
        delay = POLL_S if due is None else min(POLL_S, max(0.0, due - clock()) / speedup)
        await asyncio.sleep(delay)
        if due is not None and clock() >= due:
            gpus.expire()
            try:
                await teller.tell(gpus.total, gpus.by_type)
            except Exception:  # on_change failed: the watch's next event tells it again
                _log.exception("capacity.update_failed", retry_s=POLL_S)
                teller.told = None


class _Teller:
    """Tells ``on_change`` a total that differs from the one last told, one at a time, and
    ``on_types`` the GPUs per type when they differ."""

    def __init__(
        self,
        on_change: Callable[[int], Awaitable[None]],
        on_types: Callable[[Mapping[str, int]], None] | None = None,
    ) -> None:
        self._on_change = on_change
        self._on_types = on_types
        self._lock = asyncio.Lock()
        self.told: int | None = None
        self.types: dict[str, int] | None = None

    async def tell(self, total: int, by_type: Mapping[str, int] | None = None) -> None:
        async with self._lock:
            moved = by_type is not None and dict(by_type) != self.types
            if by_type is not None and moved:
                _log.info("capacity.by_type", gpus=dict(by_type), was=self.types)
                self.types = dict(by_type)
                if self._on_types is not None:
                    self._on_types(self.types)
            if total == self.told and not (moved and self._on_types is not None):
                return
            _log.info("capacity.nodes", gpus=total, was=self.told)
            await self._on_change(total)
            self.told = total
