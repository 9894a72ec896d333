"""Kueue's objects in the emulated API server (no Kueue controller): ResourceFlavor,
ClusterQueue, LocalQueue and Workload, served at their storage version and validated against
the real v0.19.2 CRDs, through the real ``kubernetes`` client over HTTP."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from bellows.emulator import EmulatedCluster

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
NS = "default"

FLAVOR = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "ResourceFlavor",
    "metadata": {"name": "a100"},
    "spec": {"nodeLabels": {"gpu": "a100"}},
}
CLUSTER_QUEUE = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "ClusterQueue",
    "metadata": {"name": "gpus"},
    "spec": {
        "namespaceSelector": {},
        "queueingStrategy": "StrictFIFO",
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [
                    {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}
                ],
            }
        ],
    },
}
LOCAL_QUEUE = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "LocalQueue",
    "metadata": {"name": "team-a", "namespace": NS},
    "spec": {"clusterQueue": "gpus"},
}
WORKLOAD = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "Workload",
    "metadata": {"name": "pytorchjob-resnet50", "namespace": NS},
    "spec": {
        "queueName": "team-a",
        "podSets": [
            {
                "name": "worker",
                "count": 2,
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "pytorch",
                                "image": "example/train:1",
                                "resources": {"limits": {"nvidia.com/gpu": 1}},
                            }
                        ]
                    }
                },
            }
        ],
    },
}


def _kueue_crds(shared_data: Path) -> list[Path]:
    files = sorted((shared_data / "crds" / "kueue-v0.19.2").glob("*.yaml"))
    assert files, "no Kueue CRDs in shared/data/crds/kueue-v0.19.2"
    return files


async def _create(custom: k8s.CustomObjectsApi, obj: dict[str, Any]) -> dict[str, Any]:
    plural = obj["kind"].lower() + "s"
    namespace = obj["metadata"].get("namespace")
    if namespace is None:
        return await asyncio.to_thread(
            custom.create_cluster_custom_object, GROUP, VERSION, plural, obj
        )
    return await asyncio.to_thread(
        custom.create_namespaced_custom_object, GROUP, VERSION, namespace, plural, obj
    )


def test_kueue_objects_are_served_and_validated(crds: list[Path], shared_data: Path) -> None:
    async def main() -> None:
        async with EmulatedCluster(crds=[*crds, *_kueue_crds(shared_data)]) as cluster:
            custom = k8s.CustomObjectsApi(cluster.api_client())
            for obj in (FLAVOR, CLUSTER_QUEUE, LOCAL_QUEUE, WORKLOAD):
                made = await _create(custom, copy.deepcopy(obj))
                assert (
                    made["spec"].items()
                    >= {k: v for k, v in obj["spec"].items() if k != "podSets"}.items()
                )
                assert made["metadata"]["resourceVersion"]
            workload = await asyncio.to_thread(
                custom.get_namespaced_custom_object,
                GROUP, VERSION, NS, "workloads", "pytorchjob-resnet50",
            )  # fmt: skip
            assert workload["spec"]["active"] is True  # the CRD's default, applied
            assert workload["spec"]["podSets"][0]["count"] == 2
            # Evicting is a merge patch of spec.active, as Bellows will make it.
            patched = await asyncio.to_thread(
                custom.patch_namespaced_custom_object,
                GROUP, VERSION, NS, "workloads", "pytorchjob-resnet50",
                {"spec": {"active": False}},
            )  # fmt: skip
            assert patched["spec"]["active"] is False
            queues = await asyncio.to_thread(
                custom.list_cluster_custom_object, GROUP, VERSION, "clusterqueues"
            )
            assert [q["metadata"]["name"] for q in queues["items"]] == ["gpus"]

            bad: list[tuple[dict[str, Any], str]] = []
            strategy = copy.deepcopy(CLUSTER_QUEUE)
            strategy["metadata"]["name"] = "random"
            strategy["spec"]["queueingStrategy"] = "Random"
            bad.append((strategy, "spec.queueingStrategy"))
            quota = copy.deepcopy(CLUSTER_QUEUE)
            quota["metadata"]["name"] = "no-quota"
            del quota["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
            bad.append((quota, "nominalQuota"))
            count = copy.deepcopy(WORKLOAD)
            count["metadata"]["name"] = "negative"
            count["spec"]["podSets"][0]["count"] = -1
            bad.append((count, "spec.podSets[0].count"))
            empty = copy.deepcopy(WORKLOAD)
            empty["metadata"]["name"] = "empty"
            empty["spec"]["podSets"] = []
            bad.append((empty, "spec.podSets"))
            for obj, field in bad:
                with pytest.raises(ApiException) as err:
                    await _create(custom, obj)
                assert err.value.status == 422, err.value.body
                assert field in err.value.body
            # One storage version, no conversion: v1beta1 is not served apart.
            with pytest.raises(ApiException) as err:
                await asyncio.to_thread(
                    custom.list_cluster_custom_object, GROUP, "v1beta1", "clusterqueues"
                )
            assert err.value.status == 404
            await asyncio.to_thread(custom.api_client.close)

    asyncio.run(asyncio.wait_for(main(), 20))
