"""The actuator and the reader beside the emulated Kueue: Kueue jobs are sized through their
Workloads (never by ``suspend``), and refused only while Kueue cooperation is off."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from bellows.autoscaler.decisions import Preempt, Reject, Rescale, Start
from bellows.emulator import EmulatedCluster
from bellows.emulator.crds import kueue_crd_paths
from bellows.jobs import Allocation
from bellows.kube import Actuator, JobReader, KubeApi, MPIJobKind, PyTorchJobKind, keys
from bellows.kube.client import ConflictError, NotFoundError
from bellows.kube.kinds import KindAdapter
from bellows.kube.kueue import (
    GROUP,
    JOB_UID,
    KUEUE_QUEUE,
    LOCAL_QUEUES,
    VERSION,
    WORKLOADS,
    owned_workload,
    read_workload,
)
from bellows.kube.placement import (
    HOSTNAME,
    KUEUE_PREFERRED_TOPOLOGY,
    PINNED_NODES,
    TOPOLOGY_REQUEST,
    Placement,
)
from bellows.kube.reading import Arrived, Invalid

from .conftest import condition

NS = "default"
TORCH = "pytorchjob/default/resnet50-imagenet"
MPI = "mpijob/default/cifar10-horovod"


class Recording(KubeApi):
    """The real client, keeping every patch Bellows sends (to check it never writes suspend),
    and able to stop the controller after ``die_after`` writes (:class:`KilledError`)."""

    def __init__(self, api_client: k8s.ApiClient, *, die_after: int | None = None) -> None:
        super().__init__(api_client)
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.die_after = die_after
        self.on_workload_patch: Callable[[Mapping[str, Any]], Awaitable[None]] | None = None

    def _wrote(self) -> None:
        if self.die_after is not None and len(self.patches) >= self.die_after:
            raise KilledError

    async def patch_job(
        self, kind: KindAdapter, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        done = await super().patch_job(kind, namespace, name, patch)
        self.patches.append((kind.kind, copy.deepcopy(dict(patch))))
        self._wrote()
        return done

    async def patch_workload(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        done = await super().patch_workload(namespace, name, patch)
        self.patches.append(("Workload", copy.deepcopy(dict(patch))))
        if self.on_workload_patch is not None:
            await self.on_workload_patch(patch)
        self._wrote()
        return done

    def suspend_writes(self) -> list[dict[str, Any]]:
        return [p for k, p in self.patches if "runPolicy" in (p.get("spec") or {})]


class KilledError(Exception):
    """The controller died between two writes."""


Scenario = Callable[[EmulatedCluster, Recording], Awaitable[None]]


@pytest.fixture
def on_kueue(crds: list[Path], shared_data: Path) -> Callable[..., None]:
    """Run ``scenario(cluster, api)`` on a fresh emulated cluster with Kueue: ClusterQueue
    ``gpus`` (``quota`` GPUs) and LocalQueue ``team-a`` in ``default``."""

    def run(scenario: Scenario, *, quota: int = 8, limit_s: float = 60.0) -> None:
        async def main() -> None:
            paths = [*crds, *kueue_crd_paths(shared_data / "crds")]
            async with EmulatedCluster(crds=paths, kueue=True, compression=1.0) as cluster:
                cluster.add_cluster_queue("gpus", quota, strategy="StrictFIFO")
                cluster.add_local_queue("team-a", "gpus")
                api = Recording(cluster.api_client())
                try:
                    await asyncio.wait_for(scenario(cluster, api), limit_s)
                finally:
                    await asyncio.to_thread(api.api_client.close)

        asyncio.run(main())

    return run


async def submit(api: KubeApi, examples: dict[str, Any], kind: str = "PyTorchJob") -> None:
    """Create the example job in LocalQueue ``team-a`` (with its profile ConfigMap)."""
    core = k8s.CoreV1Api(api.api_client)
    custom = k8s.CustomObjectsApi(api.api_client)
    obj = copy.deepcopy(examples[kind])
    obj["metadata"]["labels"] = {KUEUE_QUEUE: "team-a"}
    if kind == "PyTorchJob":
        await asyncio.to_thread(core.create_namespaced_config_map, NS, examples["ConfigMap"])
        version, plural = "v1", "pytorchjobs"
    else:
        version, plural = "v2beta1", "mpijobs"
    await asyncio.to_thread(
        custom.create_namespaced_custom_object, "kubeflow.org", version, NS, plural, obj
    )


async def until(check: Callable[[], Awaitable[bool]], what: str, within_s: float = 15.0) -> None:
    """Wait for ``check()`` with a deadline, re-checking briefly."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def workload_of(api: KubeApi, kind: KindAdapter, name: str) -> dict[str, Any] | None:
    job = await api.get_job(kind, NS, name)
    assert job is not None
    listed = await api.list_workloads(NS, label_selector=f"{JOB_UID}={job['metadata']['uid']}")
    found = owned_workload(job, listed)
    return None if found is None else dict(found)


async def _has_workload(api: KubeApi, kind: KindAdapter, name: str) -> bool:
    return await workload_of(api, kind, name) is not None


async def running_at(api: KubeApi, kind: KindAdapter, name: str, gpus: int) -> bool:
    """The job runs (operator: Running) with ``gpus`` GPUs, and its Workload is admitted."""
    job = await api.get_job(kind, NS, name)
    workload = await workload_of(api, kind, name)
    return (
        job is not None
        and workload is not None
        and not job["spec"]["runPolicy"].get("suspend")
        and condition(job, "Running")
        and kind.view(job, ()).gpus == gpus
        and read_workload(workload).admitted
        and read_workload(workload).active
    )


# ----- cooperation off: refused, as before --------------------------------------------------------


def test_kueue_jobs_are_refused_while_cooperation_is_off(on_kueue, examples):
    async def scenario(cluster, api):
        await submit(api, examples)
        kind = PyTorchJobKind()
        await until(lambda: running_at(api, kind, "resnet50-imagenet", 2), "Kueue to admit it")
        before = await api.get_job(kind, NS, "resnet50-imagenet")
        outcome = await Actuator(api).apply(Start(TORCH, 4, 256))
        assert outcome.result == "refused"
        assert "controller.kueue.enabled" in outcome.detail
        assert "kueue.enabled" in outcome.detail
        after = await api.get_job(kind, NS, "resnet50-imagenet")
        assert after["spec"] == before["spec"]
        assert [k for k, _ in api.patches] == ["PyTorchJob"]  # the status line only
        seen = await JobReader(api).examine(kind, after)
        assert isinstance(seen, Invalid)
        assert seen.refused
        assert "controller.kueue.enabled" in seen.problem
        seen = await JobReader(api, kueue=True).examine(kind, after)
        assert isinstance(seen, Arrived)
        assert seen.view.queue == "team-a"

    on_kueue(scenario)


# ----- cooperation on ---------------------------------------------------------------------


def test_a_held_job_is_sized_and_kueue_admits_it(on_kueue, examples):
    async def scenario(cluster, api):
        kind = PyTorchJobKind()
        await submit(api, examples)
        act = Actuator(api, kueue=True)
        hold = await act.hold(TORCH)
        assert hold.result == "queued"
        workload = await workload_of(api, kind, "resnet50-imagenet")
        assert workload is not None
        assert workload["spec"]["active"] is False
        assert (await act.hold(TORCH)).result == "unchanged"

        async def evicted() -> bool:
            wl = await workload_of(api, kind, "resnet50-imagenet")
            job = await api.get_job(kind, NS, "resnet50-imagenet")
            return (
                wl is not None
                and not read_workload(wl).quota_reserved
                and job["spec"]["runPolicy"]["suspend"] is True
            )

        await until(evicted, "Kueue to keep the held job out")
        outcome = await act.apply(Start(TORCH, 4, 256))
        assert outcome.result == "started"
        job = await api.get_job(kind, NS, "resnet50-imagenet")
        notes = job["metadata"]["annotations"]
        assert (notes[keys.PHASE], notes[keys.ALLOCATION]) == ("done", "k=4,b=256")
        assert notes[keys.REQUESTED] == "k=2,b=256"
        await until(lambda: running_at(api, kind, "resnet50-imagenet", 4), "Kueue to admit 4")
        workload = await workload_of(api, kind, "resnet50-imagenet")
        assert read_workload(workload).pod_counts == {"worker": 4}
        progress = cluster.operator.progress(job["metadata"]["uid"])
        assert (progress.gpus, progress.batch) == (4, 256)
        assert (await act.apply(Start(TORCH, 4, 256))).result == "unchanged"
        assert api.suspend_writes() == []
        assert cluster.kueue.fights == []

    on_kueue(scenario)


def test_an_admitted_job_is_evicted_resized_and_readmitted(on_kueue, examples):
    async def scenario(cluster, api):
        kind = PyTorchJobKind()
        await submit(api, examples)
        await until(lambda: running_at(api, kind, "resnet50-imagenet", 2), "Kueue to admit it")
        act = Actuator(api, kueue=True)
        assert (await act.apply(Start(TORCH, 2, 256))).result == "started"
        await until(lambda: running_at(api, kind, "resnet50-imagenet", 2), "it to run again")
        outcome = await act.apply(Rescale(TORCH, 2, 256, 6, 384))
        assert outcome.result == "rescaled"
        await until(lambda: running_at(api, kind, "resnet50-imagenet", 6), "Kueue to admit 6")
        job = await api.get_job(kind, NS, "resnet50-imagenet")
        assert kind.view(job, ("GLOBAL_BATCH_SIZE",)).env == {"GLOBAL_BATCH_SIZE": ("384",)}
        progress = cluster.operator.progress(job["metadata"]["uid"])
        assert (progress.gpus, progress.batch) == (6, 384)
        # the start of a job Kueue already runs at the target: the journal alone, no restart;
        # the rescale: journal, Workload off, replicas + env, Workload on, journal
        assert [k for k, _ in api.patches] == [
            "PyTorchJob", "PyTorchJob", "Workload", "PyTorchJob", "Workload", "PyTorchJob",
        ]  # fmt: skip
        assert progress.restarts == 2  # Kueue's admission, then the rescale
        assert api.suspend_writes() == []
        assert cluster.kueue.fights == []
        reader = JobReader(api, kueue=True)
        seen = await reader.examine(kind, job)
        assert isinstance(seen, Arrived)
        assert seen.running == Allocation(6, 384)

    on_kueue(scenario)


def test_a_job_sized_beyond_what_is_free_waits_for_kueue_and_counts_as_running(on_kueue, examples):
    """Done means sized within the quota: the journal says running even while Kueue has not
    admitted it yet (here another Workload holds the quota until it is preempted)."""

    async def scenario(cluster, api):
        torch, mpi = PyTorchJobKind(), MPIJobKind()
        await submit(api, examples, "MPIJob")
        await until(lambda: running_at(api, mpi, "cifar10-horovod", 2), "the MPIJob to run")
        await submit(api, examples)
        act = Actuator(api, kueue=True)
        assert (await act.apply(Start(TORCH, 4, 256))).result == "started"
        job = await api.get_job(torch, NS, "resnet50-imagenet")
        assert job["spec"]["runPolicy"]["suspend"] is True  # 2 + 4 > 4: not admitted yet
        seen = await JobReader(api, kueue=True).examine(torch, job)
        assert isinstance(seen, Arrived)
        assert seen.running == Allocation(4, 256)
        assert (await act.apply(Preempt(MPI, "room for the PyTorchJob"))).result == "preempted"
        await until(lambda: running_at(api, torch, "resnet50-imagenet", 4), "Kueue to admit 4")
        mpi_job = await api.get_job(mpi, NS, "cifar10-horovod")
        assert mpi_job["spec"]["runPolicy"]["suspend"] is True
        assert mpi_job["metadata"]["annotations"][keys.PHASE] == "preempted"
        assert ("Preempted", "Warning") in await events_of(api, "cifar10-horovod")
        assert (await act.apply(Reject(MPI, "no room"))).result == "rejected"
        assert api.suspend_writes() == []
        assert cluster.kueue.fights == []

    on_kueue(scenario, quota=4)


def test_an_mpijob_gets_a_fresh_launcher(on_kueue, examples):
    async def scenario(cluster, api):
        kind = MPIJobKind()
        await submit(api, examples, "MPIJob")
        await until(lambda: running_at(api, kind, "cifar10-horovod", 2), "Kueue to admit it")
        act = Actuator(api, kueue=True)
        assert (await act.apply(Start(MPI, 3, 384))).result == "started"
        await until(lambda: running_at(api, kind, "cifar10-horovod", 3), "Kueue to admit 3")
        job = await api.get_job(kind, NS, "cifar10-horovod")
        batch = k8s.BatchV1Api(api.api_client)

        async def launcher_env() -> bool:
            with contextlib.suppress(k8s.ApiException):
                launcher = await asyncio.to_thread(
                    batch.read_namespaced_job, "cifar10-horovod-launcher", NS
                )
                env = launcher.spec.template.spec.containers[0].env
                return any(e.name == "GLOBAL_BATCH_SIZE" and e.value == "384" for e in env)
            return False

        await until(launcher_env, "the launcher to be recreated from the new spec")
        progress = cluster.operator.progress(job["metadata"]["uid"])
        assert (progress.gpus, progress.batch) == (3, 384)
        assert api.suspend_writes() == []
        assert cluster.kueue.fights == []

    on_kueue(scenario)


# ----- faults: killed between steps, Workload recreated -----------------------------------


@pytest.mark.parametrize("writes", [1, 2, 3, 4])
def test_a_controller_killed_between_any_two_steps_is_finished_by_the_next(
    on_kueue, examples, writes
):
    async def scenario(cluster, api):
        kind = PyTorchJobKind()
        await submit(api, examples)
        await until(lambda: running_at(api, kind, "resnet50-imagenet", 2), "Kueue to admit it")
        dying = Recording(api.api_client, die_after=writes)
        with pytest.raises(KilledError):
            await Actuator(dying, kueue=True).apply(Start(TORCH, 4, 256))
        job = await api.get_job(kind, NS, "resnet50-imagenet")
        phase = job["metadata"]["annotations"][keys.PHASE]
        assert phase == ("suspending" if writes < 3 else "patched")
        outcomes = await Actuator(api, kueue=True, halt_timeout_s=20).resume_interrupted()
        assert [o.result for o in outcomes] == ["rescaled"]
        await until(lambda: running_at(api, kind, "resnet50-imagenet", 4), "Kueue to admit 4")
        assert await Actuator(api, kueue=True).resume_interrupted() == []
        assert dying.suspend_writes() == api.suspend_writes() == []
        assert cluster.kueue.fights == []

    on_kueue(scenario)


def test_a_halt_killed_before_the_workload_is_deactivated_is_finished_on_restart(
    on_kueue, examples
):
    async def scenario(cluster, api):
        kind = PyTorchJobKind()
        await submit(api, examples)
        await until(
            lambda: _has_workload(api, kind, "resnet50-imagenet"), "Kueue to create the Workload"
        )
        dying = Recording(api.api_client, die_after=1)
        with pytest.raises(KilledError):
            await Actuator(dying, kueue=True).hold(TORCH)
        workload = await workload_of(api, kind, "resnet50-imagenet")
        assert workload is not None
        assert workload["spec"]["active"] is True
        outcomes = await Actuator(api, kueue=True).resume_interrupted()
        assert [o.result for o in outcomes] == ["queued"]
        workload = await workload_of(api, kind, "resnet50-imagenet")
        assert workload["spec"]["active"] is False
        assert await Actuator(api, kueue=True).resume_interrupted() == []

    on_kueue(scenario)


def test_a_workload_deleted_mid_rescale_is_recreated_and_deactivated_again(on_kueue, examples):
    async def scenario(cluster, api):
        kind = PyTorchJobKind()
        await submit(api, examples)
        await until(lambda: running_at(api, kind, "resnet50-imagenet", 2), "Kueue to admit it")
        custom = k8s.CustomObjectsApi(api.api_client)
        deleted: list[str] = []

        async def delete_once(patch: Mapping[str, Any]) -> None:
            if deleted or patch["spec"]["active"] is not False:
                return
            found = await workload_of(api, kind, "resnet50-imagenet")
            assert found is not None
            deleted.append(found["metadata"]["uid"])
            await asyncio.to_thread(
                custom.delete_namespaced_custom_object,
                GROUP, VERSION, NS, WORKLOADS, found["metadata"]["name"],
            )  # fmt: skip

        api.on_workload_patch = delete_once
        outcome = await Actuator(api, kueue=True).apply(Start(TORCH, 4, 256))
        assert outcome.result == "started"
        assert deleted
        await until(lambda: running_at(api, kind, "resnet50-imagenet", 4), "Kueue to admit 4")
        workload = await workload_of(api, kind, "resnet50-imagenet")
        assert workload["metadata"]["uid"] != deleted[0]  # Kueue's new one
        # The recreated Workload (active) was deactivated again before the job was patched.
        assert [p["spec"]["active"] for k, p in api.patches if k == "Workload"] == [
            False, False, True,
        ]  # fmt: skip
        assert api.suspend_writes() == []
        assert cluster.kueue.fights == []

    on_kueue(scenario)


def test_a_wait_for_kueue_times_out_as_pending(on_kueue, examples):
    """Kueue does not act (its controller down): the eviction never comes, and the call
    ends ``pending`` at the deadline, its journal left for a later call."""

    async def scenario(cluster, api):
        kind = PyTorchJobKind()
        await submit(api, examples)
        await until(lambda: running_at(api, kind, "resnet50-imagenet", 2), "Kueue to admit it")
        # Kueue's controller stops acting (as when it is down): the eviction never comes.
        cluster.kueue.reconcile = lambda: None  # type: ignore[method-assign]
        outcome = await Actuator(api, kueue=True, halt_timeout_s=0.5).apply(Start(TORCH, 4, 256))
        assert outcome.result == "pending"
        assert "evict" in outcome.detail
        job = await api.get_job(kind, NS, "resnet50-imagenet")
        assert job["metadata"]["annotations"][keys.PHASE] == "suspending"
        assert api.suspend_writes() == []

    on_kueue(scenario)


async def events_of(api: KubeApi, name: str) -> list[tuple[str, str]]:
    core = k8s.CoreV1Api(api.api_client)
    listed = await asyncio.to_thread(core.list_namespaced_event, NS)
    return [(e.reason, e.type) for e in listed.items if e.involved_object.name == name]


def test_client_lists_and_watches_kueue_objects(on_kueue, examples):
    async def scenario(cluster, api):
        queues, version = await api.list_kueue(LOCAL_QUEUES, NS)
        assert [q["metadata"]["name"] for q in queues] == ["team-a"]
        assert version
        assert (await api.get_kueue("clusterqueues", None, "gpus"))["spec"]["queueingStrategy"] == (
            "StrictFIFO"
        )
        assert await api.get_kueue("clusterqueues", None, "nothing") is None
        assert await api.get_workload(NS, "nothing") is None
        _, version = await api.list_kueue(WORKLOADS, NS)
        await submit(api, examples)
        async for event, obj in api.watch_kueue(WORKLOADS, NS, version, timeout_s=10):
            assert event == "ADDED"
            assert obj["metadata"]["labels"][JOB_UID]
            break
        workload = await workload_of(api, PyTorchJobKind(), "resnet50-imagenet")
        assert workload is not None
        assert await api.get_workload(NS, workload["metadata"]["name"]) is not None
        async for _, obj in api.watch_workloads(
            NS, version, name=workload["metadata"]["name"], timeout_s=10
        ):
            assert obj["metadata"]["name"] == workload["metadata"]["name"]
            break
        stale = {"metadata": {"resourceVersion": "1"}, "spec": {"active": False}}
        with pytest.raises(ConflictError):
            await api.patch_workload(NS, workload["metadata"]["name"], stale)
        with pytest.raises(NotFoundError):
            await api.patch_workload(NS, "nothing", {"spec": {"active": False}})

    on_kueue(scenario)


def test_a_job_that_finishes_once_let_in_still_gets_its_event(on_kueue, examples):
    """Kueue resumes the job as soon as its Workload is active again; a job that finishes
    before the journal says ``done`` was still started by this call: one Started Event."""

    async def scenario(cluster, api):
        kind = PyTorchJobKind()
        await submit(api, examples)
        custom = k8s.CustomObjectsApi(api.api_client)

        async def finish_at_once(patch: Mapping[str, Any]) -> None:
            if patch["spec"]["active"] is not True:
                return
            job = await api.get_job(kind, NS, "resnet50-imagenet")
            status = dict(job.get("status") or {})
            status["conditions"] = [
                *(status.get("conditions") or []),
                {"type": "Succeeded", "status": "True", "reason": "Done", "message": "done"},
            ]
            await asyncio.to_thread(
                custom.patch_namespaced_custom_object_status,
                "kubeflow.org", "v1", NS, "pytorchjobs", "resnet50-imagenet",
                {"status": status},
            )  # fmt: skip

        api.on_workload_patch = finish_at_once
        outcome = await Actuator(api, kueue=True).apply(Start(TORCH, 4, 256))
        assert (outcome.result, outcome.detail) == ("dropped", "succeeded")
        assert ("Started", "Normal") in await events_of(api, "resnet50-imagenet")

    on_kueue(scenario)


# ----- beside Kueue's topology-aware scheduling ---------------------------------------------------


class _Pins:
    """A node view that places every job on ``nodes``."""

    def __init__(self, nodes: tuple[str, ...]) -> None:
        self.nodes = nodes
        self.asked: list[tuple[str, int, bool]] = []

    def place_round(self, claims: Any, types: Any = None) -> None:
        return None

    def pin(
        self, job: str, gpus: int, gpus_per_pod: int, *, required: bool = True, gpu_type: str = ""
    ) -> Any:
        self.asked.append((job, gpus, required))
        return self.nodes

    def free_nodes(self) -> None:
        return None

    def free_nodes_by_type(self) -> None:
        return None

    def moves(self, job: str, gpus: int) -> bool:
        return False

    def job_type(self, job: str) -> None:
        return None


def test_on_a_tas_queue_the_sized_job_asks_kueue_for_its_nodes_and_lands_on_one(on_kueue, examples):
    """The node view placed the job (on a node that no longer holds it): the sizing patch
    asks Kueue for the fewest nodes (preferred on the hostname level) instead of pinning
    it; Kueue's BestFit puts it on the one node that holds it, and its pods bind there."""

    async def scenario(cluster, api):
        labels = {"nvidia.com/gpu.present": "true"}
        cluster.add_node("node-a", 2, labels=labels)
        cluster.add_node("node-b", 4, labels=labels)
        cluster.add_topology("hosts", [HOSTNAME])
        cluster.add_resource_flavor("tas", node_labels=labels, topology="hosts")
        cluster.add_cluster_queue("tas-gpus", {"tas": 8}, strategy="StrictFIFO")
        cluster.add_local_queue("team-t", "tas-gpus")
        core = k8s.CoreV1Api(api.api_client)
        custom = k8s.CustomObjectsApi(api.api_client)
        obj = copy.deepcopy(examples["PyTorchJob"])
        obj["metadata"]["labels"] = {KUEUE_QUEUE: "team-t"}
        await asyncio.to_thread(core.create_namespaced_config_map, NS, examples["ConfigMap"])
        await asyncio.to_thread(
            custom.create_namespaced_custom_object, "kubeflow.org", "v1", NS, "pytorchjobs", obj
        )
        kind, name = PyTorchJobKind(), "resnet50-imagenet"
        pins = _Pins(("node-a",))  # stale: node-a holds only 2
        act = Actuator(
            api, kueue=True, placement=Placement.NODES, pins=pins, topology=lambda job: True
        )
        assert (await act.hold(TORCH)).result == "queued"
        assert (await act.apply(Start(TORCH, 4, 256))).result == "started"
        assert set(pins.asked) == {(TORCH, 4, False)}  # counted in the view, only preferred
        job = await api.get_job(kind, NS, name)
        template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
        notes = template["metadata"]["annotations"]
        assert notes[KUEUE_PREFERRED_TOPOLOGY] == HOSTNAME
        assert notes[TOPOLOGY_REQUEST] == KUEUE_PREFERRED_TOPOLOGY
        assert PINNED_NODES not in notes  # no node pin written
        await until(lambda: running_at(api, kind, name, 4), "Kueue to admit 4 on one node")
        pods = await asyncio.to_thread(
            core.list_namespaced_pod, NS, label_selector=f"training.kubeflow.org/job-name={name}"
        )
        assert {p.spec.node_name for p in pods.items} == {"node-b"}
        assert {p.spec.node_selector[HOSTNAME] for p in pods.items} == {"node-b"}

    on_kueue(scenario)
