"""A hostile tenant's progress reports (issue 25): floods, evictions, lies, restart bounds.

Each case is what a pod holding its namespace's progress credentials can do within its own
NATS permission. The reports travel through a real nats-server where the case is about the
stream; the loop and the learner are the controller's own, over a real core.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
from datetime import timedelta

import nats.errors
import pytest
import structlog.testing
from nats.aio.client import Client

from bellows.autoscaler import AutoscalerConfig
from bellows.bus import NatsSettings
from bellows.bus.progress import (
    MAX_PROGRESS_BYTES,
    ProgressEvent,
    ProgressType,
    encode_progress,
    progress_subject,
)
from bellows.bus.streams import ensure_progress_stream
from bellows.jobs import MAX_RESTART_S, JobSpec, SpecError
from bellows.kube import keys
from bellows.scaling import JobProfile, default_cluster
from bellows.scaling.online import FIT_BOUND, OnlineFit, refit_profile
from bellows.scaling.timing import step_time
from bellows.service.learning import ProgressLearner
from bellows.service.metrics import Metrics
from bellows.service.progress_loop import (
    DROP_LOGS_PER_MINUTE,
    MetricsProgressObserver,
    ProgressLoop,
    Rejection,
    open_progress_subscription,
)
from bellows.sim import run
from bellows.sim.comparing import bursty, policies
from bellows.sim.learning import Learning, Lie
from tests.service.core_controller import CoreController
from tests.service.test_progress_loop import PREFIX, T0, nc, settings
from tests.strategies import make_job

__all__ = ["nc", "settings"]  # the real nats-server fixtures

CLUSTER = default_cluster()
KEY = "pytorchjob/team-a/resnet"


class CountingLearner(ProgressLearner):
    """The controller's learner, counting its refits (the CPU a flood costs)."""

    def __init__(self) -> None:
        super().__init__(CLUSTER)
        self.fits = 0

    def fit(self, job: str, prior: JobProfile) -> OnlineFit:
        self.fits += 1
        return super().fit(job, prior)


def _report(samples: float, seconds: float, at_s: float, spec: JobSpec) -> ProgressEvent:
    del spec
    return ProgressEvent(
        ProgressType.PROGRESS, "team-a", "resnet", T0 + timedelta(seconds=at_s),
        round(samples), 8, 512, seconds, 20,
    )  # fmt: skip


def _loop(controller: CoreController, learner: ProgressLearner, metrics: Metrics) -> ProgressLoop:
    return ProgressLoop(
        controller=controller,
        learner=learner,
        prefix=PREFIX,
        now=lambda: controller.now,
        observer=MetricsProgressObserver(metrics),
        wall_to_clock=lambda when: (when - T0).total_seconds(),
    )


def _rejected(metrics: Metrics, reason: Rejection) -> float:
    value = metrics.registry.get_sample_value(
        "bellows_progress_rejected_total", {"reason": reason.value}
    )
    return value or 0.0


def _running() -> tuple[CoreController, JobSpec, float]:
    spec = make_job(KEY, work=1e9)
    controller = CoreController([spec])
    alloc = controller.autoscaler.allocations[KEY]
    assert (alloc.gpus, alloc.batch) == (8, 512)
    return controller, spec, step_time(spec, alloc.gpus, alloc.batch, CLUSTER)


async def test_a_flood_of_one_jobs_reports_costs_a_refit_per_batch_not_per_report() -> None:
    """500 reports in one second, each valid and consistent, taken as the loop takes a
    fetched batch (``run``: accept each, then flush): the namespace's bucket lets its burst
    through and drops the rest unread (counted); the job is refitted once per batch and per
    refit interval, not 500 times. (The stream itself keeps only the newest 8 of one job's
    subject: this is what a controller reading as fast as they come would see.)"""
    controller, spec, seconds = _running()
    learner, metrics = CountingLearner(), Metrics()
    loop = ProgressLoop(
        controller=controller, learner=learner, prefix=PREFIX, now=lambda: controller.now,
        observer=MetricsProgressObserver(metrics), refit_interval_s=1.0,
        wall_to_clock=lambda when: (when - T0).total_seconds(),
    )  # fmt: skip
    subject = progress_subject(PREFIX, "team-a", "resnet")
    with structlog.testing.capture_logs() as logged:
        for batch in range(0, 500, 50):  # batches of 50 over one second of the loop's clock
            for i in range(batch, batch + 50):
                at = controller.now = i / 500
                samples = 1000 + at * 512 / seconds
                await loop.accept(subject, encode_progress(_report(samples, seconds, at, spec)))
            await loop.flush()
    # the drops are counted in full, but a flood does not flood the log
    dropped = [e for e in logged if e["event"] == "progress.dropped"]
    assert len(dropped) == DROP_LOGS_PER_MINUTE
    # the burst of 200, then 50 a second refilled over the 0.998 s the reports span
    assert _rejected(metrics, Rejection.RATE_LIMITED) == 500 - 200 - 49
    assert learner.fits == 1  # one refit in the second's window
    controller.now = 1.5
    await loop.flush()
    assert learner.fits == 2  # the reports since, at the window's end
    assert learner.samples(KEY) is not None  # ... and the job was still learned from


async def test_one_namespace_cannot_push_another_namespaces_reports_out(
    nc: Client, settings: NatsSettings
) -> None:
    """5 120 reports of 4 KiB under made-up job names, all inside team-a's own permission:
    team-b's one report is still there for a controller that starts afterwards."""
    js = nc.jetstream()
    await ensure_progress_stream(js, settings)
    theirs = ProgressEvent(ProgressType.PROGRESS, "team-b", "bert", T0, 100, 8, 512, 0.4, 20)
    await js.publish(progress_subject(PREFIX, "team-b", "bert"), encode_progress(theirs))
    filler = b"x" * (MAX_PROGRESS_BYTES - 64)
    flood = [(progress_subject(PREFIX, "team-a", f"made-up-{i}"), filler) for i in range(5120)]
    for start in range(0, len(flood), 256):
        await asyncio.gather(*(js.publish(s, d) for s, d in flood[start : start + 256]))
    sub = await open_progress_subscription(js, settings)
    stored: dict[int, tuple[str, bytes]] = {}  # by stream sequence (unacked ones come again)
    for _ in range(4):
        with contextlib.suppress(nats.errors.TimeoutError):
            for m in await sub.fetch(512, timeout=1.0):
                stored[m.metadata.sequence.stream] = (m.subject, m.data)
    seen = list(stored.values())
    await sub.unsubscribe()
    namespaces = [subject.split(".")[-2] for subject, _ in seen]
    assert namespaces.count("team-a") <= 256  # its 32 partitions of 8, all it can hold
    assert json.loads(next(d for s, d in seen if ".team-b." in s))["name"] == "bert"


async def test_a_step_time_that_contradicts_the_samples_is_marked_and_learns_nothing() -> None:
    """Steps ten times faster than the samples advance: refused as inconsistent, the job
    flagged once (an Event, the gauge), the core's spec left at the prior."""
    controller, spec, seconds = _running()
    metrics = Metrics()
    loop = _loop(controller, ProgressLearner(CLUSTER), metrics)
    subject = progress_subject(PREFIX, "team-a", "resnet")
    outcomes = []
    for i in range(6):
        at = 60.0 * i
        controller.now = at
        lie = _report(1000 + at * 512 / seconds, seconds / 10, at, spec)
        outcomes.append(await loop.take(subject, encode_progress(lie)))
    assert outcomes[0] is None  # the first is only held
    assert outcomes[1:] == [Rejection.INCONSISTENT] * 5
    assert controller.events == [(KEY, "InconsistentProgress")]  # one Event
    gauge = metrics.registry.get_sample_value("bellows_job_inconsistent", {"job": KEY})
    assert gauge == 1.0
    assert controller.revisions == []
    assert controller.autoscaler.job(KEY) == spec


async def test_samples_seen_claiming_the_whole_work_never_reach_the_core() -> None:
    controller, spec, seconds = _running()
    metrics = Metrics()
    loop = _loop(controller, ProgressLearner(CLUSTER), metrics)
    subject = progress_subject(PREFIX, "team-a", "resnet")
    for i in range(4):
        controller.now = 60.0 * i
        claim = _report(spec.work, seconds, 60.0 * i, spec)
        await loop.take(subject, encode_progress(claim))
    past = _report(spec.work + 1, seconds, 300.0, spec)
    controller.now = 300.0
    assert await loop.take(subject, encode_progress(past)) is Rejection.INCONSISTENT
    assert _rejected(metrics, Rejection.INCONSISTENT) == 4  # three standing still, one past
    assert controller.revisions == []
    assert controller.autoscaler.estimated_done(KEY, 300.0) < 0.01 * spec.work


def test_a_fit_moves_no_further_from_the_profile_than_its_bound() -> None:
    spec = make_job("j")
    prior = JobProfile(spec.weights, spec.profile)
    truth = 1e4 * step_time(spec, 1, 64, CLUSTER)
    fit = refit_profile(prior, CLUSTER, {(1, 64): truth})
    assert 1 / FIT_BOUND <= fit.compute <= FIT_BOUND * (1 + 1e-9)
    assert 1 / FIT_BOUND <= fit.communication <= FIT_BOUND * (1 + 1e-9)


@pytest.mark.parametrize(
    ("liar", "lie"),
    [
        ("c3-00019", Lie(step=0.1)),  # steps faster than its samples: +27 % unchecked
        ("c3-00011", Lie(samples=1.0)),  # the whole work seen from the first report: +27 %
        ("c1-00013", Lie(step=10.0)),  # steps slower than its samples: +56 %, others +15 %
    ],
)
def test_a_liar_gains_at_most_ten_percent_and_costs_the_others_at_most_two(
    liar: str, lie: Lie
) -> None:
    """The 50-job, 16-GPU scenario of ``benchmarks/liars.py``, with the worst liars it found
    when reports were not checked."""
    trace, gpus, _ = bursty(2, gpus=16, minutes=120.0, period_min=60.0).build(CLUSTER)
    config = policies(60.0)["bellows"]

    def jcts(lies: dict[str, Lie]) -> dict[str, float]:
        result = run(
            trace, gpus=gpus, config=config, cluster=CLUSTER, horizon_s=None,
            learning=Learning({}, lies=lies),
        )  # fmt: skip
        assert result.inconsistent == ((liar,) if lies else ())
        return {j.name: j.finish_s - j.arrival_s for j in result.jobs if j.finish_s is not None}

    honest, lying = jcts({}), jcts({liar: lie})
    assert len(trace) == 51
    assert lying[liar] >= 0.9 * honest[liar]
    others = statistics.mean(v for k, v in lying.items() if k != liar)
    assert others <= 1.02 * statistics.mean(v for k, v in honest.items() if k != liar)


async def test_a_restart_past_the_one_bound_is_a_counted_rejection_not_a_failure() -> None:
    """``restartSeconds`` of two days: the decoder refuses it (the job's restart cost has
    one bound, a day, everywhere), and the job's later reports are still learned from."""
    controller, spec, seconds = _running()
    metrics = Metrics()
    loop = _loop(controller, ProgressLearner(CLUSTER), metrics)
    subject = progress_subject(PREFIX, "team-a", "resnet")
    week = ProgressEvent(ProgressType.STARTED, "team-a", "resnet", T0, 0, 8, 512, restart_s=1.0)
    doc = json.loads(encode_progress(week))
    doc["restartSeconds"] = 2 * 86_400.0
    assert await loop.take(subject, json.dumps(doc).encode()) is Rejection.INVALID
    assert _rejected(metrics, Rejection.INVALID) == 1
    for i in range(3):
        controller.now = 60.0 * i
        slow = seconds * 1.5  # slower than its profile: worth a revision
        good = _report(1000 + 60.0 * i * 512 / slow, slow, 60.0 * i, spec)
        assert await loop.take(subject, encode_progress(good)) is None
    assert controller.revisions  # learned from, no exception on any later report
    with pytest.raises(SpecError, match="restart_s"):
        AutoscalerConfig(restart_s=2 * 86_400.0)
    with pytest.raises(SpecError, match="restart-seconds"):
        keys.parse_settings({**_annotations(), keys.RESTART_SECONDS: str(MAX_RESTART_S + 1)})


def _annotations() -> dict[str, str]:
    return {
        keys.MIN_BATCH: "32",
        keys.MAX_BATCH: "512",
        keys.MAX_GPUS: "8",
        keys.MAX_BATCH_PER_GPU: "128",
        keys.WORK: "1e6",
        keys.BATCH_ENV: "BATCH",
    }
