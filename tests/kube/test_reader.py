"""The reader: opted-in jobs as observations, over list + watch, through a 410."""

from __future__ import annotations

import asyncio

from kubernetes import client as k8s

from bellows.autoscaler.decisions import Start
from bellows.jobs import Allocation
from bellows.kube import (
    Actuator,
    Arrived,
    Deleted,
    Finished,
    Invalid,
    JobReader,
    PyTorchJobKind,
    keys,
)

from .test_actuator import TORCH, submit


async def next_of(stream, limit_s=10.0):
    return await asyncio.wait_for(anext(stream), limit_s)


def test_observe_arrival_problems_completion_deletion_and_expiry(on_cluster, examples):
    async def scenario(cluster, api):
        reader = JobReader(api)
        stream = reader.observe()
        await submit(api, examples)
        seen = await next_of(stream)
        assert isinstance(seen, Arrived)
        assert (seen.spec.name, seen.spec.batch_size, seen.running) == (TORCH, 256, None)
        bad = examples["MPIJob"]
        bad["metadata"]["annotations"][keys.MAX_GPUS] = "many"
        await submit(api, {"MPIJob": bad}, "MPIJob")
        problem = await next_of(stream)
        assert isinstance(problem, Invalid)
        assert problem.job == "mpijob/default/cifar10-horovod"
        assert "bellows.io/max-gpus='many'" in problem.problem
        act = Actuator(api)
        assert (await act.report_problem(problem.job, problem.problem)).result == "invalid"
        assert (await act.report_problem(problem.job, problem.problem)).result == "unchanged"
        # After an expired watch (history compacted, stream cut) the reader lists again.
        cluster.store.compact()
        cluster.store.close_watches()
        assert (await act.apply(Start(TORCH, 4, 512))).result == "started"
        snapshot = await reader.snapshot()
        running = [o for o in snapshot if isinstance(o, Arrived)]
        assert [o.running for o in running] == [Allocation(4, 512)]
        assert running[0].spec.batch_size == 256  # the owner's ask, kept in bellows.io/requested
        finished = await next_of(stream)
        assert finished == Finished(TORCH, "Succeeded")
        custom = k8s.CustomObjectsApi(api.api_client)
        await asyncio.to_thread(
            custom.delete_namespaced_custom_object,
            "kubeflow.org",
            "v1",
            "default",
            "pytorchjobs",
            "resnet50-imagenet",
        )
        assert await next_of(stream) == Deleted(TORCH)
        await stream.aclose()

    on_cluster(scenario, compression=50_000.0)


def test_invalid_annotations_get_an_event_and_a_status_and_no_spec_change(on_cluster, examples):
    async def scenario(cluster, api):
        job = examples["PyTorchJob"]
        job["metadata"]["annotations"][keys.MIN_BATCH] = "1024"
        made = await submit(api, {"PyTorchJob": job, "ConfigMap": examples["ConfigMap"]})
        [problem] = await JobReader(api).snapshot()
        assert isinstance(problem, Invalid)
        await Actuator(api).report_problem(problem.job, problem.problem)
        obj = await api.get_job(PyTorchJobKind(), "default", "resnet50-imagenet")
        status = obj["metadata"]["annotations"][keys.STATUS]
        assert status.startswith("not managed: bellows.io/min-batch-size='1024' is invalid")
        assert "expected <= bellows.io/max-batch-size (512)" in status
        assert obj["spec"] == made["spec"]
        core = k8s.CoreV1Api(api.api_client)
        events = await asyncio.to_thread(core.list_namespaced_event, "default")
        [event] = events.items
        assert (event.reason, event.type, event.involved_object.uid) == (
            "InvalidSettings",
            "Warning",
            made["metadata"]["uid"],
        )

    on_cluster(scenario, compression=1.0)
