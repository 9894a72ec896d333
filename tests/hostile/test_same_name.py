"""Same name, new job: a job deleted and submitted again under its name starts like any new
job, of every kind (issue 35). Jobs are known by uid, not by name.

Before, the new job stayed suspended, in no queue, with every GPU free, until the controller
restarted, whatever the order in which the controller heard of the delete and the create:
the core still knew the name (it kept every finished job), so the new job's arrival changed
nothing, and an arrival heard before the old job's completion was taken for the old job.
And a ``bellows.io/recreated-from`` on a job Bellows did not create (the tenant wrote it)
made the controller drop the old job's completion: the core kept its GPUs.

The emulated cluster (its operators and Trainer) and a :class:`Controller` fed the bus events
the bridge would publish, in each order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.bus.events import JobArrived, JobCompleted
from bellows.bus.events import JobRef as BusRef
from bellows.bus.events import Outcome as BusOutcome
from bellows.emulator import EmulatedCluster
from bellows.emulator.crds import trainer_crd_paths
from bellows.kube import Actuator, JobReader, KubeApi, keys, kind_named
from bellows.kube.adapters import ALL_KINDS
from bellows.refs import JobKind
from bellows.scaling import default_cluster
from bellows.service.clock import ServiceClock
from bellows.service.controller import Controller
from bellows.twin.replay import BATCH_ENV, job_manifest
from tests.conftest import delete_as_owner, shared_data_dir
from tests.service.livecluster import NS as LIVE_NS
from tests.service.livecluster import jobs, live

NS = "default"
KINDS = ("PyTorchJob", "MPIJob", "TrainJob")
# when the controller hears of what: the old job's completion before the new job exists,
# after it exists, or the new job's arrival first
ORDERS = ("completed-before-create", "completed-first", "arrived-first")


def _crds() -> list[Path]:
    shared = shared_data_dir()
    return [*sorted((shared / "crds").glob("*.yaml")), *trainer_crd_paths(shared / "crds")]


@asynccontextmanager
async def _stack() -> AsyncIterator[tuple[KubeApi, Controller]]:
    async with EmulatedCluster(crds=_crds(), trainer=True, compression=1.0) as kube:
        api = KubeApi(kube.api_client())
        clock = ServiceClock(speedup=1.0)
        controller = Controller(
            api=api,
            autoscaler=Autoscaler(AutoscalerConfig(), capacity=8, cluster=default_cluster()),
            actuator=Actuator(api, kinds=ALL_KINDS, halt_timeout_s=10),
            reader=JobReader(api, namespace=NS, kinds=ALL_KINDS),
            now=clock.now,
            wall_to_clock=clock.at,
        )
        try:
            yield api, controller
        finally:
            await asyncio.to_thread(api.api_client.close)


def _body(kind: str, **notes: str) -> tuple[str, dict[str, Any]]:
    ref, body = job_manifest(jobs(1, seed=5, categories=(1,))[0], 0, namespace=NS, kinds=(kind,))
    body["metadata"]["annotations"].update(notes)
    return ref.name, body


async def _running(api: KubeApi, kind: str, name: str, controller: Controller) -> dict[str, Any]:
    """The job of that name once it runs (the controller's housekeeping ticking meanwhile)."""
    adapter = kind_named(kind)
    deadline = time.monotonic() + 20
    while True:
        obj = await api.get_job(adapter, NS, name)
        if obj is not None and not adapter.view(obj, (BATCH_ENV,)).suspended:
            return obj
        assert time.monotonic() < deadline, f"never started: {obj}"
        await controller.tick()
        await controller.retry_pending()
        await asyncio.sleep(0.05)


def _is(obj: dict[str, Any], uid: str) -> bool:
    """Whether ``obj`` is the job ``uid``, or the copy a resize made of it (TrainJob)."""
    meta = obj["metadata"]
    return uid in (meta["uid"], (meta.get("annotations") or {}).get(keys.RECREATED_FROM))


async def _resubmitted(
    api: KubeApi, controller: Controller, kind: str, order: str, **notes: Callable[[str], str]
) -> tuple[str, str]:
    """Run one job, delete it, submit another under its name, and feed the controller the
    completion and the arrival in ``order``; the old job's and the new job's uids."""
    adapter = kind_named(kind)
    name, body = _body(kind)
    await api.create_job(adapter, NS, body)
    await controller.rebuild()
    old = await _running(api, kind, name, controller)
    meta = old["metadata"]
    assert await api.delete_job(
        adapter, NS, name, uid=meta["uid"], resource_version=meta["resourceVersion"]
    )
    assert await api.get_job(adapter, NS, name) is None
    now = datetime.now(UTC)
    completed = JobCompleted(BusRef(JobKind(kind), NS, name, meta["uid"]), now, BusOutcome.DELETED)
    if order == "completed-before-create":
        await controller.apply((completed,))
    _, again = _body(kind, **{k: v(meta["uid"]) for k, v in notes.items()})
    new = await api.create_job(adapter, NS, again)
    arrived = JobArrived(BusRef(JobKind(kind), NS, name, new["metadata"]["uid"]), now)
    if order == "completed-first":
        await controller.apply((completed,))
    await controller.apply((arrived,))
    if order == "arrived-first":
        await controller.apply((completed,))
    return meta["uid"], new["metadata"]["uid"]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", KINDS)
async def test_a_job_resubmitted_under_its_name_starts_like_any_new_job(
    kind: str, order: str
) -> None:
    async with _stack() as (api, controller):
        old, new = await _resubmitted(api, controller, kind, order)
        name = _body(kind)[0]
        job = f"{kind.lower()}/{NS}/{name}"
        obj = await _running(api, kind, name, controller)
        assert _is(obj, new), obj["metadata"]
        assert not _is(obj, old)
        allocation = controller.autoscaler.allocations[job]
        assert controller.held == {job: allocation.gpus}  # the old job's GPUs freed
        # a late, repeated completion of the old job changes nothing now
        late = JobCompleted(
            BusRef(JobKind(kind), NS, name, old), datetime.now(UTC), BusOutcome.DELETED
        )
        await controller.apply((late,))
        assert controller.autoscaler.allocations[job] == allocation
        assert controller.held == {job: allocation.gpus}


@pytest.mark.parametrize("order", ORDERS)
async def test_a_recreated_from_written_by_the_tenant_is_ignored(order: str) -> None:
    """The new job claims to be the old one's copy (its ``recreated-from`` names the old
    uid): Bellows did not create it, so the old job's completion frees its GPUs, and the
    new job starts like any new job."""
    async with _stack() as (api, controller):
        _, new = await _resubmitted(
            api, controller, "TrainJob", order, **{keys.RECREATED_FROM: lambda uid: uid}
        )
        name = _body("TrainJob")[0]
        job = f"trainjob/{NS}/{name}"
        obj = await _running(api, "TrainJob", name, controller)
        assert _is(obj, new)
        assert controller.held == {job: controller.autoscaler.allocations[job].gpus}


LIVE = {"PyTorchJob": (False, 0), "MPIJob": (False, 1), "TrainJob": (True, 0)}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(LIVE))
async def test_on_the_live_loop_a_resubmitted_job_starts(kind: str) -> None:
    """The same through the bridge and NATS, as a user does it: delete the running job, then
    submit it again at once (the bridge publishes both, in whatever order it sees them)."""
    trainer, first = LIVE[kind]
    adapter = kind_named(kind)
    async with live(trainer=trainer) as stack:
        stack.start_bridge()
        stack.start_controller("controller")
        api = KubeApi(stack.kube.api_client())
        trace = jobs(1, seed=5, categories=(1,), scale=50.0)  # runs for the whole test
        (name,) = await stack.submit(trace, first=first)

        def running(obj: dict[str, Any] | None) -> bool:
            return obj is not None and not adapter.view(obj, (BATCH_ENV,)).suspended

        def current() -> dict[str, Any] | None:
            return stack.objects().get(name)

        await stack.until("the first job running", lambda: running(current()))
        old = current()
        assert old is not None
        meta = old["metadata"]
        await delete_as_owner(api, adapter, LIVE_NS, name, uid=meta["uid"])
        await stack.until("the first job gone", lambda: current() is None)
        await stack.submit(trace, first=first)

        def new_running() -> bool:
            obj = current()
            return running(obj) and not _is(obj or {}, meta["uid"])

        await stack.until("the job submitted again running", new_running, timeout_s=30)
        stack.alive()
        assert stack.witness.overcommits == []
        await asyncio.to_thread(api.api_client.close)
