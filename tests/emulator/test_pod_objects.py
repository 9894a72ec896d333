"""The emulated operators' pods are objects a client can list and watch: named and owned as
the operators make them, bound to nodes or Pending, deleted when the job stops; a pod's
required node affinity and node selector decide where it may go, and a job trains only
once all its pods are bound."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from tests.conftest import shared_data_dir

from bellows.autoscaler.decisions import Preempt, Start
from bellows.emulator import EmulatedCluster
from bellows.emulator.affinity import node_requirement
from bellows.emulator.nodes import uniform_nodes
from bellows.emulator.resources import builtin_resources
from bellows.kube import Actuator, KubeApi
from bellows.kube.placement import HOSTNAME, Placement

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"
JOB_NAME = "training.kubeflow.org/job-name"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _docs() -> dict[str, dict[str, Any]]:
    text = (EXAMPLES / "pytorchjob-resnet50.yaml").read_text()
    return {d["kind"]: d for d in yaml.safe_load_all(text)}


def _pinned(job: dict[str, Any], name: str, node: str) -> dict[str, Any]:
    """``job`` renamed ``name``, its pods required on ``node``."""
    job = copy.deepcopy(job)
    job["metadata"]["name"] = name
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    expression = {"key": HOSTNAME, "operator": "In", "values": [node]}
    template["affinity"] = {
        "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}}
    }
    return job


async def _create(api: KubeApi, obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "ConfigMap":
        core = k8s.CoreV1Api(api.api_client)
        await asyncio.to_thread(core.create_namespaced_config_map, "default", obj)
        return obj
    custom = k8s.CustomObjectsApi(api.api_client)
    created: dict[str, Any] = await asyncio.to_thread(
        custom.create_namespaced_custom_object, "kubeflow.org", "v1", "default", "pytorchjobs", obj
    )
    return created


async def _pods(api: KubeApi, job: str) -> list[Any]:
    core = k8s.CoreV1Api(api.api_client)
    listed = await asyncio.to_thread(
        core.list_namespaced_pod, "default", label_selector=f"{JOB_NAME}={job}"
    )
    return sorted(listed.items, key=lambda p: p.metadata.name)


async def _until(what: str, check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.02)


async def test_a_started_jobs_pods_are_objects_bound_to_nodes_and_gone_when_it_stops() -> None:
    docs = _docs()
    async with EmulatedCluster(
        crds=sorted((shared_data_dir() / "crds").glob("*.yaml")),
        gpu_nodes=uniform_nodes(2, 4),
        compression=1.0,
    ) as kube:
        api = KubeApi(kube.api_client())
        await _create(api, copy.deepcopy(docs["ConfigMap"]))
        job = await _create(api, copy.deepcopy(docs["PyTorchJob"]))
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        ref = f"pytorchjob/default/{name}"
        act = Actuator(api, placement=Placement.PACK, halt_timeout_s=10)
        assert (await act.apply(Start(ref, 3, 192))).result == "started"

        async def running() -> list[Any]:
            pods = await _pods(api, name)
            return pods if len(pods) == 3 and all(p.spec.node_name for p in pods) else []

        pods = await _until("three bound pods", running)
        assert [p.metadata.name for p in pods] == [f"{name}-worker-{i}" for i in range(3)]
        assert {p.spec.node_name for p in pods} == {"gpu-node-0"}  # packed
        for pod in pods:
            assert pod.status.phase == "Running"
            (owner,) = pod.metadata.owner_references
            assert (owner.kind, owner.name, owner.uid, owner.controller) == (
                "PyTorchJob",
                name,
                uid,
                True,
            )
            assert pod.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
        # a node's pods, as `kubectl describe node` asks for them
        core = k8s.CoreV1Api(api.api_client)
        on_node = await asyncio.to_thread(
            core.list_pod_for_all_namespaces, field_selector="spec.nodeName=gpu-node-0"
        )
        assert len(on_node.items) == 3
        assert (await act.apply(Preempt(ref, "capacity"))).result == "preempted"

        async def gone() -> bool:
            return not await _pods(api, name)

        await _until("the pods deleted", gone)
        assert kube.placer.placement(uid) == {}
        await asyncio.to_thread(api.api_client.close)


async def test_a_pod_required_on_a_full_node_waits_pending_and_its_job_does_not_train() -> None:
    docs = _docs()
    async with EmulatedCluster(
        crds=sorted((shared_data_dir() / "crds").glob("*.yaml")),
        gpu_nodes=uniform_nodes(2, 4),
        compression=60.0,
    ) as kube:
        assert kube.operator is not None
        api = KubeApi(kube.api_client())
        await _create(api, copy.deepcopy(docs["ConfigMap"]))
        first = await _create(api, _pinned(docs["PyTorchJob"], "first", "gpu-node-0"))
        second = await _create(api, _pinned(docs["PyTorchJob"], "second", "gpu-node-0"))
        act = Actuator(api, placement=Placement.NONE, halt_timeout_s=10)
        assert (await act.apply(Start("pytorchjob/default/first", 4, 256))).result == "started"
        assert (await act.apply(Start("pytorchjob/default/second", 2, 128))).result == "started"

        async def pending() -> list[Any]:
            pods = await _pods(api, "second")
            return pods if len(pods) == 2 and pods[0].status.phase == "Pending" else []

        pods = await _until("second's pods Pending", pending)
        for pod in pods:
            assert pod.spec.node_name is None  # gpu-node-1 is free, but not allowed
            (scheduled,) = pod.status.conditions
            assert (scheduled.type, scheduled.status, scheduled.reason) == (
                "PodScheduled",
                "False",
                "Unschedulable",
            )
        uid = second["metadata"]["uid"]
        assert kube.placer.pending(uid) == 2
        # time passes (12 emulated seconds at least, more on a loaded machine): a job whose
        # pods ran would have progressed; a held one stays where it was, whatever the delay
        await asyncio.sleep(0.2)
        progress = kube.operator.progress(uid)
        assert progress is not None
        assert progress.samples == 0
        # the first job stops: the pending pods bind where they must, and the job trains
        ref = "pytorchjob/default/first"
        assert (await act.apply(Preempt(ref, "capacity"))).result == "preempted"

        async def bound() -> bool:
            pods = await _pods(api, "second")
            return all(p.spec.node_name == "gpu-node-0" for p in pods) and len(pods) == 2

        await _until("second's pods bound on gpu-node-0", bound)

        async def training() -> bool:
            now = kube.operator.progress(uid) if kube.operator else None
            return now is not None and now.samples > 0

        await _until("second trains", training)
        assert kube.placer.placement(first["metadata"]["uid"]) == {}
        await asyncio.to_thread(api.api_client.close)


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        ({}, {"a", "b", "c"}),
        ({"nodeSelector": {"gpu": "t4"}}, {"a", "b"}),
        ({"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": []}}}}, set()),
        (
            {
                "nodeSelector": {"gpu": "t4"},
                "affinity": {
                    "nodeAffinity": {
                        REQUIRED: {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "rack", "operator": "Gt", "values": ["1"]}
                                    ]
                                },
                                {
                                    "matchFields": [
                                        {"key": "metadata.name", "operator": "In", "values": ["a"]}
                                    ]
                                },
                            ]
                        }
                    }
                },
            },
            {"a", "b"},
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        REQUIRED: {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "gpu", "operator": "NotIn", "values": ["t4"]},
                                        {"key": "rack", "operator": "Exists"},
                                    ]
                                },
                                {},
                            ]
                        }
                    }
                }
            },
            {"c"},
        ),
    ],
)
def test_node_selector_and_required_affinity_filter_nodes(
    spec: dict[str, Any], allowed: set[str]
) -> None:
    nodes = {
        "a": {"gpu": "t4", "rack": "1"},
        "b": {"gpu": "t4", "rack": "2"},
        "c": {"gpu": "a100", "rack": "1"},
    }
    requirement = node_requirement(spec)
    assert {n for n, labels in nodes.items() if requirement.allows(n, labels)} == allowed


def test_a_malformed_requirement_names_its_field() -> None:
    bad = {
        "nodeAffinity": {
            REQUIRED: {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "x", "operator": "Near"}]}]
            }
        }
    }
    with pytest.raises(
        ValueError, match=r"nodeSelectorTerms\[0\]\.matchExpressions\[0\]\.operator"
    ):
        node_requirement({"affinity": bad})


def test_the_server_refuses_a_node_field_requirement_with_two_values() -> None:
    """As kube-apiserver's ValidateNodeFieldSelectorRequirement: one value, In or NotIn,
    on metadata.name (a pin must be one term per node)."""
    (pods,) = [r for r in builtin_resources() if r.plural == "pods"]
    field = {"key": "metadata.name", "operator": "In", "values": ["a", "b"]}
    pod = {
        "spec": {
            "containers": [{"name": "c"}],
            "affinity": {
                "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchFields": [field]}]}}
            },
        }
    }
    (problem,) = pods.problems(pod)
    assert problem.field.endswith("matchFields[0].values")
    field["values"] = ["a"]
    assert pods.problems(pod) == []
    field["key"] = "metadata.labels"
    assert [p.field.rsplit(".", 1)[-1] for p in pods.problems(pod)] == ["key"]


async def test_a_node_that_comes_binds_the_pending_pods() -> None:
    docs = _docs()
    async with EmulatedCluster(
        crds=sorted((shared_data_dir() / "crds").glob("*.yaml")),
        gpu_nodes={"gpu-node-0": 2},
        compression=60.0,
    ) as kube:
        assert kube.operator is not None
        api = KubeApi(kube.api_client())
        await _create(api, copy.deepcopy(docs["ConfigMap"]))
        job = await _create(api, copy.deepcopy(docs["PyTorchJob"]))
        uid = job["metadata"]["uid"]
        act = Actuator(api, placement=Placement.NONE, halt_timeout_s=10)
        ref = f"pytorchjob/default/{job['metadata']['name']}"
        assert (await act.apply(Start(ref, 4, 256))).result == "started"

        async def waiting() -> bool:
            return kube.placer.pending(uid) == 2

        await _until("two pods Pending", waiting)
        kube.add_node("gpu-node-1", 4)  # the scheduler tries the pending pods again

        async def trains() -> bool:
            progress = kube.operator.progress(uid) if kube.operator else None
            return kube.placer.pending(uid) == 0 and progress is not None and progress.samples > 0

        await _until("the pods bound and the job training", trains)
        assert kube.placer.placement(uid) == {"gpu-node-0": 2, "gpu-node-1": 2}
        await asyncio.to_thread(api.api_client.close)
