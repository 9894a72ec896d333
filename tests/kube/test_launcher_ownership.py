"""An MPIJob's launcher is deleted only when the MPIJob controls it.

The probe: a tenant who creates an MPIJob named ``x`` could get a batch Job named
``x-launcher`` (someone else's) deleted by Bellows' launcher refresh. Now Bellows checks the
Job's controller reference, passes its uid and resourceVersion as delete preconditions, and a
Job the MPIJob does not control stops the scaling, reported on the MPIJob.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes import client as k8s

from bellows.autoscaler.decisions import Rescale, Start
from bellows.kube import Actuator, KubeApi, MPIJobKind, keys

from .test_actuator import MPI, events_of, submit

LAUNCHER = "cifar10-horovod-launcher"


def someone_elses_job(owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A batch Job of the launcher's name that another user created."""
    meta: dict[str, Any] = {"name": LAUNCHER, "labels": {"team": "other"}}
    if owners is not None:
        meta["ownerReferences"] = owners
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "report", "image": "example/report:1"}],
                }
            }
        },
    }


async def until(check: Any, what: str, *, within_s: float = 10.0) -> None:
    """Wait for ``check()`` (a coroutine function) with a deadline, re-checking briefly."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_a_launcher_the_mpijob_does_not_control_is_never_deleted(on_cluster, examples):
    async def scenario(cluster, api):
        batch = k8s.BatchV1Api(api.api_client)
        theirs = await asyncio.to_thread(
            batch.create_namespaced_job, "default", someone_elses_job()
        )
        made = await submit(api, examples, "MPIJob")
        act = Actuator(api)
        outcome = await act.apply(Start(MPI, 2, 256))
        assert outcome.result == "pending", outcome
        assert "is not controlled by this MPIJob" in outcome.detail
        still = await api.get_batch_job("default", LAUNCHER)
        assert still is not None
        assert still["metadata"]["uid"] == theirs.metadata.uid
        assert still["metadata"]["labels"] == {"team": "other"}  # not synced either
        obj = await api.get_job(MPIJobKind(), "default", "cifar10-horovod")
        notes = obj["metadata"]["annotations"]
        assert notes[keys.STATUS].startswith(
            f"waiting: batch Job '{LAUNCHER}' exists and is not controlled by this MPIJob "
            "(its controller: none)"
        )
        assert obj["spec"] == made["spec"]  # nothing begun that could not be finished
        assert ("LauncherNotOwned", "Warning") in await events_of(api, "cifar10-horovod")

        async def operator_refused() -> bool:
            return ("ErrResourceExists", "Warning") in await events_of(api, "cifar10-horovod")

        await until(operator_refused, "the emulated mpi-operator's Event")
        # retried: the same answer, and no second Event of Bellows
        assert (await act.apply(Start(MPI, 2, 256))).result == "pending"
        reasons = [r for r, _ in await events_of(api, "cifar10-horovod")]
        assert reasons.count("LauncherNotOwned") == 1
        # its owner removes it: the scaling goes on, with a launcher of the MPIJob's own
        await asyncio.to_thread(batch.delete_namespaced_job, LAUNCHER, "default")
        assert (await act.apply(Start(MPI, 2, 256))).result == "started"
        mine = await api.get_batch_job("default", LAUNCHER)
        assert mine is not None
        owners = mine["metadata"]["ownerReferences"]
        assert [(o["kind"], o["uid"], o["controller"]) for o in owners] == [
            ("MPIJob", made["metadata"]["uid"], True)
        ]

    on_cluster(scenario, compression=1.0)


class Swapping(KubeApi):
    """Between Bellows' read of the launcher and its delete, someone replaces the Job."""

    def __init__(self, api_client: k8s.ApiClient, cluster: Any) -> None:
        super().__init__(api_client)
        self.cluster = cluster
        self.deletes: list[bool] = []

    async def delete_batch_job(self, namespace, name, uid, *, resource_version=None):
        if not self.deletes:
            store = self.cluster.store
            res = store.resources["batch/v1/jobs"]
            store.delete(res, namespace, name)  # no await between: the operator cannot act
            store.create(res, namespace, someone_elses_job())
        done = await super().delete_batch_job(
            namespace, name, uid, resource_version=resource_version
        )
        self.deletes.append(done)
        return done


def test_a_launcher_replaced_between_read_and_delete_survives(on_cluster, examples):
    async def scenario(cluster, api):
        await submit(api, examples, "MPIJob")
        assert (await Actuator(api).apply(Start(MPI, 2, 256))).result == "started"
        swapping = Swapping(api.api_client, cluster)
        outcome = await Actuator(swapping).apply(Rescale(MPI, 2, 256, 4, 512))
        assert swapping.deletes == [False]  # the uid precondition failed: 409
        assert outcome.result == "pending", outcome
        survivor = await api.get_batch_job("default", LAUNCHER)
        assert survivor is not None
        assert survivor["metadata"]["labels"] == {"team": "other"}

    on_cluster(scenario, compression=1.0)


def test_a_launcher_edited_since_it_was_read_is_not_deleted(on_cluster, examples):
    """Its owner references may have changed with it: the resourceVersion precondition."""

    async def scenario(cluster, api):
        await submit(api, examples, "MPIJob")
        assert (await Actuator(api).apply(Start(MPI, 2, 256))).result == "started"
        launcher = await api.get_batch_job("default", LAUNCHER)
        assert launcher is not None
        meta = launcher["metadata"]
        store = cluster.store

        def labelled(obj: dict[str, Any]) -> dict[str, Any]:
            obj["metadata"]["labels"] = {"x": "y"}
            return obj

        store.update_with(store.resources["batch/v1/jobs"], "default", LAUNCHER, labelled)
        gone = await api.delete_batch_job(
            "default", LAUNCHER, meta["uid"], resource_version=meta["resourceVersion"]
        )
        assert gone is False
        assert await api.get_batch_job("default", LAUNCHER) is not None
        fresh = await api.get_batch_job("default", LAUNCHER)
        assert fresh is not None
        assert await api.delete_batch_job(
            "default",
            LAUNCHER,
            fresh["metadata"]["uid"],
            resource_version=fresh["metadata"]["resourceVersion"],
        )

    on_cluster(scenario, compression=1.0)
