"""A restarted controller knows how far each running job has got (the journal's progress).

Before, ``adopt()`` priced every running job as if it had done no work, so a controller that
restarted would weigh restarts against the whole job instead of what is left of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
from kubernetes import client as k8s

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.emulator import EmulatedCluster
from bellows.kube import Actuator, JobReader, KubeApi, keys
from bellows.scaling import default_cluster
from bellows.service.clock import ServiceClock
from bellows.service.controller import Controller
from bellows.twin.replay import job_manifest, manifest_name
from tests.service.livecluster import NS, crds, jobs

SPEEDUP = 600.0  # one real second is ten cluster minutes


def _controller(api: KubeApi, clock: ServiceClock) -> Controller:
    return Controller(
        api=api,
        autoscaler=Autoscaler(AutoscalerConfig(), capacity=8, cluster=default_cluster()),
        actuator=Actuator(api),
        reader=JobReader(api, namespace=NS),
        now=clock.now,
        wall_to_clock=clock.at,
    )


@pytest.mark.slow
async def test_a_restarted_controller_adopts_running_jobs_with_their_progress() -> None:
    trace = [
        dataclasses.replace(j, spec=dataclasses.replace(j.spec, work=j.spec.work * 50))
        for j in jobs(2, seed=12, categories=(1,))
    ]
    async with EmulatedCluster(
        crds=crds(), compression=SPEEDUP, restart_s=60.0, namespaces=(NS,)
    ) as kube:
        api = KubeApi(kube.api_client())
        custom = k8s.CustomObjectsApi(api.api_client)
        names = []
        for i, job in enumerate(trace):
            ref, body = job_manifest(job, i, namespace=NS)
            group, version = body["apiVersion"].split("/")
            await asyncio.to_thread(
                custom.create_namespaced_custom_object,
                group, version, NS, ref.kind.lower() + "s", body,
            )  # fmt: skip
            names.append((ref.key, manifest_name(job)))
        first = _controller(api, ServiceClock(speedup=SPEEDUP))
        await first.rebuild()  # its fill starts both jobs
        assert set(first.autoscaler.allocations) == {key for key, _ in names}

        def objects() -> dict[str, dict[str, object]]:
            store = kube.store
            out = {}
            for resource in ("kubeflow.org/v1/pytorchjobs", "kubeflow.org/v2beta1/mpijobs"):
                for obj in store.list_objects(store.resources[resource], NS)[0]:
                    out[obj["metadata"]["name"]] = obj
            return out

        deadline = time.monotonic() + 20
        while not all(
            (objects()[name]["metadata"].get("annotations") or {}).get(keys.PROGRESS)
            for _, name in names
        ):
            assert time.monotonic() < deadline, "the resumes did not journal their progress"
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.5)  # fifteen cluster minutes of training
        clock = ServiceClock(speedup=SPEEDUP)
        second = _controller(api, clock)  # the first one is gone: a new process, a new clock
        await second.rebuild()
        for key, name in names:
            uid = objects()[name]["metadata"]["uid"]
            truth = kube.operator.progress(uid)
            assert truth is not None
            assert truth.samples > 0.02 * truth.work  # it has got somewhere
            estimate = second.autoscaler.estimated_done(key, clock.now())
            assert estimate == pytest.approx(truth.samples, rel=0.15), (key, estimate, truth)
