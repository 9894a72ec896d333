"""The emulated Kueue does what Kueue v0.19.2's job reconciler and scheduler do for PyTorchJobs
and MPIJobs in a LocalQueue, seen through the real ``kubernetes`` client over HTTP."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from bellows.emulator import EmulatedCluster
from bellows.kube import KubeApi, MPIJobKind, PyTorchJobKind
from bellows.kube.kinds import MULTIKUEUE
from bellows.kube.kueue import (
    GROUP,
    JOB_UID,
    KUEUE_QUEUE,
    VERSION,
    read_cluster_queue,
    read_workload,
    workload_gpus,
    workload_name,
)

from .conftest import condition, wait_for

NS = "default"
TORCH = PyTorchJobKind()
MPI = MPIJobKind()
LIMIT_S = 10.0  # each wait; the emulated Kueue answers in milliseconds


# ----- objects ---------------------------------------------------------------------------------


def torch_job(
    examples: dict[str, Any], name: str, gpus: int, queue: str | None = "team"
) -> dict[str, Any]:
    """The example PyTorchJob as ``name`` with ``gpus`` one-GPU workers, submitted suspended,
    without Bellows' annotations (the emulated operator runs it until it is deleted)."""
    job = copy.deepcopy(examples["PyTorchJob"])
    job["metadata"] = {"name": name, "namespace": NS}
    if queue is not None:
        job["metadata"]["labels"] = {KUEUE_QUEUE: queue}
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = gpus
    return job


def mpi_job(examples: dict[str, Any], name: str, queue: str = "team") -> dict[str, Any]:
    job = copy.deepcopy(examples["MPIJob"])
    job["metadata"] = {"name": name, "namespace": NS, "labels": {KUEUE_QUEUE: queue}}
    return job


async def create(api: KubeApi, job: dict[str, Any]) -> dict[str, Any]:
    custom = k8s.CustomObjectsApi(api.api_client)
    version, plural = (
        ("v1", "pytorchjobs") if job["kind"] == "PyTorchJob" else ("v2beta1", "mpijobs")
    )
    made: dict[str, Any] = await asyncio.to_thread(
        custom.create_namespaced_custom_object, "kubeflow.org", version, NS, plural, job
    )
    return made


async def workloads(api: KubeApi) -> list[dict[str, Any]]:
    custom = k8s.CustomObjectsApi(api.api_client)
    listed = await asyncio.to_thread(
        custom.list_namespaced_custom_object, GROUP, VERSION, NS, "workloads"
    )
    return list(listed["items"])


async def patch_workload(api: KubeApi, name: str, patch: dict[str, Any]) -> dict[str, Any]:
    custom = k8s.CustomObjectsApi(api.api_client)
    patched: dict[str, Any] = await asyncio.to_thread(
        custom.patch_namespaced_custom_object, GROUP, VERSION, NS, "workloads", name, patch
    )
    return patched


async def until(what: str, check: Callable[[], Awaitable[Any]], *, limit_s: float = LIMIT_S) -> Any:
    """``check()``'s value once it is truthy, asked again after every short pause; fails
    naming ``what`` when ``limit_s`` passes first."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while not (value := await check()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {limit_s} s: {what}")
        await asyncio.sleep(0.01)
    return value


async def workload_of(
    api: KubeApi, job: dict[str, Any], predicate: Callable[[dict[str, Any]], bool] = bool
) -> dict[str, Any]:
    """The Workload of ``job`` (by its job-uid label) once ``predicate`` holds for it."""
    uid = job["metadata"]["uid"]

    async def check() -> dict[str, Any] | None:
        for wl in await workloads(api):
            if wl["metadata"].get("labels", {}).get(JOB_UID) == uid and predicate(wl):
                return wl
        return None

    found: dict[str, Any] = await until(f"the Workload of {job['metadata']['name']}", check)
    return found


def admitted(wl: dict[str, Any]) -> bool:
    view = read_workload(wl)
    return view.quota_reserved and view.admitted


def pending_because(text: str) -> Callable[[dict[str, Any]], bool]:
    def check(wl: dict[str, Any]) -> bool:
        found = [
            c for c in wl.get("status", {}).get("conditions", []) if c["type"] == "QuotaReserved"
        ]
        return bool(found) and found[0]["status"] == "False" and text in found[0]["message"]

    return check


def suspended(obj: dict[str, Any] | None) -> bool:
    return bool(obj and obj["spec"]["runPolicy"].get("suspend"))


def running(obj: dict[str, Any] | None) -> bool:
    return bool(obj) and not suspended(obj) and condition(obj, "Running")


async def job_now(api: KubeApi, job: dict[str, Any], predicate: Callable[[Any], bool]) -> Any:
    kind = TORCH if job["kind"] == "PyTorchJob" else MPI
    return await asyncio.wait_for(
        wait_for(api, kind, NS, job["metadata"]["name"], predicate), LIMIT_S
    )


# ----- tests -----------------------------------------------------------------------------------


def test_a_workload_per_queued_job_owned_labelled_with_its_pod_sets(on_kueue, examples):
    async def scenario(cluster, api):
        cluster.add_cluster_queue("gpus", 8)
        cluster.add_local_queue("team", "gpus")
        # neither in a queue nor Kueue's to manage: no Workload, left as submitted
        plain = await create(api, torch_job(examples, "plain", 1, queue=None))
        foreign = torch_job(examples, "foreign", 1)
        foreign["spec"]["runPolicy"]["managedBy"] = MULTIKUEUE
        foreign = await create(api, foreign)
        torch = await create(api, torch_job(examples, "resnet", 2))
        mpi = await create(api, mpi_job(examples, "cifar"))
        for job, kind, types in (
            (torch, "PyTorchJob", ["Worker"]),
            (mpi, "MPIJob", ["Launcher", "Worker"]),
        ):
            meta = job["metadata"]
            wl = await workload_of(api, job)
            assert wl["metadata"]["name"] == workload_name(kind, meta["name"], meta["uid"])
            assert wl["metadata"]["labels"] == {JOB_UID: meta["uid"]}
            [owner] = wl["metadata"]["ownerReferences"]
            assert owner == {
                "apiVersion": job["apiVersion"],
                "kind": kind,
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
            assert wl["spec"]["queueName"] == "team"
            assert wl["spec"]["active"] is True
            field = "pytorchReplicaSpecs" if kind == "PyTorchJob" else "mpiReplicaSpecs"
            specs = job["spec"][field]
            assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
                (t.lower(), specs[t]["replicas"]) for t in types
            ]
            for pod_set, rtype in zip(wl["spec"]["podSets"], types, strict=True):
                containers = pod_set["template"]["spec"]["containers"]
                assert containers == specs[rtype]["template"]["spec"]["containers"]
            assert workload_gpus(wl["spec"]["podSets"]) == 2
            # admitted within quota, then resumed by Kueue (the launcher asks for no GPU)
            wl = await workload_of(api, job, admitted)
            assignments = wl["status"]["admission"]["podSetAssignments"]
            assert wl["status"]["admission"]["clusterQueue"] == "gpus"
            assert assignments[-1] == {
                "name": "worker",
                "count": 2,
                "flavors": {"nvidia.com/gpu": "default-flavor"},
                "resourceUsage": {"nvidia.com/gpu": "2"},
            }
            await job_now(api, job, running)
        listed = await workloads(api)
        assert sorted(w["metadata"]["ownerReferences"][0]["name"] for w in listed) == [
            "cifar",
            "resnet",
        ]
        for job in (plain, foreign):
            now = await api.get_job(TORCH, NS, job["metadata"]["name"])
            assert now["spec"] == job["spec"]  # never suspended, resumed or edited
        assert cluster.kueue.fights == []

    on_kueue(scenario)


@pytest.mark.parametrize("strategy", ["StrictFIFO", "BestEffortFIFO"])
def test_admission_in_creation_order_within_the_quota(on_kueue, examples, strategy):
    async def scenario(cluster, api):
        cluster.add_cluster_queue("gpus", 4, strategy=strategy)
        # queued before their LocalQueue exists: one scheduling pass then sees all three
        jobs = [
            await create(api, torch_job(examples, name, gpus))
            for name, gpus in (("a-first", 2), ("b-big", 4), ("c-small", 2))
        ]
        for job in jobs:
            await workload_of(api, job, pending_because("LocalQueue team doesn't exist"))
        cluster.add_local_queue("team", "gpus")
        first, big, small = jobs
        await workload_of(api, first, admitted)
        await workload_of(api, big, pending_because("insufficient unused quota"))
        await job_now(api, first, running)
        if strategy == "StrictFIFO":  # the older job that does not fit blocks the younger
            assert not admitted(await workload_of(api, small, pending_because("StrictFIFO")))
            assert suspended(await api.get_job(TORCH, NS, "c-small"))
        else:  # BestEffortFIFO: the younger one that fits goes past it
            await workload_of(api, small, admitted)
            await job_now(api, small, running)
        assert suspended(await api.get_job(TORCH, NS, "b-big"))
        # the first one leaves: StrictFIFO admits the big one (4 of 4); BestEffortFIFO
        # holds 2 for the small one, so the big one still waits
        await delete_job(api, "a-first")
        if strategy == "StrictFIFO":
            await workload_of(api, big, admitted)
            await job_now(api, big, running)
            assert not admitted(await workload_of(api, small))
        else:
            await until(
                "the first Workload deleted with its job",
                lambda: _gone(api, first),
            )
            assert not admitted(await workload_of(api, big))
        assert cluster.kueue.fights == []

    on_kueue(scenario)


async def _gone(api: KubeApi, job: dict[str, Any]) -> bool:
    uid = job["metadata"]["uid"]
    return all(w["metadata"]["labels"].get(JOB_UID) != uid for w in await workloads(api))


async def delete_job(api: KubeApi, name: str) -> None:
    custom = k8s.CustomObjectsApi(api.api_client)
    await asyncio.to_thread(
        custom.delete_namespaced_custom_object, "kubeflow.org", "v1", NS, "pytorchjobs", name
    )


async def status_of_job(api: KubeApi, name: str, status: dict[str, Any]) -> dict[str, Any]:
    """Write a PyTorchJob's status as its operator would (the cluster runs none here)."""
    custom = k8s.CustomObjectsApi(api.api_client)
    done: dict[str, Any] = await asyncio.to_thread(
        custom.patch_namespaced_custom_object_status,
        "kubeflow.org", "v1", NS, "pytorchjobs", name, {"status": status},
    )  # fmt: skip
    return done


def job_condition(kind: str, status: str = "True") -> dict[str, Any]:
    stamp = "2026-01-01T00:00:00Z"
    return {
        "type": kind,
        "status": status,
        "reason": f"PyTorchJob{kind}",
        "message": f"PyTorchJob is {kind.lower()}.",
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
    }


def test_an_external_suspend_of_an_admitted_job_is_undone_and_counted(on_kueue, examples):
    async def scenario(cluster, api):
        cluster.add_cluster_queue("gpus", 4)
        cluster.add_local_queue("team", "gpus")
        job = await create(api, torch_job(examples, "resnet", 2))
        await workload_of(api, job, admitted)
        started = await job_now(api, job, running)  # un-suspended on admission
        assert cluster.kueue.fights == []
        fought = await api.patch_job(
            TORCH, NS, "resnet", {"spec": {"runPolicy": {"suspend": True}}}
        )
        generation = fought["metadata"]["generation"]
        # Kueue resumes it at once: the suspend is undone, and the fight is on record
        resumed = await job_now(
            api, job, lambda o: not suspended(o) and o["metadata"]["generation"] > generation
        )
        assert resumed["metadata"]["uid"] == started["metadata"]["uid"]
        [fight] = cluster.kueue.fights
        assert (fight.kind, fight.namespace, fight.name) == ("PyTorchJob", NS, "resnet")
        assert fight.workload == (await workload_of(api, job))["metadata"]["name"]
        await job_now(api, job, running)

    on_kueue(scenario)


def test_deactivating_evicts_and_clears_the_reservation_only_once_the_job_halted(
    on_kueue, examples
):
    async def scenario(cluster, api):
        cluster.add_cluster_queue("gpus", 4)
        cluster.add_local_queue("team", "gpus")
        job = await create(api, torch_job(examples, "resnet", 2))
        wl = await workload_of(api, job, admitted)
        await job_now(api, job, lambda o: not suspended(o))
        # no operator here: the test says what it would, that the job's pods run
        await status_of_job(
            api,
            "resnet",
            {"conditions": [job_condition("Running")], "startTime": "2026-01-01T00:00:00Z"},
        )
        name = wl["metadata"]["name"]
        await patch_workload(api, name, {"spec": {"active": False}})
        evicted = await workload_of(
            api, job, lambda w: read_workload(w).evicted_reason == "Deactivated"
        )
        await job_now(api, job, suspended)  # Kueue stops the job ...
        # ... but holds the reservation while its pods may still run
        again = await workload_of(api, job)
        assert again["metadata"]["uid"] == evicted["metadata"]["uid"]
        assert admitted(again)
        await status_of_job(
            api,
            "resnet",
            {"conditions": [job_condition("Running", "False"), job_condition("Suspended")]},
        )
        released = await workload_of(api, job, lambda w: not read_workload(w).quota_reserved)
        assert not read_workload(released).admitted
        assert "admission" not in released["status"]
        assert suspended(await api.get_job(TORCH, NS, "resnet"))  # inactive: never admitted
        # active again: requeued, admitted and resumed
        await patch_workload(api, name, {"spec": {"active": True}})
        back = await workload_of(api, job, admitted)
        assert read_workload(back).evicted_reason is None
        await job_now(api, job, lambda o: not suspended(o))
        assert cluster.kueue.fights == []

    on_kueue(scenario, operator=False)


def test_deactivating_with_the_operator_halts_the_job_and_frees_its_gpus(on_kueue, examples):
    async def scenario(cluster, api):
        cluster.add_cluster_queue("gpus", 2)
        cluster.add_local_queue("team", "gpus")
        first = await create(api, torch_job(examples, "first", 2))
        wl = await workload_of(api, first, admitted)
        await job_now(api, first, running)
        second = await create(api, torch_job(examples, "second", 2))
        await workload_of(api, second, pending_because("insufficient unused quota"))
        await patch_workload(api, wl["metadata"]["name"], {"spec": {"active": False}})
        halted = await job_now(api, first, lambda o: suspended(o) and condition(o, "Suspended"))
        assert not condition(halted, "Running")
        await workload_of(api, first, lambda w: not read_workload(w).quota_reserved)
        await workload_of(api, second, admitted)  # its GPUs went to the next in line
        await job_now(api, second, running)
        assert cluster.kueue.fights == []

    on_kueue(scenario)


def test_editing_a_suspended_unreserved_job_updates_its_workload(on_kueue, examples):
    async def scenario(cluster, api):
        cluster.add_cluster_queue("gpus", 2)
        cluster.add_local_queue("team", "gpus")
        first = await create(api, torch_job(examples, "first", 2))
        await workload_of(api, first, admitted)
        queued = await create(api, torch_job(examples, "queued", 4))
        before = await workload_of(api, queued, pending_because("insufficient unused quota"))
        obj = await api.get_job(TORCH, NS, "queued")
        spec = TORCH.scale_patch(obj, 1, {"GLOBAL_BATCH_SIZE": "64", "LOCAL_BATCH_SIZE": "64"})
        await api.patch_job(TORCH, NS, "queued", {"spec": spec})
        after = await workload_of(api, queued, lambda w: w["spec"]["podSets"][0]["count"] == 1)
        assert after["metadata"]["uid"] == before["metadata"]["uid"]  # updated, not replaced
        env = after["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["env"]
        assert {e["name"]: e["value"] for e in env} == {
            "GLOBAL_BATCH_SIZE": "64",
            "LOCAL_BATCH_SIZE": "64",
        }
        assert not read_workload(after).quota_reserved  # 2 + 1 > 2: still waiting
        assert suspended(await api.get_job(TORCH, NS, "queued"))
        await delete_job(api, "first")
        await workload_of(api, queued, admitted)
        await job_now(api, queued, running)
        assert cluster.kueue.fights == []

    on_kueue(scenario)


def test_replicas_changed_on_a_running_job_suspend_and_requeue_it(on_kueue, examples):
    async def scenario(cluster, api):
        cluster.add_cluster_queue("gpus", 4)
        cluster.add_local_queue("team", "gpus")
        job = await create(api, torch_job(examples, "resnet", 2))
        before = await workload_of(api, job, admitted)
        await job_now(api, job, running)
        grow = {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 6}}}}
        await api.patch_job(TORCH, NS, "resnet", grow)
        # no Workload matches the job any more: Kueue suspends it and releases the quota
        await job_now(api, job, suspended)
        requeued = await workload_of(api, job, lambda w: w["spec"]["podSets"][0]["count"] == 6)
        assert requeued["metadata"]["uid"] == before["metadata"]["uid"]
        assert not read_workload(requeued).quota_reserved
        await workload_of(api, job, pending_because("requests 6, the nominal quota is 4"))
        # back within the quota while suspended: the Workload follows, and is admitted
        shrink = {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4}}}}
        await api.patch_job(TORCH, NS, "resnet", shrink)
        readmitted = await workload_of(api, job, admitted)
        assert readmitted["status"]["admission"]["podSetAssignments"][0]["count"] == 4
        await job_now(api, job, running)
        assert cluster.kueue.fights == []

    on_kueue(scenario)


def test_a_deleted_workload_is_recreated_and_goes_with_its_job(on_kueue, examples):
    async def scenario(cluster, api):
        cluster.add_cluster_queue("gpus", 4)
        cluster.add_local_queue("team", "gpus")
        job = await create(api, torch_job(examples, "resnet", 2))
        first = await workload_of(api, job, admitted)
        custom = k8s.CustomObjectsApi(api.api_client)
        name = first["metadata"]["name"]
        await asyncio.to_thread(
            custom.delete_namespaced_custom_object, GROUP, VERSION, NS, "workloads", name
        )
        second = await workload_of(
            api, job, lambda w: w["metadata"]["uid"] != first["metadata"]["uid"]
        )
        assert second["metadata"]["name"] == name
        assert second["spec"]["active"] is True
        await workload_of(api, job, admitted)
        await job_now(api, job, running)
        await delete_job(api, "resnet")
        await until("the Workload deleted with its job", lambda: _gone(api, job))
        assert await workloads(api) == []

    on_kueue(scenario)


def test_lowering_the_quota_evicts_nothing_and_admits_nothing_new(on_kueue, examples):
    async def scenario(cluster, api):
        cluster.add_cluster_queue("gpus", 4)
        cluster.add_local_queue("team", "gpus")
        a = await create(api, torch_job(examples, "a", 2))
        b = await create(api, torch_job(examples, "b", 2))
        for job in (a, b):
            await workload_of(api, job, admitted)
            await job_now(api, job, running)
        cluster.set_cluster_queue_quota("gpus", 2)
        c = await create(api, torch_job(examples, "c", 1))
        await workload_of(api, c, pending_because("requests 1, the nominal quota is 2"))
        for job in (a, b):  # 4 GPUs in use under a quota of 2: both keep running
            assert admitted(await workload_of(api, job))
            assert running(await api.get_job(TORCH, NS, job["metadata"]["name"]))
        await delete_job(api, "a")
        await until("a's Workload gone", lambda: _gone(api, a))
        assert not admitted(await workload_of(api, c))  # 2 + 1 > 2
        await delete_job(api, "b")
        await workload_of(api, c, admitted)
        await job_now(api, c, running)

    on_kueue(scenario)


def test_a_finished_job_releases_its_quota(on_kueue, examples):
    async def scenario(cluster, api):
        cluster.add_cluster_queue("gpus", 2)
        cluster.add_local_queue("team", "gpus")
        done = await create(api, torch_job(examples, "done", 2))
        await workload_of(api, done, admitted)
        waiting = await create(api, torch_job(examples, "waiting", 2))
        await workload_of(api, waiting, pending_because("insufficient unused quota"))
        await status_of_job(
            api,
            "done",
            {"conditions": [job_condition("Succeeded")], "completionTime": "2026-01-01T00:00:00Z"},
        )
        finished = await workload_of(api, done, lambda w: condition(w, "Finished"))
        assert read_workload(finished).quota_reserved  # kept, as Kueue keeps it, but not counted
        await workload_of(api, waiting, admitted)

    on_kueue(scenario, operator=False)


def test_queues_with_several_flavors_and_a_missing_flavor(on_kueue, examples):
    async def scenario(cluster, api):
        custom = k8s.CustomObjectsApi(api.api_client)
        made = cluster.add_cluster_queue("gpus", {"a100": 2, "h100": 2}, cohort="org")
        view = read_cluster_queue(made)
        assert (view.gpus, view.strategy, view.cohort) == (4, "BestEffortFIFO", "org")
        flavors = await asyncio.to_thread(
            custom.list_cluster_custom_object, GROUP, VERSION, "resourceflavors"
        )
        assert sorted(f["metadata"]["name"] for f in flavors["items"]) == ["a100", "h100"]
        cluster.add_local_queue("team", "gpus")
        first = await create(api, torch_job(examples, "first", 2))
        second = await create(api, torch_job(examples, "second", 2))
        placed = []
        for job in (first, second):  # each podSet on the first flavor with room for it
            wl = await workload_of(api, job, admitted)
            placed.append(wl["status"]["admission"]["podSetAssignments"][0]["flavors"])
        assert placed == [{"nvidia.com/gpu": "a100"}, {"nvidia.com/gpu": "h100"}]
        with pytest.raises(ValueError, match="give the quota per flavor"):
            cluster.set_cluster_queue_quota("gpus", 3)
        with pytest.raises(ValueError, match="no GPU flavor t4"):
            cluster.set_cluster_queue_quota("gpus", {"t4": 1})
        lowered = cluster.set_cluster_queue_quota("gpus", {"h100": 0})
        assert read_cluster_queue(lowered).gpus == 2
        # a ClusterQueue naming a flavor nobody created admits nothing (Kueue: inactive)
        cluster.add_cluster_queue("spare", 4)
        spec = cluster.store.get(
            cluster.store.resources[f"{GROUP}/{VERSION}/clusterqueues"], "", "spare"
        )
        spec["spec"]["resourceGroups"][0]["flavors"][0]["name"] = "l4"
        await asyncio.to_thread(
            custom.replace_cluster_custom_object, GROUP, VERSION, "clusterqueues", "spare", spec
        )
        cluster.add_local_queue("other", "spare")
        third = await create(api, torch_job(examples, "third", 1, queue="other"))
        await workload_of(api, third, pending_because("ClusterQueue spare is inactive: flavor l4"))
        cluster.add_resource_flavor("l4", node_labels={"gpu": "l4"})
        wl = await workload_of(api, third, admitted)
        assert wl["status"]["admission"]["clusterQueue"] == "spare"
        assert cluster.kueue.fights == []

    on_kueue(scenario)


def test_kueue_without_its_crds_is_refused_by_name(crds: list[Path]) -> None:
    with pytest.raises(ValueError, match=r"workloads .*kueue_crd_paths"):
        EmulatedCluster(crds=crds, kueue=True)
    cluster = EmulatedCluster(crds=crds)
    assert cluster.kueue is None
    with pytest.raises(ValueError, match=r"does not serve \w+\.kueue\.x-k8s\.io"):
        cluster.add_cluster_queue("gpus", 8)
