"""The live loop under faults: nothing lost, nothing done twice.

Each test runs the real processes' entry points (``run_bridge``, ``run_controller``) against a
real nats-server and the strict emulated Kubeflow cluster, breaks something, and then asks
the :class:`~tests.service.livecluster.Witness` whether every job succeeded, started once,
was never stopped and resumed at the same allocation twice in a row, and whether the pods
ever held more GPUs than the cluster has.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from datetime import datetime
from typing import Any

import pytest
from nats.aio.client import Client

from bellows.bus import JobArrived, JobCompleted, JobKind, JobRef, Outcome, connect, publish_events
from bellows.bus.codec import encode
from bellows.bus.publishing import MSG_ID_HEADER
from bellows.bus.subjects import event_subject
from bellows.kube import keys
from tests.service.livecluster import LATENCY_S, NS, Live, jobs, live

pytestmark = pytest.mark.slow


async def _consumer_info(stack: Live) -> Any:
    config = stack.config()
    nc = await connect(config.nats)
    try:
        return await nc.jetstream().consumer_info(config.nats.stream, config.nats.durable)
    finally:
        await nc.close()


async def _drained(stack: Live, timeout_s: float) -> float:
    """Seconds until the consumer has nothing pending or un-acked (bounded wait)."""
    started = time.monotonic()
    while True:
        info = await _consumer_info(stack)
        if info.num_pending == 0 and info.num_ack_pending == 0:
            return time.monotonic() - started
        stack.alive()
        assert time.monotonic() - started < timeout_s, f"the consumer did not drain: {info}"
        await asyncio.sleep(0.1)


def _running_at(stack: Live, name: str) -> bool:
    obj = stack.objects().get(name) or {}
    return (obj.get("metadata", {}).get("annotations") or {}).get(keys.PHASE) == "done"


async def test_a_controller_killed_mid_window_is_replaced_without_loss() -> None:
    # paper mode, Δ = 2 cluster hours = 6 real seconds: the arrivals wait in the open window
    # (Bellows mode applies each at once: its kills are the other tests here)
    async with live(delta_s=7200.0, extra=("controller.mode=paper",)) as stack:
        stack.start_bridge()
        stack.start_controller("first")
        await asyncio.sleep(0.5)
        names = await stack.submit(jobs(5))
        info: list[Any] = []

        async def held() -> bool:
            info[:] = [await _consumer_info(stack)]
            return info[0].num_ack_pending == len(names)

        started = time.monotonic()
        while not await held():
            assert time.monotonic() - started < 10, f"deliveries not held: {info}"
            await asyncio.sleep(0.05)
        # the controller holds every arrival un-acked and has not acted on any job yet
        assert set(stack.states().values()) == {"new"}
        await stack.kill("first")
        stack.start_controller("second", "controller.deltaSeconds=600")
        await stack.all_done(names)
        stack.alive()
        stack.witness.check(names)
        # the dead controller's deliveries came back and were settled (acked, none left)
        await _drained(stack, timeout_s=10)


async def test_a_controller_killed_between_suspend_and_resume_is_finished_by_the_next() -> None:
    async with live(capacity=8) as stack:
        stack.start_bridge()
        stack.start_controller("first")
        trace = jobs(4, scale=4.0)  # long enough to be running when the others come
        first = await stack.submit(trace[:1])
        await stack.until("the first job running", lambda: _running_at(stack, first[0]))
        interrupted: list[tuple[str, str]] = []

        def on_phase(name: str, phase: str, obj: dict[str, Any]) -> None:
            # a running job being suspended for a rescale: kill the controller right now
            if phase == "suspending" and "first" in stack.tasks and not interrupted:
                interrupted.append((name, obj["metadata"]["annotations"][keys.TARGET]))
                stack.tasks["first"][0].cancel()

        stack.witness.phase_hooks.append(on_phase)
        rest = await stack.submit(trace[1:], first=1)
        await stack.until("a rescale interrupted", lambda: bool(interrupted))
        await stack.kill("first")
        name, target = interrupted[0]
        obj = stack.objects()[name]
        notes = obj["metadata"]["annotations"]
        # left half done: suspended, journal not at "done"
        assert notes[keys.PHASE] in ("suspending", "patched"), notes
        assert obj["spec"]["runPolicy"]["suspend"] is True
        stack.start_controller("second")
        await stack.all_done(first + rest)
        stack.alive()
        stack.witness.check(first + rest)
        # the second controller resumed the job at the target the first one had chosen
        log = stack.witness.jobs[name]
        assert target in log.resumes[1:], (target, log.resumes)


@pytest.mark.parametrize("graceful", [True, False], ids=["sigterm", "sigkill"])
async def test_the_loop_survives_a_nats_server_restart(graceful: bool) -> None:
    async with live() as stack:
        stack.start_bridge()
        stack.start_controller("controller")
        trace = jobs(8, seed=2)
        names = await stack.submit(trace[:4])
        await stack.until("jobs started", lambda: sum(_running_at(stack, n) for n in names) >= 2)
        await stack.nats.restart(graceful=graceful)
        names += await stack.submit(trace[4:], first=4)
        await stack.all_done(names, timeout_s=45)
        stack.alive()
        stack.witness.check(names)


async def test_api_conflicts_and_server_errors_are_retried_without_double_actions() -> None:
    async with live() as stack:
        faults = stack.kube.faults
        jobs_path = r"/apis/kubeflow\.org/.*/(pytorchjobs|mpijobs)/[^/]+$"
        # the first lists fail: the controller's rebuild or the bridge's watch start over
        faults.inject("GET", r"/(pytorchjobs|mpijobs)$", 500, count=2)
        faults.inject("PATCH", jobs_path, 409, count=4)
        faults.inject("PATCH", jobs_path, 500, count=3)
        faults.inject("PATCH", jobs_path, 500, count=3, after_commit=True)  # landed, answer lost
        faults.inject("GET", jobs_path, 503, count=3)
        stack.start_bridge()
        stack.start_controller("controller")
        names = await stack.submit(jobs(8, seed=3))
        await stack.all_done(names, timeout_s=45)
        stack.alive()
        assert faults.pending == 0, "not every fault was hit"
        assert {i.status for i in faults.injected} == {409, 500, 503}
        # an actuation whose answer was lost records no Event: count resumes, not Events
        stack.witness.check(names, events_exact=False)


def _ref(stack: Live, name: str) -> JobRef:
    obj = stack.objects()[name]
    return JobRef(JobKind(obj["kind"]), NS, name, obj["metadata"]["uid"])


async def _publish_raw(nc: Client, stack: Live, event: Any, msg_id: str) -> None:
    """Publish ``event`` under its own message id (a repeat the stream cannot recognise)."""
    nats = stack.config().nats
    await nc.jetstream().publish(
        event_subject(nats.subject_prefix, event),
        encode(event),
        stream=nats.stream,
        headers={MSG_ID_HEADER: msg_id},
    )


async def test_duplicated_premature_and_reordered_events_change_nothing() -> None:
    async with live() as stack:
        stack.start_controller("controller")
        names = await stack.submit(jobs(5, seed=4))
        refs = {n: _ref(stack, n) for n in names}
        now = stack.objects()[names[0]]["metadata"]["creationTimestamp"]
        t = datetime.fromisoformat(now)
        a, b, c = names[:3]
        # a pipeline step announces jobs, out of order, with false completions mixed in
        pipeline = [
            JobCompleted(refs[b], t, Outcome.SUCCEEDED, source="pipeline"),  # before b arrived
            JobArrived(refs[a], t, source="pipeline"),
            JobArrived(refs[b], t, source="pipeline"),
            JobCompleted(refs[a], t, Outcome.SUCCEEDED, source="pipeline"),  # a has not finished
            JobArrived(refs[c], t, source="pipeline"),
        ]
        published = await publish_events(stack.config().nats, pipeline)
        assert not any(p.duplicate for p in published)
        nc = await connect(stack.config().nats)
        try:
            for n in (a, b, c):
                await _publish_raw(
                    nc, stack, JobArrived(refs[n], t, source="replay"), f"replay-{n}"
                )
        finally:
            await nc.close()
        await stack.until(
            "a, b and c started", lambda: all(_running_at(stack, n) for n in (a, b, c))
        )
        # the bridge now publishes the same facts again (the stream drops them) and the rest
        stack.start_bridge()
        await stack.all_done(names)
        again = await publish_events(
            stack.config().nats, [JobArrived(refs[a], t, source="pipeline")]
        )
        assert again[0].duplicate
        stack.alive()
        stack.witness.check(names)


async def test_a_burst_of_10000_events_is_absorbed() -> None:
    n_jobs, n_events = 200, 10_000
    async with live(capacity=32) as stack:
        stack.start_controller("controller", "nats.fetchBatch=512")
        names = await stack.submit(jobs(n_jobs, seed=5, scale=0.05))
        refs = [_ref(stack, n) for n in names]
        stamp = stack.objects()[names[0]]["metadata"]["creationTimestamp"]
        t = datetime.fromisoformat(stamp)
        rng = random.Random(5)
        nats = stack.config().nats
        nc = await connect(nats)
        js = nc.jetstream()
        started = time.monotonic()
        try:
            order = [rng.randrange(n_jobs) for _ in range(n_events)]
            for i in range(0, n_events, 500):
                sends = []
                for j, k in enumerate(order[i : i + 500]):
                    event = JobArrived(refs[k], t, source="burst")
                    # two in three are exact repeats (dropped by the stream); the rest carry
                    # their own ids and reach the controller as repeated deliveries
                    msg_id = f"{refs[k].uid}/job.arrived" if (i + j) % 3 else f"burst-{i + j}"
                    sends.append(
                        js.publish(
                            event_subject(nats.subject_prefix, event), encode(event),
                            stream=nats.stream, headers={MSG_ID_HEADER: msg_id},
                        )
                    )  # fmt: skip
                await asyncio.gather(*sends)
        finally:
            await nc.close()
        published_s = time.monotonic() - started
        stack.start_bridge()
        drained_s = published_s + await _drained(stack, timeout_s=60)
        await stack.all_done(names, timeout_s=90)
        print(f"\n10k burst: published in {published_s:.1f} s, consumed by {drained_s:.1f} s")
        stack.alive()
        stack.witness.check(names)


def _rigid(scales: list[float]) -> list[Any]:
    """Rigid jobs of 2 GPUs each (they cannot be resized to fit), the n-th one's work
    ``scales[n]`` times its category's (about 0.75 real seconds per unit here)."""
    trace = jobs(len(scales), seed=7, categories=(4,))
    return [
        dataclasses.replace(
            job, spec=dataclasses.replace(job.spec, k_max=2, gpus=2, work=job.spec.work * scale)
        )
        for job, scale in zip(trace, scales, strict=True)
    ]


def _suspended(stack: Live, name: str) -> bool:
    return bool(stack.objects()[name]["spec"]["runPolicy"].get("suspend", False))


@pytest.mark.parametrize("mode", ["bellows", "paper"])
async def test_a_node_lost_under_running_jobs_halts_the_newest_until_it_is_back(mode: str) -> None:
    # two nodes of 4 GPUs; the controller watches them (capacity.gpus 0), and a node gone
    # counts at once (no grace: tests/hostile/test_node_flaps.py has the grace)
    nodes = {"gpu-a": 4, "gpu-b": 4}
    extra = (f"controller.mode={mode}", "controller.capacity.nodeGraceSeconds=0")
    async with live(nodes=nodes, extra=extra) as stack:
        witness = stack.witness
        stack.start_bridge()
        stack.start_controller("controller")
        # four 2-GPU jobs fill the 8 GPUs, started one after another (so "newest" is clear);
        # the two oldest outlast the outage, a fifth job waits in the queue
        trace = _rigid([20.0, 20.0, 8.0, 8.0, 4.0])
        names: list[str] = []
        for i, job in enumerate(trace[:4]):
            (name,) = await stack.submit([job], first=i)
            names.append(name)
            await stack.until(f"{name} running", lambda n=name: _running_at(stack, n))
        names += await stack.submit(trace[4:], first=4)
        oldest, newest, queued = names[:2], names[2:4], names[4]
        assert sum(witness.held().values()) == 8
        restarted: list[str] = []  # jobs reaching "done" again after the node is back
        witness.phase_hooks.append(
            lambda name, phase, _: restarted.append(name) if phase == "done" else None
        )

        stack.kube.remove_node("gpu-b")
        await stack.until(
            "the pods' GPUs within the 4 left",
            lambda: bool(witness.drops) and witness.drops[0].within_at is not None,
            timeout_s=3 * LATENCY_S,
        )
        drop = witness.drops[0]
        assert (drop.was, drop.gpus) == (8, 4)
        assert drop.within_at is not None
        took = drop.within_at - drop.at
        print(f"\nnode lost: GPUs back within capacity in {took:.2f} s")
        assert took <= LATENCY_S, f"over-committed for {took:.2f} s"
        # the newest were halted (journal phase "preempted"), the oldest kept running
        await witness.settle()
        assert all(witness.jobs[n].phases[-1] == "preempted" for n in newest)
        assert all(_suspended(stack, n) for n in newest)
        for name in oldest:
            assert "preempted" not in witness.jobs[name].phases
            assert not _suspended(stack, name)
        assert set(witness.held()) == set(oldest)
        assert witness.jobs[queued].resumes == []

        restarted.clear()
        stack.kube.add_node("gpu-b", 4)
        await stack.until(
            "the halted jobs running again", lambda: all(_running_at(stack, n) for n in newest)
        )
        # the witness learns of them from its watch, after the objects say so
        await stack.until("the witness saw two restarts", lambda: len(restarted) >= 2)
        # the halted jobs went first, at the head of the queue, before the one waiting
        assert set(restarted[:2]) == set(newest), restarted
        assert all(len(witness.jobs[n].resumes) == 2 for n in newest)
        for name in oldest:  # never touched by the drop or the return
            assert len(witness.jobs[name].resumes) == 1
        await stack.all_done(names, timeout_s=90)
        stack.alive()
        assert witness.max_capacity == 8
        witness.check(names)
