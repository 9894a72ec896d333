"""MultiKueue: an opted-in job whose ``spec.runPolicy.managedBy`` names another controller is
skipped, never written to, and said so once (an Event and ``bellows_jobs_skipped``), while
the jobs beside it are scheduled as usual."""

from __future__ import annotations

import asyncio
import copy
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.bus.events import JobArrived, JobCompleted
from bellows.bus.events import Outcome as BusOutcome
from bellows.emulator import ApiError, EmulatedCluster
from bellows.kube import Actuator, JobReader, KubeApi, MPIJobKind, PyTorchJobKind, Skipped
from bellows.kube.kinds import KUEUE_QUEUE, MULTIKUEUE
from bellows.refs import JobKind, JobRef
from bellows.scaling import default_cluster
from bellows.service.clock import ServiceClock
from bellows.service.controller import Controller
from bellows.service.metrics import Metrics, MetricsObserver
from tests.service.livecluster import NS, crds

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"
TORCH, MPI = "resnet50-imagenet", "cifar10-horovod"
MPIJOBS = "kubeflow.org/v2beta1/mpijobs"


def _examples() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            out[doc["kind"]] = doc
    return copy.deepcopy(out)


def _multikueue(mpi: dict[str, Any]) -> dict[str, Any]:
    """The MPIJob as a MultiKueue manager cluster holds it: queue name and managedBy set."""
    mpi["metadata"].setdefault("labels", {})[KUEUE_QUEUE] = "team-a"
    mpi["spec"]["runPolicy"]["managedBy"] = MULTIKUEUE
    return mpi


async def _create(api: KubeApi, obj: dict[str, Any]) -> None:
    if obj["kind"] == "ConfigMap":
        core = k8s.CoreV1Api(api.api_client)
        await asyncio.to_thread(core.create_namespaced_config_map, NS, obj)
        return
    group, version = obj["apiVersion"].split("/")
    custom = k8s.CustomObjectsApi(api.api_client)
    plural = obj["kind"].lower() + "s"
    await asyncio.to_thread(custom.create_namespaced_custom_object, group, version, NS, plural, obj)


async def _events(api: KubeApi, name: str) -> list[tuple[str, str]]:
    core = k8s.CoreV1Api(api.api_client)
    listed = await asyncio.to_thread(core.list_namespaced_event, NS)
    return [(e.reason, e.type) for e in listed.items if e.involved_object.name == name]


def _skipped(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("bellows_jobs_skipped", {"reason": "managed-by"})


async def test_a_multikueue_job_is_skipped_beside_a_scheduled_one() -> None:
    examples = _examples()
    async with EmulatedCluster(crds=crds(), compression=60.0, namespaces=(NS,)) as kube:
        api = KubeApi(kube.api_client())
        for obj in (examples["ConfigMap"], examples["PyTorchJob"], _multikueue(examples["MPIJob"])):
            await _create(api, obj)
        managed = await api.get_job(MPIJobKind(), NS, MPI)
        assert managed is not None
        metrics = Metrics()
        assert _skipped(metrics) == 0
        clock = ServiceClock(speedup=60.0)
        controller = Controller(
            api=api,
            autoscaler=Autoscaler(AutoscalerConfig(), capacity=8, cluster=default_cluster()),
            actuator=Actuator(api),
            reader=JobReader(api, namespace=NS),
            now=clock.now,
            wall_to_clock=clock.at,
            observer=MetricsObserver(metrics),
        )
        await controller.rebuild()
        assert set(controller.autoscaler.allocations) == {f"pytorchjob/{NS}/{TORCH}"}
        deadline = time.monotonic() + 10
        while True:  # the normal job is started on the cluster
            torch = await api.get_job(PyTorchJobKind(), NS, TORCH)
            if torch is not None and torch["spec"]["runPolicy"].get("suspend") is False:
                break
            assert time.monotonic() < deadline, "the PyTorchJob was never resumed"
            await asyncio.sleep(0.05)
        assert _skipped(metrics) == 1
        # The watch delivers the managed job again: still skipped, no second Event.
        ref = JobRef(JobKind.MPIJOB, NS, MPI, managed["metadata"]["uid"])
        await controller.apply((JobArrived(ref, datetime.now(UTC)),))
        assert await _events(api, MPI) == [("Skipped", "Normal")]
        assert _skipped(metrics) == 1
        # Never written to, by Bellows nor by the operator, which leaves it to MultiKueue.
        assert [w for w in kube.store.writes if w[1] == MPIJOBS] == [("create", MPIJOBS, NS, MPI)]
        assert await api.get_job(MPIJobKind(), NS, MPI) == managed
        assert await api.get_batch_job(NS, f"{MPI}-launcher") is None
        # Gone: no longer counted.
        custom = k8s.CustomObjectsApi(api.api_client)
        await asyncio.to_thread(
            custom.delete_namespaced_custom_object, "kubeflow.org", "v2beta1", NS, "mpijobs", MPI
        )
        await controller.apply((JobCompleted(ref, datetime.now(UTC), BusOutcome.FAILED),))
        assert _skipped(metrics) == 0
        await asyncio.to_thread(api.api_client.close)


async def test_the_reader_and_actuator_never_touch_a_job_managed_elsewhere() -> None:
    examples = _examples()
    async with EmulatedCluster(crds=crds(), namespaces=(NS,)) as kube:
        api = KubeApi(kube.api_client())
        mpi = _multikueue(examples["MPIJob"])
        mpi["spec"]["slotsPerWorker"] = 3  # Bellows could not size this one: no matter
        await _create(api, mpi)
        obj = await api.get_job(MPIJobKind(), NS, MPI)
        assert obj is not None
        seen = await JobReader(api, namespace=NS).examine(MPIJobKind(), obj)
        assert isinstance(seen, Skipped)
        assert (seen.job, seen.reason) == (f"mpijob/{NS}/{MPI}", "managed-by")
        assert MULTIKUEUE in seen.message
        act = Actuator(api)
        outcome = await act.report_problem(seen.job, "anything")
        assert outcome.result == "refused"
        assert [w for w in kube.store.writes if w[1] == MPIJOBS] == [("create", MPIJOBS, NS, MPI)]
        assert await _events(api, MPI) == []
        await asyncio.to_thread(api.api_client.close)


@pytest.mark.parametrize(
    ("kind", "value", "accepted"),
    [
        ("PyTorchJob", MULTIKUEUE, True),
        ("PyTorchJob", "kubeflow.org/training-operator", True),
        ("PyTorchJob", "kubeflow.org/mpi-operator", False),
        ("MPIJob", MULTIKUEUE, True),
        ("MPIJob", "kubeflow.org/mpi-operator", True),
        ("MPIJob", "example.com/other", False),
    ],
)
async def test_the_emulated_api_server_takes_the_operators_managed_by_values(
    kind: str, value: str, accepted: bool
) -> None:
    obj = _examples()[kind]
    obj["spec"]["runPolicy"]["managedBy"] = value
    async with EmulatedCluster(crds=crds(), namespaces=(NS,)) as kube:
        res = kube.store.resources[MPIJOBS if kind == "MPIJob" else "kubeflow.org/v1/pytorchjobs"]
        if accepted:
            kube.store.create(res, NS, obj)
        else:
            with pytest.raises(ApiError) as err:
                kube.store.create(res, NS, obj)
            assert err.value.code == 422
            assert [c.field for c in err.value.causes] == ["spec.runPolicy.managedBy"]
