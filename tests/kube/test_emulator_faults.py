"""The emulator's fault hook: chosen requests fail with the real Status bodies, a set number of
times, before or after their write lands; the rules themselves are validated strictly."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from bellows.emulator import EmulatedCluster, FaultRule
from bellows.jobs import SpecError

CM_PATH = r"/api/v1/namespaces/default/configmaps"


def _configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}}


def test_failures_are_injected_count_times_with_real_status_bodies(on_cluster: Any) -> None:
    async def scenario(cluster: EmulatedCluster, _: Any) -> None:
        core = k8s.CoreV1Api(cluster.api_client())
        cluster.faults.inject("POST", CM_PATH, 500, count=2)
        for _attempt in range(2):
            with pytest.raises(ApiException) as err:
                await asyncio.to_thread(
                    core.create_namespaced_config_map, "default", _configmap("a")
                )
            assert err.value.status == 500
            assert "InternalError" in err.value.body
        # spent: the third attempt goes through, and nothing was written before it
        assert cluster.faults.pending == 0
        assert [w for w in cluster.store.writes if w[1] == "v1/configmaps"] == []
        await asyncio.to_thread(core.create_namespaced_config_map, "default", _configmap("a"))
        assert [i.status for i in cluster.faults.injected] == [500, 500]

    on_cluster(scenario, operator=False)


def test_after_commit_fails_the_answer_but_keeps_the_write(on_cluster: Any) -> None:
    async def scenario(cluster: EmulatedCluster, _: Any) -> None:
        core = k8s.CoreV1Api(cluster.api_client())
        await asyncio.to_thread(core.create_namespaced_config_map, "default", _configmap("b"))
        cluster.faults.inject("PATCH", CM_PATH + "/b$", 409, after_commit=True)
        with pytest.raises(ApiException) as err:
            await asyncio.to_thread(
                core.patch_namespaced_config_map, "b", "default", {"data": {"a": "2"}}
            )
        assert err.value.status == 409
        assert "Conflict" in err.value.body
        read = await asyncio.to_thread(core.read_namespaced_config_map, "b", "default")
        assert read.data == {"a": "2"}  # the change landed although the client saw an error

    on_cluster(scenario, operator=False)


def test_rules_match_method_and_path_only(on_cluster: Any) -> None:
    async def scenario(cluster: EmulatedCluster, _: Any) -> None:
        core = k8s.CoreV1Api(cluster.api_client())
        cluster.faults.inject("DELETE", CM_PATH, 503)
        cluster.faults.inject("*", r"/apis/kubeflow\.org/", 504, count=3)
        # a POST to configmaps and a GET of namespaces match neither rule
        await asyncio.to_thread(core.create_namespaced_config_map, "default", _configmap("c"))
        await asyncio.to_thread(core.read_namespace, "default")
        assert cluster.faults.pending == 4
        with pytest.raises(ApiException) as err:
            await asyncio.to_thread(core.delete_namespaced_config_map, "c", "default")
        assert err.value.status == 503
        cluster.faults.clear()
        assert cluster.faults.pending == 0
        await asyncio.to_thread(core.delete_namespaced_config_map, "c", "default")

    on_cluster(scenario, operator=False)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"method": "FETCH", "path": "/", "status": 500}, "method"),
        ({"method": "GET", "path": "(", "status": 500}, "path"),
        ({"method": "GET", "path": "/", "status": 404}, "status"),
        ({"method": "GET", "path": "/", "status": 500, "count": 0}, "count"),
        ({"method": "GET", "path": "/", "status": 500, "after_commit": True}, "after_commit"),
    ],
)
def test_rules_are_validated(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        FaultRule(**kwargs)
    assert err.value.field == field
