"""What a tenant writes in the journal annotations of its own job is data, never an order
(issue 35, items 2 and 3): a value its settings, its replicas or the cluster's GPUs rule out
reads as absent, is said in a Warning Event and counted; whatever one job's objects raise,
that job is set aside and the rest of the cluster is rebuilt and scheduled in the same pass.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes.client.rest import ApiException

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.emulator import EmulatedCluster
from bellows.jobs import Allocation, SpecError
from bellows.kube import Actuator, Arrived, JobReader, KubeApi, keys
from bellows.kube.journal import Journal, Phase
from bellows.kube.readback import DISTRUSTED_EVENT, allowed, checked_journal
from bellows.scaling import default_cluster
from bellows.service.clock import ServiceClock
from bellows.service.controller import Controller
from bellows.service.observing import ControllerObserver
from bellows.sim.workloads.traces import TraceJob
from bellows.twin.replay import job_manifest
from tests.hostile.test_probes import examine, torch_job
from tests.hostile.test_probes import spec as probe_spec
from tests.service.livecluster import NS, crds, jobs

JOURNAL_KEYS = (keys.PHASE, keys.TARGET, keys.ALLOCATION, keys.REQUESTED, keys.PROGRESS)


# ----- the pure check ------------------------------------------------------------------------


def journaled(**notes: str) -> Arrived:
    """The example PyTorchJob (max-gpus 8, 2 replicas, batch 256) with these annotations."""
    obj = torch_job()
    obj["metadata"]["annotations"].update(notes)
    seen = examine(obj)
    assert isinstance(seen, Arrived), seen
    return seen


def running(obj_notes: Mapping[str, str], replicas: int | None = None) -> Arrived:
    obj = torch_job()
    obj["metadata"]["annotations"].update({keys.REQUESTED: "k=2,b=256", **obj_notes})
    obj["spec"]["runPolicy"] = {"suspend": False}
    if replicas is not None:
        obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = replicas
    seen = examine(obj)
    assert isinstance(seen, Arrived), seen
    return seen


def test_an_allocation_the_jobs_settings_allow_is_adopted():
    seen = running({keys.PHASE: "done", keys.ALLOCATION: "k=2,b=256"})
    assert seen.running is not None
    assert (seen.running.gpus, seen.running.batch) == (2, 256)
    assert seen.distrusted == ()


@pytest.mark.parametrize(
    ("allocation", "replicas", "why"),
    [
        ("k=64,b=256", 64, "outside the job's settings"),  # max-gpus is 8
        ("k=2,b=1000000", 2, "outside the job's settings"),  # over max-batch-size
        ("k=4,b=256", 2, "replicas ask for 2 GPUs"),  # the spec says otherwise
    ],
)
def test_a_forged_allocation_is_not_adopted_and_says_why(allocation, replicas, why):
    seen = running({keys.PHASE: "done", keys.ALLOCATION: allocation}, replicas=replicas)
    assert seen.running is None
    (item,) = seen.distrusted
    assert item.key == keys.ALLOCATION
    assert item.value == allocation
    assert why in item.why
    assert allocation in item.message()


def test_a_target_beyond_the_cluster_is_dropped():
    seen = journaled(**{keys.PHASE: "suspending", keys.TARGET: "k=8,b=256"})
    journal = Journal.read(seen.view.annotations)
    kept, dropped = checked_journal(journal, seen.spec, seen.view, capacity=4)
    assert kept.target is None
    assert kept.phase is Phase.SUSPENDING
    assert [d.key for d in dropped] == [keys.TARGET]
    assert "more than the cluster's 4" in dropped[0].why
    kept, dropped = checked_journal(journal, seen.spec, seen.view, capacity=8)
    assert kept == journal
    assert dropped == ()


pairs = st.builds(
    "k={}b={}".format,
    st.integers(0, 10**6),
    st.integers(0, 10**7),
).map(lambda text: text.replace("b=", ",b="))
values = st.one_of(pairs, st.sampled_from([str(p) for p in Phase]), st.text(max_size=40))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(JOURNAL_KEYS), values, max_size=5), st.integers(0, 16))
def test_whatever_the_journal_says_only_allowed_sizes_are_kept(notes, capacity):
    obj = torch_job()
    obj["metadata"]["annotations"].update(notes)
    seen = examine(obj)
    if not isinstance(seen, Arrived):
        return  # a bad `requested` makes the job invalid: left alone, nothing adopted
    journal, _ = checked_journal(
        Journal.read(seen.view.annotations), seen.spec, seen.view, capacity=capacity
    )
    resuming = journal.phase in (Phase.SUSPENDING, Phase.PATCHED)  # a target acted on
    for pair in (journal.allocation, journal.target if resuming else None):
        if pair is not None:
            assert allowed(seen.spec, pair)
            assert capacity == 0 or pair[0] <= capacity
    if seen.running is not None:
        assert allowed(seen.spec, (seen.running.gpus, seen.running.batch))


def test_the_core_refuses_to_adopt_a_size_the_job_does_not_allow():
    spec = probe_spec(k_max=2, b_max=256, batch_size=128)
    core = Autoscaler(AutoscalerConfig(), capacity=16, cluster=default_cluster())
    with pytest.raises(SpecError, match="allocation"):
        core.adopt(spec, Allocation(8, 256), 0.0)
    assert core.allocations == {}
    assert core.in_use == 0
    assert core.adopt(spec, Allocation(2, 128), 0.0)


# ----- a rebuild on the emulated cluster ----------------------------------------------------


class Counting(ControllerObserver):
    def __init__(self) -> None:
        self.distrusted: list[str] = []
        self.set_aside: list[str] = []

    def journal_distrusted(self, key: str) -> None:
        self.distrusted.append(key)

    def job_set_aside(self, reason: str) -> None:
        self.set_aside.append(reason)


class FailingFor(KubeApi):
    """The API, but every read of one job's profile ConfigMap answers ``status``."""

    def __init__(self, api_client: Any, configmap: str, status: int) -> None:
        super().__init__(api_client)
        self._configmap, self._status = configmap, status

    async def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        if name == self._configmap:
            raise ApiException(status=self._status, reason="Forbidden by a webhook")
        return await super().get_configmap(namespace, name)


def _resource(kube: EmulatedCluster, kind: str) -> Any:
    plural = kind.lower() + "s"
    key = next(k for k in kube.store.resources if k.endswith("/" + plural))
    return kube.store.resources[key]


def _create(kube: EmulatedCluster, body: dict[str, Any]) -> None:
    kube.store.create(_resource(kube, body["kind"]), NS, body)


def _running(body: dict[str, Any], notes: Mapping[str, str]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["metadata"]["annotations"].update(notes)
    body["spec"]["runPolicy"]["suspend"] = False
    return body


def _events(kube: EmulatedCluster, name: str) -> list[dict[str, Any]]:
    found = []
    for key, res in kube.store.resources.items():
        if key.endswith("/events"):
            for e in kube.store.list_objects(res, NS)[0]:
                about = e.get("involvedObject") or e.get("regarding") or {}
                if about.get("name") == name:
                    found.append(e)
    return found


def _reason(event: Mapping[str, Any]) -> str:
    return str(event.get("reason", ""))


async def _rebuilt(
    kube: EmulatedCluster, *, api: KubeApi | None = None, capacity: int = 8
) -> tuple[Controller, Counting]:
    api = api or KubeApi(kube.api_client())
    clock = ServiceClock(speedup=60.0)
    observer = Counting()
    controller = Controller(
        api=api,
        autoscaler=Autoscaler(AutoscalerConfig(), capacity=capacity, cluster=default_cluster()),
        actuator=Actuator(api),
        reader=JobReader(api, namespace=NS),
        now=clock.now,
        wall_to_clock=clock.at,
        observer=observer,
    )
    await controller.rebuild()
    return controller, observer


def _honest(n: int) -> list[TraceJob]:
    found = [j for j in jobs(30, categories=(1, 2)) if j.spec.elastic][:n]
    assert len(found) == n
    return found


async def test_forged_journals_stop_no_rebuild_and_buy_nothing() -> None:
    honest, victims = _honest(4), _honest(6)[4:]
    async with EmulatedCluster(crds=crds(), compression=60.0, namespaces=(NS,)) as kube:
        names = []
        for i, job in enumerate(honest):
            ref, body = job_manifest(job, i, namespace=NS)
            names.append(ref.key)
            _create(kube, body)
        forged: dict[str, str] = {}
        for i, job in enumerate(victims):
            ref, body = job_manifest(job, 100 + 2 * i, namespace=NS)  # PyTorchJobs
            k_max, replicas = job.spec.k_max, body["spec"]["pytorchReplicaSpecs"]["Worker"]
            over = f"k={k_max + 6},b={job.spec.batch_size}"
            notes = (
                {keys.PHASE: "done", keys.ALLOCATION: over}
                if i == 0
                else {keys.PHASE: "suspending", keys.TARGET: over}
            )
            if i == 0:  # its replicas as the forged allocation says; its ask as it was
                asked = f"k={replicas['replicas']},b={job.spec.batch_size}"
                notes[keys.REQUESTED] = asked
                replicas["replicas"] = k_max + 6
            _create(kube, _running(body, notes))
            forged[ref.key] = body["metadata"]["name"]
        controller, observer = await _rebuilt(kube)
        core = controller.autoscaler
        # the honest jobs are all taken; the forged ones too, but at no forged size
        assert set(names) <= set(core.allocations) | set(core.queued)
        for key in forged:
            allocation = core.allocations.get(key)
            assert allocation is None or allocation.gpus <= core.job(key).k_max
        assert sorted(observer.distrusted) == sorted([keys.ALLOCATION, keys.TARGET])
        for key, name in forged.items():
            reasons = [_reason(e) for e in _events(kube, name)]
            assert DISTRUSTED_EVENT in reasons, (key, reasons)
            # its replicas buy it nothing: held at most at a size it is allowed
            assert controller.held.get(key, 0) <= core.job(key).k_max
        # a round runs, and schedules the honest jobs
        await controller.tick()
        assert set(names) <= set(core.allocations) | set(core.queued)
        assert any(n in core.allocations for n in names)


@pytest.mark.parametrize("status", [400, 403, 422, 500])
async def test_an_api_error_about_one_job_sets_it_aside_and_the_rest_go_on(status) -> None:
    honest = _honest(4)
    async with EmulatedCluster(crds=crds(), compression=60.0, namespaces=(NS,)) as kube:
        names = []
        for i, job in enumerate(honest):
            ref, body = job_manifest(job, i, namespace=NS)
            names.append(ref.key)
            _create(kube, body)
        ref, body = job_manifest(_honest(5)[4], 10, namespace=NS)
        notes = body["metadata"]["annotations"]
        del notes[keys.PROFILE]
        notes[keys.PROFILE_CONFIGMAP] = "poisoned"
        _create(kube, body)
        api = FailingFor(kube.api_client(), "poisoned", status)
        controller, observer = await _rebuilt(kube, api=api)
        core = controller.autoscaler
        assert set(names) <= set(core.allocations) | set(core.queued)
        assert ref.key not in core.allocations
        assert ref.key not in core.queued
        assert observer.set_aside == ["api"]
        reasons = [_reason(e) for e in _events(kube, body["metadata"]["name"])]
        assert "InvalidSettings" in reasons


async def test_an_api_server_that_cannot_answer_still_fails_the_rebuild() -> None:
    async with EmulatedCluster(crds=crds(), compression=60.0, namespaces=(NS,)) as kube:
        _, body = job_manifest(_honest(1)[0], 0, namespace=NS)
        notes = body["metadata"]["annotations"]
        del notes[keys.PROFILE]
        notes[keys.PROFILE_CONFIGMAP] = "poisoned"
        _create(kube, body)
        api = FailingFor(kube.api_client(), "poisoned", 503)
        with pytest.raises(ApiException):
            await _rebuilt(kube, api=api)


# ----- arbitrary tenant-writable state ------------------------------------------------------

annotation_values = st.one_of(
    pairs,
    st.sampled_from([str(p) for p in Phase] + ["", "true", "false", "k=1,b=1"]),
    st.text(max_size=30),
)
hostile_notes = st.dictionaries(
    st.sampled_from(
        [
            *JOURNAL_KEYS,
            keys.RECREATED_FROM,
            keys.RESTARTS,
            keys.STARTED_AT,
            keys.SUSPENDED_AT,
            keys.MAX_GPUS,
            keys.MIN_BATCH,
            keys.MAX_BATCH,
            keys.PROFILE_CONFIGMAP,
            keys.PROFILE,
        ]
    ),
    annotation_values,
    max_size=6,
)
configmaps = st.dictionaries(
    st.sampled_from(["trainjob.json", "old-uid", "target", "source", "profile.json"]),
    st.one_of(st.text(max_size=40), st.just('{"metadata":{"generateName":"x-"}}')),
    max_size=4,
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(st.tuples(hostile_notes, st.booleans()), min_size=1, max_size=3),
    st.lists(configmaps, max_size=2),
)
async def test_whatever_tenants_write_the_rebuild_returns_and_honest_jobs_are_scheduled(
    hostile: list[tuple[dict[str, str], bool]], maps: list[dict[str, str]]
) -> None:
    honest = _honest(3)
    async with EmulatedCluster(crds=crds(), compression=60.0, namespaces=(NS,)) as kube:
        names = []
        for i, job in enumerate(honest):
            ref, body = job_manifest(job, i, namespace=NS)
            names.append(ref.key)
            _create(kube, body)
        extra = _honest(6)[3:]
        for i, (notes, run) in enumerate(hostile):
            _, body = job_manifest(extra[i], 20 + i, namespace=NS)
            body["metadata"]["annotations"].update(notes)
            body["spec"]["runPolicy"]["suspend"] = not run
            _create(kube, body)
        for i, data in enumerate(maps):
            kube.store.create(
                _configmaps(kube),
                NS,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": f"bellows-recreate-x{i}",
                        "labels": {"bellows.io/recreates": f"x{i}"},
                    },
                    "data": data,
                },
            )
        controller, _ = await _rebuilt(kube)
        core = controller.autoscaler
        assert set(names) <= set(core.allocations) | set(core.queued)
        await controller.tick()
        for name, allocation in core.allocations.items():
            assert allowed(core.job(name), (allocation.gpus, allocation.batch))
        assert core.in_use <= core.capacity


def _configmaps(kube: EmulatedCluster) -> Any:
    key = next(k for k in kube.store.resources if k.endswith("/configmaps"))
    return kube.store.resources[key]
