"""The pipeline component's logic on the emulated cluster: submit, get sized, finish, report."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from kubernetes import client as k8s

from bellows.autoscaler.decisions import Start
from bellows.emulator.crds import trainer_crd_paths
from bellows.inputs import SpecError
from bellows.kube import Actuator, PyTorchJobKind, keys
from bellows.kube.adapters import ALL_KINDS, TRAINJOB
from bellows.kube.kinds import parse_time
from bellows.kube.pipeline_job import job_manifest, run_job

from .conftest import condition, wait_for

NAME = "resnet50-pipeline"


@pytest.fixture(scope="module")
def crds(shared_data: Path) -> list[Path]:
    """The Kubeflow v1 CRDs and Trainer v2.3.0's (for the TrainJob path)."""
    kubeflow = sorted((shared_data / "crds").glob("*.yaml"))
    return [*kubeflow, *trainer_crd_paths(shared_data / "crds")]


def manifest(kind="PyTorchJob", **changes):
    settings = {
        "kind": kind,
        "name": NAME,
        "namespace": "default",
        "image": "ghcr.io/example/resnet50-train:1.0",
        "command": ["torchrun", "/workspace/train.py"],
        "gpus": 1,
        "batch": 64,
        "min_batch": 64,
        "max_batch": 512,
        "max_gpus": 8,
        "max_batch_per_gpu": 128,
        "work": 6000,
        "profile_configmap": "resnet50-profile",
    }
    settings.update(changes)
    return job_manifest(**settings)


def test_the_job_runs_as_bellows_sizes_it_and_its_outcome_is_read_back(on_cluster, examples):
    async def scenario(cluster, api):
        core = k8s.CoreV1Api(api.api_client)
        await asyncio.to_thread(core.create_namespaced_config_map, "default", examples["ConfigMap"])
        step = asyncio.create_task(
            asyncio.to_thread(run_job, cluster.api_client(), manifest(), timeout_s=25, poll_s=0.05)
        )
        kind = PyTorchJobKind()
        while (await api.get_job(kind, "default", NAME)) is None:
            await asyncio.sleep(0.02)
        await wait_for(api, kind, "default", NAME, lambda o: condition(o, "Suspended"))
        # What the controller does once it sizes the job: 4 GPUs, global batch 256.
        await Actuator(api).apply(Start(f"pytorchjob/default/{NAME}", 4, 256))
        outcome = await step
        final = await api.get_job(kind, "default", NAME)
        assert outcome.phase == "Succeeded"
        assert condition(final, "Succeeded")
        assert (outcome.gpus, outcome.batch) == (4, 256)
        assert final["metadata"]["annotations"][keys.ALLOCATION] == "k=4,b=256"
        created = parse_time(final["metadata"]["creationTimestamp"])
        done = parse_time(final["status"]["completionTime"])
        assert outcome.jct_s == pytest.approx((done - created).total_seconds())
        assert outcome.jct_s >= 1  # timestamps in whole seconds: the run lasts a few

    on_cluster(scenario, compression=4.0, restart_s=1.0)


def test_a_trainjob_is_followed_across_its_recreation_to_its_outcome(on_cluster, examples):
    async def scenario(cluster, api):
        core = k8s.CoreV1Api(api.api_client)
        await asyncio.to_thread(core.create_namespaced_config_map, "default", examples["ConfigMap"])
        step = asyncio.create_task(
            asyncio.to_thread(
                run_job, cluster.api_client(), manifest("TrainJob"), timeout_s=25, poll_s=0.01,
                gone_s=5.0,
            )
        )  # fmt: skip
        while (first := await api.get_job(TRAINJOB, "default", NAME)) is None:
            await asyncio.sleep(0.02)
        await wait_for(api, TRAINJOB, "default", NAME, lambda o: condition(o, "Suspended"))
        # the controller sizes it to 4 nodes: spec.trainer is immutable, so a re-creation
        act = Actuator(api, kinds=ALL_KINDS)
        assert (await act.apply(Start(f"trainjob/default/{NAME}", 4, 256))).result == "started"
        outcome = await step
        final = await api.get_job(TRAINJOB, "default", NAME)
        assert final["metadata"]["uid"] != first["metadata"]["uid"]  # the copy finished
        assert final["metadata"]["annotations"][keys.RECREATED_FROM] == first["metadata"]["uid"]
        assert condition(final, "Complete")
        assert (outcome.phase, outcome.gpus, outcome.batch) == ("Succeeded", 4, 256)
        assert cluster.trainer.pod_env(final["metadata"]["uid"])["PET_NNODES"] == "4"
        # the JCT counts from the submission (the first object), not from the copy
        submitted = parse_time(first["metadata"]["creationTimestamp"])
        complete = next(c for c in final["status"]["conditions"] if c["type"] == "Complete")
        done = parse_time(complete["lastTransitionTime"])
        assert outcome.jct_s == pytest.approx((done - submitted).total_seconds())

    on_cluster(scenario, trainer=True, compression=4.0, restart_s=1.0)


def test_a_job_deleted_for_good_is_reported_gone(on_cluster):
    async def scenario(cluster, api):
        made = manifest()  # nothing sizes it here; its owner deletes it
        step = asyncio.create_task(
            asyncio.to_thread(
                run_job, cluster.api_client(), made, timeout_s=20, poll_s=0.02, gone_s=0.3
            )
        )
        deadline = time.monotonic() + 20.0
        deleted: object = False
        while not deleted:  # the operator may write the job between our read and the delete
            assert time.monotonic() < deadline, "the job was never deleted"
            obj = await api.get_job(PyTorchJobKind(), "default", NAME)
            if obj is None:
                await asyncio.sleep(0.02)
                continue
            meta = obj["metadata"]
            deleted = await api.delete_job(
                PyTorchJobKind(), "default", NAME, uid=meta["uid"],
                resource_version=meta["resourceVersion"],
            )  # fmt: skip
        with pytest.raises(LookupError, match=f"PyTorchJob default/{NAME} was deleted"):
            await step

    on_cluster(scenario)


def test_a_job_bellows_never_starts_times_out_naming_it(on_cluster):
    async def scenario(cluster, api):
        made = manifest()  # its profile ConfigMap absent; nothing sizes it here
        with pytest.raises(TimeoutError, match=f"PyTorchJob default/{NAME}"):
            await asyncio.to_thread(run_job, cluster.api_client(), made, timeout_s=0.3, poll_s=0.05)
        assert await api.get_job(PyTorchJobKind(), "default", NAME) is not None

    on_cluster(scenario)


def test_the_manifests_opt_in_and_carry_the_ask():
    torch = manifest(gpus=2, batch=256)
    assert torch["metadata"]["annotations"][keys.MAX_GPUS] == "8"
    assert keys.opted_in(torch["metadata"]["annotations"])
    worker = torch["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert torch["spec"]["runPolicy"]["suspend"] is True
    assert worker["replicas"] == 2
    env = {e["name"]: e["value"] for e in worker["template"]["spec"]["containers"][0]["env"]}
    assert env == {"GLOBAL_BATCH_SIZE": "256", "LOCAL_BATCH_SIZE": "128"}
    train = manifest("TrainJob", gpus=2, batch=256)
    assert train["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert train["spec"]["suspend"] is True
    assert train["spec"]["trainer"]["numNodes"] == 2
    assert train["spec"]["runtimeRef"] == {"name": "torch-distributed"}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"kind": "MPIJob"}, "kind"),
        ({"name": "Bad_Name"}, "name"),
        ({"min_batch": 600}, keys.MIN_BATCH),
        ({"gpus": 9}, "gpus"),
        ({"gpus": 3, "batch": 64}, "batch"),
        ({"command": []}, "command"),
    ],
)
def test_bad_input_names_the_field(changes, field):
    with pytest.raises(SpecError) as raised:
        manifest(**changes)
    assert raised.value.field == field
