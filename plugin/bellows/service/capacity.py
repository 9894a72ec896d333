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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
import urllib3
from kubernetes.client.rest import ApiException

from bellows.inputs import DATA_ERRORS, SpecError, brief, parse_quantity, shown
from bellows.jobs import MAX_GPUS
from bellows.kube import ConflictError, ExpiredError, KubeApi, NotFoundError
from bellows.service.config import MAX_CLUSTER_GPUS, CapacitySettings

__all__ = [
    "NodeGpus",
    "list_capacity",
    "node_gpus",
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


def node_gpus(node: Mapping[str, Any], resource: str) -> int:
    """The GPUs ``node`` offers new pods: its allocatable ``resource`` when it is Ready and
    not cordoned, else 0. :class:`SpecError` when that allocatable is not a whole number of
    GPUs in [0, MAX_GPUS] (the API server never stores one; a proxy or a bug might)."""
    name = shown(_name(node))
    status = node.get("status") or {}
    value = (status.get("allocatable") or {}).get(resource)
    if value is None:
        return 0
    field = f"node {name}: status.allocatable.{resource}"
    amount = parse_quantity(field, value, maximum=MAX_GPUS)
    if amount.denominator != 1:
        raise SpecError(field, value, "a whole number of GPUs")
    if (node.get("spec") or {}).get("unschedulable") is True:
        return 0
    ready = any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return int(amount) if ready else 0


class NodeGpus:
    """GPUs per node, as a list and then watch events show them; :attr:`total` is the sum."""

    def __init__(self, resource: str) -> None:
        self._resource = resource
        self._gpus: dict[str, int] = {}
        self._advertised: set[str] = set()  # nodes with the resource at all, ready or not
        self._bad: dict[str, str] = {}  # node -> the problem last logged for it

    @property
    def total(self) -> int:
        """The GPUs to share, at most ``MAX_CLUSTER_GPUS`` (the bound of a fixed capacity)."""
        return min(sum(self._gpus.values()), MAX_CLUSTER_GPUS)

    @property
    def advertised(self) -> bool:
        """Whether some selected node has the resource in its allocatable (ready or not)."""
        return bool(self._advertised)

    def put(self, node: Mapping[str, Any]) -> None:
        """Count ``node`` as it is now (added or changed)."""
        name = _name(node)
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
        self._gpus[name] = gpus
        if advertised:
            self._advertised.add(name)
        else:
            self._advertised.discard(name)

    def remove(self, node: Mapping[str, Any]) -> None:
        """``node`` is gone (or no longer matches the selector)."""
        name = _name(node)
        self._gpus.pop(name, None)
        self._advertised.discard(name)
        self._bad.pop(name, None)


def _name(node: Mapping[str, Any]) -> str:
    meta = node.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


async def list_capacity(api: KubeApi, settings: CapacitySettings) -> tuple[NodeGpus, str]:
    """The selected nodes' GPUs, counted from one full list, and its resourceVersion."""
    gpus = NodeGpus(settings.resource_name)
    version = ""
    async for page, page_version in api.list_nodes(node_selector(settings)):
        version = page_version  # the last page's: watch from it
        for node in page:
            gpus.put(node)
    return gpus, version


async def read_capacity(api: KubeApi, settings: CapacitySettings) -> int:
    """GPUs to share at start: the configured number, else the nodes' (possibly 0 while none
    is ready: the watch raises it). :class:`SpecError` when no selected node has the
    resource at all: a wrong ``resourceName`` or ``nodeSelector`` does not heal by waiting."""
    if settings.gpus:
        return settings.gpus
    gpus, _ = await list_capacity(api, settings)
    if not gpus.advertised:
        raise SpecError(
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
) -> None:
    """Until cancelled: keep the selected nodes' GPUs and call ``on_change(total)`` whenever
    the total differs from the one last told (the first list tells it once, so a change
    between the controller's start and this watch is not missed)."""
    selector = node_selector(settings)
    wait, longest = retry_s
    told: int | None = None
    version: str | None = None
    gpus = NodeGpus(settings.resource_name)
    while True:
        try:
            if version is None:
                gpus, version = await list_capacity(api, settings)
                told = await _tell(gpus.total, told, on_change)
                wait = retry_s[0]  # the API server answers again
            async for event, node in api.watch_nodes(selector, version, timeout_s=timeout_s):
                version = str((node.get("metadata") or {}).get("resourceVersion") or version)
                if event == "DELETED":
                    gpus.remove(node)
                else:
                    gpus.put(node)
                told = await _tell(gpus.total, told, on_change)
                wait = retry_s[0]  # the watch works again
        except ExpiredError:
            version = None  # too old: list again
        except Exception as err:
            if isinstance(err, _TRANSIENT):
                _log.warning("capacity.watch_failed", error=brief(err), retry_s=wait)
            else:  # on_change failed, or a fault no one foresaw: the capacity must keep up
                _log.exception("capacity.update_failed", retry_s=wait)
                version = None  # list again, and tell the total again
            await asyncio.sleep(wait)
            wait = min(wait * 2, longest)


async def _tell(
    total: int, told: int | None, on_change: Callable[[int], Awaitable[None]]
) -> int | None:
    if total == told:
        return told
    _log.info("capacity.nodes", gpus=total, was=told)
    await on_change(total)
    return total
