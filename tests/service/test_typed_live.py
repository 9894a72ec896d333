"""The live controller on nodes of several GPU types, in the emulated cluster: each job is
given a type and a count by the typed core, pinned to that type's nodes (a node selector on
the type label, and its nodes), trains at that type's speed, shows its type in ``bellows
status``, and a new leader adopts each running job on the type its pods run on."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from bellows.autoscaler import AutoscalerConfig, TypedAutoscaler
from bellows.bus.events import JobArrived
from bellows.emulator import EmulatedCluster
from bellows.emulator.crds import kueue_crd_paths
from bellows.emulator.typed import GPU_PRODUCT, typed_nodes
from bellows.kube import Actuator, JobReader, KubeApi, PyTorchJobKind, keys
from bellows.kube.placement import Placement, template_type
from bellows.kube.statuses import read_status
from bellows.refs import JobKind, JobRef
from bellows.scaling import default_cluster
from bellows.scaling.gpu_types import GpuType, TypedCluster, sia_mix
from bellows.service.clock import ServiceClock
from bellows.service.node_view import NodeView, watch_pods
from bellows.service.pools import Pools
from bellows.service.queues import QueueIndex
from tests.conftest import shared_data_dir
from tests.service.livecluster import NS, crds
from tests.waiting import until

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"
LIMIT_S = 20.0
SIA = {t.name: t for t in sia_mix().types}
# two T4 nodes of 4 GPUs and one A100 node of 8, each with the Allreduce model fitted to it
MIX = TypedCluster((
    GpuType("t4", 2, SIA["t4"].cluster, SIA["t4"].product),
    GpuType("a100", 1, SIA["a100"].cluster, SIA["a100"].product),
))  # fmt: skip
STEPS = [(20, 0.146), (40, 0.252), (81, 0.420), (163, 0.761), (200, 0.922)]


def _profile(a100_speedup: float) -> str:
    """ResNet-50's T4 profile, and a section per type: the T4's, and the A100 faster."""

    def steps(factor: float) -> list[dict[str, float]]:
        return [{"localBatch": b, "seconds": round(s / factor, 5)} for b, s in STEPS]

    section = {"weights": 25557032, "maxLocalBatch": 128}
    return json.dumps({
        "apiVersion": "bellows.io/v1alpha1", "kind": "JobProfile", "weights": 25557032,
        "step": steps(1.0),
        "types": {"t4": {**section, "step": steps(1.0)},
                  "a100": {**section, "step": steps(a100_speedup)}},
    })  # fmt: skip


def _job(name: str, *, max_gpus: int, a100_speedup: float = 4.0) -> dict[str, Any]:
    docs = {d["kind"]: d for d in yaml.safe_load_all((EXAMPLES / "pytorchjob-resnet50.yaml")
                                                      .read_text())}  # fmt: skip
    job = copy.deepcopy(docs["PyTorchJob"])
    notes = job["metadata"]["annotations"]
    notes.pop(keys.PROFILE_CONFIGMAP)
    notes[keys.PROFILE] = _profile(a100_speedup)
    notes[keys.MAX_GPUS] = str(max_gpus)
    notes[keys.WORK] = str(10**9)  # runs for as long as the test looks
    job["metadata"] = {"name": name, "namespace": NS, "annotations": notes}
    return job


async def _until(what: str, check: Callable[[], Any], limit_s: float = LIMIT_S) -> Any:
    return await until(what, check, limit_s)


class Live:
    """The typed emulated cluster, a node view watching it, and a fresh leader on demand."""

    def __init__(self, cluster: EmulatedCluster) -> None:
        self.cluster = cluster
        self.api = KubeApi(cluster.api_client())
        self.clock = ServiceClock(speedup=60.0)
        self.gpus, self.labels = typed_nodes(MIX)
        self.custom = k8s.CustomObjectsApi(self.api.api_client)

    def leader(self, view: NodeView, queues: QueueIndex | None = None) -> Pools:
        """A new leader's pools: one typed default pool over MIX (and, beside Kueue, one
        per ClusterQueue)."""
        kueue = queues is not None
        actuator = Actuator(
            self.api, placement=Placement.NODES, pins=view, halt_timeout_s=10, kueue=kueue,
            gpu_products=MIX.products, type_label=GPU_PRODUCT,
        )  # fmt: skip
        pools = Pools(
            api=self.api, core=AutoscalerConfig(), cluster=default_cluster(),
            capacity=MIX.total, actuator=actuator,
            reader=JobReader(self.api, namespace=NS, kueue=kueue), namespaces=(NS,),
            now=self.clock.now, wall_to_clock=self.clock.at, typed=MIX, queues=queues,
        )  # fmt: skip
        pools.set_types(dict(zip(MIX.names, MIX.capacities, strict=True)))
        view.follow(lambda: pools.held)
        return pools

    async def typed_leader(self, view: NodeView) -> tuple[Pools, TypedAutoscaler]:
        """A new leader (:meth:`leader`, no Kueue) rebuilt, and its default pool's typed core."""
        pools = self.leader(view)
        await pools.rebuild()
        core = pools.default.autoscaler
        assert isinstance(core, TypedAutoscaler)
        return pools, core

    def view(self) -> NodeView:
        view = NodeView(gpus_per_node=8)
        view.set_nodes(self.gpus)
        types = {n: MIX.types[0].name if "t4" in n else "a100" for n in self.gpus}
        view.set_node_types(types, {t.name: t.gpus_per_node for t in MIX.types})
        return view

    async def submit(self, job: dict[str, Any]) -> JobArrived:
        made = await asyncio.to_thread(
            self.custom.create_namespaced_custom_object,
            "kubeflow.org", "v1", NS, "pytorchjobs", job,
        )  # fmt: skip
        ref = JobRef(JobKind.PYTORCHJOB, NS, made["metadata"]["name"], made["metadata"]["uid"])
        return JobArrived(ref, datetime.now(UTC))

    async def job(self, name: str) -> dict[str, Any]:
        obj = await self.api.get_job(PyTorchJobKind(), NS, name)
        assert obj is not None
        return obj

    def nodes_of(self, obj: dict[str, Any]) -> set[str]:
        return set(self.cluster.placer.placement(obj["metadata"]["uid"]))


@asynccontextmanager
async def typed_live(*, kueue: bool = False) -> AsyncIterator[Live]:
    gpus, labels = typed_nodes(MIX)
    files = [*crds(), *(kueue_crd_paths(shared_data_dir() / "crds") if kueue else [])]
    async with EmulatedCluster(
        crds=files, namespaces=(NS,), gpu_nodes=gpus, labels_by_node=labels, typed=MIX,
        compression=60.0, kueue=kueue,
    ) as cluster:  # fmt: skip
        live = Live(cluster)
        try:
            yield live
        finally:
            await asyncio.to_thread(live.api.api_client.close)


@asynccontextmanager
async def watching(live: Live, view: NodeView) -> AsyncIterator[None]:
    task = asyncio.create_task(watch_pods(live.api, view, (NS,)))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _key(name: str) -> str:
    return f"pytorchjob/{NS}/{name}"


def _type_of(obj: dict[str, Any]) -> str | None:
    worker = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    return template_type(worker)


async def test_jobs_get_a_type_run_on_its_nodes_and_a_new_leader_adopts_them_there() -> None:
    async with typed_live() as live:
        view = live.view()
        async with watching(live, view):
            pools, core = await live.typed_leader(view)
            # an A100 4x a T4 for this model: the first job goes to the A100 node
            await pools.apply((await live.submit(_job("fast", max_gpus=8)),))
            fast = await _until(
                "fast started", lambda: core.allocations.get(f"pytorchjob/{NS}/fast")
            )
            assert core.gpu_type(f"pytorchjob/{NS}/fast") == "a100"
            obj = await _until("fast placed", lambda: _placed(live, "fast", fast.gpus))
            assert _type_of(obj) == "a100"
            worker = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
            assert worker["nodeSelector"][GPU_PRODUCT] == MIX.type("a100").product
            assert live.nodes_of(obj) == {"a100-0"}
            # a job no faster on an A100, with the A100 full: a T4 node
            await pools.apply((await live.submit(_job("slow", max_gpus=4, a100_speedup=1.0)),))
            slow = await _until(
                "slow started", lambda: core.allocations.get(f"pytorchjob/{NS}/slow")
            )
            obj = await _until("slow placed", lambda: _placed(live, "slow", slow.gpus))
            kind = core.gpu_type(f"pytorchjob/{NS}/slow")
            assert _type_of(obj) == kind
            assert all(n.startswith(f"{kind}-") for n in live.nodes_of(obj))
            rows = await read_status(live.api, now=datetime.now(UTC), cluster=default_cluster(),
                                     namespace=NS, events=False)  # fmt: skip
            assert {r.name: r.gpu_type for r in rows} == {"fast": "a100", "slow": kind}
            held = {n: core.gpu_type(n) for n in core.allocations}
            # a new leader: each running job adopted on the type its pods run on
            await _until("pods seen", lambda: all(view.job_type(n) == t for n, t in held.items()))
            again = live.leader(view)
            await again.rebuild()
            adopted = again.default.autoscaler
            assert isinstance(adopted, TypedAutoscaler)
            assert {n: adopted.gpu_type(n) for n in adopted.allocations} == held


async def _placed(live: Live, name: str, gpus: int) -> dict[str, Any] | None:
    obj = await live.job(name)
    placed = live.cluster.placer.placement(obj["metadata"]["uid"])
    return obj if sum(placed.values()) == gpus else None


async def test_an_owners_type_selector_stands_and_the_core_decides_the_job_there() -> None:
    """A job whose owner requires T4 nodes is decided on the T4s, though an A100 would run
    it 4x faster and is free: Bellows writes no type of its own over the owner's."""
    async with typed_live() as live:
        view = live.view()
        async with watching(live, view):
            pools, core = await live.typed_leader(view)
            job = _job("owned", max_gpus=4)
            worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
            worker["nodeSelector"] = {GPU_PRODUCT: MIX.type("t4").product}
            await pools.apply((await live.submit(job),))
            got = await _until("started", lambda: core.allocations.get(_key("owned")))
            assert core.gpu_type(_key("owned")) == "t4"
            obj = await _until("placed", lambda: _placed(live, "owned", got.gpus))
            assert all(n.startswith("t4-") for n in live.nodes_of(obj))
            template = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
            assert template["spec"]["nodeSelector"] == {GPU_PRODUCT: MIX.type("t4").product}
            assert _type_of(obj) is None  # the owner's selector, not one Bellows wrote


async def test_beside_kueue_the_flavor_is_kueues_and_bellows_sizes_within_it() -> None:
    """A ClusterQueue with a T4 flavor (4 GPUs of quota) and an A100 one (8): its pool
    decides over both types, but Kueue assigns each job's flavor. Bellows writes no type
    selector; each job runs on the flavor Kueue admitted it to (its nodeLabels, injected
    by Kueue), and the core holds it on that type, within that flavor's quota."""
    async with typed_live(kueue=True) as live:
        cluster = live.cluster
        for kind in MIX.types:
            cluster.add_resource_flavor(kind.name, node_labels={GPU_PRODUCT: kind.product})
        cluster.add_cluster_queue("gpus", {"t4": 4, "a100": 8})
        cluster.add_local_queue("team", "gpus", namespace=NS)
        view = live.view()
        async with watching(live, view):
            queues = QueueIndex(live.api, namespaces=(NS,))
            pools = live.leader(view, queues)
            await pools.rebuild()
            pool = pools.controller("gpus")
            assert pool is not None
            core = pool.autoscaler
            assert isinstance(core, TypedAutoscaler)
            assert core.assigned
            assert dict(core.capacities) == {"t4": 4, "a100": 8}
            for name in ("first", "second"):
                job = _job(name, max_gpus=4)
                job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
                await pools.apply((await live.submit(job),))
                await _until(f"{name} started", lambda n=name: core.allocations.get(_key(n)))
            placed = {}
            for name in ("first", "second"):
                gpus = core.allocations[_key(name)].gpus
                obj = await _until(f"{name} placed", lambda n=name, g=gpus: _placed(live, n, g))
                placed[name] = obj
                assert _type_of(obj) is None  # no type of Bellows': the flavor is Kueue's
                kinds = {n.split("-")[0] for n in live.nodes_of(obj)}
                assert len(kinds) == 1
            for name, obj in placed.items():
                (kind,) = {n.split("-")[0] for n in live.nodes_of(obj)}

                async def followed(job: str = _key(name), there: str = kind) -> bool:
                    await pool.tick()  # its rounds follow where Kueue put it
                    return core.gpu_type(job) == there

                await _until(f"{name} held on {kind}", followed)
            held = dict.fromkeys(core.cluster.names, 0)
            for name, allocation in core.allocations.items():
                held[core.gpu_type(name)] += allocation.gpus
            assert all(held[t] <= core.capacities[t] for t in held)  # within each flavor
