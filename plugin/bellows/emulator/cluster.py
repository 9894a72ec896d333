"""A whole emulated cluster in-process: strict API server over HTTP plus the training operators.

Usage (tests, and ``bellows demo`` later)::

    async with EmulatedCluster(crds=[pytorchjob_crd, mpijob_crd]) as cluster:
        api = KubeApi(cluster.api_client())      # the real ``kubernetes`` client, over HTTP
        ...

``gpu_nodes={"node-a": 4, "node-b": 4}`` (or ``uniform_nodes(2, 4)``) registers GPU nodes at
start; :meth:`EmulatedCluster.add_node`, :meth:`~EmulatedCluster.remove_node`,
:meth:`~EmulatedCluster.set_node_ready` and :meth:`~EmulatedCluster.cordon` change them while
it runs. The server listens on 127.0.0.1 on a free port; :meth:`EmulatedCluster.configuration`
and :meth:`EmulatedCluster.kubeconfig` point clients at it. The CRD files are read from
the paths given (the real ones live outside the repository). Synchronous client calls
must run outside the loop that serves the cluster (``asyncio.to_thread``), as
:class:`bellows.kube.client.KubeApi` does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from aiohttp import web
from kubernetes import client as k8s

from bellows.emulator.admission import admit
from bellows.emulator.faults import Faults
from bellows.emulator.nodes import gpu_node, ready_condition, schedulable_gpus
from bellows.emulator.operator import EmulatedOperator
from bellows.emulator.resources import builtin_resources, crd_resources
from bellows.emulator.server import build_app
from bellows.emulator.store import Store
from bellows.scaling import ClusterProfile
from bellows.scaling.online import SpeedFactors

__all__ = ["EmulatedCluster"]


class EmulatedCluster:
    """Async context manager running the emulated API server (and, by default, operators)."""

    def __init__(
        self,
        *,
        crds: Sequence[Path],
        operator: bool = True,
        compression: float = 60.0,
        restart_cost_s: float = 30.0,
        cluster: ClusterProfile | None = None,
        namespaces: Sequence[str] = ("default",),
        gpu_nodes: Mapping[str, int] | None = None,
        true_speed: Callable[[str, str], SpeedFactors | None] | None = None,
    ) -> None:
        self.store = Store([*builtin_resources(), *crd_resources(crds)], admission=admit)
        for name in namespaces:
            self.store.create_namespace(name)
        self._nodes = self.store.resources["v1/nodes"]
        for node, gpus in (gpu_nodes or {}).items():
            self.add_node(node, gpus)
        self.operator: EmulatedOperator | None = (
            EmulatedOperator(
                self.store,
                compression=compression,
                restart_cost_s=restart_cost_s,
                cluster=cluster,
                true_speed=true_speed,
            )
            if operator
            else None
        )
        self.faults = Faults()  # fault tests add rules here (see faults.py)
        self._runner: web.AppRunner | None = None
        self._task: asyncio.Task[None] | None = None
        self.url = ""

    async def __aenter__(self) -> EmulatedCluster:
        self._runner = web.AppRunner(
            build_app(self.store, faults=self.faults), handle_signals=False
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server: Any = site._server  # aiohttp exposes the bound port only here
        port = server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        if self.operator is not None:
            self._task = asyncio.create_task(self.operator.run(), name="emulated-operator")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.store.close_watches()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._runner is not None:
            await self._runner.cleanup()

    # ----- nodes (the cluster's capacity; tests add, remove, cordon them at run time) -------

    def add_node(
        self,
        name: str,
        gpus: int,
        *,
        labels: Mapping[str, str] | None = None,
        ready: bool = True,
        unschedulable: bool = False,
    ) -> dict[str, Any]:
        """Register a node with ``gpus`` allocatable ``nvidia.com/gpu``, as its kubelet would."""
        body = gpu_node(name, gpus, labels=labels, ready=ready, unschedulable=unschedulable)
        return self.store.create(self._nodes, None, body)

    def remove_node(self, name: str) -> None:
        """Delete the node (it was lost, or scaled away)."""
        self.store.delete(self._nodes, None, name)

    def set_node_ready(self, name: str, ready: bool) -> dict[str, Any]:
        """Set the node's ``Ready`` condition (``Unknown`` when not ready, as the node
        controller writes it for a kubelet that stopped reporting)."""

        def change(node: dict[str, Any]) -> dict[str, Any]:
            status = node.setdefault("status", {})
            kept = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
            status["conditions"] = [*kept, ready_condition(ready)]
            return node

        return self.store.update_with(self._nodes, None, name, change, subresource="status")

    def cordon(self, name: str, unschedulable: bool = True) -> dict[str, Any]:
        """Mark the node unschedulable (``kubectl cordon``), or schedulable again."""

        def change(node: dict[str, Any]) -> dict[str, Any]:
            spec = node.setdefault("spec", {})
            if unschedulable:
                spec["unschedulable"] = True
            else:
                spec.pop("unschedulable", None)
            return node

        return self.store.update_with(self._nodes, None, name, change)

    def gpus_available(self) -> int:
        """GPUs new pods could get now: the ready, schedulable nodes' allocatable GPUs."""
        return schedulable_gpus(self.store.list_objects(self._nodes, None)[0])

    def configuration(self) -> k8s.Configuration:
        """A ``kubernetes`` client configuration for this cluster."""
        config = k8s.Configuration(host=self.url)
        config.retries = 0  # a strict fake: no silent retry hides a failed request
        return config

    def api_client(self) -> k8s.ApiClient:
        return k8s.ApiClient(self.configuration())

    def kubeconfig(self, namespace: str = "default") -> dict[str, Any]:
        """A kubeconfig document (no credentials: the emulator has no authentication)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "bellows-emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "bellows-emulator", "user": {}}],
            "contexts": [
                {
                    "name": "bellows-emulator",
                    "context": {
                        "cluster": "bellows-emulator",
                        "user": "bellows-emulator",
                        "namespace": namespace,
                    },
                }
            ],
            "current-context": "bellows-emulator",
        }

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        path.write_text(yaml.safe_dump(self.kubeconfig(namespace)))
        return path
