"""A TrainJob in a Kueue LocalQueue: the emulated Kueue's TrainJob integration (its Workload's
podSets from the runtime, admission by quota, resume, garbage collection with the job), and
Bellows' resize of it: held through its Workload, re-created in its queue, crash-safe."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from bellows.autoscaler.decisions import Preempt, Rescale, Start
from bellows.emulator.crds import kueue_crd_paths, trainer_crd_paths
from bellows.emulator.trainer import TORCH_DISTRIBUTED
from bellows.jobs import SpecError
from bellows.kube import Actuator, KubeApi, keys
from bellows.kube.adapters import ALL_KINDS, TRAINJOB
from bellows.kube.kueue import (
    JOB_UID,
    KUEUE_QUEUE,
    WorkloadView,
    read_workload,
    trainjob_pod_sets,
    workload_gpus,
    workload_name,
)
from bellows.kube.kueue_journal import AwaitWorkload, PatchWorkload
from bellows.kube.kueue_recreation import plan_kueue_recreate
from bellows.kube.records import DEFAULT_RECORDS_NAMESPACE as RECORDS
from bellows.kube.records import RECORD_LABEL

from .test_emulated_kueue import admitted, until, workloads
from .test_trainjob import NAME, CrashError, Dying, example, profile

JOB = f"trainjob/default/{NAME}"
LIMIT_S = 10.0


@pytest.fixture(scope="module")
def crds(shared_data: Path) -> list[Path]:
    """The Kubeflow v1 CRDs, Trainer v2.3.0's and Kueue's."""
    folder = shared_data / "crds"
    return [*sorted(folder.glob("*.yaml")), *trainer_crd_paths(folder), *kueue_crd_paths(folder)]


def queued(nodes: int = 2, queue: str = "team") -> dict[str, Any]:
    body = example()
    body["metadata"]["labels"] = {KUEUE_QUEUE: queue, "team": "vision"}
    body["spec"]["trainer"]["numNodes"] = nodes
    return body


async def submit(api: KubeApi, body: dict[str, Any]) -> dict[str, Any]:
    core = k8s.CoreV1Api(api.api_client)
    names = [
        c.metadata.name
        for c in (await asyncio.to_thread(core.list_namespaced_config_map, "default")).items
    ]
    if profile()["metadata"]["name"] not in names:
        await asyncio.to_thread(core.create_namespaced_config_map, "default", profile())
    return await api.create_job(TRAINJOB, "default", body)


async def workload_of(api: KubeApi, uid: str, predicate: Any = bool) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        for wl in await workloads(api):
            if wl["metadata"].get("labels", {}).get(JOB_UID) == uid and predicate(wl):
                return wl
        return None

    return await until(f"the Workload of {uid}", check)  # type: ignore[no-any-return]


async def job_now(api: KubeApi, predicate: Any) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        obj = await api.get_job(TRAINJOB, "default", NAME)
        return obj if obj is not None and predicate(obj) else None

    return await until(f"{NAME} as wanted", check)  # type: ignore[no-any-return]


def resumed(nodes: int) -> Any:
    return lambda o: o["spec"]["trainer"]["numNodes"] == nodes and not o["spec"]["suspend"]


# ----- the pod sets Kueue derives -------------------------------------------------------------


def test_pod_sets_are_the_runtime_jobs_with_the_trainers_overrides() -> None:
    job = queued(nodes=3)
    job["spec"]["runtimePatches"] = [
        {
            "manager": "example.com/ops",
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {
                                    "spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}
                                },
                            }
                        ]
                    }
                }
            },
        }
    ]
    runtime = copy.deepcopy(dict(TORCH_DISTRIBUTED))
    init = {
        "name": "dataset-initializer",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset"}},
            "spec": {"template": {"spec": {"containers": [{"name": "dataset-initializer"}]}}},
        },
    }
    runtime["spec"]["template"]["spec"]["replicatedJobs"].insert(0, init)
    sets = trainjob_pod_sets(job, runtime)
    assert [(p["name"], p["count"]) for p in sets] == [("dataset-initializer", 1), ("node", 3)]
    pod = sets[1]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert container["image"] == job["spec"]["trainer"]["image"]
    assert {e["name"]: e["value"] for e in container["env"]}["GLOBAL_BATCH_SIZE"] == "256"
    assert pod["nodeSelector"] == {"a": "b"}
    assert workload_gpus(sets) == 3
    assert (
        "resources"
        not in TORCH_DISTRIBUTED["spec"]["template"]["spec"]["replicatedJobs"][0]["template"][
            "spec"
        ]["template"]["spec"]["containers"][0]
    )  # the runtime is not changed
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = -1
    with pytest.raises(SpecError, match=r"replicatedJobs\[0\]\.replicas"):
        trainjob_pod_sets(job, runtime)


# ----- the emulated Kueue's TrainJob integration -----------------------------------------------


def test_kueue_admits_a_queued_trainjob_by_quota_and_collects_its_workload(on_cluster) -> None:
    async def scenario(cluster, api):
        cluster.add_cluster_queue("gpus", 3)
        cluster.add_local_queue("team", "gpus")
        first = await submit(api, queued(nodes=2))
        uid = first["metadata"]["uid"]
        wl = await workload_of(api, uid, admitted)
        assert wl["metadata"]["name"] == workload_name(
            "TrainJob", NAME, uid, "trainer.kubeflow.org"
        )
        (owner,) = wl["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("TrainJob", uid, True)
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("node", 2)]
        assert wl["spec"]["queueName"] == "team"
        await job_now(api, resumed(2))  # Kueue resumed it
        await until("the Trainer runs it", lambda: _started(cluster, uid))
        # a second one asking more than the quota left stays suspended, pending
        other = queued(nodes=2)
        other["metadata"]["name"] = "second"
        second = await submit(api, other)
        pending = await workload_of(
            api, second["metadata"]["uid"], lambda w: read_workload(w).quota_reserved is False
        )
        assert not admitted(pending)
        obj = await api.get_job(TRAINJOB, "default", "second")
        assert obj["spec"]["suspend"] is True
        # the first deleted: its Workload goes with it, and the second is admitted
        custom = k8s.CustomObjectsApi(api.api_client)
        await asyncio.to_thread(
            custom.delete_namespaced_custom_object,
            "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", NAME,
        )  # fmt: skip
        await workload_of(api, second["metadata"]["uid"], admitted)
        assert [w["metadata"]["labels"][JOB_UID] for w in await workloads(api)] == [
            second["metadata"]["uid"]
        ]

    on_cluster(scenario, trainer=True, kueue=True, compression=1.0)


async def _started(cluster: Any, uid: str) -> bool:
    return any(s[1] == uid for s in cluster.trainer.starts)


# ----- Bellows' resize of a queued TrainJob -------------------------------------------------------


def actuator(api: KubeApi) -> Actuator:
    return Actuator(api, kinds=ALL_KINDS, kueue=True, halt_timeout_s=10)


async def records(api: KubeApi) -> list[str]:
    return [c["metadata"]["name"] for c in await api.list_configmaps(RECORDS, RECORD_LABEL)]


def test_start_and_rescale_recreate_a_queued_trainjob_in_its_queue(on_cluster) -> None:
    async def scenario(cluster, api):
        cluster.add_cluster_queue("gpus", 4)
        cluster.add_local_queue("team", "gpus")
        first = await submit(api, queued(nodes=2))
        old = await workload_of(api, first["metadata"]["uid"])
        act = actuator(api)
        outcome = await act.apply(Start(JOB, 3, 192))
        assert outcome.result == "started", outcome
        obj = await job_now(api, resumed(3))
        uid = obj["metadata"]["uid"]
        assert uid != first["metadata"]["uid"]
        notes = obj["metadata"]["annotations"]
        assert notes[keys.RECREATED_FROM] == first["metadata"]["uid"]
        assert (notes[keys.PHASE], notes[keys.ALLOCATION]) == ("done", "k=3,b=192")
        assert obj["metadata"]["labels"][KUEUE_QUEUE] == "team"  # kept in its queue
        wl = await workload_of(api, uid, admitted)
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("node", 3)]
        assert old["metadata"]["uid"] not in [w["metadata"]["uid"] for w in await workloads(api)]
        assert len(await workloads(api)) == 1  # the old Workload went with the old TrainJob
        await until("the Trainer runs it", lambda: _started(cluster, uid))
        assert await records(api) == []
        assert cluster.kueue.fights == []  # Bellows never wrote suspend against Kueue
        # a rescale to the whole quota: the old Workload must go first for the new to fit
        outcome = await act.apply(Rescale(JOB, 3, 192, 4, 256, reason="grows to the quota"))
        assert outcome.result == "rescaled", outcome
        again = await job_now(api, resumed(4))
        renotes = again["metadata"]["annotations"]  # journaled as a resume in place is
        assert (renotes[keys.REASON], renotes[keys.RESTARTS]) == ("grows to the quota", "1")
        assert renotes[keys.STARTED_AT] == notes[keys.STARTED_AT]
        assert [
            p["count"]
            for p in (await workload_of(api, again["metadata"]["uid"], admitted))["spec"]["podSets"]
        ] == [4]
        # a preemption: the Workload deactivated, Kueue suspends the job in place
        assert (await act.apply(Preempt(JOB, "capacity"))).result == "preempted"
        held = await job_now(api, lambda o: o["spec"]["suspend"] is True)
        assert held["metadata"]["uid"] == again["metadata"]["uid"]
        wl = await workload_of(api, again["metadata"]["uid"])
        assert wl["spec"]["active"] is False

    on_cluster(scenario, trainer=True, kueue=True, compression=1.0)


@pytest.mark.parametrize("step", Dying.STEPS)
def test_a_controller_killed_inside_a_queued_recreation_loses_and_duplicates_nothing(
    on_cluster, step: str
) -> None:
    async def scenario(cluster, api):
        cluster.add_cluster_queue("gpus", 8)
        cluster.add_local_queue("team", "gpus")
        first = await submit(api, queued(nodes=2))
        await workload_of(api, first["metadata"]["uid"])
        with pytest.raises(CrashError):
            await actuator(Dying(api.api_client, step)).apply(Start(JOB, 4, 256))
        outcomes = await actuator(api).resume_interrupted()
        expected = [] if step == "delete_configmap" else ["rescaled"]  # resumed: a resize
        assert [o.result for o in outcomes] == expected, outcomes
        obj = await job_now(api, resumed(4))
        assert obj["metadata"]["annotations"][keys.RECREATED_FROM] == first["metadata"]["uid"]
        assert await records(api) == []
        listed = [o async for page, _ in api.list_job_pages(TRAINJOB, "default") for o in page]
        assert [o["metadata"]["name"] for o in listed] == [NAME]  # no duplicate
        wl = await workload_of(api, obj["metadata"]["uid"], admitted)
        assert len(await workloads(api)) == 1
        assert wl["spec"]["podSets"][0]["count"] == 4
        await until("the Trainer runs it", lambda: _started(cluster, obj["metadata"]["uid"]))
        # Kueue admitted the owner's 2 nodes before Bellows held it; the copy started once
        starts = [(s[1], s[2]) for s in cluster.trainer.starts]
        assert starts == [(first["metadata"]["uid"], 2), (obj["metadata"]["uid"], 4)]

    on_cluster(scenario, trainer=True, kueue=True, compression=1.0)


def test_a_trainjob_at_its_size_activates_its_workload_whatever_its_initializers() -> None:
    """A queued TrainJob already at the target is not re-created: its Workload (with a podSet
    per initializer Job of the runtime too) is activated once its ``node`` count matches."""
    job = queued(nodes=2)
    job["metadata"].update(uid="u-1", resourceVersion="7")
    notes = job["metadata"]["annotations"]
    notes.update({keys.TARGET: "k=2,b=256", keys.PHASE: "patched"})

    def workload(counts: dict[str, int]) -> WorkloadView:
        return WorkloadView(
            "trainjob-x", "default", "w-1", "3", "u-1", "team", False, False, False, None,
            None, counts,
        )  # fmt: skip

    def plan(counts: dict[str, int]) -> Any:
        return plan_kueue_recreate(
            TRAINJOB, job, None, workload(counts), in_place=None, target=(2, 256),
            env={"GLOBAL_BATCH_SIZE": "256", "LOCAL_BATCH_SIZE": "128"}, requested=(2, 256),
            now=datetime.now(UTC),
        )  # fmt: skip

    step = plan({"dataset-initializer": 1, "node": 2})
    assert isinstance(step, PatchWorkload)
    assert step.active is True
    assert isinstance(plan({"dataset-initializer": 1, "node": 3}), AwaitWorkload)
