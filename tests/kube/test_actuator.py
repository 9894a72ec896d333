"""End to end on the emulated cluster: decisions applied through the real client."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from kubeflow.training import (
    KubeflowOrgV1PyTorchJob,
    KubeflowOrgV1PyTorchJobSpec,
    KubeflowOrgV1ReplicaSpec,
    KubeflowOrgV1RunPolicy,
    TrainingClient,
)
from kubernetes import client as k8s

from bellows.autoscaler.decisions import Preempt, Reject, Rescale, Start
from bellows.kube import Actuator, KubeApi, MPIJobKind, PyTorchJobKind, keys

from .conftest import condition, wait_for

TORCH = "pytorchjob/default/resnet50-imagenet"
MPI = "mpijob/default/cifar10-horovod"


async def submit(api, examples, kind="PyTorchJob"):
    core = k8s.CoreV1Api(api.api_client)
    custom = k8s.CustomObjectsApi(api.api_client)
    if kind == "PyTorchJob":
        await asyncio.to_thread(core.create_namespaced_config_map, "default", examples["ConfigMap"])
        return await asyncio.to_thread(
            custom.create_namespaced_custom_object,
            "kubeflow.org",
            "v1",
            "default",
            "pytorchjobs",
            examples["PyTorchJob"],
        )
    return await asyncio.to_thread(
        custom.create_namespaced_custom_object,
        "kubeflow.org",
        "v2beta1",
        "default",
        "mpijobs",
        examples["MPIJob"],
    )


async def events_of(api, name):
    core = k8s.CoreV1Api(api.api_client)
    listed = await asyncio.to_thread(core.list_namespaced_event, "default")
    return [(e.reason, e.type) for e in listed.items if e.involved_object.name == name]


def torch_model(examples) -> KubeflowOrgV1PyTorchJob:
    """The example PyTorchJob built from the kubeflow-training models."""
    worker = examples["PyTorchJob"]["spec"]["pytorchReplicaSpecs"]["Worker"]
    c = worker["template"]["spec"]["containers"][0]
    container = k8s.V1Container(
        name="pytorch",
        image=c["image"],
        command=c["command"],
        env=[k8s.V1EnvVar(name=e["name"], value=e["value"]) for e in c["env"]],
        resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": 1}),
    )
    return KubeflowOrgV1PyTorchJob(
        api_version="kubeflow.org/v1",
        kind="PyTorchJob",
        metadata=k8s.V1ObjectMeta(
            name="resnet50-imagenet",
            namespace="default",
            annotations=examples["PyTorchJob"]["metadata"]["annotations"],
        ),
        spec=KubeflowOrgV1PyTorchJobSpec(
            run_policy=KubeflowOrgV1RunPolicy(suspend=True),
            pytorch_replica_specs={
                "Worker": KubeflowOrgV1ReplicaSpec(
                    replicas=2,
                    restart_policy="OnFailure",
                    template=k8s.V1PodTemplateSpec(spec=k8s.V1PodSpec(containers=[container])),
                )
            },
        ),
    )


def test_pytorchjob_start_rescale_complete(on_cluster, examples):
    async def scenario(cluster, api):
        core = k8s.CoreV1Api(api.api_client)
        await asyncio.to_thread(core.create_namespaced_config_map, "default", examples["ConfigMap"])
        trainer = TrainingClient(client_configuration=cluster.configuration(), namespace="default")
        await asyncio.to_thread(trainer.create_job, job=torch_model(examples))
        act = Actuator(api)
        assert (await act.apply(Start(TORCH, 2, 256))).result == "started"
        kind = PyTorchJobKind()
        obj = await api.get_job(kind, "default", "resnet50-imagenet")
        first_start = obj["status"]["startTime"]
        outcome = await act.apply(Rescale(TORCH, 2, 256, 4, 512))
        assert outcome.result == "rescaled", outcome
        obj = await api.get_job(kind, "default", "resnet50-imagenet")
        notes = obj["metadata"]["annotations"]
        assert (notes[keys.PHASE], notes[keys.ALLOCATION], notes[keys.REQUESTED]) == (
            "done",
            "k=4,b=512",
            "k=2,b=256",
        )
        assert obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
        assert obj["status"]["startTime"] >= first_start
        progress = cluster.operator.progress(obj["metadata"]["uid"])
        assert (progress.gpus, progress.batch, progress.restarts) == (4, 512, 2)
        # The same decision again changes nothing.
        assert (await act.apply(Rescale(TORCH, 2, 256, 4, 512))).result == "unchanged"
        done = await wait_for(
            api, kind, "default", "resnet50-imagenet", lambda o: condition(o, "Succeeded")
        )
        assert done["status"]["completionTime"]
        assert await asyncio.to_thread(trainer.is_job_succeeded, "resnet50-imagenet")
        assert sorted(r for r, _ in await events_of(api, "resnet50-imagenet")) == [
            "Rescaled",
            "Started",
        ]
        assert (await act.apply(Rescale(TORCH, 4, 512, 2, 256))).result == "dropped"

    on_cluster(scenario, compression=20_000.0)


def test_mpijob_rescale_recreates_the_stale_launcher(on_cluster, examples):
    async def scenario(cluster, api):
        await submit(api, examples, "MPIJob")
        act = Actuator(api)
        assert (await act.apply(Start(MPI, 2, 256))).result == "started"
        launcher = await api.get_batch_job("default", "cifar10-horovod-launcher")
        assert launcher["spec"]["suspend"] is False
        assert (await act.apply(Rescale(MPI, 2, 256, 4, 512))).result == "rescaled"
        fresh = await api.get_batch_job("default", "cifar10-horovod-launcher")
        assert fresh["metadata"]["uid"] != launcher["metadata"]["uid"]
        env = fresh["spec"]["template"]["spec"]["containers"][0]["env"]
        assert env == [{"name": "GLOBAL_BATCH_SIZE", "value": "512"}]
        obj = await api.get_job(MPIJobKind(), "default", "cifar10-horovod")
        progress = cluster.operator.progress(obj["metadata"]["uid"])
        assert (progress.gpus, progress.batch) == (4, 512)

    on_cluster(scenario, compression=1.0)


def test_without_the_launcher_trick_the_mpijob_keeps_its_old_batch(on_cluster, examples):
    """The emulated mpi-operator reproduces mpi-operator#687, which the actuator works around."""

    async def scenario(cluster, api):
        await submit(api, examples, "MPIJob")
        kind = MPIJobKind()
        await Actuator(api).apply(Start(MPI, 2, 256))
        obj = await api.get_job(kind, "default", "cifar10-horovod")
        await api.patch_job(
            kind, "default", "cifar10-horovod", {"spec": {"runPolicy": {"suspend": True}}}
        )
        await wait_for(api, kind, "default", "cifar10-horovod", lambda o: condition(o, "Suspended"))
        spec = kind.scale_patch(obj, 4, {"GLOBAL_BATCH_SIZE": "512"})
        await api.patch_job(
            kind, "default", "cifar10-horovod", {"spec": spec | {"runPolicy": {"suspend": False}}}
        )
        await wait_for(api, kind, "default", "cifar10-horovod", lambda o: condition(o, "Running"))
        progress = cluster.operator.progress(obj["metadata"]["uid"])
        assert (progress.gpus, progress.batch) == (4, 256)

    on_cluster(scenario, compression=1.0)


class Interfering(KubeApi):
    """A KubeApi whose first job patch is preceded by another client's write."""

    def __init__(self, api_client, action):
        super().__init__(api_client)
        self.action = action
        self.patches = 0

    async def patch_job(self, kind, namespace, name, patch):
        self.patches += 1
        await self.action(self, kind, namespace, name, self.patches)
        return await super().patch_job(kind, namespace, name, patch)


def test_a_conflict_is_reread_and_reapplied_without_undoing_the_other_write(on_cluster, examples):
    async def scenario(cluster, api):
        await submit(api, examples)

        async def label_once(self, kind, ns, name, count):
            if count == 1:
                await KubeApi.patch_job(
                    self, kind, ns, name, {"metadata": {"labels": {"team": "a"}}}
                )

        racing = Interfering(api.api_client, label_once)
        assert (await Actuator(racing).apply(Start(TORCH, 2, 256))).result == "started"
        obj = await api.get_job(PyTorchJobKind(), "default", "resnet50-imagenet")
        assert obj["metadata"]["labels"] == {"team": "a"}
        assert obj["spec"]["runPolicy"]["suspend"] is False
        assert racing.patches == 3  # the conflicting one, then patch and resume

    on_cluster(scenario, compression=1.0)


def test_a_job_deleted_mid_rescale_is_dropped(on_cluster, examples):
    async def scenario(cluster, api):
        await submit(api, examples)
        await Actuator(api).apply(Start(TORCH, 2, 256))
        custom = k8s.CustomObjectsApi(api.api_client)

        async def delete_after_suspend(self, kind, ns, name, count):
            if count == 2:
                await asyncio.to_thread(
                    custom.delete_namespaced_custom_object,
                    "kubeflow.org",
                    "v1",
                    ns,
                    "pytorchjobs",
                    name,
                )

        outcome = await Actuator(Interfering(api.api_client, delete_after_suspend)).apply(
            Rescale(TORCH, 2, 256, 4, 512)
        )
        assert (outcome.result, outcome.detail) == ("dropped", "deleted")

    on_cluster(scenario, compression=1.0)


class CrashError(Exception):
    pass


def test_a_controller_killed_between_suspend_and_resume_is_finished_by_the_next(
    on_cluster, examples
):
    async def scenario(cluster, api):
        await submit(api, examples, "MPIJob")
        await Actuator(api).apply(Start(MPI, 2, 256))

        async def die_after_patch(self, kind, ns, name, count):
            if count == 3:  # suspend, patch replicas+env: then the controller dies
                raise CrashError

        with contextlib.suppress(CrashError):
            await Actuator(Interfering(api.api_client, die_after_patch)).apply(
                Rescale(MPI, 2, 256, 4, 512)
            )
        kind = MPIJobKind()
        obj = await api.get_job(kind, "default", "cifar10-horovod")
        assert obj["metadata"]["annotations"][keys.PHASE] == "patched"
        assert obj["spec"]["runPolicy"]["suspend"] is True
        outcomes = await Actuator(api).resume_interrupted()
        assert [o.result for o in outcomes] == ["rescaled"]
        obj = await api.get_job(kind, "default", "cifar10-horovod")
        assert obj["metadata"]["annotations"][keys.ALLOCATION] == "k=4,b=512"
        progress = cluster.operator.progress(obj["metadata"]["uid"])
        assert (progress.gpus, progress.batch, progress.restarts) == (4, 512, 2)
        assert await Actuator(api).resume_interrupted() == []

    on_cluster(scenario, compression=1.0)


def test_reject_preempt_and_refusals(on_cluster, examples):
    async def scenario(cluster, api):
        await submit(api, examples)
        act = Actuator(api)
        kind = PyTorchJobKind()
        assert (await act.apply(Reject(TORCH, "no GPUs free"))).result == "rejected"
        obj = await api.get_job(kind, "default", "resnet50-imagenet")
        assert obj["spec"]["runPolicy"]["suspend"] is True
        assert obj["metadata"]["annotations"][keys.STATUS] == "rejected: no GPUs free"
        assert (await act.apply(Reject(TORCH, "no GPUs free"))).result == "unchanged"
        await act.apply(Start(TORCH, 1, 128))
        assert (await act.apply(Preempt(TORCH, "a node was lost"))).result == "preempted"
        assert ("Rejected", "Warning") in await events_of(api, "resnet50-imagenet")
        # A Kueue-managed job is refused with an Event and left alone (Kueue cooperation off).
        mpi = examples["MPIJob"]
        mpi["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a"}
        await submit(api, {"MPIJob": mpi}, "MPIJob")
        before = await api.get_job(MPIJobKind(), "default", "cifar10-horovod")
        outcome = await act.apply(Start(MPI, 2, 256))
        assert outcome.result == "refused"
        assert "Kueue" in outcome.detail
        assert "controller.kueue.enabled" in outcome.detail
        after = await api.get_job(MPIJobKind(), "default", "cifar10-horovod")
        assert after["spec"] == before["spec"]
        assert ("Refused", "Warning") in await events_of(api, "cifar10-horovod")

    on_cluster(scenario, compression=1.0)


def test_jobs_without_annotations_are_never_patched(on_cluster, examples):
    async def scenario(cluster, api):
        plain = examples["PyTorchJob"]
        plain["metadata"]["annotations"] = {"team": "x"}
        await submit(api, {"PyTorchJob": plain, "ConfigMap": examples["ConfigMap"]})
        act = Actuator(api)
        assert (await act.apply(Start(TORCH, 2, 256))).result == "refused"
        assert await act.resume_interrupted() == []
        job_writes = [w[0] for w in cluster.store.writes if w[1] == "kubeflow.org/v1/pytorchjobs"]
        assert job_writes[0] == "create"
        assert set(job_writes[1:]) == {"update/status"}
        obj = await api.get_job(PyTorchJobKind(), "default", "resnet50-imagenet")
        assert obj["metadata"]["generation"] == 1
        assert obj["metadata"]["annotations"] == {"team": "x"}
        assert await events_of(api, "resnet50-imagenet") == []

    on_cluster(scenario, compression=1.0)


def test_a_job_submitted_running_is_held_until_started(on_cluster, examples):
    async def scenario(cluster, api):
        job = examples["PyTorchJob"]
        job["spec"]["runPolicy"]["suspend"] = False
        await submit(api, {"PyTorchJob": job, "ConfigMap": examples["ConfigMap"]})
        kind = PyTorchJobKind()
        await wait_for(api, kind, "default", "resnet50-imagenet", lambda o: condition(o, "Running"))
        act = Actuator(api)
        assert (await act.hold(TORCH)).result == "queued"
        held = await api.get_job(kind, "default", "resnet50-imagenet")
        notes = held["metadata"]["annotations"]
        assert held["spec"]["runPolicy"]["suspend"] is True
        assert (notes[keys.PHASE], notes[keys.REQUESTED]) == ("queued", "k=2,b=256")
        assert keys.SUSPENDED_AT in notes
        # Start waits for the operator to confirm the suspension, then patches and resumes.
        assert (await act.apply(Start(TORCH, 3, 384))).result == "started"
        progress = cluster.operator.progress(held["metadata"]["uid"])
        assert (progress.gpus, progress.batch, progress.restarts) == (3, 384, 2)

    on_cluster(scenario, compression=1.0)


class Gated(KubeApi):
    """A KubeApi that records whose jobs it reads, and whose watches of a job (the waits
    for the operator) start only once ``gate`` is set."""

    def __init__(self, api_client, gate):
        super().__init__(api_client)
        self.gate = gate
        self.watching = asyncio.Event()
        self.reads = []

    async def get_job(self, kind, namespace, name):
        self.reads.append(name)
        return await super().get_job(kind, namespace, name)

    async def watch_jobs(self, kind, namespace, resource_version, **options):
        self.watching.set()
        await self.gate.wait()
        async for item in super().watch_jobs(kind, namespace, resource_version, **options):
            yield item


def set_condition(cluster, name, condition, **status):
    """Write what an operator would: ``condition`` True on the PyTorchJob ``name``."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def change(obj):
        found = obj.setdefault("status", {}).setdefault("conditions", [])
        found.append({"type": condition, "status": "True", "lastTransitionTime": stamp})
        obj["status"].update(status)
        return obj

    res = cluster.store.resources["kubeflow.org/v1/pytorchjobs"]
    cluster.store.update_with(res, "default", name, change, subresource="status")


def test_jobs_are_driven_a_few_at_a_time_and_a_wait_gives_its_turn_up(on_cluster, examples):
    async def scenario(cluster, api):
        await submit(api, examples)
        await submit(api, examples, "MPIJob")
        gate = asyncio.Event()
        gate.set()
        one = Gated(api.api_client, gate)
        act = Actuator(one, max_active=1)
        both = await asyncio.gather(act.apply(Start(TORCH, 2, 256)), act.apply(Start(MPI, 2, 256)))
        assert [o.result for o in both] == ["started", "started"]
        # one job at a time: each is read, patched and read again before the other is read
        first = one.reads[0]
        assert one.reads == sorted(one.reads, key=lambda name: name != first), one.reads
        # a rescale waiting for the operator to stop the pods lets another job be started
        set_condition(cluster, "resnet50-imagenet", "Running", startTime="2024-01-01T00:00:00Z")
        other = examples["PyTorchJob"]
        other["metadata"]["name"] = "resnet50-other"
        custom = k8s.CustomObjectsApi(api.api_client)
        await asyncio.to_thread(
            custom.create_namespaced_custom_object,
            "kubeflow.org", "v1", "default", "pytorchjobs", other,
        )  # fmt: skip
        gate.clear()
        gated = Gated(api.api_client, gate)
        act = Actuator(gated, max_active=1)
        rescale = asyncio.create_task(act.apply(Rescale(TORCH, 2, 256, 4, 512)))
        await gated.watching.wait()
        started = await act.apply(Start("pytorchjob/default/resnet50-other", 2, 256))
        assert started.result == "started"
        assert not rescale.done()
        set_condition(cluster, "resnet50-imagenet", "Suspended")  # the operator stopped it
        gate.set()
        assert (await rescale).result == "rescaled"

    on_cluster(scenario, operator=False)
