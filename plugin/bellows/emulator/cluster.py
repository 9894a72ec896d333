"""A whole emulated cluster in-process: strict API server over HTTP plus the training operators.

Usage (tests, and ``bellows demo`` later)::

    async with EmulatedCluster(crds=[pytorchjob_crd, mpijob_crd]) as cluster:
        api = KubeApi(cluster.api_client())      # the real ``kubernetes`` client, over HTTP
        ...

``gpu_nodes={"node-a": 4, "node-b": 4}`` (or ``uniform_nodes(2, 4)``) registers GPU nodes at
start; :meth:`EmulatedCluster.add_node`, :meth:`~EmulatedCluster.remove_node`,
:meth:`~EmulatedCluster.set_node_ready` and :meth:`~EmulatedCluster.cordon` change them while
it runs. ``labels_by_node`` gives nodes labels of their own; on a cluster of several GPU
types, ``typed`` (with :func:`bellows.emulator.typed.typed_nodes` for the nodes and their
``nvidia.com/gpu.product`` labels) makes every job train at the speed of the type its pods
run on (``typed.py``)::

    gpus, labels = typed_nodes(sia_mix())      # t4-0 … with the label at "Tesla-T4" …
    async with EmulatedCluster(crds=crds, gpu_nodes=gpus, labels_by_node=labels,
                               typed=sia_mix()) as cluster: ...

The server listens on 127.0.0.1 on a free port; :meth:`EmulatedCluster.configuration`
and :meth:`EmulatedCluster.kubeconfig` point clients at it. The CRD files are read from
the paths given (the real ones live outside the repository). Synchronous client calls
must run outside the loop that serves the cluster (``asyncio.to_thread``), as
:class:`bellows.kube.client.KubeApi` does.

``kueue=True`` runs the emulated Kueue (``kueue.py``) beside the operators; the CRDs must
then include Kueue's (:func:`bellows.emulator.crds.kueue_crd_paths`).
:meth:`EmulatedCluster.add_resource_flavor`, :meth:`~EmulatedCluster.add_cluster_queue`,
:meth:`~EmulatedCluster.add_local_queue` and :meth:`~EmulatedCluster.set_cluster_queue_quota`
set up and change its queues, as a cluster admin would with ``kubectl``::

    async with EmulatedCluster(crds=[*kubeflow, *kueue_crd_paths(folder)], kueue=True) as c:
        c.add_cluster_queue("gpus", {"a100": 8}, strategy="StrictFIFO")
        c.add_local_queue("team-a", "gpus")
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any

import yaml
from aiohttp import web
from kubernetes import client as k8s

from bellows.emulator.admission import admit
from bellows.emulator.faults import Faults
from bellows.emulator.kueue import EmulatedKueue
from bellows.emulator.nodes import gpu_node, ready_condition, schedulable_gpus, schedulable_nodes
from bellows.emulator.operator import EmulatedOperator
from bellows.emulator.pods import StorePods
from bellows.emulator.resources import builtin_resources, crd_resources
from bellows.emulator.scheduling import Placer
from bellows.emulator.server import AccessLog, build_app
from bellows.emulator.store import Store
from bellows.emulator.trainer import (
    CLUSTER_RUNTIMES,
    TORCH_DISTRIBUTED,
    EmulatedTrainer,
    relax_trainer_rule,
)
from bellows.emulator.typed import GPU_PRODUCT
from bellows.kube.kinds import GPU
from bellows.kube.kueue import CLUSTER_QUEUES, GROUP, LOCAL_QUEUES, VERSION, Strategy
from bellows.kube.records import DEFAULT_RECORDS_NAMESPACE as RECORDS_NAMESPACE
from bellows.scaling import ClusterProfile, EfficiencyProfile
from bellows.scaling.gpu_types import TypedCluster
from bellows.scaling.online import SpeedFactors

__all__ = ["DEFAULT_FLAVOR", "EmulatedCluster"]

DEFAULT_FLAVOR = "default-flavor"  # the flavor of a ClusterQueue given a plain GPU count
_EVERY: Mapping[str, Any] = MappingProxyType({})  # the selector of every namespace


class EmulatedCluster:
    """Async context manager running the emulated API server (and, by default, operators)."""

    def __init__(
        self,
        *,
        crds: Sequence[Path],
        operator: bool = True,
        compression: float = 60.0,
        restart_s: float = 30.0,
        cluster: ClusterProfile | None = None,
        namespaces: Sequence[str] = ("default",),
        gpu_nodes: Mapping[str, int] | None = None,
        true_speed: Callable[[str, str], SpeedFactors | None] | None = None,
        efficiency: Callable[[str, str], EfficiencyProfile | None] | None = None,
        kueue: bool = False,
        node_labels: Mapping[str, str] | None = None,
        trainer: bool = False,
        mutable_trainer: bool = False,
        tokens: Sequence[str] | None = None,
        labels_by_node: Mapping[str, Mapping[str, str]] | None = None,
        typed: TypedCluster | None = None,
        type_label: str = GPU_PRODUCT,
    ) -> None:
        """``tokens``: the API server authenticates every request by bearer token, one of
        these (401 otherwise; :meth:`kubeconfig` writes the first); default: no
        authentication. ``trainer``: run the emulated Kubeflow Trainer v2 (``trainer.py``; the
        CRDs must include ``trainer-v2.3.0/``'s, :func:`bellows.emulator.crds.trainer_crd_paths`)
        and serve :data:`~bellows.emulator.trainer.TORCH_DISTRIBUTED`. ``mutable_trainer``:
        serve the TrainJob CRD of a future Trainer whose ``spec.trainer`` may change while
        suspended (kubeflow/trainer#3995). ``efficiency(namespace, name)``: the statistical
        efficiency each job trains with (its work then counts reference samples).
        ``node_labels``: labels of every node of ``gpu_nodes`` beside its hostname (what a
        ResourceFlavor's ``nodeLabels`` select); ``labels_by_node``: more labels of some
        nodes of ``gpu_nodes``, by node name (over ``node_labels``). ``typed``: the GPU
        types the nodes' ``type_label`` names, each job trained at its type's speed
        (``typed.py``; ``None``: every job on ``cluster``)."""

        def edit(kind: str, schema: dict[str, Any]) -> dict[str, Any]:
            return relax_trainer_rule(schema) if kind == "TrainJob" else schema

        resources = crd_resources(crds, edit if mutable_trainer else None)
        self.store = Store([*builtin_resources(), *resources], admission=admit)
        # with the Trainer, the controller's own namespace too: its re-creation records live
        # there (bellows.kube.records), where no tenant writes
        for name in dict.fromkeys([*namespaces, *((RECORDS_NAMESPACE,) if trainer else ())]):
            self.store.create_namespace(name)
        self._nodes = self.store.resources["v1/nodes"]
        # where the operators bind their pods: the nodes that take pods now (none: nowhere)
        self.placer = Placer(
            lambda: schedulable_nodes(self.store.list_objects(self._nodes, None)[0]),
            StorePods(self.store),
        )
        unknown = sorted(set(labels_by_node or {}) - set(gpu_nodes or {}))
        if unknown:
            raise ValueError(f"labels_by_node names nodes not in gpu_nodes: {unknown}")
        for node, gpus in (gpu_nodes or {}).items():
            own = (labels_by_node or {}).get(node) or {}
            self.add_node(node, gpus, labels={**(node_labels or {}), **own})
        self.operator: EmulatedOperator | None = (
            EmulatedOperator(
                self.store,
                compression=compression,
                restart_s=restart_s,
                cluster=cluster,
                true_speed=true_speed,
                placer=self.placer,
                efficiency=efficiency,
                typed=typed,
                type_label=type_label,
            )
            if operator
            else None
        )
        # raises ValueError naming what to pass when the CRDs lack Kueue's kinds
        self.kueue: EmulatedKueue | None = EmulatedKueue(self.store) if kueue else None
        self.trainer: EmulatedTrainer | None = None
        if trainer:  # raises ValueError naming the CRDs when they lack the Trainer's
            self.trainer = EmulatedTrainer(
                self.store,
                compression=compression,
                restart_s=restart_s,
                cluster=cluster,
                placer=self.placer,
                efficiency=efficiency,
                typed=typed,
                type_label=type_label,
            )
            self.add_training_runtime(TORCH_DISTRIBUTED)
        self._trainer_task: asyncio.Task[None] | None = None
        self.faults = Faults()  # fault tests add rules here (see faults.py)
        # every request the server was sent, by (method, path): what tests count
        self.requests: Counter[tuple[str, str]] = Counter()
        self._runner: web.AppRunner | None = None
        self._task: asyncio.Task[None] | None = None
        self._kueue_task: asyncio.Task[None] | None = None
        self.url = ""
        self.tokens = None if tokens is None else tuple(tokens)

    async def __aenter__(self) -> EmulatedCluster:
        self._runner = web.AppRunner(
            build_app(self.store, faults=self.faults, requests=self.requests, tokens=self.tokens),
            handle_signals=False,
            access_log_class=AccessLog,  # debug lines (server.py)
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server: Any = site._server  # aiohttp exposes the bound port only here
        port = server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        if self.operator is not None:
            self._task = asyncio.create_task(self.operator.run(), name="emulated-operator")
        if self.kueue is not None:
            self._kueue_task = asyncio.create_task(self.kueue.run(), name="emulated-kueue")
        if self.trainer is not None:
            self._trainer_task = asyncio.create_task(self.trainer.run(), name="emulated-trainer")
        return self

    def check_alive(self) -> None:
        """Raise if an emulated controller (operator, Kueue, Trainer) died with an error: the
        jobs it reconciles would stall without one."""
        for task in (self._task, self._kueue_task, self._trainer_task):
            if task is not None and task.done() and not task.cancelled():
                error = task.exception()
                if error is not None:
                    raise AssertionError(f"{task.get_name()} died") from error

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.store.close_watches()
        for task in (self._task, self._kueue_task, self._trainer_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
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
        return self._retried(self.store.create(self._nodes, None, body))

    def _retried(self, node: dict[str, Any]) -> dict[str, Any]:
        """``node`` after a change that may let pending pods bind: the scheduler retries."""
        if self.placer.waiting():  # only the emulated operators place pods
            clock = self.operator or self.trainer
            assert clock is not None
            self.placer.retry(clock.emulated_now())
        return node

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

        return self._retried(
            self.store.update_with(self._nodes, None, name, change, subresource="status")
        )

    def cordon(self, name: str, unschedulable: bool = True) -> dict[str, Any]:
        """Mark the node unschedulable (``kubectl cordon``), or schedulable again."""

        def change(node: dict[str, Any]) -> dict[str, Any]:
            spec = node.setdefault("spec", {})
            if unschedulable:
                spec["unschedulable"] = True
            else:
                spec.pop("unschedulable", None)
            return node

        return self._retried(self.store.update_with(self._nodes, None, name, change))

    def gpus_available(self) -> int:
        """GPUs new pods could get now: the ready, schedulable nodes' allocatable GPUs."""
        return schedulable_gpus(self.store.list_objects(self._nodes, None)[0])

    def add_training_runtime(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a ``ClusterTrainingRuntime`` (validated against its CRD), as an admin would."""
        res = self.store.resources[CLUSTER_RUNTIMES]
        return self.store.create(res, None, copy.deepcopy(dict(body)))

    # ----- Kueue's queues (a cluster admin's objects; tests change quota at run time) ----------

    def _kueue_resource(self, plural: str) -> Any:
        key = f"{GROUP}/{VERSION}/{plural}"
        if key not in self.store.resources:
            raise ValueError(
                f"this cluster does not serve {plural}.{GROUP}: pass Kueue's CRDs "
                "(bellows.emulator.crds.kueue_crd_paths())"
            )
        return self.store.resources[key]

    def add_topology(self, name: str, levels: Sequence[str]) -> None:
        """Give the emulated Kueue the Topology ``name``: its ``levels``, node label keys
        highest first (the Topology CRD is not served, ``bellows.emulator.tas``)."""
        if self.kueue is None:
            raise ValueError("this cluster runs no Kueue: pass kueue=True")
        self.kueue.add_topology(name, levels)
        self.kueue.reconcile()  # a ClusterQueue waiting on it may admit now

    def add_resource_flavor(
        self,
        name: str,
        *,
        node_labels: Mapping[str, str] | None = None,
        topology: str | None = None,
    ) -> dict[str, Any]:
        """Create a ResourceFlavor (``nodeLabels`` name the nodes it stands for; a TAS
        flavor, with ``topology``, needs at least one)."""
        spec: dict[str, Any] = {"nodeLabels": dict(node_labels)} if node_labels else {}
        if topology is not None:
            spec["topologyName"] = topology
        body = {"metadata": {"name": name}, "spec": spec}
        return self.store.create(self._kueue_resource("resourceflavors"), None, body)

    def add_cluster_queue(
        self,
        name: str,
        gpus: int | Mapping[str, int],
        *,
        strategy: Strategy = "BestEffortFIFO",
        cohort: str | None = None,
        namespaces: Mapping[str, Any] | None = _EVERY,
    ) -> dict[str, Any]:
        """Create a ClusterQueue with a ``nvidia.com/gpu`` nominal quota per flavor
        (``{"a100": 8, "h100": 4}``; a plain count is one flavor, :data:`DEFAULT_FLAVOR`),
        admitting in ``strategy`` order from the namespaces ``namespaces`` selects (a
        LabelSelector; ``{}``, the default, every namespace; ``None``: no selector,
        which Kueue reads as none). Flavors that do not exist yet are created, as the
        admin would (Kueue admits nothing for a missing flavor)."""
        quotas = {DEFAULT_FLAVOR: gpus} if isinstance(gpus, int) else dict(gpus)
        flavors = self._kueue_resource("resourceflavors")
        for flavor in quotas:
            if not any(
                f["metadata"]["name"] == flavor for f in self.store.list_objects(flavors, None)[0]
            ):
                self.add_resource_flavor(flavor)
        spec: dict[str, Any] = {
            "queueingStrategy": strategy,
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {"name": flavor, "resources": [{"name": GPU, "nominalQuota": quota}]}
                        for flavor, quota in quotas.items()
                    ],
                }
            ],
        }
        if cohort is not None:
            spec["cohortName"] = cohort
        if namespaces is not None:
            spec["namespaceSelector"] = dict(namespaces)
        body = {"metadata": {"name": name}, "spec": spec}
        return self.store.create(self._kueue_resource(CLUSTER_QUEUES), None, body)

    def label_namespace(self, name: str, labels: Mapping[str, str | None]) -> dict[str, Any]:
        """Merge ``labels`` into namespace ``name``'s (a ``None`` value removes the key),
        creating the namespace if missing, as ``kubectl label namespace`` would."""
        self.store.create_namespace(name)
        res = self.store.resources["v1/namespaces"]

        def change(current: dict[str, Any]) -> dict[str, Any]:
            meta = current.setdefault("metadata", {})
            merged = {**(meta.get("labels") or {}), **labels}
            meta["labels"] = {k: v for k, v in merged.items() if v is not None}
            return current

        return self.store.update_with(res, None, name, change)

    def add_local_queue(
        self, name: str, cluster_queue: str, *, namespace: str = "default"
    ) -> dict[str, Any]:
        """Create a LocalQueue in ``namespace`` pointing at ``cluster_queue``."""
        body = {"metadata": {"name": name}, "spec": {"clusterQueue": cluster_queue}}
        return self.store.create(self._kueue_resource(LOCAL_QUEUES), namespace, body)

    def set_cluster_queue_quota(self, name: str, gpus: int | Mapping[str, int]) -> dict[str, Any]:
        """Change a ClusterQueue's GPU nominal quota at run time: per flavor, or a plain
        count for a ClusterQueue with one GPU flavor (flavors not named keep theirs)."""

        res = self._kueue_resource(CLUSTER_QUEUES)
        current = self.store.get(res, "", name)
        gpu_flavors = [
            flavor["name"]
            for group in current["spec"].get("resourceGroups") or []
            for flavor in group.get("flavors") or []
            if any(r.get("name") == GPU for r in flavor.get("resources") or [])
        ]
        if isinstance(gpus, int):
            if len(gpu_flavors) != 1:
                raise ValueError(
                    f"ClusterQueue {name} has {len(gpu_flavors)} GPU flavors "
                    f"({', '.join(gpu_flavors)}): give the quota per flavor"
                )
            quotas = {gpu_flavors[0]: gpus}
        else:
            quotas = dict(gpus)
        unknown = sorted(set(quotas) - set(gpu_flavors))
        if unknown:
            raise ValueError(f"ClusterQueue {name} has no GPU flavor {', '.join(unknown)}")

        def set_quota(cq: dict[str, Any]) -> dict[str, Any]:
            for group in cq["spec"].get("resourceGroups") or []:
                for flavor in group.get("flavors") or []:
                    for entry in flavor.get("resources") or []:
                        if entry.get("name") == GPU and flavor["name"] in quotas:
                            entry["nominalQuota"] = quotas[flavor["name"]]
            return cq

        return self.store.update_with(res, None, name, set_quota)

    def configuration(self) -> k8s.Configuration:
        """A ``kubernetes`` client configuration for this cluster."""
        config = k8s.Configuration(host=self.url)
        config.retries = 0  # a strict fake: no silent retry hides a failed request
        if self.tokens:
            config.api_key["authorization"] = f"Bearer {self.tokens[0]}"
        return config

    def api_client(self) -> k8s.ApiClient:
        return k8s.ApiClient(self.configuration())

    def kubeconfig(self, namespace: str = "default") -> dict[str, Any]:
        """A kubeconfig document: the first of the server's tokens as the user's, if it asks
        for one (else no credentials)."""
        user = {"token": self.tokens[0]} if self.tokens else {}
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "bellows-emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "bellows-emulator", "user": user}],
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
