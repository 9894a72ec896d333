"""The emulated Kueue assigns each podSet a flavor as Kueue v0.19.2 does: the ClusterQueue's
flavors in order, the first whose own quota left holds it and whose ``nodeLabels`` the pod
template's node selector and required affinity allow; it puts the flavor's ``nodeLabels`` on
the job's pod templates when it starts the job and takes them off when it suspends it."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from bellows.emulator import EmulatedCluster
from bellows.emulator.flavors import Queue, assign, flavor_selectors, inject, restore
from bellows.emulator.schemas import SchemaChecker
from bellows.emulator.topology import HOSTNAME, REQUIRED
from bellows.emulator.typed import GPU_PRODUCT, typed_nodes
from bellows.kube import KubeApi
from bellows.kube.kueue import NamespaceSelector, read_workload
from bellows.scaling.gpu_types import sia_mix

from .conftest import condition
from .test_emulated_kueue import (
    NS,
    TORCH,
    admitted,
    create,
    job_condition,
    job_now,
    mpi_job,
    patch_workload,
    pending_because,
    running,
    status_of_job,
    suspended,
    torch_job,
    until,
    workload_of,
)

GPU = "nvidia.com/gpu"
T4 = {GPU_PRODUCT: "Tesla-T4"}  # the nodes of sia_mix's t4 type carry this
A100 = {GPU_PRODUCT: "NVIDIA-A100-SXM4-40GB"}
ZONE = {"zone": "z1"}  # on every node: an owner's own selector that any node meets
GPUS, LABELS = typed_nodes(sia_mix())  # t4-0..5 (4 GPUs), a100-0..1 (8), rtx2080ti-0..2 (8)


# ----- helpers ---------------------------------------------------------------------------------


def _flavored(cluster: EmulatedCluster, quotas: dict[str, int]) -> None:
    """The admin's setup: flavor ``t4`` and ``a100`` on their nodes, one queue over both."""
    cluster.add_resource_flavor("t4", node_labels=T4)
    cluster.add_resource_flavor("a100", node_labels=A100)
    cluster.add_cluster_queue("gpus", quotas)
    cluster.add_local_queue("team", "gpus")


def _selected(job: dict[str, Any], selector: dict[str, str]) -> dict[str, Any]:
    """``job`` with its owner's ``selector`` on its worker template."""
    job = copy.deepcopy(job)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = selector
    return job


def _flavor(wl: dict[str, Any]) -> str:
    assignment = wl["status"]["admission"]["podSetAssignments"][-1]
    flavor: str = assignment["flavors"][GPU]
    return flavor


def _worker_selector(obj: dict[str, Any], field: str = "pytorchReplicaSpecs") -> Any:
    return obj["spec"][field]["Worker"]["template"]["spec"].get("nodeSelector")


async def _bound(api: KubeApi, job: str, count: int) -> list[dict[str, Any]]:
    core = k8s.CoreV1Api(api.api_client)

    async def check() -> list[dict[str, Any]] | None:
        listed = await asyncio.to_thread(
            core.list_namespaced_pod, NS, label_selector=f"training.kubeflow.org/job-name={job}"
        )
        pods = [api.api_client.sanitize_for_serialization(p) for p in listed.items]
        placed = [p for p in pods if p["spec"].get("nodeName")]
        return placed if len(placed) == count else None

    found: list[dict[str, Any]] = await until(f"{count} pods of {job} bound", check)
    return found


def _workload_schema(shared_data: Path) -> SchemaChecker:
    """The real Workload ``v1beta2`` schema, CEL rules included."""
    with (shared_data / "crds" / "kueue-v0.19.2" / "workloads.yaml").open() as handle:
        crd = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")
    return SchemaChecker(version["schema"]["openAPIV3Schema"], cel=True)


# ----- against the emulated cluster -------------------------------------------------------------


def test_podsets_fill_the_first_flavor_then_the_next_and_run_on_its_nodes(
    on_kueue: Callable[..., None], examples: dict[str, Any], shared_data: Path
) -> None:
    schema = _workload_schema(shared_data)

    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        _flavored(cluster, {"t4": 8, "a100": 16})
        # its owner asks for A100s: t4 (first, empty) does not match, a100 takes it
        pinned = await create(api, _selected(torch_job(examples, "pinned", 2), A100))
        wl = await workload_of(api, pinned, admitted)
        assert _flavor(wl) == "a100"
        # the first flavor with room: t4, until it is full
        a = await create(api, torch_job(examples, "a", 4))
        zoned = await create(api, _selected(torch_job(examples, "zoned", 2), ZONE))
        for job in (a, zoned):
            wl = await workload_of(api, job, admitted)
            assert _flavor(wl) == "t4"
            assert schema.problems(wl) == []
        big = await create(api, torch_job(examples, "big", 12))  # 2 left on t4: a100
        wl = await workload_of(api, big, admitted)
        assert wl["status"]["admission"]["podSetAssignments"] == [
            {"name": "worker", "count": 12, "flavors": {GPU: "a100"}, "resourceUsage": {GPU: "12"}}
        ]
        assert schema.problems(wl) == []
        # 4 GPUs left in the queue, 2 on each flavor: no flavor holds 4
        late = await create(api, torch_job(examples, "late", 4))
        message = (
            "couldn't assign flavors to pod set worker: "
            f"insufficient unused quota for {GPU} in flavor a100, 2 more needed, "
            f"insufficient unused quota for {GPU} in flavor t4, 2 more needed"
        )
        await workload_of(api, late, pending_because(message))
        # resumed with the flavor's nodeLabels merged into the templates (the owner's kept)
        for job, selector in ((pinned, A100), (a, T4), (zoned, {**ZONE, **T4}), (big, A100)):
            obj = await job_now(api, job, running)
            assert _worker_selector(obj) == selector
        for name, count, prefix, selector in (
            ("pinned", 2, "a100-", A100),
            ("a", 4, "t4-", T4),
            ("zoned", 2, "t4-", {**ZONE, **T4}),
            ("big", 12, "a100-", A100),
        ):
            for pod in await _bound(api, name, count):  # only on the flavor's nodes
                assert pod["spec"]["nodeSelector"] == selector
                assert pod["spec"]["nodeName"].startswith(prefix)
        # evicted: suspended, the injected keys taken off, the owner's left (pinned's
        # own selector names the very label its flavor injected: it stays)
        for job, selector in ((zoned, ZONE), (pinned, A100)):
            wl = await workload_of(api, job)
            await patch_workload(api, wl["metadata"]["name"], {"spec": {"active": False}})
            obj = await job_now(api, job, lambda o: suspended(o) and condition(o, "Suspended"))
            assert _worker_selector(obj) == selector
            wl = await workload_of(api, job, lambda w: not read_workload(w).quota_reserved)
            assert "admission" not in wl["status"]
        # zoned's 2 GPUs back on t4: late (4) fits there now
        wl = await workload_of(api, late, admitted)
        assert _flavor(wl) == "t4"
        await _bound(api, "late", 4)
        # active again: t4 is full, so zoned goes to a100 (pinned's 2 were freed there)
        zoned_wl = await workload_of(api, zoned)
        await patch_workload(api, zoned_wl["metadata"]["name"], {"spec": {"active": True}})
        wl = await workload_of(api, zoned, lambda w: admitted(w) and _flavor(w) == "a100")
        assert schema.problems(wl) == []
        obj = await job_now(api, zoned, running)
        assert _worker_selector(obj) == {**ZONE, **A100}
        for pod in await _bound(api, "zoned", 2):
            assert pod["spec"]["nodeName"].startswith("a100-")
        assert cluster.kueue is not None
        assert cluster.kueue.fights == []

    on_kueue(scenario, gpu_nodes=GPUS, labels_by_node=LABELS, node_labels=ZONE)


def test_a_finished_job_frees_its_flavor_and_an_mpijob_gets_selectors_where_it_asks(
    on_kueue: Callable[..., None], examples: dict[str, Any]
) -> None:
    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        _flavored(cluster, {"t4": 8, "a100": 16})
        done = await create(api, torch_job(examples, "done", 8))
        assert _flavor(await workload_of(api, done, admitted)) == "t4"
        # pinned to T4 by its owner: a100 does not match it, t4 is full
        waits = await create(api, _selected(torch_job(examples, "waits", 4), T4))
        message = (
            "couldn't assign flavors to pod set worker: flavor a100 doesn't match node "
            f"affinity, insufficient unused quota for {GPU} in flavor t4, 4 more needed"
        )
        await workload_of(api, waits, pending_because(message))
        # the launcher asks for no GPU: no flavor, no selector; the workers get a100's
        cifar = await create(api, mpi_job(examples, "cifar"))
        wl = await workload_of(api, cifar, admitted)
        launcher, worker = wl["status"]["admission"]["podSetAssignments"]
        assert (launcher["flavors"], worker["flavors"]) == ({}, {GPU: "a100"})
        obj = await job_now(api, cifar, lambda o: not suspended(o))
        assert _worker_selector(obj, "mpiReplicaSpecs") == A100
        launcher_spec = obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
        assert "nodeSelector" not in launcher_spec
        # done finishes: its 8 GPUs of t4 are free, and waits is admitted there
        finished = {
            "conditions": [job_condition("Succeeded")],
            "completionTime": "2026-01-01T00:00:00Z",
        }
        await status_of_job(api, "done", finished)
        await workload_of(api, done, lambda w: condition(w, "Finished"))
        wl = await workload_of(api, waits, admitted)
        assert _flavor(wl) == "t4"
        obj = await job_now(api, waits, lambda o: not suspended(o))
        assert _worker_selector(obj) == T4

    on_kueue(scenario, operator=False)


def test_a_tas_flavor_is_chosen_in_order_then_its_topology_places_the_pods(
    on_kueue: Callable[..., None], examples: dict[str, Any]
) -> None:
    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        cluster.add_topology("hosts", [HOSTNAME])
        cluster.add_resource_flavor("tas-t4", node_labels=T4, topology="hosts")
        cluster.add_resource_flavor("tas-a100", node_labels=A100, topology="hosts")
        cluster.add_cluster_queue("gpus", {"tas-t4": 4, "tas-a100": 8})
        cluster.add_local_queue("team", "gpus")
        for name, flavor, prefix in (("one", "tas-t4", "t4-"), ("two", "tas-a100", "a100-")):
            job = torch_job(examples, name, 4)
            template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
            template.setdefault("metadata", {})["annotations"] = {REQUIRED: HOSTNAME}
            made = await create(api, job)
            wl = await workload_of(api, made, admitted)
            assert _flavor(wl) == flavor
            assert "topologyAssignment" in wl["status"]["admission"]["podSetAssignments"][0]
            pods = await _bound(api, name, 4)
            assert len({p["spec"]["nodeName"] for p in pods}) == 1  # required: one host
            assert pods[0]["spec"]["nodeName"].startswith(prefix)
            obj = await api.get_job(TORCH, NS, name)
            assert _worker_selector(obj) is None  # TAS: the template is left as it is

    on_kueue(scenario, gpu_nodes=GPUS, labels_by_node=LABELS)


# ----- the assignment and the selectors (pure) ----------------------------------------------------


def _queue(**quotas: int) -> Queue:
    labels = {"t4": T4, "a100": A100, "any": {}}
    return Queue(
        sum(quotas.values()),
        False,
        tuple(quotas.items()),
        None,
        NamespaceSelector(()),
        {},
        {name: labels[name] for name in quotas},
    )


def _pod_set(gpus: int, **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "resources": {"limits": {GPU: 1}}}
    return {
        "name": "worker",
        "count": gpus,
        "template": {"spec": {"containers": [container], **spec}},
    }


def _never(*_: Any) -> None:
    raise AssertionError("no TAS flavor here")


def _affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    required = {"nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def test_a_flavor_is_skipped_only_on_its_own_label_keys() -> None:
    queue = _queue(t4=8, a100=8, any=8)
    used = {"t4": 0, "a100": 0, "any": 0}

    def chosen(pod_set: dict[str, Any], left: dict[str, int] = used) -> Any:
        got = assign([pod_set], queue, left, _never)
        return got if isinstance(got, str) else got[0]["flavors"][GPU]

    assert chosen(_pod_set(2)) == "t4"
    assert chosen(_pod_set(2, nodeSelector=A100)) == "a100"
    assert chosen(_pod_set(2, nodeSelector={"other": "x"})) == "t4"  # a key no flavor has
    wants_a100 = [{"key": GPU_PRODUCT, "operator": "In", "values": [A100[GPU_PRODUCT]]}]
    assert chosen(_pod_set(2, affinity=_affinity(wants_a100))) == "a100"
    not_t4 = [{"key": GPU_PRODUCT, "operator": "NotIn", "values": [T4[GPU_PRODUCT]]}]
    assert chosen(_pod_set(2, affinity=_affinity(not_t4))) == "a100"
    # a term with no key of the flavor matches it: the terms are ORed
    elsewhere = [{"key": "other", "operator": "In", "values": ["x"]}]
    assert chosen(_pod_set(2, affinity=_affinity(wants_a100, elsewhere))) == "t4"
    # a flavor without nodeLabels matches every template; over any flavor's whole quota
    assert chosen(_pod_set(8, nodeSelector=A100), {**used, "a100": 2}) == "any"
    assert chosen(_pod_set(9)) == (
        "couldn't assign flavors to pod set worker: "
        f"insufficient quota for {GPU} in flavor a100, previously considered podsets requests "
        f"(0) + current podset request (9) > maximum capacity (8), "
        f"insufficient quota for {GPU} in flavor any, previously considered podsets requests "
        f"(0) + current podset request (9) > maximum capacity (8), "
        f"insufficient quota for {GPU} in flavor t4, previously considered podsets requests "
        f"(0) + current podset request (9) > maximum capacity (8)"
    )


def test_a_workloads_podsets_count_together_on_a_flavor() -> None:
    queue = _queue(t4=8, a100=8)
    first, second = _pod_set(6), {**_pod_set(4), "name": "second"}
    got = assign([first, second], queue, {"t4": 0, "a100": 0}, _never)
    assert not isinstance(got, str)
    assert [(e["name"], e["flavors"][GPU]) for e in got] == [("worker", "t4"), ("second", "a100")]


def test_selectors_are_injected_and_restored_from_the_workload() -> None:
    job = {
        "kind": "PyTorchJob",
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"template": {"spec": {"containers": []}}},
            "Worker": {"template": {"spec": {"containers": [], "nodeSelector": ZONE}}},
        }},
    }  # fmt: skip
    wl = {
        "spec": {"podSets": [
            {"name": "master", "template": {"spec": {"containers": []}}},
            {"name": "worker", "template": {"spec": {"containers": [], "nodeSelector": ZONE}}},
        ]},
        "status": {"admission": {"podSetAssignments": [
            {"name": "master", "flavors": {GPU: "t4"}},
            {"name": "worker", "flavors": {GPU: "t4"}},
        ]}},
    }  # fmt: skip
    assert flavor_selectors(wl, {}) == "t4"  # a flavor not found: nothing to start with
    selectors = flavor_selectors(wl, {"t4": T4})
    assert selectors == {"master": T4, "worker": T4}
    running = copy.deepcopy(job)
    inject(running, selectors)
    specs = running["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["template"]["spec"]["nodeSelector"] == T4
    assert specs["Worker"]["template"]["spec"]["nodeSelector"] == {**ZONE, **T4}
    restore(running, wl)
    assert running == job
    trainjob = {"kind": "TrainJob", "spec": {"trainer": {"numNodes": 2}}}
    inject(trainjob, selectors)  # its selectors go through runtime patches: left out
    assert trainjob == {"kind": "TrainJob", "spec": {"trainer": {"numNodes": 2}}}
