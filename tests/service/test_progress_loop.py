"""The controller's progress consumer on a real nats-server: reports in, revised specs out.

A fake controller (the :class:`~bellows.service.progress_loop.Revising` port over a real
core) stands in for Kubernetes; the reports travel through the real progress stream.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from nats.aio.client import Client

from bellows.autoscaler import TypedAutoscaler
from bellows.bus import NatsSettings, connect
from bellows.bus.progress import ProgressEvent, ProgressType, encode_progress, progress_subject
from bellows.bus.server import running_nats_server
from bellows.jobs import JobSpec, TypeSection
from bellows.scaling import JobProfile, default_cluster
from bellows.scaling.gpu_types import GpuType, TypedCluster
from bellows.scaling.online import SpeedFactors
from bellows.scaling.timing import step_time
from bellows.service.learning import ProgressLearner
from bellows.service.metrics import Metrics
from bellows.service.progress_loop import (
    MetricsProgressObserver,
    ProgressLoop,
    Rejection,
    open_progress_subscription,
)
from tests.service.core_controller import CoreController
from tests.strategies import make_job

CLUSTER = default_cluster()
PREFIX = "bellows"
T0 = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
TRUTH = SpeedFactors(compute=0.75, communication=1.4)  # the job is not what its prior says


def truth(job: JobSpec) -> JobSpec:
    real = TRUTH.apply(JobProfile(job.weights, job.profile))
    return dataclasses.replace(job, weights=real.effective_weights, profile=real.step)


def report(
    name: str, samples: int, seconds: float, gpus: int, batch: int, *, at: float = 0.0
) -> ProgressEvent:
    """A report made ``at`` seconds after T0 (reports hold together only when their samples
    advance as their step times say: ``bellows.scaling.consistency``)."""
    when = T0 + timedelta(seconds=at)
    return ProgressEvent(
        ProgressType.PROGRESS, "team-a", name, when, samples, gpus, batch, seconds, 20
    )


@pytest_asyncio.fixture
async def settings(tmp_path: Path) -> AsyncIterator[NatsSettings]:
    async with running_nats_server(tmp_path / "nats") as server:
        yield NatsSettings(servers=(server.url,), ack_wait_s=1.0)


@pytest_asyncio.fixture
async def nc(settings: NatsSettings) -> AsyncIterator[Client]:
    client = await connect(settings, reconnect_wait_s=0.1)
    yield client
    await client.close()


async def test_reports_revise_the_job_and_bad_ones_are_dropped_by_reason(
    nc: Client, settings: NatsSettings
) -> None:
    key = "pytorchjob/team-a/resnet"
    prior = make_job(key, work=1e4)  # 1000 samples more than estimated is worth a revision
    controller = CoreController([prior])
    alloc = controller.autoscaler.allocations[key]
    metrics = Metrics()
    loop = ProgressLoop(
        controller=controller,
        learner=ProgressLearner(CLUSTER, stall_after_s=100.0),
        prefix=PREFIX,
        now=lambda: controller.now,
        namespaces=("team-a",),
        observer=MetricsProgressObserver(metrics),
        wall_to_clock=lambda when: (when - T0).total_seconds(),
    )
    js = nc.jetstream()
    sub = await open_progress_subscription(js, settings)
    subject = progress_subject(PREFIX, "team-a", "resnet")
    seconds = step_time(truth(prior), alloc.gpus, alloc.batch, CLUSTER)
    every = 1000 * seconds / alloc.batch  # seconds these steps take for 1000 samples
    good = [
        report("resnet", 1000 * (i + 1), seconds, alloc.gpus, alloc.batch, at=every * i)
        for i in range(4)
    ]
    controller.now = every * 3  # the last good report's time
    bad = [
        (subject, b"{not json"),
        (subject, json.dumps({"apiVersion": "bellows.io/v1", "type": "job.progress"}).encode()),
        (progress_subject(PREFIX, "team-a", "other"), encode_progress(good[0])),  # other job
        (
            progress_subject(PREFIX, "team-b", "resnet"),
            encode_progress(dataclasses.replace(good[0], namespace="team-b")),
        ),
        (subject, encode_progress(report("resnet", 10, seconds, alloc.gpus, 2 * alloc.batch))),
    ]
    for subj, data in bad[:2]:
        await js.publish(subj, data)
    for event in good:
        await js.publish(subject, encode_progress(event))
    for subj, data in bad[2:]:
        await js.publish(subj, data)
    backwards = ProgressEvent(
        ProgressType.STARTED, "team-a", "resnet", T0 + timedelta(seconds=every * 3), 5,
        alloc.gpus, alloc.batch, restart_s=1.0,
    )  # fmt: skip
    await js.publish(subject, encode_progress(backwards))  # restarted behind its last report
    await js.publish(
        progress_subject(PREFIX, "team-a", "ghost"),
        encode_progress(report("ghost", 5, seconds, 1, 32)),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(loop.run(sub, stop, check_s=1e9))

    def rejected(reason: Rejection) -> float:
        value = metrics.registry.get_sample_value(
            "bellows_progress_rejected_total", {"reason": reason.value}
        )
        return value or 0.0

    deadline = time.monotonic() + 15
    while rejected(Rejection.NOT_RUNNING) < 1:  # the last report published
        assert time.monotonic() < deadline, "the loop did not get through the reports"
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.wait_for(task, 10)
    await sub.unsubscribe()

    assert rejected(Rejection.INVALID) == 3  # bad JSON, missing fields, another job's report
    assert rejected(Rejection.OUT_OF_SCOPE) == 1
    assert rejected(Rejection.STALE) == 1
    assert rejected(Rejection.BACKWARDS) == 1
    assert rejected(Rejection.NOT_RUNNING) == 1
    revised = controller.autoscaler.job(key)
    assert controller.revisions
    assert revised is controller.revisions[-1]
    predicted = step_time(revised, alloc.gpus, alloc.batch, CLUSTER)
    assert predicted == pytest.approx(seconds, rel=0.05)  # within 5 % after a few reports
    assert controller.autoscaler.allocations[key] == alloc  # revising moved nothing
    assert controller.autoscaler.estimated_done(key, controller.now) == 4000.0


async def test_a_silent_job_is_flagged_once_and_unflagged_when_it_reports() -> None:
    key = "pytorchjob/team-a/resnet"
    controller = CoreController([make_job(key, work=1e9)])
    alloc = controller.autoscaler.allocations[key]
    metrics = Metrics()
    learner = ProgressLearner(CLUSTER, stall_after_s=100.0)
    loop = ProgressLoop(
        controller=controller,
        learner=learner,
        prefix=PREFIX,
        now=lambda: controller.now,
        observer=MetricsProgressObserver(metrics),
    )
    subject = progress_subject(PREFIX, "team-a", "resnet")

    def stalled() -> float | None:
        return metrics.registry.get_sample_value("bellows_job_stalled", {"job": key})

    event = report("resnet", 100, 0.3, alloc.gpus, alloc.batch)
    assert await loop.take(subject, encode_progress(event)) is None  # the run's first: held
    controller.now = 100.0
    assert await loop.check() == []
    controller.now = 101.0
    assert await loop.check() == [key]
    assert await loop.check() == [key]
    assert controller.events == [(key, "Stalled")]  # one Event per stall
    assert stalled() == 1.0
    later = report("resnet", 100 + round(101 * alloc.batch / 0.3), 0.3, alloc.gpus, alloc.batch)
    assert await loop.take(subject, encode_progress(later)) is None
    assert stalled() is None
    controller.autoscaler.finish(key, now=102.0)
    await loop.check()
    assert len(learner) == 0  # what was learned of a finished job is forgotten


async def test_a_report_is_dated_by_its_own_time_never_later_than_now() -> None:
    key = "pytorchjob/team-a/resnet"
    controller = CoreController([make_job(key, work=1e9)])
    alloc = controller.autoscaler.allocations[key]
    learner = ProgressLearner(CLUSTER)
    loop = ProgressLoop(
        controller=controller,
        learner=learner,
        prefix=PREFIX,
        now=lambda: controller.now,
        wall_to_clock=lambda when: (when - T0).total_seconds() + 40.0,
    )
    subject = progress_subject(PREFIX, "team-a", "resnet")
    controller.now = 100.0
    rate = alloc.batch / 0.3  # samples per second of 0.3 s steps
    first = report("resnet", 500, 0.3, alloc.gpus, alloc.batch)  # made at T0: clock 40
    assert await loop.take(subject, encode_progress(first)) is None
    assert learner.samples(key) is None  # the run's first report: held until the next agrees
    old = report("resnet", 500 + round(10 * rate), 0.3, alloc.gpus, alloc.batch, at=10.0)
    assert await loop.take(subject, encode_progress(old)) is None
    assert learner.samples(key) == (old.samples_seen, 50.0)  # read again later, as old as it is
    later = dataclasses.replace(
        old, samples_seen=500 + round(60 * rate), time=T0 + timedelta(hours=1)
    )
    assert await loop.take(subject, encode_progress(later)) is None
    assert learner.samples(key) == (later.samples_seen, 100.0)  # a clock ahead: dated now


@pytest.mark.parametrize("placements", [True, False])
async def test_a_jobs_reports_teach_its_class_what_its_gpus_are_worth(placements: bool) -> None:
    """Two jobs of one profile run; ``a`` reports steps 3x what the JSA says of its GPUs.
    With the placement memory (``controller.progress.learnPlacements``, opt in) the
    loop tells the core its median step there at each flush, and ``b``, which never ran
    there, is valued by it; without it, ``b``'s row stays the JSA's."""
    a, b = "pytorchjob/team-a/resnet", "pytorchjob/team-a/other"
    controller = CoreController(
        [make_job(a, work=1e12), make_job(b, work=1e12)], capacity=12, placements=placements
    )
    alloc = controller.autoscaler.allocations[a]
    before = controller.autoscaler._s.rows[b].values.copy()
    loop = ProgressLoop(
        controller=controller, learner=ProgressLearner(CLUSTER), prefix=PREFIX,
        now=lambda: controller.now, wall_to_clock=lambda when: (when - T0).total_seconds(),
        refit_interval_s=0.0,
    )  # fmt: skip
    seconds = 3 * step_time(controller.autoscaler.job(a), alloc.gpus, alloc.batch, CLUSTER)
    subject = progress_subject(PREFIX, "team-a", "resnet")
    for i in range(3):
        at = 30.0 * (i + 1)
        samples = 1000 + round(at * alloc.batch / seconds)
        event = report("resnet", samples, seconds, alloc.gpus, alloc.batch, at=at)
        controller.now = at
        assert await loop.take(subject, encode_progress(event)) is None
        await loop.flush()
    after = controller.autoscaler._s.rows[b].values
    if placements:
        assert controller.observed
        assert controller.observed[-1][1].seconds == pytest.approx(seconds)
        assert after[alloc.gpus] < before[alloc.gpus] / 2
    else:
        assert after[alloc.gpus] == before[alloc.gpus]


async def test_a_typed_jobs_reports_refit_the_section_of_its_type() -> None:
    """Issue 39: on a core of several GPU types, a job's reports refit the section of the
    type it runs on (imputed there: now measured), through the loop as the controller
    drives it; its other sections stand."""
    step = make_job("x").profile
    slow = TypeSection("slow", step, 1_000_000, 64)
    guessed = TypeSection("fast", step, 1_000_000, 64, imputed=True)  # imputed: as fast as slow
    key = "pytorchjob/team-a/resnet"
    prior = dataclasses.replace(make_job(key, work=1e9), types=(slow, guessed))
    typed = TypedCluster((GpuType("slow", 1, CLUSTER), GpuType("fast", 1, CLUSTER)))
    controller = CoreController([prior], typed=typed)
    auto = controller.autoscaler
    assert isinstance(auto, TypedAutoscaler)
    on, alloc = auto.gpu_type(key), auto.allocations[key]
    assert on == "slow"  # alike: the first type
    auto.finish(key, 1.0)  # then found running on "fast" (as a new leader adopts it)
    assert auto.adopt(prior, alloc, 1.0, gpu_type="fast")
    loop = ProgressLoop(
        controller=controller, learner=ProgressLearner(CLUSTER), prefix=PREFIX,
        now=lambda: controller.now, namespaces=("team-a",),
        wall_to_clock=lambda when: (when - T0).total_seconds(),
    )  # fmt: skip
    on_fast = dataclasses.replace(prior, types=())
    seconds = 0.5 * step_time(on_fast, alloc.gpus, alloc.batch, CLUSTER)  # twice the guess
    every = 60.0
    subject = progress_subject(PREFIX, "team-a", "resnet")
    for i in range(4):
        samples = round(100 + alloc.batch / seconds * every * i)
        event = report("resnet", samples, seconds, alloc.gpus, alloc.batch, at=every * i)
        controller.now = every * i
        assert await loop.take(subject, encode_progress(event)) is None
    await loop.flush()
    assert controller.revisions, "no revision"
    sections = {t.gpu_type: t for t in auto.job(key).types}
    assert not sections["fast"].imputed  # measured where it ran
    learned = dataclasses.replace(on_fast, profile=sections["fast"].profile,
                                  weights=sections["fast"].weights)  # fmt: skip
    measured = step_time(learned, alloc.gpus, alloc.batch, CLUSTER)
    assert measured == pytest.approx(seconds, rel=0.05)
    assert sections["slow"] == slow  # not run there: as it came
