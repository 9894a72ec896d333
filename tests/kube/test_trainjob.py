"""Kubeflow Trainer v2 TrainJob: the real v2.3.0 CRDs' CEL rules, dry runs, the emulated
Trainer, and a resize as a re-creation (or in place on a server that allows it)."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from bellows.autoscaler.decisions import Preempt, Rescale, Start
from bellows.emulator.crds import trainer_crd_paths
from bellows.emulator.store import ApiError, rfc3339
from bellows.emulator.trainer import TORCH_DISTRIBUTED
from bellows.jobs import SpecError
from bellows.kube import Actuator, KubeApi, keys
from bellows.kube.adapters import ALL_KINDS, TRAINJOB
from bellows.kube.records import DEFAULT_RECORDS_NAMESPACE as RECORDS
from bellows.kube.records import RECORD_LABEL, record_name
from tests.conftest import delete_as_owner

from .conftest import EXAMPLES, condition, wait_for

NAME = "resnet50-trainjob"
JOB = f"trainjob/default/{NAME}"
GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"


@pytest.fixture(scope="module")
def crds(shared_data: Path) -> list[Path]:
    """The Kubeflow v1 CRDs (as everywhere in tests/kube) and Trainer v2.3.0's."""
    kubeflow = sorted((shared_data / "crds").glob("*.yaml"))
    return [*kubeflow, *trainer_crd_paths(shared_data / "crds")]


def example() -> dict[str, Any]:
    docs = list(yaml.safe_load_all((EXAMPLES / "trainjob-resnet50.yaml").read_text()))
    return copy.deepcopy(next(d for d in docs if d["kind"] == "TrainJob"))


def profile() -> dict[str, Any]:
    docs = list(yaml.safe_load_all((EXAMPLES / "pytorchjob-resnet50.yaml").read_text()))
    return next(d for d in docs if d["kind"] == "ConfigMap")


async def submit(api: KubeApi, body: dict[str, Any] | None = None) -> dict[str, Any]:
    core = k8s.CoreV1Api(api.api_client)
    await asyncio.to_thread(core.create_namespaced_config_map, "default", profile())
    return await api.create_job(TRAINJOB, "default", body or example())


async def patch_status(api: KubeApi, patch: dict[str, Any], **kw: Any) -> Any:
    custom = k8s.CustomObjectsApi(api.api_client)
    return await asyncio.to_thread(
        custom.patch_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, NAME, patch, **kw
    )


def actuator(api: KubeApi) -> Actuator:
    return Actuator(api, kinds=ALL_KINDS, halt_timeout_s=10)


async def records(api: KubeApi) -> list[str]:
    return [c["metadata"]["name"] for c in await api.list_configmaps(RECORDS, RECORD_LABEL)]


# ----- the adapter -------------------------------------------------------------------------


def test_the_adapter_reads_nodes_gpus_and_the_batch_env() -> None:
    obj = example()
    obj["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] = "2"
    view = TRAINJOB.view(obj, ("GLOBAL_BATCH_SIZE", "LOCAL_BATCH_SIZE"))
    assert (view.gpus, view.gpu_step, view.min_gpus, view.suspended) == (4, 2, 2, True)
    assert view.env == {"GLOBAL_BATCH_SIZE": ("256",), "LOCAL_BATCH_SIZE": ("128",)}
    patch = TRAINJOB.scale_patch(obj, 6, {"GLOBAL_BATCH_SIZE": "384", "LOCAL_BATCH_SIZE": "64"})
    assert patch["trainer"]["numNodes"] == 3
    assert {e["name"]: e["value"] for e in patch["trainer"]["env"]} == {
        "GLOBAL_BATCH_SIZE": "384",
        "LOCAL_BATCH_SIZE": "64",
    }
    assert patch["trainer"]["image"] == obj["spec"]["trainer"]["image"]  # the rest kept
    with pytest.raises(SpecError, match="a positive multiple of 2"):
        TRAINJOB.scale_patch(obj, 5, {})
    del obj["spec"]["trainer"]["resourcesPerNode"]
    with pytest.raises(SpecError, match=r"spec\.trainer\.resourcesPerNode\.limits"):
        TRAINJOB.view(obj, ())
    assert TRAINJOB.pod_counts(example()) == {"node": 2}


# ----- the API server: CEL rules of the real CRD, dry runs ---------------------------------


def test_spec_trainer_is_immutable_even_while_suspended(on_cluster) -> None:
    async def scenario(cluster, api):
        created = await submit(api)
        assert created["spec"]["managedBy"] == "trainer.kubeflow.org/trainjob-controller"
        with pytest.raises(ApiException) as err:
            await api.patch_job(TRAINJOB, "default", NAME, {"spec": {"trainer": {"numNodes": 3}}})
        assert err.value.status == 422
        assert "spec.trainer" in err.value.body
        assert "field is immutable" in err.value.body
        with pytest.raises(ApiException) as err:  # runtimeRef is immutable too
            await api.patch_job(TRAINJOB, "default", NAME, {"spec": {"runtimeRef": {"name": "x"}}})
        assert err.value.status == 422
        # suspend and the annotations may change
        done = await api.patch_job(TRAINJOB, "default", NAME, {"spec": {"suspend": False}})
        assert done["spec"]["suspend"] is False
        bad = example()
        bad["metadata"]["name"] = "other"
        bad["spec"]["managedBy"] = "someone-else"
        with pytest.raises(ApiException) as err:
            await api.create_job(TRAINJOB, "default", bad)
        assert err.value.status == 422
        assert "ManagedBy must be" in err.value.body

    on_cluster(scenario, trainer=True, compression=1.0)


def test_a_dry_run_is_checked_in_full_and_stores_nothing(on_cluster) -> None:
    async def scenario(cluster, api):
        await submit(api)
        settled = await wait_for(
            api, TRAINJOB, "default", NAME, lambda o: condition(o, "Suspended")
        )
        version = settled["metadata"]["resourceVersion"]
        trainer = {"spec": {"trainer": {"numNodes": 3}}}
        assert await api.dry_run_patch_job(TRAINJOB, "default", NAME, trainer) is False
        notes = {"metadata": {"annotations": {"team": "a"}}}
        assert await api.dry_run_patch_job(TRAINJOB, "default", NAME, notes) is True
        obj = await api.get_job(TRAINJOB, "default", NAME)
        assert obj["metadata"]["resourceVersion"] == version
        assert "team" not in obj["metadata"]["annotations"]
        with pytest.raises(ApiException) as err:
            await patch_status(api, notes, dry_run="Some")
        assert err.value.status == 400

    on_cluster(scenario, trainer=True, compression=1.0)


def test_a_future_trainer_accepts_spec_trainer_changes_while_suspended(on_cluster) -> None:
    async def scenario(cluster, api):
        await submit(api)
        trainer = {"spec": {"trainer": {**example()["spec"]["trainer"], "numNodes": 3}}}
        assert await api.dry_run_patch_job(TRAINJOB, "default", NAME, trainer) is True
        await api.patch_job(TRAINJOB, "default", NAME, {"spec": {"suspend": False}})
        assert await api.dry_run_patch_job(TRAINJOB, "default", NAME, trainer) is False

    on_cluster(scenario, trainer=True, compression=1.0, mutable_trainer=True)


# ----- the emulated Trainer ----------------------------------------------------------------


def test_the_trainer_resolves_the_runtime_runs_suspends_and_completes(on_cluster) -> None:
    async def scenario(cluster, api):
        body = example()
        body["metadata"]["annotations"][keys.WORK] = "20000"  # a few seconds of training
        created = await submit(api, body)
        uid = created["metadata"]["uid"]
        obj = await wait_for(api, TRAINJOB, "default", NAME, lambda o: condition(o, "Suspended"))
        assert obj["status"]["jobsStatus"][0]["active"] == 0
        await api.patch_job(TRAINJOB, "default", NAME, {"spec": {"suspend": False}})
        obj = await wait_for(api, TRAINJOB, "default", NAME, lambda o: condition(o, "Complete"))
        assert not condition(obj, "Suspended")
        env = cluster.trainer.pod_env(uid)
        assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"]) == ("2", "1")
        assert env["GLOBAL_BATCH_SIZE"] == "256"
        progress = cluster.trainer.progress(uid)
        assert progress.samples == progress.work == 20000

    on_cluster(scenario, trainer=True, compression=60.0)


def test_a_missing_runtime_leaves_the_job_unstarted_with_a_warning(on_cluster) -> None:
    async def scenario(cluster, api):
        body = example()
        body["spec"]["runtimeRef"]["name"] = "no-such-runtime"
        body["spec"]["suspend"] = False
        await submit(api, body)
        core = k8s.CoreV1Api(api.api_client)
        for _ in range(200):
            listed = await asyncio.to_thread(core.list_namespaced_event, "default")
            if any(e.reason == "TrainingRuntimeNotFound" for e in listed.items):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("no TrainingRuntimeNotFound Event")
        assert cluster.trainer.starts == []

    on_cluster(scenario, trainer=True, compression=1.0)


def test_the_shipped_runtime_is_valid_against_its_crd(on_cluster) -> None:
    async def scenario(cluster, api):
        custom = k8s.CustomObjectsApi(api.api_client)
        got = await asyncio.to_thread(
            custom.get_cluster_custom_object,
            GROUP,
            VERSION,
            "clustertrainingruntimes",
            TORCH_DISTRIBUTED["metadata"]["name"],
        )
        assert "torch" in got["spec"]["mlPolicy"]
        two = copy.deepcopy(dict(TORCH_DISTRIBUTED))
        two["metadata"] = {"name": "two-policies"}
        two["spec"]["mlPolicy"]["mpi"] = {}
        with pytest.raises(ApiError, match="Invalid"):  # CEL: one ML policy at most
            cluster.add_training_runtime(two)

    on_cluster(scenario, trainer=True, compression=1.0)


# ----- a resize is a re-creation ----------------------------------------------------------


async def running_on(api, cluster, nodes):
    def ok(obj):
        return (
            obj is not None
            and obj["spec"]["trainer"]["numNodes"] == nodes
            and not obj["spec"]["suspend"]
            and any(s[1] == obj["metadata"]["uid"] for s in cluster.trainer.starts)
        )

    obj = await api.get_job(TRAINJOB, "default", NAME)
    for _ in range(400):
        if ok(obj):
            return obj
        await asyncio.sleep(0.025)
        obj = await api.get_job(TRAINJOB, "default", NAME)
    raise AssertionError(f"not running on {nodes} nodes: {obj}")


def test_start_and_rescale_recreate_the_trainjob_keeping_what_it_was(on_cluster) -> None:
    async def scenario(cluster, api):
        body = example()
        body["metadata"]["labels"] = {"team": "vision"}
        body["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "u-1"}
        ]
        first = await submit(api, body)
        act = actuator(api)
        outcome = await act.apply(Start(JOB, 3, 192, reason="started into free GPUs"))
        assert outcome.result == "started", outcome
        started = await running_on(api, cluster, 3)
        assert started["metadata"]["uid"] != first["metadata"]["uid"]  # re-created
        notes = started["metadata"]["annotations"]
        assert notes[keys.RECREATED_FROM] == first["metadata"]["uid"]
        assert (notes[keys.PHASE], notes[keys.ALLOCATION]) == ("done", "k=3,b=192")
        assert notes[keys.REQUESTED] == "k=2,b=256"
        # the journal a resume in place writes (bellows status reads it): the first start
        assert notes[keys.REASON] == "started into free GPUs"
        assert keys.STARTED_AT in notes
        assert keys.RESTARTS not in notes
        assert started["metadata"]["labels"] == {"team": "vision"}
        assert started["metadata"]["ownerReferences"] == body["metadata"]["ownerReferences"]
        assert started["spec"]["runtimeRef"]["name"] == "torch-distributed"
        env = {e["name"]: e["value"] for e in started["spec"]["trainer"]["env"]}
        assert env == {"GLOBAL_BATCH_SIZE": "192", "LOCAL_BATCH_SIZE": "64"}
        assert cluster.trainer.pod_env(started["metadata"]["uid"])["PET_NNODES"] == "3"
        await asyncio.sleep(0.5)  # some training at (3, 192)
        before = cluster.trainer.progress(started["metadata"]["uid"]).samples
        assert before > 0
        grow = Rescale(JOB, 3, 192, 4, 256, reason="grows: 1.3x the throughput")
        outcome = await act.apply(grow, done=before)
        assert outcome.result == "rescaled", outcome
        again = await running_on(api, cluster, 4)
        renotes = again["metadata"]["annotations"]
        assert renotes[keys.REASON] == "grows: 1.3x the throughput"
        assert renotes[keys.RESTARTS] == "1"  # one restart after its start
        assert renotes[keys.STARTED_AT] == notes[keys.STARTED_AT]  # kept from the first start
        assert keys.PROGRESS in renotes
        progress = cluster.trainer.progress(again["metadata"]["uid"])
        assert progress.samples >= before  # resumed from the checkpoint, not from zero
        assert (progress.gpus, progress.batch, progress.restarts) == (4, 256, 2)
        assert again["metadata"]["annotations"][keys.RECREATED_FROM] == started["metadata"]["uid"]
        assert await records(api) == []
        assert [s[2] for s in cluster.trainer.starts] == [3, 4]  # one start per size
        assert await act.apply(Rescale(JOB, 4, 256, 4, 256)) == type(outcome)(
            JOB, "unchanged", "already running at the target"
        )

    on_cluster(scenario, trainer=True, compression=1.0)


def test_a_future_trainer_is_resized_in_place(on_cluster) -> None:
    async def scenario(cluster, api):
        first = await submit(api)
        act = actuator(api)
        assert (await act.apply(Start(JOB, 2, 256))).result == "started"
        await running_on(api, cluster, 2)
        assert (await act.apply(Rescale(JOB, 2, 256, 4, 512))).result == "rescaled"
        obj = await running_on(api, cluster, 4)
        assert obj["metadata"]["uid"] == first["metadata"]["uid"]  # the same TrainJob
        assert keys.RECREATED_FROM not in obj["metadata"]["annotations"]
        assert await records(api) == []

    on_cluster(scenario, trainer=True, compression=1.0, mutable_trainer=True)


def test_preempt_suspends_a_trainjob_in_place(on_cluster) -> None:
    async def scenario(cluster, api):
        await submit(api)
        act = actuator(api)
        await act.apply(Start(JOB, 2, 256))
        await running_on(api, cluster, 2)
        assert (await act.apply(Preempt(JOB, "capacity"))).result == "preempted"
        obj = await wait_for(api, TRAINJOB, "default", NAME, lambda o: condition(o, "Suspended"))
        assert obj["spec"]["suspend"] is True

    on_cluster(scenario, trainer=True, compression=1.0)


# ----- the controller killed at each step of a re-creation -----------------------------------


class CrashError(Exception):
    pass


class Dying(KubeApi):
    """A KubeApi that dies (raises) right after its ``step``-th write of a re-creation has
    reached the server: the write landed, the controller is gone before the next one."""

    STEPS = ("write_configmap", "delete_job", "create_job", "delete_configmap")

    def __init__(self, api_client, step: str) -> None:
        super().__init__(api_client)
        self.step = step

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name not in Dying.STEPS or name != super().__getattribute__("step"):
            return attr

        async def then_die(*args: Any, **kwargs: Any) -> Any:
            await attr(*args, **kwargs)
            raise CrashError(name)

        return then_die


@pytest.mark.parametrize("step", Dying.STEPS)
def test_a_controller_killed_at_each_step_of_a_recreation_loses_and_duplicates_nothing(
    on_cluster, step: str
) -> None:
    async def scenario(cluster, api):
        first = await submit(api)
        await actuator(api).apply(Start(JOB, 2, 256))
        running = await running_on(api, cluster, 2)
        await asyncio.sleep(0.3)
        done = cluster.trainer.progress(running["metadata"]["uid"]).samples
        with pytest.raises(CrashError):
            await actuator(Dying(api.api_client, step)).apply(
                Rescale(JOB, 2, 256, 4, 512), done=done
            )
        # a new controller: it finishes what the journal and the record say, once
        outcomes = await actuator(api).resume_interrupted()
        # killed after the record's delete, it had finished (but for its Event)
        expected = [] if step == "delete_configmap" else ["rescaled"]
        assert [o.result for o in outcomes] == expected, outcomes
        obj = await running_on(api, cluster, 4)
        assert obj["metadata"]["annotations"][keys.RECREATED_FROM] == running["metadata"]["uid"]
        assert obj["metadata"]["annotations"][keys.ALLOCATION] == "k=4,b=512"
        assert await records(api) == []
        assert await actuator(api).resume_interrupted() == []
        listed = [o async for page, _ in api.list_job_pages(TRAINJOB, "default") for o in page]
        assert [o["metadata"]["name"] for o in listed] == [NAME]  # no duplicate
        # started at its own size in place, then once as its copy: nothing started twice
        uids = [s[1] for s in cluster.trainer.starts]
        assert uids == [first["metadata"]["uid"], obj["metadata"]["uid"]]
        progress = cluster.trainer.progress(obj["metadata"]["uid"])
        assert progress.samples >= done
        assert progress.restarts == 2

    on_cluster(scenario, trainer=True, compression=1.0)


def test_a_record_made_stale_by_the_owner_is_dropped_untouched(on_cluster) -> None:
    async def scenario(cluster, api):
        await submit(api)
        await actuator(api).apply(Start(JOB, 2, 256))
        running = await running_on(api, cluster, 2)
        with pytest.raises(CrashError):
            await actuator(Dying(api.api_client, "delete_job")).apply(Rescale(JOB, 2, 256, 4, 512))
        # the owner submits a new TrainJob of that name meanwhile
        mine = example()
        mine["spec"]["trainer"]["numNodes"] = 1
        mine["metadata"]["annotations"] = {"team": "a"}
        await api.create_job(TRAINJOB, "default", mine)
        await actuator(api).resume_interrupted()
        assert await records(api) == []
        obj = await api.get_job(TRAINJOB, "default", NAME)
        assert obj["spec"]["trainer"]["numNodes"] == 1  # the owner's, never replaced
        assert keys.RECREATED_FROM not in obj["metadata"]["annotations"]
        assert running["metadata"]["uid"] != obj["metadata"]["uid"]
        assert record_name("default", NAME) != record_name("other", NAME)  # one per namespace

    on_cluster(scenario, trainer=True, compression=1.0)


def test_a_record_left_by_a_job_that_finished_before_its_delete_is_dropped(on_cluster) -> None:
    async def scenario(cluster, api):
        await submit(api)
        await actuator(api).apply(Start(JOB, 2, 256))
        running = await running_on(api, cluster, 2)
        with pytest.raises(CrashError):  # killed right after the record's write
            await actuator(Dying(api.api_client, "write_configmap")).apply(
                Rescale(JOB, 2, 256, 4, 512)
            )
        assert await records(api) == [record_name("default", NAME)]
        # the job ends before anyone deletes it (here: its pods failed while suspended)
        store = cluster.store
        res = store.resources[f"{GROUP}/{VERSION}/{PLURAL}"]

        def failed(obj: dict[str, Any]) -> dict[str, Any]:
            ended = {"type": "Failed", "status": "True", "reason": "TrainJobFailed"}
            ended |= {
                "message": "the node pods failed",
                "lastTransitionTime": rfc3339(datetime.now(UTC)),
            }
            obj["status"] = {**(obj.get("status") or {}), "conditions": [ended]}
            return obj

        store.update_with(res, "default", NAME, failed, subresource="status")
        outcomes = await actuator(api).resume_interrupted()
        assert {(o.result, o.detail) for o in outcomes} == {("dropped", "failed")}
        assert await records(api) == []  # the record went with the job's end
        obj = await api.get_job(TRAINJOB, "default", NAME)
        assert obj["metadata"]["uid"] == running["metadata"]["uid"]  # never deleted
        # the owner deletes the finished job: nothing brings it back
        await delete_as_owner(api, TRAINJOB, "default", NAME, uid=obj["metadata"]["uid"])
        assert await actuator(api).resume_interrupted() == []
        assert await api.get_job(TRAINJOB, "default", NAME) is None
        assert [s[1] for s in cluster.trainer.starts] == [running["metadata"]["uid"]]

    on_cluster(scenario, trainer=True, compression=1.0)


def test_a_record_written_late_by_a_dead_controller_does_not_pass_for_a_resume(
    on_cluster,
) -> None:
    async def scenario(cluster, api):
        await submit(api)
        await actuator(api).apply(Start(JOB, 2, 256))
        running = await running_on(api, cluster, 2)
        with pytest.raises(CrashError):
            await actuator(Dying(api.api_client, "write_configmap")).apply(
                Rescale(JOB, 2, 256, 4, 512)
            )
        (late,) = await api.list_configmaps(RECORDS, RECORD_LABEL)
        await actuator(api).resume_interrupted()  # the next controller finishes it
        copy_ = await running_on(api, cluster, 4)
        assert copy_["metadata"]["annotations"][keys.RECREATED_FROM] == running["metadata"]["uid"]
        assert (await actuator(api).apply(Preempt(JOB, "capacity"))).result == "preempted"
        # the dead controller's write of that record lands only now (a request in flight)
        body = {k: late[k] for k in ("apiVersion", "kind", "data")}
        body["metadata"] = {k: late["metadata"][k] for k in ("name", "namespace", "labels")}
        await api.write_configmap(RECORDS, body, resource_version=None)
        # started again at the record's target: the copy is not running there, so the stale
        # record is dropped and the job resumed, not taken as done
        assert (await actuator(api).apply(Start(JOB, 4, 512))).result == "started"
        assert await records(api) == []
        obj = await running_on(api, cluster, 4)
        assert obj["metadata"]["uid"] == copy_["metadata"]["uid"]  # resumed, not re-created

    on_cluster(scenario, trainer=True, compression=1.0)


def test_a_trainjob_in_a_queue_without_kueue_cooperation_is_refused_untouched(
    on_cluster,
) -> None:
    async def scenario(cluster, api):
        body = example()
        body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a"}
        created = await submit(api, body)
        outcome = await Actuator(api, kinds=ALL_KINDS).apply(Start(JOB, 4, 256))
        assert outcome.result == "refused"
        assert "Kueue" in outcome.detail
        obj = await api.get_job(TRAINJOB, "default", NAME)
        assert obj["spec"] == created["spec"]  # nothing but the status line written
        assert obj["metadata"]["annotations"][keys.STATUS].startswith("not managed:")

    on_cluster(scenario, trainer=True, compression=1.0)
