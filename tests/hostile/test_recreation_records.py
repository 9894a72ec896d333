"""A tenant's ConfigMaps are data, never orders: the TrainJob re-creation record (issue 35).

Before, the record lived in the tenant's namespace (``bellows-recreate-<name>``) and was
trusted as written: a forged one spawned TrainJobs without end (``generateName``: about
1 200 in 10 s), created any TrainJob the tenant liked under the controller's identity, made
every rebuild raise (a body naming another namespace) or looped on 409s (a body naming a job
that exists). Now records live in the records namespace, where no tenant writes, and are
checked on read (:mod:`bellows.kube.records`): these tests put the old forgeries in the
tenant's namespace (never read, never deleted) and tampered records in the records
namespace (reported, never acted on), and resize a TrainJob whose delete a finalizer holds
(before: about 1 400 DELETEs in 10 s, and the call never returned).

Each call runs under a deadline, so the old code's endless loops fail the test rather than
hang it.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.autoscaler.decisions import Rescale, Start
from bellows.emulator import EmulatedCluster
from bellows.emulator.crds import trainer_crd_paths
from bellows.kube import Actuator, JobReader, KubeApi, keys
from bellows.kube.adapters import ALL_KINDS, TRAINJOB
from bellows.kube.records import DEFAULT_RECORDS_NAMESPACE as RECORDS
from bellows.kube.records import RECORD_LABEL
from bellows.scaling import default_cluster
from bellows.service.assembly import records_namespace
from bellows.service.clock import ServiceClock
from bellows.service.config import ConfigError, load_config
from bellows.service.controller import Controller
from bellows.service.observing import ControllerObserver
from tests.conftest import delete_as_owner, shared_data_dir
from tests.kube.test_trainjob import JOB, NAME, CrashError, Dying, example, running_on, submit

NS = "default"
DEADLINE_S = 15.0  # far beyond what an honest call takes; the old loops never end
TRAINJOBS = f"/apis/{TRAINJOB.group}/{TRAINJOB.version}/namespaces/{NS}/{TRAINJOB.plural}"


def _crds() -> list[Path]:
    shared = shared_data_dir()
    return [*sorted((shared / "crds").glob("*.yaml")), *trainer_crd_paths(shared / "crds")]


@asynccontextmanager
async def _cluster() -> AsyncIterator[tuple[EmulatedCluster, KubeApi]]:
    async with EmulatedCluster(crds=_crds(), trainer=True, compression=1.0) as kube:
        api = KubeApi(kube.api_client())
        try:
            yield kube, api
        finally:
            await asyncio.to_thread(api.api_client.close)


def _actuator(api: KubeApi) -> Actuator:
    return Actuator(api, kinds=ALL_KINDS, halt_timeout_s=10)


async def _trainjobs(api: KubeApi, namespace: str = NS) -> list[str]:
    return [o["metadata"]["name"] async for page, _ in api.list_job_pages(TRAINJOB, namespace)
            for o in page]  # fmt: skip


def _posts(kube: EmulatedCluster) -> int:
    return sum(
        n for (method, path), n in kube.requests.items() if (method, path) == ("POST", TRAINJOBS)
    )


# ----- the old layout, or a forgery: a record in the tenant's namespace ---------------------


def _spawner() -> tuple[str, dict[str, Any]]:
    body = example()
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "spawn-"
    return "spawn", body


def _never_existed() -> tuple[str, dict[str, Any]]:
    body = example()
    body["metadata"]["name"] = "forged"
    body["spec"]["suspend"] = False
    trainer = body["spec"]["trainer"]
    trainer["numNodes"] = 8  # over its max-gpus
    trainer["image"] = "registry.invalid/miner:latest"
    trainer["command"] = ["sh", "-c", "mine --all-gpus"]
    return "forged", body


def _other_namespace() -> tuple[str, dict[str, Any]]:
    body = example()
    body["metadata"]["name"] = "elsewhere"
    body["metadata"]["namespace"] = "kube-system"
    return "elsewhere", body


def _existing_job() -> tuple[str, dict[str, Any]]:
    return "other", example()  # the record of "other" creates NAME, which exists: 409s


FORGERIES: dict[str, Callable[[], tuple[str, dict[str, Any]]]] = {
    "generateName": _spawner,
    "never-existed": _never_existed,
    "other-namespace": _other_namespace,
    "existing-job": _existing_job,
}


def _tenant_record(job: str, body: dict[str, Any]) -> dict[str, Any]:
    """A ConfigMap as the old controller wrote its records, in the tenant's namespace."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"bellows-recreate-{job}",
            "labels": {"app.kubernetes.io/managed-by": "bellows", RECORD_LABEL: job},
        },
        "data": {
            "trainjob.json": json.dumps(body),
            "old-uid": "0c1c4a8e-0000-4000-8000-000000000000",
            "source": "forged",
            "target": "k=8,b=512",
        },
    }


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
async def test_a_record_in_the_tenants_namespace_is_never_read_nor_deleted(forgery: str) -> None:
    async with _cluster() as (kube, api):
        await submit(api)  # an honest TrainJob beside it
        job, body = FORGERIES[forgery]()
        core = k8s.CoreV1Api(api.api_client)
        forged = _tenant_record(job, body)
        await asyncio.to_thread(core.create_namespaced_config_map, NS, forged)
        before = _posts(kube)
        actuator = _actuator(api)
        # at start-up (cluster-wide and per namespace), and at run time (the completion
        # path asks for the record of a TrainJob found gone)
        await asyncio.wait_for(actuator.resume_interrupted(), DEADLINE_S)
        await asyncio.wait_for(actuator.finish_recreations(NS), DEADLINE_S)
        assert (
            await asyncio.wait_for(actuator.finish_recreation(f"trainjob/{NS}/{job}"), DEADLINE_S)
            is None
        )
        assert _posts(kube) == before  # nothing created, not even tried
        assert await _trainjobs(api) == [NAME]
        honest = await api.get_job(TRAINJOB, NS, NAME)
        assert honest is not None
        assert keys.RECREATED_FROM not in honest["metadata"]["annotations"]
        # the tenant's ConfigMap is the tenant's: still there, untouched
        kept = await api.get_configmap(NS, forged["metadata"]["name"])
        assert kept is not None
        assert kept["data"] == forged["data"]


# ----- a record in the records namespace that fails its checks ------------------------------


async def _half_done(kube: EmulatedCluster, api: KubeApi) -> dict[str, Any]:
    """A resize killed after its delete: the job gone, its record in the records namespace."""
    await submit(api)
    await _actuator(api).apply(Start(JOB, 2, 256))
    await running_on(api, kube, 2)
    with pytest.raises(CrashError):
        await _actuator(Dying(api.api_client, "delete_job")).apply(Rescale(JOB, 2, 256, 4, 512))
    assert await api.get_job(TRAINJOB, NS, NAME) is None
    (record,) = await api.list_configmaps(RECORDS, RECORD_LABEL)
    return record


def _body_edit(edit: Callable[[dict[str, Any]], None], *, digest: bool = True) -> Any:
    def tamper(record: dict[str, Any]) -> None:
        body = json.loads(record["data"]["trainjob.json"])
        edit(body)
        text = json.dumps(body, sort_keys=True)
        record["data"]["trainjob.json"] = text
        if digest:
            record["data"]["digest"] = hashlib.sha256(text.encode()).hexdigest()

    return tamper


def _generate_name(body: dict[str, Any]) -> None:
    body["metadata"]["generateName"] = body["metadata"].pop("name")


def _rename(body: dict[str, Any]) -> None:
    body["metadata"]["name"] = "someone-else"


def _image(body: dict[str, Any]) -> None:
    body["spec"]["trainer"]["image"] = "registry.invalid/miner:latest"


def _nodes(body: dict[str, Any]) -> None:
    body["spec"]["trainer"]["numNodes"] = 8


def _no_token(body: dict[str, Any]) -> None:
    del body["metadata"]["annotations"][keys.RECREATION]


def _data(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    def tamper(record: dict[str, Any]) -> None:
        record["data"][key] = value

    return tamper


TAMPERED: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "generateName": (_body_edit(_generate_name), "generateName"),
    "another-job": (_body_edit(_rename), "is not default/"),
    "no-digest": (_body_edit(_image, digest=False), "digest differs"),
    "another-image": (_body_edit(_image), "spec.trainer differs"),
    "over-its-target": (_body_edit(_nodes), "not sized at its target"),
    "no-token": (_body_edit(_no_token), "lacks its token"),
    "another-source": (_data("source", "0" * 64), "fingerprint differs"),
    "another-namespace": (_data("namespace", "kube-system"), "name"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
async def test_a_record_that_fails_a_check_is_reported_and_never_acted_on(case: str) -> None:
    async with _cluster() as (kube, api):
        record = await _half_done(kube, api)
        tamper, problem = TAMPERED[case]
        edited = copy.deepcopy(record)
        tamper(edited)
        await api.write_configmap(
            RECORDS, edited, resource_version=record["metadata"]["resourceVersion"]
        )
        before = _posts(kube)
        outcomes = await asyncio.wait_for(_actuator(api).resume_interrupted(), DEADLINE_S)
        assert [o.result for o in outcomes] == ["invalid"], outcomes
        assert problem in outcomes[0].detail
        assert _posts(kube) == before  # never created
        assert await _trainjobs(api) == []
        # kept for whoever looks into it (the records namespace is the controller's)
        assert len(await api.list_configmaps(RECORDS, RECORD_LABEL)) == 1


async def test_an_untouched_record_creates_the_job_once_and_goes() -> None:
    async with _cluster() as (kube, api):
        record = await _half_done(kube, api)
        before = _posts(kube)
        outcomes = await asyncio.wait_for(_actuator(api).resume_interrupted(), DEADLINE_S)
        assert [o.result for o in outcomes] == ["rescaled"], outcomes
        assert _posts(kube) == before + 1
        copy_ = await running_on(api, kube, 4)
        notes = copy_["metadata"]["annotations"]
        assert notes[keys.RECREATED_FROM] == record["data"]["old-uid"]
        assert notes[keys.RECREATION] == record["data"]["token"]
        assert await api.list_configmaps(RECORDS, RECORD_LABEL) == []


class _DiesAtMark(KubeApi):
    """Dies right after the record's second write: the mark that its copy was created."""

    async def write_configmap(self, *args: Any, **kwargs: Any) -> Any:
        done = await super().write_configmap(*args, **kwargs)
        if kwargs.get("resource_version") is not None:
            raise CrashError("write_configmap")
        return done


async def test_a_copy_deleted_by_its_owner_before_the_record_went_is_not_created_again() -> None:
    async with _cluster() as (kube, api):
        await _half_done(kube, api)
        with pytest.raises(CrashError):  # killed right after the create, and its mark
            await _actuator(_DiesAtMark(api.api_client)).finish_recreations()
        copy_ = await api.get_job(TRAINJOB, NS, NAME)
        assert copy_ is not None
        await delete_as_owner(api, TRAINJOB, NS, NAME, uid=copy_["metadata"]["uid"])
        before = _posts(kube)
        await asyncio.wait_for(_actuator(api).resume_interrupted(), DEADLINE_S)
        assert _posts(kube) == before  # its owner deleted it: it stays deleted
        assert await _trainjobs(api) == []
        assert await api.list_configmaps(RECORDS, RECORD_LABEL) == []


# ----- a finalizer holds the delete of a resize ----------------------------------------------


async def test_a_trainjob_whose_delete_a_finalizer_holds_is_pending_and_not_deleted_again() -> None:
    async with _cluster() as (kube, api):
        await submit(api)
        await _actuator(api).apply(Start(JOB, 2, 256))
        await running_on(api, kube, 2)
        obj = await api.get_job(TRAINJOB, NS, NAME)
        assert obj is not None
        hold = {"metadata": {"finalizers": ["example.com/hold"]}}
        await api.patch_job(TRAINJOB, NS, NAME, hold)
        path, actuator = f"{TRAINJOBS}/{NAME}", _actuator(api)
        outcome = await asyncio.wait_for(actuator.apply(Rescale(JOB, 2, 256, 4, 512)), DEADLINE_S)
        assert outcome.result == "pending", outcome
        assert "being deleted" in outcome.detail
        assert "example.com/hold" in outcome.detail
        assert kube.requests[("DELETE", path)] == 1  # once, never again in a loop
        # a later call (the retry) neither deletes it again nor waits for it
        again = await asyncio.wait_for(actuator.apply(Rescale(JOB, 2, 256, 4, 512)), DEADLINE_S)
        assert again.result == "pending"
        assert kube.requests[("DELETE", path)] == 1
        events = await api.list_events(NS)
        assert [e.get("reason") for e in events].count("DeletePending") == 1  # said once
        # the finalizer goes: the job is gone, and the record creates its copy, once
        await api.patch_job(TRAINJOB, NS, NAME, {"metadata": {"finalizers": None}})
        assert await api.get_job(TRAINJOB, NS, NAME) is None
        done = await asyncio.wait_for(_actuator(api).finish_recreation(JOB), DEADLINE_S)
        assert done is not None
        assert done.result == "rescaled", done
        copy_ = await running_on(api, kube, 4)
        assert copy_["metadata"]["annotations"][keys.RECREATED_FROM] == obj["metadata"]["uid"]
        assert copy_["metadata"]["finalizers"] == ["example.com/hold"]  # kept, as the rest


def test_the_records_namespace_is_the_leases_unless_set() -> None:
    assert records_namespace(load_config(None, env={})) == "bellows-system"
    leases = load_config(None, env={}, overrides=["leaderElection.namespace=ops"])
    assert records_namespace(leases) == "ops"
    env = {"BELLOWS_CONTROLLER_TRAINER_RECORDS_NAMESPACE": "records"}
    assert records_namespace(load_config(None, env=env)) == "records"
    with pytest.raises(ConfigError, match="recordsNamespace"):
        load_config(None, env={}, overrides=["controller.trainer.recordsNamespace=Team_A"])


class _SetAside(ControllerObserver):
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def job_set_aside(self, reason: str) -> None:
        self.reasons.append(reason)


async def test_a_rebuild_counts_a_refused_record_and_schedules_the_others() -> None:
    async with _cluster() as (kube, api):
        record = await _half_done(kube, api)
        edited = copy.deepcopy(record)
        _body_edit(_image)(edited)
        await api.write_configmap(
            RECORDS, edited, resource_version=record["metadata"]["resourceVersion"]
        )
        other = example()
        other["metadata"]["name"] = "honest"
        await api.create_job(TRAINJOB, NS, other)
        observer, clock = _SetAside(), ServiceClock(speedup=1.0)
        controller = Controller(
            api=api,
            autoscaler=Autoscaler(AutoscalerConfig(), capacity=8, cluster=default_cluster()),
            actuator=_actuator(api),
            reader=JobReader(api, namespace=NS, kinds=ALL_KINDS),
            now=clock.now,
            wall_to_clock=clock.at,
            observer=observer,
        )
        await asyncio.wait_for(controller.rebuild(), DEADLINE_S)
        assert observer.reasons == ["record"]
        assert list(controller.autoscaler.allocations) == [f"trainjob/{NS}/honest"]
        assert await _trainjobs(api) == ["honest"]
