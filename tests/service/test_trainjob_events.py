"""The controller on the facts of a TrainJob that its resizes re-created (one uid per size).

Each resize of a TrainJob deletes it and creates it again under the same name
(``bellows.kube.recreation``), so the bus carries a completion (``DELETED``) of every uid
but the last. Such a completion can reach the controller late: after a controller was
killed, JetStream delivers it again to the next one, which may have resized the job once
more meanwhile. The job lives on in its copy and must stay the core's, holding its GPUs.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.autoscaler.decisions import Rescale
from bellows.bus.events import JobCompleted
from bellows.bus.events import JobKind as BusKind
from bellows.bus.events import JobRef as BusRef
from bellows.bus.events import Outcome as BusOutcome
from bellows.emulator import EmulatedCluster
from bellows.emulator.crds import trainer_crd_paths
from bellows.kube import Actuator, JobReader, KubeApi, keys
from bellows.kube.adapters import ALL_KINDS, TRAINJOB
from bellows.kube.records import DEFAULT_RECORDS_NAMESPACE as RECORDS
from bellows.kube.records import RECORD_LABEL
from bellows.scaling import default_cluster
from bellows.service.clock import ServiceClock
from bellows.service.controller import Controller
from tests.conftest import delete_as_owner, shared_data_dir
from tests.kube.test_trainjob import NAME, example, submit

NS = "default"
JOB = f"trainjob/{NS}/{NAME}"


async def _running(api: KubeApi, uid_not: str) -> dict[str, Any]:
    """The TrainJob once it is a copy other than ``uid_not``, resumed."""
    deadline = time.monotonic() + 20
    while True:
        obj = await api.get_job(TRAINJOB, NS, NAME)
        if (
            obj is not None
            and obj["metadata"]["uid"] != uid_not
            and obj["spec"].get("suspend") is False
        ):
            return obj
        assert time.monotonic() < deadline, f"not re-created and running: {obj}"
        await asyncio.sleep(0.05)


def _crds() -> list[Path]:
    crds = [*sorted((shared_data_dir() / "crds").glob("*.yaml"))]
    return crds + trainer_crd_paths(shared_data_dir() / "crds")


def _controller(api: KubeApi) -> tuple[Actuator, Controller]:
    """A controller of 8 GPUs on this cluster (a real clock), and its actuator."""
    clock = ServiceClock(speedup=1.0)
    actuator = Actuator(api, kinds=ALL_KINDS, halt_timeout_s=10)
    controller = Controller(
        api=api,
        autoscaler=Autoscaler(AutoscalerConfig(), capacity=8, cluster=default_cluster()),
        actuator=actuator,
        reader=JobReader(api, namespace=NS, kinds=ALL_KINDS),
        now=clock.now,
        wall_to_clock=clock.at,
    )
    return actuator, controller


async def test_a_late_completion_of_an_older_copy_does_not_finish_the_job() -> None:
    async with EmulatedCluster(crds=_crds(), trainer=True, compression=1.0) as kube:
        api = KubeApi(kube.api_client())
        first = await submit(api, example())
        actuator, controller = _controller(api)
        await controller.rebuild()  # started at the core's size: a re-creation (or not)
        allocation = controller.autoscaler.allocations[JOB]
        obj = await api.get_job(TRAINJOB, NS, NAME)
        assert obj is not None
        uids = [first["metadata"]["uid"]]
        if obj["metadata"]["uid"] != uids[-1]:
            uids.append(obj["metadata"]["uid"])
        # two resizes behind the controller's back (a killed one's, and the next one's)
        gpus, batch = allocation.gpus, allocation.batch
        for new in (gpus - 1, gpus):
            outcome = await actuator.apply(Rescale(JOB, gpus, batch, new, batch))
            assert outcome.result == "rescaled", outcome
            obj = await _running(api, uids[-1])
            assert obj["metadata"]["annotations"][keys.RECREATED_FROM] == uids[-1]
            uids.append(obj["metadata"]["uid"])
            gpus = new
        assert len(uids) >= 3
        held = controller.held
        # the completion of each older copy, delivered late and in any order: none finishes it
        for uid in reversed(uids[:-1]):
            ref = BusRef(BusKind.TRAINJOB, NS, NAME, uid)
            await controller.apply((JobCompleted(ref, datetime.now(UTC), BusOutcome.DELETED),))
            assert JOB in controller.autoscaler.allocations, f"finished by {uid}'s completion"
            assert controller.held == held
        # the last copy's own completion does
        last = await api.get_job(TRAINJOB, NS, NAME)
        assert last is not None
        meta = last["metadata"]
        await delete_as_owner(api, TRAINJOB, NS, NAME, uid=meta["uid"])
        ref = BusRef(BusKind.TRAINJOB, NS, NAME, uids[-1])
        await controller.apply((JobCompleted(ref, datetime.now(UTC), BusOutcome.DELETED),))
        assert JOB not in controller.autoscaler.allocations
        assert JOB not in controller.held
        await asyncio.to_thread(api.api_client.close)


async def test_a_completion_between_a_resizes_delete_and_create_recreates_the_job() -> None:
    """A resize's create that failed (the API server answered 500) leaves the job deleted and
    its record there; the old uid's ``DELETED`` then comes in: no completion, the record
    creates the job, and it stays the core's."""
    async with EmulatedCluster(crds=_crds(), trainer=True, compression=1.0) as kube:
        api = KubeApi(kube.api_client())
        await submit(api, example())
        actuator, controller = _controller(api)
        await controller.rebuild()
        allocation = controller.autoscaler.allocations[JOB]
        before = await _running(api, "")
        held = controller.held
        gpus, batch = allocation.gpus, allocation.batch
        kube.faults.inject("POST", f"/namespaces/{NS}/trainjobs$", 500)
        with pytest.raises(ApiException):  # the delete landed, the create did not
            await actuator.apply(Rescale(JOB, gpus, batch, gpus + 1, batch))
        assert await api.get_job(TRAINJOB, NS, NAME) is None
        ref = BusRef(BusKind.TRAINJOB, NS, NAME, before["metadata"]["uid"])
        await controller.apply((JobCompleted(ref, datetime.now(UTC), BusOutcome.DELETED),))
        assert JOB in controller.autoscaler.allocations, "the resize's delete finished the job"
        assert controller.held == held
        copy = await _running(api, before["metadata"]["uid"])
        assert copy["metadata"]["annotations"][keys.RECREATED_FROM] == before["metadata"]["uid"]
        assert copy["spec"]["trainer"]["numNodes"] == gpus + 1
        assert await api.list_configmaps(RECORDS, RECORD_LABEL) == []
        await asyncio.to_thread(api.api_client.close)
