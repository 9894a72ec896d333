"""A tenant's finalizer, or its edits in a loop, never make the actuator loop without end.

Issue 35, item 4. An MPIJob's rescale deletes its stale launcher batch Job and reads again
until it is gone. A tenant who adds a finalizer to that Job (anyone who may edit Jobs in the
namespace may) keeps it there, terminating: every DELETE is answered 200 and changes
nothing. The actuator then sent DELETEs as fast as the API server answered and never
returned, its turn held (on the emulated server, which now keeps such objects as the real
one does). Now it deletes once, waits a bounded while backing off, and reports the MPIJob
``pending`` (status and a Warning Event naming the launcher and its finalizers) while the
other jobs go on. A job edited under every write is retried a bounded number of times, with
a growing wait between tries, never at the API server's full speed.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from bellows.autoscaler.decisions import Keep, Rescale, Start
from bellows.emulator import EmulatedCluster
from bellows.kube import ActuationError, Actuator, KubeApi, MPIJobKind, keys
from tests.conftest import shared_data_dir
from tests.kube.conftest import load_examples
from tests.kube.test_actuator import MPI, TORCH, events_of, set_condition, submit

LAUNCHER = "cifar10-horovod-launcher"
LAUNCHER_PATH = f"/apis/batch/v1/namespaces/default/jobs/{LAUNCHER}"
AUDIT = "example.com/audit"

Scenario = Callable[[EmulatedCluster, KubeApi], Awaitable[None]]


def _run(scenario: Scenario, *, limit_s: float = 60.0, operator: bool = True) -> None:
    async def main() -> None:
        crds = sorted((shared_data_dir() / "crds").glob("*.yaml"))
        async with EmulatedCluster(crds=crds, compression=1.0, operator=operator) as cluster:
            api = KubeApi(cluster.api_client())
            try:
                await asyncio.wait_for(scenario(cluster, api), limit_s)
            finally:
                await asyncio.to_thread(api.api_client.close)

    asyncio.run(main())


def _finalizers(names: list[str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["finalizers"] = names
        return obj

    return change


def test_a_launcher_held_by_a_finalizer_is_deleted_once_and_reported() -> None:
    examples = copy.deepcopy(load_examples())

    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        loop = asyncio.get_running_loop()
        await submit(api, examples, "MPIJob")
        await submit(api, examples, "PyTorchJob")
        act = Actuator(api, halt_timeout_s=3.0)
        assert (await act.apply(Start(MPI, 2, 256))).result == "started"
        store = cluster.store
        jobs = store.resources["batch/v1/jobs"]
        store.update_with(jobs, "default", LAUNCHER, _finalizers([AUDIT]))  # the tenant's
        started = loop.time()
        mpi, torch = await asyncio.gather(
            act.apply(Rescale(MPI, 2, 256, 4, 512)), act.apply(Start(TORCH, 2, 256))
        )
        took = loop.time() - started
        assert torch.result == "started", torch  # the other job went on beside it
        assert mpi.result == "pending", mpi
        assert LAUNCHER in mpi.detail, mpi.detail
        assert AUDIT in mpi.detail, mpi.detail
        deletes = cluster.requests[("DELETE", LAUNCHER_PATH)]
        assert deletes == 1, f"{deletes} DELETEs of the launcher in {took:.1f} s"
        assert took < 15, took  # a bounded wait: at most LAUNCHER_WAIT_S (3 s here) for it
        held = store.get(jobs, "default", LAUNCHER)
        assert held["metadata"]["deletionTimestamp"]  # still there, terminating
        obj = await api.get_job(MPIJobKind(), "default", "cifar10-horovod")
        assert obj is not None
        assert obj["metadata"]["annotations"][keys.STATUS].startswith(
            f"waiting: the MPIJob's launcher, batch Job '{LAUNCHER}', is deleted and not gone"
        )
        assert ("LauncherNotDeleted", "Warning") in await events_of(api, "cifar10-horovod")
        # the next call: pending at once, no DELETE again, no second Event
        started = loop.time()
        again = await act.apply(Rescale(MPI, 2, 256, 4, 512))
        assert again.result == "pending", again
        assert loop.time() - started < 2.5
        assert cluster.requests[("DELETE", LAUNCHER_PATH)] == 1
        reasons = [r for r, _ in await events_of(api, "cifar10-horovod")]
        assert reasons.count("LauncherNotDeleted") == 1
        # the finalizer removed: the Job goes, the operator makes the new launcher, and the
        # scaling completes on the next call
        store.update_with(jobs, "default", LAUNCHER, _finalizers([]))
        done = await act.apply(Rescale(MPI, 2, 256, 4, 512))
        assert done.result == "rescaled", done
        fresh = await api.get_batch_job("default", LAUNCHER)
        assert fresh is not None
        assert fresh["metadata"]["uid"] != held["metadata"]["uid"]
        env = fresh["spec"]["template"]["spec"]["containers"][0]["env"]
        assert env == [{"name": "GLOBAL_BATCH_SIZE", "value": "512"}]

    _run(scenario)


@pytest.mark.parametrize("call", ["report_problem", "note_kept"])
def test_a_job_changed_under_every_write_is_retried_a_few_times_backing_off(call: str) -> None:
    examples = copy.deepcopy(load_examples())
    path = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/resnet50-imagenet"

    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        loop = asyncio.get_running_loop()
        await submit(api, examples, "PyTorchJob")
        act = Actuator(api, max_conflicts=4)
        if call == "note_kept":
            assert (await act.apply(Start(TORCH, 2, 256))).result == "started"
        patches = cluster.requests[("PATCH", path)]
        cluster.faults.inject("PATCH", path, 409, count=1000)  # changed, every time
        attempt = (
            act.report_problem(TORCH, "a problem")
            if call == "report_problem"
            else act.note_kept(Keep(TORCH, 2, 256, 4, "kept by a test"))
        )
        started = loop.time()
        with pytest.raises(ActuationError, match="more than 4 conflicts"):
            await attempt
        took = loop.time() - started
        assert cluster.requests[("PATCH", path)] - patches == 4
        # waits of 0.05, 0.1, 0.2 and 0.4 s between the tries: never at full speed
        assert took >= 0.7, took

    _run(scenario)


class EndedWatches(KubeApi):
    """An API server that ends every watch of a job at once, with no event."""

    def __init__(self, api_client: Any) -> None:
        super().__init__(api_client)
        self.watches = 0

    async def watch_jobs(self, *args: Any, **kwargs: Any) -> AsyncIterator[tuple[str, Any]]:
        self.watches += 1
        await asyncio.sleep(0)  # as a real watch's request awaits its answer
        for event in ():
            yield event


def test_a_watch_the_server_ends_at_once_is_opened_again_after_a_while() -> None:
    examples = copy.deepcopy(load_examples())

    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        await submit(api, examples, "PyTorchJob")
        set_condition(cluster, "resnet50-imagenet", "Running")  # and no operator to halt it
        ended = EndedWatches(api.api_client)
        outcome = await Actuator(ended, halt_timeout_s=1.0).apply(Rescale(TORCH, 2, 256, 4, 512))
        assert outcome.result == "pending", outcome  # no event seen: the halt not confirmed
        # waits of 0.05, 0.1, 0.2, 0.4 s between the watches of the one second: a few
        assert ended.watches <= 8, ended.watches

    _run(scenario, operator=False)
