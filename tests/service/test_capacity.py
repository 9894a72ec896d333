"""The capacity watcher (``bellows.service.capacity``): the GPUs of the ready, schedulable
nodes, kept current through list + watch against the emulated API server.

The live fault test (a node with running jobs lost, then back) is in ``test_faults.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
from kubernetes import client as k8s

from bellows.emulator import EmulatedCluster, gpu_node
from bellows.inputs import SpecError
from bellows.kube import KubeApi
from bellows.service.capacity import NodeGpus, node_gpus, read_capacity, watch_capacity
from bellows.service.config import MAX_CLUSTER_GPUS, CapacitySettings

GPU = "nvidia.com/gpu"
AT_ONCE = CapacitySettings(node_grace_s=0.0)  # a node lost counts at once (no grace)


def _node(name: str, gpus: Any, **changes: Any) -> dict[str, Any]:
    node = gpu_node(name, 0)
    node["status"]["allocatable"][GPU] = gpus
    node["spec"].update(changes.pop("spec", {}))
    node["status"].update(changes)
    return node


@pytest.mark.parametrize(
    ("node", "gpus"),
    [
        (_node("a", "8"), 8),
        (_node("a", "1k"), 1000),
        (_node("a", "0"), 0),
        (_node("a", "8", spec={"unschedulable": True}), 0),
        (_node("a", "8", conditions=[{"type": "Ready", "status": "False"}]), 0),
        (_node("a", "8", conditions=[{"type": "Ready", "status": "Unknown"}]), 0),
        (_node("a", "8", conditions=[]), 0),
        (_node("a", "8", conditions=[{"type": "MemoryPressure", "status": "True"}]), 0),
        # a NoSchedule taint on GPU nodes keeps other pods off: the GPUs still count
        (_node("a", "8", spec={"taints": [{"key": GPU, "effect": "NoSchedule"}]}), 8),
        ({"metadata": {"name": "cpu-only"}, "status": {"allocatable": {"cpu": "8"}}}, 0),
        ({"metadata": {"name": "bare"}}, 0),
    ],
)
def test_a_node_offers_its_allocatable_gpus_only_when_ready_and_schedulable(node, gpus):
    assert node_gpus(node, GPU) == gpus


@pytest.mark.parametrize("value", ["1500m", "0.5", "-1", "four", 8, None, "70000", "1e999"])
def test_an_allocatable_that_is_no_whole_gpu_count_is_a_spec_error(value):
    node = _node("odd", value)
    if value is None:
        assert node_gpus(node, GPU) == 0  # absent: no GPUs, not an error
        return
    with pytest.raises(SpecError, match=r"node 'odd': status\.allocatable\.nvidia\.com/gpu"):
        node_gpus(node, GPU)


def test_a_bad_node_counts_zero_is_logged_once_and_the_others_still_count():
    gpus = NodeGpus(GPU)
    with structlog.testing.capture_logs() as logs:
        gpus.put(_node("good", "4"))
        gpus.put(_node("odd", "0.5"))
        gpus.put(_node("odd", "0.5"))  # a heartbeat: the same problem, not logged again
        gpus.put({"metadata": {"name": "weird"}, "status": {"conditions": 5, "allocatable": 7}})
        gpus.put({"metadata": {"name": "weirder"}, "status": [GPU]})
        gpus.put({"metadata": ["no name"], "status": {"allocatable": {GPU: "4"}}})  # not ready
    assert gpus.total == 4
    warned = [e for e in logs if e["event"] == "capacity.node_invalid"]
    assert [e["node"] for e in warned] == ["odd", "weird", "weirder"]
    gpus.put(_node("odd", "2"))  # fixed
    assert gpus.total == 6
    gpus.remove(_node("good", "4"))
    assert gpus.total == 2
    assert gpus.advertised
    gpus.remove(_node("odd", "2"))
    gpus.remove({"metadata": ["no name"]})
    assert not gpus.advertised


def test_the_total_is_bounded_as_a_fixed_capacity_is():
    gpus = NodeGpus(GPU)
    for i in range(MAX_CLUSTER_GPUS // 60_000 + 2):
        gpus.put(_node(f"n{i}", "60000"))
    assert gpus.total == MAX_CLUSTER_GPUS


@pytest.fixture
def crds(shared_data: Path) -> list[Path]:
    return sorted((shared_data / "crds").glob("*.yaml"))


def _on_cluster(crds: list[Path], scenario: Callable[..., Awaitable[None]], **options: Any) -> None:
    async def main() -> None:
        async with EmulatedCluster(crds=crds, operator=False, **options) as cluster:
            api = KubeApi(cluster.api_client())
            try:
                await asyncio.wait_for(scenario(cluster, api), 30)
            finally:
                await asyncio.to_thread(api.api_client.close)

    asyncio.run(main())


class Told:
    """What the watcher told, as ``controller.set_capacity`` would receive it."""

    def __init__(self, fail: int = 0) -> None:
        self.values: list[int] = []
        self.fail = fail

    async def __call__(self, gpus: int) -> None:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("the controller could not take it (injected)")
        self.values.append(gpus)

    async def until(self, expected: list[int], timeout_s: float = 10.0) -> None:
        started = time.monotonic()
        while self.values != expected:
            assert time.monotonic() - started < timeout_s, f"told {self.values}, not {expected}"
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def watching(api: KubeApi, settings: CapacitySettings, told: Told, **options: Any):
    task = asyncio.create_task(watch_capacity(api, settings, told, **options))
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_the_watcher_follows_nodes_lost_added_cordoned_and_not_ready(crds):
    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        told = Told()
        async with watching(api, AT_ONCE, told):
            await told.until([8])
            cluster.remove_node("b")
            await told.until([8, 4])
            cluster.add_node("c", 8)
            await told.until([8, 4, 12])
            cluster.cordon("a")
            await told.until([8, 4, 12, 8])
            cluster.set_node_ready("c", False)
            await told.until([8, 4, 12, 8, 0])
            cluster.cordon("a", False)
            cluster.set_node_ready("c", True)
            await told.until([8, 4, 12, 8, 0, 4, 12])
            cluster.set_node_ready("c", True)  # a heartbeat that changes no total: not told
            cluster.add_node("d", 0)
            cluster.add_node("e", 2)
            await told.until([8, 4, 12, 8, 0, 4, 12, 14])

    _on_cluster(crds, scenario, gpu_nodes={"a": 4, "b": 4})


def test_the_watcher_counts_only_the_selected_nodes_and_another_resource(crds):
    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        cluster.add_node("train-1", 8, labels={"pool": "train"})
        cluster.add_node("serve-1", 8, labels={"pool": "serve"})
        told = Told()
        settings = CapacitySettings(node_selector={"pool": "train"}, node_grace_s=0.0)
        async with watching(api, settings, told):
            await told.until([8])
            cluster.add_node("train-2", 4, labels={"pool": "train"})
            cluster.add_node("serve-2", 4, labels={"pool": "serve"})
            await told.until([8, 12])
            relabel = [{"op": "replace", "path": "/metadata/labels/pool", "value": "serve"}]
            core = k8s.CoreV1Api(api.api_client)
            await asyncio.to_thread(core.patch_node, "train-1", relabel)  # leaves the pool
            await told.until([8, 12, 4])
        assert await read_capacity(api, settings) == 4
        other = CapacitySettings(resource_name="amd.com/gpu")
        with pytest.raises(SpecError, match=r"nodes with allocatable 'amd.com/gpu'"):
            await read_capacity(api, other)
        missing = CapacitySettings(node_selector={"pool": "none"})
        with pytest.raises(SpecError, match=r"matching 'pool=none'"):
            await read_capacity(api, missing)
        assert await read_capacity(api, CapacitySettings(gpus=3)) == 3  # fixed: no list

    _on_cluster(crds, scenario)


def test_no_ready_node_at_start_is_zero_gpus_not_an_error(crds):
    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        cluster.add_node("a", 4, ready=False)
        assert await read_capacity(api, CapacitySettings()) == 0
        told = Told()
        async with watching(api, CapacitySettings(), told):
            await told.until([0])
            cluster.set_node_ready("a", True)
            await told.until([0, 4])

    _on_cluster(crds, scenario)


class CountingApi(KubeApi):
    """The real client, counting the node lists it starts (each 410 costs one)."""

    lists = 0

    async def list_nodes(self, selector: str | None = None, **options: Any) -> Any:
        self.lists += 1
        async for page in super().list_nodes(selector, **options):
            yield page


def test_the_watcher_outlives_api_errors_expired_versions_and_a_failed_update(crds):
    async def scenario(cluster: EmulatedCluster, _: KubeApi) -> None:
        api = CountingApi(cluster.api_client())
        cluster.faults.inject("GET", r"^/api/v1/nodes$", 500, count=2)
        told = Told(fail=1)  # the first total is refused once: told again after the back-off
        async with watching(api, AT_ONCE, told, retry_s=(0.05, 0.2)):
            await told.until([8])
            assert cluster.faults.pending == 0
            lists = api.lists  # two failed, one whose total was refused, one that took
            assert lists == 4
            # other writes, the watch history compacted and the stream cut: the watcher's
            # version is now 410 Gone, so it lists again, and then misses nothing
            cluster.store.create_namespace("elsewhere")
            cluster.store.compact()
            cluster.store.close_watches()
            started = time.monotonic()
            while api.lists == lists:
                assert time.monotonic() - started < 10, "no new list after a 410"
                await asyncio.sleep(0.01)
            cluster.remove_node("a")
            await told.until([8, 4])
            cluster.add_node("c", 2)
            await told.until([8, 4, 6])
        await asyncio.to_thread(api.api_client.close)

    _on_cluster(crds, scenario, gpu_nodes={"a": 4, "b": 4})


PRODUCT = "nvidia.com/gpu.product"


def _typed(name: str, gpus: str, product: str | None) -> dict[str, Any]:
    node = _node(name, gpus)
    if product is not None:
        node["metadata"]["labels"][PRODUCT] = product
    return node


def test_the_gpus_are_kept_per_type_from_the_node_label():
    """Issue 39: each node's type from its product label (named by ``gpu_types``; a value
    not named is its own type, a node without the label untyped ``""``); a lapsed node's
    GPUs stay with its type for its grace, then leave it."""
    clock = [0.0]
    gpus = NodeGpus(GPU, grace_s=300.0, now=lambda: clock[0], type_label=PRODUCT,
                    types={"Tesla-T4": "t4", "NVIDIA-A100-SXM4-40GB": "a100"})  # fmt: skip
    gpus.put(_typed("t4-0", "4", "Tesla-T4"))
    gpus.put(_typed("t4-1", "4", "Tesla-T4"))
    gpus.put(_typed("a100-0", "8", "NVIDIA-A100-SXM4-40GB"))
    gpus.put(_typed("rtx-0", "8", "NVIDIA-GeForce-RTX-2080-Ti"))
    gpus.put(_typed("plain", "2", None))
    assert gpus.by_type == {"": 2, "NVIDIA-GeForce-RTX-2080-Ti": 8, "a100": 8, "t4": 8}
    assert gpus.total == sum(gpus.by_type.values())
    gpus.remove(_typed("a100-0", "8", "NVIDIA-A100-SXM4-40GB"))  # gone: in its grace
    assert gpus.by_type["a100"] == 8
    clock[0] = 301.0
    gpus.expire()
    assert "a100" not in gpus.by_type
    gpus.put(_typed("t4-1", "4", "NVIDIA-A100-SXM4-40GB"))  # relabelled: counted as it is now
    assert gpus.by_type["t4"] == 4
    assert gpus.by_type["a100"] == 4


def test_the_watcher_tells_the_gpus_per_type_when_they_change(crds):
    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        cluster.add_node("t4-0", 4, labels={PRODUCT: "Tesla-T4"})
        cluster.add_node("a100-0", 8, labels={PRODUCT: "NVIDIA-A100-SXM4-40GB"})
        told, kinds = Told(), list[dict[str, int]]()
        settings = CapacitySettings(node_grace_s=0.0, gpu_types={"Tesla-T4": "t4"})
        async with watching(api, settings, told, on_types=lambda t: kinds.append(dict(t))):
            await told.until([12])
            cluster.add_node("t4-1", 4, labels={PRODUCT: "Tesla-T4"})
            await told.until([12, 16])
            cluster.remove_node("a100-0")
            await told.until([12, 16, 8])
        assert kinds == [
            {"NVIDIA-A100-SXM4-40GB": 8, "t4": 4},
            {"NVIDIA-A100-SXM4-40GB": 8, "t4": 8},
            {"t4": 8},
        ]

    _on_cluster(crds, scenario)


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"gpu_type_label": "not a label!"}, "gpu_type_label"),
        ({"gpu_types": {"Tesla-T4": "T4 GPU"}}, "gpu_types.Tesla-T4"),
    ],
)
def test_a_bad_type_label_or_name_is_refused_by_name(changes, key):
    with pytest.raises(SpecError) as err:
        CapacitySettings(**changes)
    assert err.value.field == key
