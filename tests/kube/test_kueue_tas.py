"""The emulated Kueue's topology-aware scheduling (TAS): a flavor with a topology admits a
podSet only where its nodes' free GPUs hold it, as Kueue v0.19.2 picks the domains
(required, preferred, unconstrained, and the implicit default), writes the assignment in
the Workload's ``v1beta2`` shape, and the job's pods get the node selector of their domain
and bind there."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from bellows.emulator import EmulatedCluster
from bellows.emulator.schemas import SchemaChecker
from bellows.emulator.tas import TAS_LABEL
from bellows.emulator.topology import (
    HOSTNAME,
    PREFERRED,
    REQUIRED,
    UNCONSTRAINED,
    Request,
    decode,
    encode,
    find_assignment,
    topology_levels,
    topology_request,
)
from bellows.inputs import SpecError
from bellows.kube import KubeApi

from .test_emulated_kueue import (
    NS,
    admitted,
    create,
    pending_because,
    torch_job,
    until,
    workload_of,
)

REPLICA_INDEX = "training.kubeflow.org/replica-index"
GPU_PRESENT = {"nvidia.com/gpu.present": "true"}  # what the TAS flavor's nodes carry
NODES = {"gpu-node-0": 4, "gpu-node-1": 4}
Host = [HOSTNAME]


def _leaves(**pods: int) -> dict[tuple[str, ...], int]:
    return {(name,): count for name, count in pods.items()}


# ----- the algorithm (pure) -------------------------------------------------------------------


def test_best_fit_takes_the_tightest_domain_and_fills_the_fewest() -> None:
    leaves = _leaves(a=3, b=3, c=2, d=1)
    assert find_assignment(leaves, Host, Request("preferred", HOSTNAME), 2) == [(("c",), 2)]
    # KEP-2724's example: 7 pods on 3, 3, 2, 1: the two largest, then the one that fits 1
    seven = find_assignment(leaves, Host, Request("preferred", HOSTNAME), 7)
    assert seven == [(("a",), 3), (("b",), 3), (("d",), 1)]


def test_least_free_capacity_fills_the_gaps_first_for_unconstrained() -> None:
    leaves = _leaves(a=3, b=3, c=2, d=1)
    for request in (Request("unconstrained"), Request("unconstrained", implied=True)):
        got = find_assignment(leaves, Host, request, 7)
        assert got == [(("a",), 1), (("b",), 3), (("c",), 2), (("d",), 1)]  # 1, 2, 3 then 1
    assert find_assignment(leaves, Host, Request("unconstrained"), 1) == [(("d",), 1)]


def test_required_fails_where_no_domain_holds_it_preferred_goes_up_a_level() -> None:
    leaves = _leaves(a=3, b=3)
    assert find_assignment(leaves, Host, Request("required", HOSTNAME), 4) == (
        "allows to fit only 3 out of 4 pod(s)"
    )
    assert find_assignment(_leaves(a=0), Host, Request("required", HOSTNAME), 1) == (
        "doesn't allow to fit any of 1 pod(s)"
    )
    assert find_assignment(leaves, Host, Request("required", "rack"), 1) == (
        "no requested topology level: rack"
    )
    racks = ["rack", HOSTNAME]
    tree = {("r1", "a"): 2, ("r1", "b"): 2, ("r2", "c"): 3}
    # required on a rack: r1 holds 4 (two nodes), r2 only 3; written at the hostname level
    got = find_assignment(tree, racks, Request("required", "rack"), 4)
    assert got == [(("a",), 2), (("b",), 2)]
    # preferred on a host: none holds 4, nor does one rack hold 6: spread over the racks
    got = find_assignment(tree, racks, Request("preferred", HOSTNAME), 6)
    assert sum(count for _, count in got) == 6


def test_the_assignment_round_trips_through_the_v1beta2_shape() -> None:
    domains = [(("gpu-node-0",), 3), (("gpu-node-1",), 1)]
    encoded = encode(Host, domains)
    assert encoded == {
        "levels": Host,
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [{"individual": {"prefix": "gpu-node-", "roots": ["0", "1"]}}],
                "podCounts": {"individual": [3, 1]},
            }
        ],
    }
    assert decode(encoded) == (Host, domains)
    one = encode(Host, [(("gpu-node-2",), 4)])
    assert one["slices"][0]["valuesPerLevel"] == [{"universal": "gpu-node-2"}]
    assert one["slices"][0]["podCounts"] == {"universal": 4}
    with pytest.raises(SpecError, match="roots"):
        decode({"levels": Host, "slices": [{"domainCount": 2, "valuesPerLevel": [
            {"individual": {"roots": ["a"]}}], "podCounts": {"universal": 1}}]})  # fmt: skip


def test_requests_come_from_one_annotation_and_bad_ones_are_named() -> None:
    index = "training.kubeflow.org/replica-index"
    template = {"metadata": {"annotations": {REQUIRED: HOSTNAME}}}
    assert topology_request(template, index) == {"podIndexLabel": index, "required": HOSTNAME}
    loose = {"metadata": {"annotations": {UNCONSTRAINED: "true"}}}
    assert topology_request(loose, index) == {"podIndexLabel": index, "unconstrained": True}
    assert topology_request({}, index) is None
    both = {"metadata": {"annotations": {REQUIRED: HOSTNAME, PREFERRED: HOSTNAME}}}
    with pytest.raises(SpecError, match="at most one"):
        topology_request(both, index)
    with pytest.raises(SpecError, match=r"true.*false"):
        topology_request({"metadata": {"annotations": {UNCONSTRAINED: "yes"}}}, index)
    with pytest.raises(ValueError, match="lowest level"):
        topology_levels("t", [HOSTNAME, "rack"])
    with pytest.raises(ValueError, match="distinct"):
        topology_levels("t", [])


# ----- against the emulated cluster -------------------------------------------------------------


def _tas_cluster(cluster: EmulatedCluster, gpus: int = 8) -> None:
    """The admin's TAS setup: a hostname topology, a flavor on it, a queue of ``gpus``."""
    cluster.add_topology("hosts", [HOSTNAME])
    cluster.add_resource_flavor("tas", node_labels=GPU_PRESENT, topology="hosts")
    cluster.add_cluster_queue("gpus", {"tas": gpus})
    cluster.add_local_queue("team", "gpus")


def _annotated(job: dict[str, Any], key: str, value: str) -> dict[str, Any]:
    job = copy.deepcopy(job)
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {})[key] = value
    return job


async def _pods(api: KubeApi, job: str) -> list[dict[str, Any]]:
    core = k8s.CoreV1Api(api.api_client)
    listed = await asyncio.to_thread(
        core.list_namespaced_pod, NS, label_selector=f"training.kubeflow.org/job-name={job}"
    )
    return [api.api_client.sanitize_for_serialization(p) for p in listed.items]


async def _bound(api: KubeApi, job: str, count: int) -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]] | None:
        pods = await _pods(api, job)
        placed = [p for p in pods if p["spec"].get("nodeName")]
        return pods if len(placed) == count else None

    found: list[dict[str, Any]] = await until(f"{count} pods of {job} bound", check)
    return found


def _assignment(wl: dict[str, Any]) -> dict[str, Any]:
    entry = wl["status"]["admission"]["podSetAssignments"][0]
    assignment: dict[str, Any] = entry["topologyAssignment"]
    return assignment


def test_a_required_podset_is_admitted_on_one_node_and_its_pods_bind_there(
    on_kueue: Callable[..., None], examples: dict[str, Any]
) -> None:
    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        _tas_cluster(cluster, gpus=12)
        one = await create(api, _annotated(torch_job(examples, "one", 1), REQUIRED, HOSTNAME))
        wl = await workload_of(api, one, admitted)
        request = wl["spec"]["podSets"][0]["topologyRequest"]
        assert request == {
            "required": HOSTNAME,
            "podIndexLabel": "training.kubeflow.org/replica-index",
        }
        # the one-GPU job went to the tightest node (both empty: the first by name)
        assert decode(_assignment(wl)) == (Host, [(("gpu-node-0",), 1)])
        (pod,) = await _bound(api, "one", 1)
        assert pod["spec"]["nodeSelector"] == {HOSTNAME: "gpu-node-0"}
        assert pod["metadata"]["labels"][TAS_LABEL] == "true"
        assert pod["spec"]["nodeName"] == "gpu-node-0"
        assert not pod["spec"].get("schedulingGates")  # as the ungater leaves it
        # four more, required on one node: only gpu-node-1 holds them all
        four = await create(api, _annotated(torch_job(examples, "four", 4), REQUIRED, HOSTNAME))
        wl = await workload_of(api, four, admitted)
        assert decode(_assignment(wl)) == (Host, [(("gpu-node-1",), 4)])
        pods = await _bound(api, "four", 4)
        assert {p["spec"]["nodeName"] for p in pods} == {"gpu-node-1"}
        # and four more fit the quota (12) but no node: pending with Kueue's message
        late = await create(api, _annotated(torch_job(examples, "late", 4), REQUIRED, HOSTNAME))
        message = 'couldn\'t assign flavors to pod set worker: topology "hosts" allows to fit'
        await workload_of(api, late, pending_because(f"{message} only 3 out of 4 pod(s)"))
        assert await _pods(api, "late") == []

    on_kueue(scenario, gpu_nodes=NODES, node_labels=GPU_PRESENT)


def test_preferred_spreads_when_no_node_holds_it_and_no_annotation_is_unconstrained(
    on_kueue: Callable[..., None], examples: dict[str, Any]
) -> None:
    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        _tas_cluster(cluster)
        # the implicit default: no annotation on a TAS-only queue, least free first
        small = await create(api, torch_job(examples, "small", 1))
        wl = await workload_of(api, small, admitted)
        assert "topologyRequest" not in wl["spec"]["podSets"][0]
        assert decode(_assignment(wl)) == (Host, [(("gpu-node-1",), 1)])  # ties: last first
        loose = await create(api, torch_job(examples, "loose", 2))
        wl = await workload_of(api, loose, admitted)
        assert decode(_assignment(wl)) == (Host, [(("gpu-node-1",), 2)])  # the fuller node
        await _bound(api, "loose", 2)
        # 5 left: 4 on gpu-node-0 and 1 on gpu-node-1; preferred on a host: not one holds
        # 5, so the most free first, the last the tightest
        wide = await create(api, _annotated(torch_job(examples, "wide", 5), PREFERRED, HOSTNAME))
        wl = await workload_of(api, wide, admitted)
        got = decode(_assignment(wl))[1]
        assert got == [(("gpu-node-0",), 4), (("gpu-node-1",), 1)]
        pods = await _bound(api, "wide", 5)
        by_node = sorted(p["spec"]["nodeName"] for p in pods)
        assert by_node == ["gpu-node-0"] * 4 + ["gpu-node-1"]
        # the pods took the domains in their index order
        first = {p["metadata"]["labels"]["training.kubeflow.org/replica-index"]: p for p in pods}
        assert first["4"]["spec"]["nodeName"] == "gpu-node-1"

    on_kueue(scenario, gpu_nodes=NODES, node_labels=GPU_PRESENT)


def test_a_topology_request_fits_no_plain_flavor_and_an_unknown_topology_stops_the_queue(
    on_kueue: Callable[..., None], examples: dict[str, Any]
) -> None:
    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        cluster.add_cluster_queue("gpus", 8)  # a flavor without a topology
        cluster.add_local_queue("team", "gpus")
        asked = await create(api, _annotated(torch_job(examples, "asked", 1), REQUIRED, HOSTNAME))
        await workload_of(api, asked, pending_because("does not support TopologyAwareScheduling"))
        plain = await create(api, torch_job(examples, "plain", 1))
        wl = await workload_of(api, plain, admitted)
        assert "topologyAssignment" not in wl["status"]["admission"]["podSetAssignments"][0]
        cluster.add_resource_flavor("tas", node_labels=GPU_PRESENT, topology="racks")
        cluster.add_cluster_queue("tas-gpus", {"tas": 8})
        cluster.add_local_queue("tas-team", "tas-gpus")
        waits = await create(api, torch_job(examples, "waits", 1, queue="tas-team"))
        await workload_of(api, waits, pending_because("topology racks, which is not found"))
        cluster.add_topology("racks", ["rack", HOSTNAME])  # nodes without a rack label: none
        await workload_of(api, waits, pending_because("doesn't allow to fit any of 1 pod(s)"))

    on_kueue(scenario, gpu_nodes=NODES, node_labels=GPU_PRESENT)


def _workload_schema(shared_data: Path) -> SchemaChecker:
    """The real Workload ``v1beta2`` schema with its CEL rules (the emulated API server
    does not evaluate Kueue's: docs/kube.md)."""
    with (shared_data / "crds" / "kueue-v0.19.2" / "workloads.yaml").open() as handle:
        crd = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")
    return SchemaChecker(version["schema"]["openAPIV3Schema"], cel=True)


def test_the_assignment_is_valid_under_the_real_workload_schema(
    on_kueue: Callable[..., None], examples: dict[str, Any], shared_data: Path
) -> None:
    """What the emulated Kueue writes passes the CRD's schema and its CEL rules; a
    malformed assignment does not."""
    schema = _workload_schema(shared_data)

    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        _tas_cluster(cluster)
        first = await create(api, torch_job(examples, "first", 3))
        await workload_of(api, first, admitted)
        job = await create(api, _annotated(torch_job(examples, "job", 5), PREFERRED, HOSTNAME))
        wl = await workload_of(api, job, admitted)
        assignment = _assignment(wl)
        assert decode(assignment)[1] == [(("gpu-node-0",), 4), (("gpu-node-1",), 1)]
        assert assignment["slices"][0]["valuesPerLevel"][0]["individual"]["prefix"] == "gpu-node-"
        assert schema.problems(wl) == []
        bad = copy.deepcopy(wl)
        piece = _assignment(bad)["slices"][0]
        piece["podCounts"] = {"universal": 1, "individual": [4, 1]}
        problems = [p.expected for p in schema.problems(bad)]
        assert any("exactly one of the fields in [universal individual]" in p for p in problems)
        piece["podCounts"] = {"individual": [1]}
        problems = [p.expected for p in schema.problems(bad)]
        assert any(
            "podCounts.individual must have length equal to domainCount" in p for p in problems
        )

    on_kueue(scenario, gpu_nodes=NODES, node_labels=GPU_PRESENT)
