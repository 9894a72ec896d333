"""What a leader reads of the nodes and watches of them: the capacity watch (the pools' GPUs,
per type too), the node view's first lists and its pod watch (``controller.placement:
nodes``), and the GPU types it decides over (:mod:`bellows.service.typed_cluster`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import structlog

from bellows.autoscaler import Mode
from bellows.inputs import brief
from bellows.kube import KubeApi
from bellows.kube.placement import Placement
from bellows.scaling import ClusterProfile
from bellows.scaling.gpu_types import TypedCluster
from bellows.service import capacity
from bellows.service.assembly import managed_namespaces
from bellows.service.clock import ServiceClock
from bellows.service.config import BellowsConfig
from bellows.service.metrics import Metrics
from bellows.service.node_view import NodeView, watch_pods
from bellows.service.pools import Pools
from bellows.service.typed_cluster import typed_cluster

__all__ = ["VIEW_WAIT_S", "capacity_watch", "node_view_of", "typed_nodes", "view_started"]

_log = structlog.get_logger("bellows.service")


def capacity_watch(
    config: BellowsConfig,
    api: KubeApi,
    pools: Pools,
    clock: ServiceClock,
    metrics: Metrics,
    *,
    view: NodeView | None = None,
) -> list[asyncio.Task[None]]:
    """With ``capacity.gpus`` 0, the task that keeps the default pool's capacity to the
    nodes' (nodes lost, added, cordoned, not ready past their grace). With a node ``view``
    (``placement: nodes``), the nodes' watch keeps the view's nodes too (with a fixed
    capacity, for the view alone), and a second task its pods."""
    settings = config.controller.capacity
    if settings.gpus and view is None:
        return []

    def on_types(gpus: Mapping[str, int]) -> None:
        metrics.capacity_by_type(gpus)
        pools.set_types(gpus)

    watch = capacity.watch_capacity(
        api, settings, _fixed if settings.gpus else pools.set_capacity, now=clock.now,
        speedup=clock.speedup, on_types=on_types,
        on_nodes=None if view is None else view.set_nodes,
        on_node_types=None if view is None else view.set_node_types,
    )  # fmt: skip
    return [asyncio.create_task(watch, name="capacity-watch")]


VIEW_WAIT_S = 30.0  # the longest a new leader waits for its node view's first lists


async def view_started(
    config: BellowsConfig, api: KubeApi, view: NodeView | None
) -> list[asyncio.Task[None]]:
    """With a node view: the nodes listed once and the pod watch started, both before the
    rebuild, so that its first round already sees where the GPUs sit (waited for at most
    ``VIEW_WAIT_S``: an API server that does not answer is the watch's to retry)."""
    if view is None:
        return []
    try:
        nodes, _ = await capacity.list_capacity(api, config.controller.capacity)
        view.set_node_types(nodes.node_types)
        view.set_nodes(nodes.per_node)
    except Exception as err:  # the capacity watch lists them again
        _log.warning("node_view.nodes_unlisted", error=brief(err))
    listed = asyncio.Event()
    pods = watch_pods(api, view, managed_namespaces(config), listed=listed)
    task = asyncio.create_task(pods, name="pod-watch")
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(listed.wait(), VIEW_WAIT_S)
    return [task]


async def _fixed(_gpus: int) -> None:
    """A fixed ``capacity.gpus`` stays as configured, whatever the nodes hold."""


def node_view_of(config: BellowsConfig, cluster: ClusterProfile) -> NodeView | None:
    """A fresh node view for a term of leading, with ``controller.placement: nodes``."""
    if config.controller.placement is not Placement.NODES:
        return None
    resource = config.controller.capacity.resource_name
    return NodeView(resource, gpus_per_node=cluster.gpus_per_node)


async def typed_nodes(
    config: BellowsConfig, api: KubeApi, cluster: ClusterProfile, view: NodeView | None = None
) -> TypedCluster | None:
    """The nodes' GPU types, where Bellows mode counts the nodes and they have two or more
    (:func:`~bellows.service.typed_cluster.typed_cluster`); else ``None``: one pool. A node
    ``view`` learns each type's node as the core prices it."""
    settings = config.controller.capacity
    if settings.gpus or config.controller.mode is not Mode.BELLOWS:
        return None
    nodes, _ = await capacity.list_capacity(api, settings)
    typed = typed_cluster(nodes.per_node, nodes.node_types, settings.gpu_types, cluster)
    if typed is not None:
        if "" in nodes.node_types.values():
            _log.warning("controller.untyped_nodes_left_out",
                         nodes=sorted(n for n, t in nodes.node_types.items() if not t))  # fmt: skip
        _log.info("controller.gpu_types", types={t.name: t.gpus for t in typed.types})
        if view is not None:
            sizes = {t.name: t.gpus_per_node for t in typed.types}
            view.set_node_types(nodes.node_types, sizes)
    return typed
