"""Forged events: a payload for another namespace than its subject, or for a namespace out of
the controller's scope, starts nothing and touches nothing there.

The probe this answers: with ``namespaces=[default]``, an arrival published for a ``team-b``
job (on a ``default`` subject, past the consumer's filter) started that job on 8 GPUs.
"""

from __future__ import annotations

import asyncio
import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client as k8s

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.bus import (
    EventConsumer,
    EventPump,
    JobArrived,
    JobCompleted,
    JobKind,
    JobRef,
    NatsSettings,
    Outcome,
    connect,
)
from bellows.bus.batching import Batcher
from bellows.bus.codec import encode
from bellows.bus.consuming import CODE_HEADER, REASON_HEADER
from bellows.bus.server import running_nats_server
from bellows.bus.streams import ensure_streams
from bellows.bus.subjects import dead_letter_wildcard, event_subject, subject_mismatch
from bellows.emulator import EmulatedCluster
from bellows.kube import Actuator, JobReader, KubeApi, PyTorchJobKind, keys
from bellows.scaling import default_cluster
from bellows.service.clock import ServiceClock
from bellows.service.controller import Controller
from tests.kube.conftest import load_examples

T0 = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
KIND = PyTorchJobKind()

# ----------------------------------------------------------------------------- the subject check

labels = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
names = st.builds(".".join, st.lists(labels, min_size=1, max_size=3))
refs = st.builds(JobRef, st.sampled_from(list(JobKind)), labels, names, st.just("uid-1"))


@st.composite
def events(draw: st.DrawFn) -> JobArrived | JobCompleted:
    ref = draw(refs)
    if draw(st.booleans()):
        return JobArrived(ref, T0)
    return JobCompleted(ref, T0, Outcome.SUCCEEDED)


@given(event=events(), prefix=st.sampled_from(["bellows", "acme.ml"]))
def test_an_event_fits_its_own_subject(event: JobArrived | JobCompleted, prefix: str) -> None:
    assert subject_mismatch(prefix, event_subject(prefix, event), event) is None


@given(event=events(), other=events())
def test_an_event_on_another_jobs_subject_is_refused_with_the_parts_that_differ(
    event: JobArrived | JobCompleted, other: JobArrived | JobCompleted
) -> None:
    subject = event_subject("bellows", other)
    reason = subject_mismatch("bellows", subject, event)
    same = (other.job.namespace, other.job.kind, other.job.name, other.type) == (
        event.job.namespace,
        event.job.kind,
        event.job.name,
        event.type,
    )
    assert (reason is None) == same
    if other.job.namespace != event.job.namespace:
        assert reason is not None
        assert f"namespace '{other.job.namespace}' in the subject" in reason
        assert f"'{event.job.namespace}' in the payload" in reason


@pytest.mark.parametrize(
    "subject",
    [
        "bellows.events.v1.team-a.pytorchjob.x",  # a token short
        "bellows.events.v1.team-a.pytorchjob.x.arrived.more",
        "other.events.v1.team-a.pytorchjob.x.arrived",
        "bellows.events",
        "",
    ],
)
def test_a_subject_that_is_no_event_subject_is_refused(subject: str) -> None:
    event = JobArrived(JobRef(JobKind.PYTORCHJOB, "team-a", "x", "u"), T0)
    reason = subject_mismatch("bellows", subject, event)
    assert reason is not None
    assert "is not an event subject" in reason
    assert "bellows.events.v1.team-a.pytorchjob.x.arrived" in reason


# ----------------------------------------------------------------------------- the controller


def opted_in_job(namespace: str, name: str) -> dict[str, Any]:
    """The example PyTorchJob (8 GPUs at most), its profile inline, in ``namespace``."""
    examples = copy.deepcopy(load_examples())
    obj = examples["PyTorchJob"]
    notes = obj["metadata"]["annotations"]
    del notes[keys.PROFILE_CONFIGMAP]
    notes[keys.PROFILE] = json.dumps(json.loads(examples["ConfigMap"]["data"]["profile.json"]))
    obj["metadata"].update(namespace=namespace, name=name)
    return obj


class Recording(KubeApi):
    """A KubeApi that remembers the namespaces of every job it read or wrote."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        super().__init__(api_client)
        self.touched: list[tuple[str, str, str]] = []

    async def get_job(self, kind: Any, namespace: str, name: str) -> Any:
        self.touched.append(("get", namespace, name))
        return await super().get_job(kind, namespace, name)

    async def patch_job(self, kind: Any, namespace: str, name: str, patch: Any) -> Any:
        self.touched.append(("patch", namespace, name))
        return await super().patch_job(kind, namespace, name, patch)


def controller_for(api: KubeApi, clock: ServiceClock, namespaces: list[str]) -> Controller:
    return Controller(
        api=api,
        autoscaler=Autoscaler(
            AutoscalerConfig(delta_s=0.0, queue=True, optimizer="numpy"),
            capacity=8,
            cluster=default_cluster(),
        ),
        actuator=Actuator(api),
        reader=JobReader(api, namespace=namespaces[0]),
        namespaces=namespaces,
        now=clock.now,
        wall_to_clock=clock.at,
    )


async def create(api: KubeApi, obj: dict[str, Any]) -> dict[str, Any]:
    custom = k8s.CustomObjectsApi(api.api_client)
    made: dict[str, Any] = await asyncio.to_thread(
        custom.create_namespaced_custom_object,
        KIND.group,
        KIND.version,
        obj["metadata"]["namespace"],
        KIND.plural,
        obj,
    )
    return made


def arrival(made: dict[str, Any]) -> JobArrived:
    meta = made["metadata"]
    ref = JobRef(JobKind.PYTORCHJOB, meta["namespace"], meta["name"], meta["uid"])
    return JobArrived(ref, T0, meta["resourceVersion"])


def untouched(cluster: EmulatedCluster, made: dict[str, Any]) -> bool:
    """No Bellows write reached the job: the same spec and annotations, still suspended."""
    store = cluster.store
    now = store.get(store.resources["kubeflow.org/v1/pytorchjobs"], "team-b", "victim")
    return (
        now["spec"] == made["spec"]
        and now["metadata"].get("annotations") == made["metadata"]["annotations"]
        and not any(
            (e.get("involvedObject") or {}).get("name") == "victim"
            for e in store.list_objects(store.resources["v1/events"], None)[0]
        )
    )


async def running(api: KubeApi, name: str) -> bool:
    """Whether Bellows started the job ``default/name`` (its journal says ``done``)."""
    obj = await KubeApi.get_job(api, KIND, "default", name)  # not recorded: a test's read
    notes = (obj or {}).get("metadata", {}).get("annotations") or {}
    return notes.get(keys.PHASE) == "done"


def test_an_arrival_outside_the_controllers_namespaces_starts_nothing(crds: list[Path]) -> None:
    async def main() -> None:
        async with EmulatedCluster(crds=crds, namespaces=("default", "team-b")) as cluster:
            api = Recording(cluster.api_client())
            try:
                victim = await create(api, opted_in_job("team-b", "victim"))
                controller = controller_for(api, ServiceClock(), ["default"])
                await controller.rebuild()
                good = await create(api, opted_in_job("default", "good"))
                # the forged arrival and a good one in the same window
                await controller.apply((arrival(victim), arrival(good)))
                assert await running(api, "good")
                assert set(controller.held) == {"pytorchjob/default/good"}
                assert not any(ns == "team-b" for _, ns, _ in api.touched), api.touched
                assert untouched(cluster, victim)
                # a completion out of scope frees nothing either
                gone = JobCompleted(arrival(victim).job, T0, Outcome.SUCCEEDED)
                await controller.apply((gone,))
                assert set(controller.held) == {"pytorchjob/default/good"}
                assert not any(ns == "team-b" for _, ns, _ in api.touched)
            finally:
                await asyncio.to_thread(api.api_client.close)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_forged_event_on_the_bus_is_dead_lettered_and_the_good_one_applied(
    crds: list[Path], tmp_path: Path
) -> None:
    """The whole path: a namespace-filtered consumer, the pump, the controller."""

    async def main() -> None:
        async with (
            running_nats_server(tmp_path / "nats") as nats_server,
            EmulatedCluster(crds=crds, namespaces=("default", "team-b")) as cluster,
        ):
            settings = NatsSettings(servers=(nats_server.url,), ack_wait_s=5.0)
            nc = await connect(settings)
            api = Recording(cluster.api_client())
            try:
                js = nc.jetstream()
                await ensure_streams(js, settings)
                victim = await create(api, opted_in_job("team-b", "victim"))
                controller = controller_for(api, ServiceClock(), ["default"])
                await controller.rebuild()
                good = await create(api, opted_in_job("default", "good"))
                forged = arrival(victim)
                # team-b's payload on a default subject: past the consumer's filter
                lure = event_subject(settings.subject_prefix, arrival(good))
                await js.publish(lure, encode(forged))
                # team-b's payload on its own subject: the filter keeps it out
                await js.publish(event_subject(settings.subject_prefix, forged), encode(forged))
                await js.publish(event_subject(settings.subject_prefix, arrival(good)),
                                 encode(arrival(good)))  # fmt: skip
                consumer = await EventConsumer.open(js, settings, namespaces=("default",))
                loop = asyncio.get_running_loop()
                pump = EventPump(
                    consumer,
                    Batcher(),
                    controller.apply,
                    clock=loop.time,
                    max_deliver=settings.max_deliver,
                    ack_wait_s=settings.ack_wait_s,
                    poll_s=0.1,
                )
                deadline = loop.time() + 30
                while not await running(api, "good"):
                    assert loop.time() < deadline, "the good job was never started"
                    await pump.cycle()
                assert not any(ns == "team-b" for _, ns, _ in api.touched), api.touched
                assert untouched(cluster, victim)
                sub = await js.pull_subscribe(
                    dead_letter_wildcard(settings.subject_prefix),
                    stream=settings.dead_letter_stream,
                )
                letters = await sub.fetch(1, timeout=5)
                assert letters[0].headers is not None
                assert letters[0].headers[CODE_HEADER] == "invalid_event"
                assert letters[0].headers[REASON_HEADER] == (
                    "subject and payload name different jobs: namespace 'default' in the "
                    "subject but 'team-b' in the payload; name 'good' in the subject but "
                    "'victim' in the payload"
                )
                await consumer.close()
            finally:
                await nc.close()
                await asyncio.to_thread(api.api_client.close)

    asyncio.run(asyncio.wait_for(main(), 90))


@pytest.fixture(scope="module")
def crds(shared_data: Path) -> list[Path]:
    return sorted((shared_data / "crds").glob("*.yaml"))
