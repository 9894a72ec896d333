"""The emulated training operator behaves like the real one where Bellows depends on it."""

from __future__ import annotations

from bellows.autoscaler.decisions import Start
from bellows.kube import Actuator, PyTorchJobKind, keys

from .conftest import condition, wait_for
from .test_actuator import TORCH, submit

NAME = "resnet50-imagenet"


def test_suspend_resume_keeps_progress_resets_start_time_and_charges_a_restart(
    on_cluster, examples
):
    async def scenario(cluster, api):
        kind = PyTorchJobKind()
        made = await submit(api, examples)
        uid = made["metadata"]["uid"]
        assert cluster.operator.progress(uid) is None  # created suspended: never started
        suspended = await wait_for(api, kind, "default", NAME, lambda o: condition(o, "Suspended"))
        assert "startTime" not in suspended["status"]
        await Actuator(api).apply(Start(TORCH, 2, 256))
        running = await wait_for(api, kind, "default", NAME, lambda o: condition(o, "Running"))
        first = cluster.operator.progress(uid)
        await api.patch_job(kind, "default", NAME, {"spec": {"runPolicy": {"suspend": True}}})
        halted = await wait_for(api, kind, "default", NAME, lambda o: condition(o, "Suspended"))
        assert not condition(halted, "Running")
        kept = cluster.operator.progress(uid)
        assert kept.samples >= first.samples
        assert kept.gpus is None
        await api.patch_job(kind, "default", NAME, {"spec": {"runPolicy": {"suspend": False}}})
        resumed = await wait_for(api, kind, "default", NAME, lambda o: condition(o, "Running"))
        assert resumed["status"]["startTime"] >= running["status"]["startTime"]
        reasons = {c["type"]: c["reason"] for c in resumed["status"]["conditions"]}
        assert reasons["Suspended"] == "PyTorchJobResumed"
        assert cluster.operator.progress(uid).restarts == 2

    on_cluster(scenario, compression=1.0, restart_s=5.0)


def test_editing_a_running_job_does_not_reach_its_pods(on_cluster, examples):
    async def scenario(cluster, api):
        kind = PyTorchJobKind()
        made = await submit(api, examples)
        await Actuator(api).apply(Start(TORCH, 2, 256))
        obj = await api.get_job(kind, "default", NAME)
        spec = kind.scale_patch(obj, 4, {"GLOBAL_BATCH_SIZE": "512", "LOCAL_BATCH_SIZE": "128"})
        edited = await api.patch_job(kind, "default", NAME, {"spec": spec})
        assert edited["metadata"]["generation"] > obj["metadata"]["generation"]
        progress = cluster.operator.progress(made["metadata"]["uid"])
        assert (progress.gpus, progress.batch, progress.restarts) == (2, 256, 1)

    on_cluster(scenario, compression=1.0)


def test_a_per_gpu_batch_over_the_memory_limit_fails_the_job(on_cluster, examples):
    async def scenario(cluster, api):
        kind = PyTorchJobKind()
        job = examples["PyTorchJob"]
        job["metadata"]["annotations"][keys.REQUESTED] = "k=2,b=256"
        worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
        worker["replicas"] = 1  # 256 samples on one GPU
        worker["template"]["spec"]["containers"][0]["env"][1]["value"] = "256"  # LOCAL_BATCH_SIZE
        job["spec"]["runPolicy"]["suspend"] = False
        await submit(api, {"PyTorchJob": job, "ConfigMap": examples["ConfigMap"]})
        failed = await wait_for(api, kind, "default", NAME, lambda o: condition(o, "Failed"))
        message = next(
            c["message"] for c in failed["status"]["conditions"] if c["type"] == "Failed"
        )
        assert "CUDA out of memory: per-GPU batch 256" in message
        assert failed["status"]["completionTime"]
        # A finished job ignores suspend.
        await api.patch_job(kind, "default", NAME, {"spec": {"runPolicy": {"suspend": True}}})
        after = await api.get_job(kind, "default", NAME)
        assert not condition(after, "Suspended")

    on_cluster(scenario, compression=1.0)
