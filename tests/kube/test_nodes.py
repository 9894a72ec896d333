"""Nodes in the emulated API server, and ``KubeApi.list_nodes``/``watch_nodes`` over them.

Driven by the real ``kubernetes`` client over HTTP: cluster scope, a node created with its
status, the ``status`` subresource, canonical quantities, paged and selected lists,
watches (a label change that leaves the selector is a ``DELETED``, a compacted version a
410), and the 422 a real API server answers for a node it would not store.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from bellows.emulator import ApiError, EmulatedCluster, Store, gpu_node, uniform_nodes
from bellows.emulator.resources import builtin_resources
from bellows.kube import ExpiredError, KubeApi

GPU = "nvidia.com/gpu"


async def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(fn, *args, **kwargs)


async def raw(cluster: EmulatedCluster, method: str, path: str, body: Any, ctype: str) -> Any:
    client = k8s.ApiClient(cluster.configuration())
    try:
        return await call(
            client.call_api,
            path,
            method,
            header_params={"Content-Type": ctype},
            body=body,
            response_type="object",
            _return_http_data_only=True,
        )
    finally:
        client.close()


def test_nodes_are_cluster_scoped_created_with_their_status_and_canonical(on_cluster):
    async def scenario(cluster, api):
        core = k8s.CoreV1Api(api.api_client)
        body = gpu_node("big", 1000)
        body["status"]["allocatable"]["memory"] = "1024Mi"
        made = await call(core.create_node, body)
        assert made.metadata.uid
        assert made.metadata.resource_version
        assert made.metadata.namespace is None
        # kept on create (the kubelet registers so), written back canonical as the server does
        assert made.status.allocatable[GPU] == "1k"
        assert made.status.allocatable["memory"] == "1Gi"
        assert made.status.capacity[GPU] == "1k"
        got = await call(core.read_node, "big")
        assert got.status.conditions[0].type == "Ready"
        with pytest.raises(ApiException) as err:
            await call(core.create_node, gpu_node("big", 4))
        assert err.value.status == 409
        # no namespace holds a node
        with pytest.raises(ApiException) as err:
            await raw(cluster, "GET", "/api/v1/namespaces/default/nodes", None, "application/json")
        assert err.value.status == 404
        await call(core.delete_node, "big")
        with pytest.raises(ApiException) as err:
            await call(core.read_node, "big")
        assert err.value.status == 404

    on_cluster(scenario, operator=False)


def test_the_main_resource_keeps_the_status_and_the_status_endpoint_keeps_the_spec(on_cluster):
    async def scenario(cluster, api):
        core = k8s.CoreV1Api(api.api_client)
        cluster.add_node("n1", 4)
        # the Python client sends a list body as a JSON patch
        ops = [
            {"op": "add", "path": "/spec/unschedulable", "value": True},
            {"op": "replace", "path": "/status/allocatable/nvidia.com~1gpu", "value": "8"},
        ]
        cordoned = await call(core.patch_node, "n1", ops)
        assert cordoned.spec.unschedulable is True
        assert cordoned.status.allocatable[GPU] == "4"  # status ignored on the main resource
        merge = {"spec": {"unschedulable": False}, "status": {"allocatable": {GPU: 2}}}
        path = "/api/v1/nodes/n1/status"
        after = await raw(cluster, "PATCH", path, merge, "application/merge-patch+json")
        assert after["status"]["allocatable"][GPU] == "2"  # a bare number, stored canonical
        assert after["spec"]["unschedulable"] is True  # spec ignored on the status endpoint
        # conditions and addresses merge by key in a strategic merge: not emulated, refused
        with pytest.raises(ApiException) as err:
            await raw(cluster, "PATCH", "/api/v1/nodes/n1", {"spec": {}}, STRATEGIC)
        assert err.value.status == 415

    on_cluster(scenario, operator=False)


STRATEGIC = "application/strategic-merge-patch+json"


def _node(**changes: Any) -> dict[str, Any]:
    body = gpu_node("bad", 4)
    for path, value in changes.items():
        node: Any = body
        *parents, last = path.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return body


INVALID = {
    "fractional GPUs": (_node(status__allocatable={GPU: "1500m"}), "status.allocatable.nvidia"),
    "negative GPUs": (_node(status__allocatable={GPU: "-1"}), "status.allocatable.nvidia"),
    "no quantity": (_node(status__allocatable={GPU: "four"}), "status.allocatable.nvidia"),
    "a list for a quantity": (_node(status__capacity={GPU: [4]}), "status.capacity.nvidia"),
    "fractional pods": (_node(status__allocatable={"pods": "0.5"}), "status.allocatable.pods"),
    "unknown resource": (_node(status__allocatable={"gpu": "4"}), "status.allocatable.gpu"),
    "unknown spec field": (_node(spec__unschedulabel=True), "spec.unschedulabel"),
    "unknown top field": (_node(data={"x": "y"}), "data"),
    "cordon not a bool": (_node(spec__unschedulable="yes"), "spec.unschedulable"),
    "status not an object": (_node(status=[1]), "status"),
    "taint effect": (
        _node(spec__taints=[{"key": "gpu", "effect": "Sometimes"}]),
        "spec.taints[0].effect",
    ),
    "taint twice": (
        _node(spec__taints=[{"key": "g", "effect": "NoSchedule"}] * 2),
        "spec.taints[1]",
    ),
    "condition status": (
        _node(status__conditions=[{"type": "Ready", "status": "Yes"}]),
        "status.conditions[0].status",
    ),
    "bad name": (dict(gpu_node("x", 1), metadata={"name": "Node_A"}), "metadata.name"),
}


@pytest.mark.parametrize("case", list(INVALID), ids=list(INVALID))
def test_a_node_the_api_server_would_not_store_is_refused_naming_the_field(on_cluster, case):
    body, field = INVALID[case]

    async def scenario(cluster, api):
        core = k8s.CoreV1Api(api.api_client)
        with pytest.raises(ApiException) as err:
            await raw(cluster, "POST", "/api/v1/nodes", body, "application/json")
        assert err.value.status == 422, err.value.body
        assert field in err.value.body
        assert (await call(core.list_node)).items == []
        # a patch that makes a stored node so is refused too, and changes nothing
        cluster.add_node("good", 4)
        before = (await call(core.read_node, "good")).metadata.resource_version
        if field.startswith("status"):
            with pytest.raises(ApiException) as err:
                await raw(
                    cluster, "PUT", "/api/v1/nodes/good/status",
                    dict(body, metadata={"name": "good"}), "application/json",
                )  # fmt: skip
            assert err.value.status == 422
        after = (await call(core.read_node, "good")).metadata.resource_version
        assert before == after

    on_cluster(scenario, operator=False)


def test_lists_page_and_select_and_watches_follow_nodes(on_cluster):
    async def scenario(cluster, api):
        for name, gpus in uniform_nodes(5, 4).items():
            cluster.add_node(name, gpus, labels={"pool": "a" if name[-1] in "024" else "b"})
        pages = [p async for p in api.list_nodes(None, limit=2)]
        assert [len(items) for items, _ in pages] == [2, 2, 1]
        assert len({version for _, version in pages}) == 1  # one snapshot, in pieces
        names = [n["metadata"]["name"] for items, _ in pages for n in items]
        assert names == sorted(uniform_nodes(5, 4))
        selected = [n async for items, _ in api.list_nodes("pool=b") for n in items]
        assert [n["metadata"]["name"] for n in selected] == ["gpu-node-1", "gpu-node-3"]
        assert all(n["status"]["allocatable"][GPU] == "4" for n in selected)  # plain dicts
        version = pages[-1][1]
        seen: list[tuple[str, str]] = []

        async def follow() -> None:
            async for event, node in api.watch_nodes("pool=b", version, timeout_s=30):
                seen.append((event, node["metadata"]["name"]))
                if len(seen) == 4:
                    return

        watch = asyncio.create_task(follow())
        cluster.add_node("gpu-node-9", 8, labels={"pool": "b"})
        cluster.set_node_ready("gpu-node-1", False)
        cluster.add_node("gpu-node-8", 8, labels={"pool": "a"})  # not selected: never seen
        relabel = [{"op": "replace", "path": "/metadata/labels/pool", "value": "a"}]
        core = k8s.CoreV1Api(api.api_client)
        await call(core.patch_node, "gpu-node-3", relabel)  # leaves the selector
        cluster.remove_node("gpu-node-9")
        await asyncio.wait_for(watch, 10)
        assert seen == [
            ("ADDED", "gpu-node-9"),
            ("MODIFIED", "gpu-node-1"),
            ("DELETED", "gpu-node-3"),
            ("DELETED", "gpu-node-9"),
        ]
        cluster.store.compact()
        with pytest.raises(ExpiredError):
            async for _ in api.watch_nodes(None, version, timeout_s=5):
                pass

    on_cluster(scenario, operator=False)


def test_the_cluster_counts_the_gpus_of_ready_schedulable_nodes(crds):
    async def main() -> None:
        async with EmulatedCluster(
            crds=crds, operator=False, gpu_nodes={"a": 4, "b": 4, "c": 8}
        ) as cluster:
            assert cluster.gpus_available() == 16
            cluster.cordon("a")
            assert cluster.gpus_available() == 12
            cluster.set_node_ready("c", False)
            assert cluster.gpus_available() == 4
            cluster.set_node_ready("c", True)
            cluster.cordon("a", False)
            cluster.remove_node("b")
            assert cluster.gpus_available() == 12
            cluster.add_node("d", 2, ready=False)
            assert cluster.gpus_available() == 12
            api = KubeApi(cluster.api_client())
            listed = [n async for items, _ in api.list_nodes() for n in items]
            assert [n["metadata"]["name"] for n in listed] == ["a", "c", "d"]
            api.api_client.close()

    asyncio.run(main())


# ----- whatever a node body holds, the store answers 4xx or stores a valid node -----------

_LEAF = st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats() | st.text(max_size=8)
_VALUES = st.recursive(
    _LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)
_GOOD_QUANTITY = st.sampled_from(["4", "1k", "0.5", "1Ki", "2e3", "0", 8])
_QUANTITY = st.one_of(  # mostly valid, so that whole nodes get stored too
    _GOOD_QUANTITY, _GOOD_QUANTITY, _GOOD_QUANTITY,
    st.sampled_from(["-1", "x", "", "1e999", "8\n", "1.5"]),
    _LEAF,
)  # fmt: skip
_RESOURCES = st.dictionaries(
    st.sampled_from([GPU, GPU, "pods", "cpu", "memory", "gpu", "a/b/c", "requests.x/y"]),
    _QUANTITY,
    max_size=2,
)
_CONDITION = st.fixed_dictionaries(
    {"type": st.sampled_from(["Ready", "", "DiskPressure"])},
    optional={"status": st.sampled_from(["True", "False", "Unknown", "Yes"])},
)
_SPEC = st.fixed_dictionaries(
    {},
    optional={
        "unschedulable": st.booleans() | _LEAF,
        "taints": st.lists(
            st.fixed_dictionaries(
                {"key": st.sampled_from(["gpu", "a/b", "-x"]), "effect": st.text(max_size=12)}
            ),
            max_size=2,
        )
        | _VALUES,
        "other": _VALUES,
    },
)
_STATUS = st.fixed_dictionaries(
    {},
    optional={
        "capacity": _RESOURCES | _VALUES,
        "allocatable": _RESOURCES,
        "conditions": st.lists(_CONDITION, max_size=2) | _VALUES,
        "nodeInfo": st.dictionaries(st.text(max_size=4), _LEAF, max_size=2),
        "phase": _LEAF,
    },
)
_FIELDS = st.one_of(
    # near a real node: one field at a time goes wrong
    st.fixed_dictionaries({"status": _STATUS}, optional={"spec": _SPEC}),
    st.fixed_dictionaries(
        {}, optional={"spec": _SPEC | _VALUES, "status": _STATUS | _VALUES, "extra": _VALUES}
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_FIELDS)
def test_any_node_body_is_stored_valid_or_refused_with_4xx(fields: dict[str, Any]) -> None:
    store = Store(builtin_resources())
    nodes = store.resources["v1/nodes"]
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, **copy.deepcopy(fields)}
    try:
        made = store.create(nodes, None, body)
    except ApiError as err:
        code = err.code
    else:
        code = 201
    assert code in (201, 400, 409, 422)
    if code != 201:
        return
    # what was stored passes the check again (canonical quantities included)
    assert nodes.problems(made) == []
    store.update_with(nodes, None, "n", lambda obj: obj, subresource="status")
