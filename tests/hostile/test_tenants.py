"""Tenant B's hostile jobs and poison messages beside tenant A's good job, on the live loop.

The real ``run_bridge``/``run_controller`` against nats-server and the strict emulated
cluster. Before the controller starts, tenant B (namespace ``team-b``) has created jobs whose
annotations stopped the controller once, and someone on the NATS network has published
messages that crash-looped it. Tenant A's job, submitted afterwards in ``default``, must be
scheduled within one round; B's jobs are reported (status + Event) and never touched; every
poison message is dead-lettered with its reason; the controller never dies.
"""

from __future__ import annotations

import asyncio
import copy
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client as k8s
from nats.js.api import ConsumerConfig

from bellows.bus import JobArrived, JobKind, JobRef, connect, ensure_streams
from bellows.bus.subjects import dead_letter_wildcard, event_subject
from bellows.kube import keys
from bellows.twin.replay import job_manifest
from tests.service.livecluster import NS, Live, jobs, live

pytestmark = pytest.mark.slow

TEAM_B = "team-b"
HOSTILE = {
    "superscript": {keys.MAX_GPUS: "²"},
    "digits": {keys.MAX_BATCH: "9" * 5000},
    "requested": {keys.REQUESTED: "k=2,b=" + "9" * 5000},
    "million-gpus": {keys.MAX_GPUS: "4000000"},
    "weights": {
        keys.PROFILE: '{"apiVersion": "bellows.io/v1alpha1", "kind": "JobProfile", '
        '"weights": 1' + "0" * 400 + ', "step": [{"localBatch": 8, "seconds": 0.1}]}'
    },
    "env-name": {keys.BATCH_ENV: "LD_PRELOAD"},
}


def _hostile_bodies() -> list[dict[str, Any]]:
    template = jobs(1, seed=3, categories=(1,))[0]
    out = []
    for i, (name, values) in enumerate(HOSTILE.items()):
        _, body = job_manifest(template, 2 * i, namespace=TEAM_B)  # PyTorchJobs
        body = copy.deepcopy(body)
        body["metadata"]["name"] = f"hostile-{name}"
        body["metadata"]["annotations"].update(values)
        out.append(body)
    return out


async def _create(stack: Live, body: dict[str, Any]) -> None:
    custom = k8s.CustomObjectsApi(stack.kube.api_client())
    group, version = body["apiVersion"].split("/")
    await asyncio.to_thread(
        custom.create_namespaced_custom_object,
        group, version, body["metadata"]["namespace"], body["kind"].lower() + "s", body,
    )  # fmt: skip


async def _publish_poison(stack: Live) -> int:
    """Messages that crash-looped the controller, on subjects it consumes."""
    nats = stack.config().nats
    ref = JobRef(JobKind.PYTORCHJOB, NS, "ghost", "uid-ghost")
    subject = event_subject(nats.subject_prefix, JobArrived(ref, datetime.now(UTC)))
    payloads = [
        b"[" * 100_000,
        b'{"version": ' + b"9" * 5000 + b"}",
        b'{"version":1,"type":"job.arrived","time":"0001-01-01T00:00:00+14:00","source":"x",'
        b'"job":{"kind":"PyTorchJob","namespace":"default","name":"ghost","uid":"uid-ghost"}}',
        b"\xff\xfe\x00",
    ]
    nc = await connect(nats)
    try:
        js = nc.jetstream()
        for payload in payloads:
            await js.publish(subject, payload, stream=nats.stream)
    finally:
        await nc.close()
    return len(payloads)


async def _dead_letters(stack: Live, count: int, timeout_s: float = 20.0) -> list[str]:
    nats = stack.config().nats
    nc = await connect(nats)
    codes: list[str] = []
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe(
            dead_letter_wildcard(nats.subject_prefix),
            stream=nats.dead_letter_stream,
            config=ConsumerConfig(),
        )
        deadline = time.monotonic() + timeout_s
        while len(codes) < count and time.monotonic() < deadline:
            try:
                msgs = await sub.fetch(count - len(codes), timeout=1)
            except TimeoutError:
                continue
            codes.extend(m.subject.rsplit(".", 1)[-1] for m in msgs)
    finally:
        await nc.close()
    return codes


def _team_b(stack: Live) -> dict[str, dict[str, Any]]:
    store = stack.kube.store
    found = store.list_objects(store.resources["kubeflow.org/v1/pytorchjobs"], TEAM_B)[0]
    return {obj["metadata"]["name"]: obj for obj in found}


def _events_for(stack: Live, namespace: str) -> list[dict[str, Any]]:
    store = stack.kube.store
    return store.list_objects(store.resources["v1/events"], namespace)[0]


async def test_a_good_job_is_scheduled_beside_hostile_jobs_and_poison_messages() -> None:
    async with live(
        capacity=8, namespaces=(TEAM_B,), extra=(f"namespaces={NS},{TEAM_B}",)
    ) as stack:
        bodies = _hostile_bodies()
        for body in bodies:
            await _create(stack, body)
        before = {name: copy.deepcopy(obj["spec"]) for name, obj in _team_b(stack).items()}
        nats = stack.config().nats
        nc = await connect(nats)
        try:
            await ensure_streams(nc.jetstream(), nats)  # as either process does at start
        finally:
            await nc.close()
        poison = await _publish_poison(stack)
        stack.start_bridge()
        stack.start_controller("controller")
        names = await stack.submit(jobs(1, seed=4, categories=(1,)))
        started = time.monotonic()
        took = await stack.until(
            "tenant A's job started",
            lambda: stack.states().get(names[0]) in ("done", "Succeeded"),
            timeout_s=30.0,
        )
        # Bellows mode starts a job on free GPUs at its arrival: well within one round
        # (Δ = 600 cluster s = 0.5 real s), plus the event-to-patch latency of a loaded CI box
        assert took < 10.0, f"tenant A waited {took:.1f} s"
        await stack.all_done(names, timeout_s=30.0)
        stack.alive()  # the controller and the bridge never died
        assert time.monotonic() - started < 60.0
        # every hostile job is reported to its owner and otherwise untouched
        reasons = {e["involvedObject"]["name"]: e["reason"] for e in _events_for(stack, TEAM_B)}
        after = _team_b(stack)
        for name, spec in before.items():
            status = (after[name]["metadata"].get("annotations") or {}).get(keys.STATUS, "")
            assert status.startswith("not managed:"), (name, status)
            assert len(status) < 2000, "the hostile value is shown truncated"
            assert reasons.get(name) == "InvalidSettings", (name, reasons)
            assert after[name]["spec"] == spec, f"{name} was touched"
            assert keys.PHASE not in (after[name]["metadata"].get("annotations") or {})
        # every poison message is dead-lettered with its reason, none is lost silently
        codes = await _dead_letters(stack, poison)
        assert sorted(codes) == sorted(
            ["malformed_json", "malformed_json", "invalid_event", "malformed_json"]
        ), codes
        stack.witness.check(names)
