"""The emulated operators bind their jobs' pods to nodes as kube-scheduler would: spread
over the emptiest nodes without Bellows' placement, on the fewest with ``pack`` (a
PyTorchJob's pod templates; a TrainJob's runtime patches, which the emulated Trainer
applies to the pods it renders)."""

from __future__ import annotations

import asyncio
import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from tests.conftest import shared_data_dir

from bellows.autoscaler.decisions import Preempt, Rescale, Start
from bellows.emulator import EmulatedCluster
from bellows.emulator.crds import trainer_crd_paths
from bellows.emulator.nodes import uniform_nodes
from bellows.emulator.scheduling import Placer, Pod, fewest_nodes
from bellows.kube import Actuator, KubeApi, PyTorchJobKind
from bellows.kube.adapters import ALL_KINDS, TRAINJOB
from bellows.kube.adapters.trainjob import JOBSET_NAME_LABEL, PLACEMENT_MANAGER
from bellows.kube.placement import HOSTNAME, Placement, pack_term

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _docs(name: str) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all((EXAMPLES / name).read_text())}


def _crds() -> list[Path]:
    data = shared_data_dir() / "crds"
    return [*sorted(data.glob("*.yaml")), *trainer_crd_paths(data)]


async def _create(api: KubeApi, obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "ConfigMap":
        core = k8s.CoreV1Api(api.api_client)
        await asyncio.to_thread(core.create_namespaced_config_map, "default", obj)
        return obj
    group, version = obj["apiVersion"].split("/")
    custom = k8s.CustomObjectsApi(api.api_client)
    plural = obj["kind"].lower() + "s"
    created: dict[str, Any] = await asyncio.to_thread(
        custom.create_namespaced_custom_object, group, version, "default", plural, obj
    )
    return created


async def _placed(kube: EmulatedCluster, api: KubeApi, kind: Any, name: str) -> dict[str, int]:
    """The GPUs per node of the job's pods, once it runs with all of them bound."""
    deadline = time.monotonic() + 10
    while True:
        obj = await api.get_job(kind, "default", name)
        assert obj is not None
        placed = kube.placer.placement(obj["metadata"]["uid"])
        if placed and sum(placed.values()) == kind.view(obj, ()).gpus:
            return placed
        assert time.monotonic() < deadline, f"{name} never placed: {placed}"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize(("placement", "nodes"), [(Placement.NONE, 4), (Placement.PACK, 1)])
async def test_a_pytorchjobs_pods_spread_without_packing_and_pack_with_it(
    placement: Placement, nodes: int
) -> None:
    docs = _docs("pytorchjob-resnet50.yaml")
    async with EmulatedCluster(
        crds=_crds(), gpu_nodes=uniform_nodes(4, 4), compression=1.0
    ) as kube:
        api = KubeApi(kube.api_client())
        await _create(api, copy.deepcopy(docs["ConfigMap"]))
        job = copy.deepcopy(docs["PyTorchJob"])
        await _create(api, job)
        name = job["metadata"]["name"]
        ref = f"pytorchjob/default/{name}"
        act = Actuator(api, placement=placement, halt_timeout_s=10)
        assert (await act.apply(Start(ref, 4, 256))).result == "started"
        placed = await _placed(kube, api, PyTorchJobKind(), name)
        assert (len(placed), sum(placed.values())) == (nodes, 4)
        # a preemption releases them; the job-time is counted, spread only without packing
        assert (await act.apply(Preempt(ref, "capacity"))).result == "preempted"
        obj = await api.get_job(PyTorchJobKind(), "default", name)
        assert obj is not None
        deadline = time.monotonic() + 10
        while kube.placer.placement(obj["metadata"]["uid"]):
            assert time.monotonic() < deadline, "the pods were never released"
            await asyncio.sleep(0.02)
        assert kube.placer.held_s > 0
        share = kube.placer.spread_job_time_share(0.0)
        assert share == (1.0 if placement is Placement.NONE else 0.0)
        await asyncio.to_thread(api.api_client.close)


async def test_the_trainer_applies_runtime_patches_to_the_pods_it_renders() -> None:
    docs = _docs("trainjob-resnet50.yaml")
    profile = _docs("pytorchjob-resnet50.yaml")["ConfigMap"]
    async with EmulatedCluster(
        crds=_crds(), gpu_nodes=uniform_nodes(2, 4), trainer=True, compression=1.0
    ) as kube:
        assert kube.trainer is not None
        api = KubeApi(kube.api_client())
        await _create(api, copy.deepcopy(profile))
        job = copy.deepcopy(docs["TrainJob"])
        await _create(api, job)
        name = job["metadata"]["name"]
        ref = f"trainjob/default/{name}"
        act = Actuator(api, kinds=ALL_KINDS, placement=Placement.PACK, halt_timeout_s=10)
        assert (await act.apply(Start(ref, 3, 384))).result == "started"  # a re-creation
        placed = await _placed(kube, api, TRAINJOB, name)
        assert placed == {"gpu-node-0": 3}  # the three node pods together
        obj = await api.get_job(TRAINJOB, "default", name)
        assert obj is not None
        assert [p["manager"] for p in obj["spec"]["runtimePatches"]] == [PLACEMENT_MANAGER]
        template = kube.trainer.pod_template(obj["metadata"]["uid"])
        terms = template["spec"]["affinity"]["podAffinity"][PREFERRED]
        assert terms == [pack_term({JOBSET_NAME_LABEL: name}, HOSTNAME)]
        assert template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
        # resized: the copy asks for packing again, and its pods are placed afresh
        assert (await act.apply(Rescale(ref, 3, 384, 4, 512))).result == "rescaled"
        deadline = time.monotonic() + 10
        while True:
            now = await api.get_job(TRAINJOB, "default", name)
            assert now is not None
            if now["metadata"]["uid"] != obj["metadata"]["uid"]:
                break
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        assert sorted((await _placed(kube, api, TRAINJOB, name)).values()) == [4]
        await asyncio.to_thread(api.api_client.close)


def test_the_placer_counts_spread_time_and_pending_pods() -> None:
    nodes = {f"n{i}": (2, {HOSTNAME: f"n{i}"}) for i in range(2)}
    placer = Placer(lambda: nodes)
    assert placer.place("a", [Pod("a", {"j": "a"}, 1)], 0.0) == {"n0": 1}
    # two GPUs fit one node, but the default scoring spreads them: on more nodes than needed
    assert len(placer.place("b", [Pod("b", {"j": "b"}, 1)] * 2, 0.0)) == 2
    assert placer.spread_job_time_share(10.0) == 0.5  # 10 s each, b's spread
    assert placer.place("c", [Pod("c", {}, 1)] * 2, 10.0) == {"n1": 1}  # one GPU left
    assert placer.pending("c") == 1  # the other pod fits nowhere: Pending
    ready: list[str] = []
    placer.on_ready(ready.append)
    # c holds its GPU but has not started: its job-time is not counted yet
    assert placer.spread_job_time_share(20.0) == pytest.approx(20 / 40, abs=1e-6)
    placer.release("b", 20.0)
    assert placer.placement("b") == {}
    # b's GPUs freed: c's pending pod binds (on the other node: c is spread) and c starts
    assert ready == ["c"]
    assert placer.pending("c") == 0
    assert placer.placement("c") == {"n0": 1, "n1": 1}
    # a 40 s on one node; b 20 s and c 20 s spread
    assert placer.spread_job_time_share(40.0) == pytest.approx(40 / 80, abs=1e-6)
    assert fewest_nodes(5, [4, 4, 2]) == 2
    assert fewest_nodes(9, [4, 4]) == 2  # more than the nodes hold: every node
    assert Placer(dict).place("a", [Pod("a", {}, 1)], 0.0) == {}  # no nodes: nowhere
