"""The controller's second consumer: progress reports in, revised job specs out.

Each message of the progress stream (:mod:`bellows.bus.progress`) is decoded, checked against
what the controller runs now, and handed to a :class:`bellows.service.learning.ProgressLearner`.
When what was learned of a job moved enough — its refitted speed factors by more than
:data:`REVISE_TOLERANCE`, or its first or a changed measured restart cost — the job's spec is
revised in the core (:meth:`bellows.service.controller.Controller.revise`) with the reported
samples, so that the next round prices restarts on the real remaining work. The prior of
every fit is the spec the core had when the job was first reported on (its profile
annotation, or the documented default prior).

A job whose reports carry gradient statistics (payload version 2) gets its statistical
efficiency learned too (:meth:`ProgressLearner.efficiency`, relative to the job's own
``batch_size``: its work counts samples at that batch); once known, and when it moved, the
revision hands it to the core (Bellows mode), which decides the job by goodput from then on
(goodput rows: per GPU count the batch maximising throughput x efficiency) and counts its
progress in reference samples. A job without them is revised exactly as before.

A report is a hint, never an order: one that does not decode, is about a job out of scope,
not running or running elsewhere, or goes backwards is dropped with a logged reason and
counted by reason (``bellows_progress_rejected_total{reason}``); nothing a message holds can
stop the loop. Every ``check_s`` the loop flags jobs silent for longer than the learner's
``stall_after_s`` (an Event and ``bellows_job_stalled``) and forgets jobs that left.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Final

import structlog
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

from bellows.bus.progress import decode_progress, progress_wildcard
from bellows.bus.settings import NatsSettings
from bellows.bus.streams import ensure_progress_stream, progress_stream_name
from bellows.bus.transient import ride_out
from bellows.inputs import SpecError, brief
from bellows.jobs import Allocation, JobSpec
from bellows.kube import KubeApi
from bellows.scaling import ClusterProfile, EfficiencyProfile
from bellows.scaling.noise import efficiency_moved
from bellows.scaling.online import REVISE_TOLERANCE, Learned, drifted, moved
from bellows.scaling.placement_memory import ObservedStep
from bellows.service.fit_annotation import (
    Annotate,
    fit_annotator,
    fit_text,
    read_fit,
)
from bellows.service.learning import ProgressLearner
from bellows.service.memory import Memory, revision, revision_fields
from bellows.service.metrics import Metrics
from bellows.service.pool_totals import gpu_type_of
from bellows.service.progress_interfaces import Core, ProgressObserver, Rejection, Revising
from bellows.service.progress_limits import NamespaceBuckets, ProgressLimits

__all__ = [
    "CHECK_S",
    "FETCH_BATCH",
    "REVISE_TOLERANCE",
    "Annotate",
    "Core",
    "MetricsProgressObserver",
    "ProgressLoop",
    "ProgressObserver",
    "Rejection",
    "Revising",
    "fit_annotator",
    "fit_text",
    "open_progress_subscription",
    "read_fit",
    "start_progress_loop",
]

FETCH_BATCH: Final = 256  # reports per fetch; the consumer holds at most 4 fetches unacked
CHECK_S: Final = 60.0  # clock seconds between looks for stalled jobs (at most)
_log = structlog.get_logger("bellows.progress")

# Dropped reports logged per reason and minute (the rest are counted, and summed in one line)
DROP_LOGS_PER_MINUTE = 10


class ProgressLoop:
    """Feeds one controller from the progress stream (see the module docstring)."""

    def __init__(
        self,
        *,
        controller: Revising,
        learner: ProgressLearner,
        prefix: str,
        now: Callable[[], float],
        namespaces: Sequence[str | None] = (None,),
        observer: ProgressObserver | None = None,
        annotate: Annotate | None = None,
        wall_to_clock: Callable[[datetime], float] | None = None,
        limits: ProgressLimits | None = None,
        refit_interval_s: float = 0.0,
        memory: Memory | None = None,
    ) -> None:
        """``memory``: what is learned is kept there after each revision (for the next
        leader), and the loop goes on from what the rebuild recalled; its learner must be
        ``learner``.

        ``wall_to_clock`` dates each report by its own ``time`` on the ``now`` clock (never
        later than now): the reports a new leader reads again are as old as they are, so the
        samples they carry are not taken for today's. Without it, a report is dated now.

        ``limits``: each namespace's reports and bytes per second (default
        :class:`ProgressLimits`). A job is refitted at most once per fetched batch and per
        ``refit_interval_s`` clock seconds, however many reports it sent."""
        self._controller = controller
        self._wall_to_clock = wall_to_clock
        self._annotate = annotate
        self._learner = learner
        self._memory = memory
        if memory is not None and memory.learner is not learner:
            raise ValueError("memory keeps another learner than the loop's")
        self._prefix = prefix
        self._now = now
        self._namespaces = tuple(namespaces)
        self._observer = observer or ProgressObserver()
        self._priors: dict[str, JobSpec] = {}  # the spec each fit starts from, by job key
        self._learned: dict[str, Learned] = {}  # what the last revision used, by job key
        self._efficiencies: dict[str, EfficiencyProfile] = {}  # and the efficiency it gave
        self._stalled: set[str] = set()
        self._inconsistent: set[str] = set()
        self._buckets = NamespaceBuckets(limits or ProgressLimits())
        self._refit_interval_s = refit_interval_s
        self._pending: dict[str, Allocation] = {}  # jobs with reports not refitted yet
        self._refitted: dict[str, float] = {}  # when each job was last refitted
        # per reason: when its minute of drop logs began and how many drops it has seen
        self._drop_window: dict[Rejection, tuple[float, int]] = {}

    async def take(self, subject: str, data: bytes) -> Rejection | None:
        """Learn from one message and refit its job if due; why it was dropped, if it was."""
        rejection = await self.accept(subject, data)
        await self.flush()
        return rejection

    async def accept(self, subject: str, data: bytes) -> Rejection | None:
        """Learn from one message without refitting (:meth:`flush` does); why it was
        dropped, if it was."""
        limited = self._limited(subject, len(data))
        if limited is not None:
            return self._drop(limited, subject, "the namespace's progress rate limit")
        try:
            event = decode_progress(self._prefix, subject, data)
        except SpecError as err:
            return self._drop(Rejection.INVALID, subject, str(err))
        if None not in self._namespaces and event.namespace not in self._namespaces:
            return self._drop(Rejection.OUT_OF_SCOPE, subject, event.namespace)
        allocations = self._controller.autoscaler.allocations
        suffix = f"/{event.namespace}/{event.name}"
        keys = [key for key in allocations if key.endswith(suffix)]
        if not keys:
            return self._drop(Rejection.NOT_RUNNING, subject, "no running job of that name")
        if len(keys) > 1:
            return self._drop(Rejection.AMBIGUOUS, subject, ", ".join(sorted(keys)))
        key, running = keys[0], allocations[keys[0]]
        self._take_recalled()
        if (event.world_size, event.global_batch) != (running.gpus, running.batch):
            reason = f"reported ({event.world_size}, {event.global_batch}) but runs at {running}"
            return self._drop(Rejection.STALE, subject, reason)
        if key not in self._priors:  # the spec and efficiency the job's learning starts from
            self._priors[key] = self._controller.autoscaler.job(key)
            self._learner.prime(key, self._controller.autoscaler.charged(key))
        now = self._now()
        at = now if self._wall_to_clock is None else min(now, self._wall_to_clock(event.time))
        on = gpu_type_of(self._controller.autoscaler, key)  # its speed is learned per type
        refused = self._learner.take(key, event, running, at, work=self._raw_work(key), gpu_type=on)
        if refused is not None and refused.backwards:
            return self._drop(Rejection.BACKWARDS, subject, refused.reason)
        if refused is not None:
            await self._mark(key, refused.reason)
            return self._drop(Rejection.INCONSISTENT, subject, refused.reason)
        if key in self._stalled:
            self._stalled.discard(key)
            self._observer.stalled(key, False)
        self._pending[key] = running
        return None

    def _raw_work(self, key: str) -> float:
        """The most samples the job may have seen while it runs: its work, or, decided by
        goodput (work in reference samples), the samples its largest batch needs for it."""
        auto = self._controller.autoscaler
        job = auto.job(key)
        charged = auto.charged(key)
        if charged is None:
            return job.work
        return max(job.work, float(charged.samples(job.b_max, job.work)))

    def _limited(self, subject: str, size: int) -> Rejection | None:
        """The namespace's buckets, by the subject's namespace token (what NATS permissions
        bind to the publisher); a subject of another shape is left to the decoder."""
        tokens = subject.split(".")
        if len(tokens) < 2:
            return None
        limited = self._buckets.admit(tokens[-2], size, self._now())
        return None if limited is None else Rejection(limited.value)

    async def flush(self) -> None:
        """Refit each job with new reports whose window is over (see ``__init__``)."""
        now = self._now()
        for key, running in list(self._pending.items()):
            last = self._refitted.get(key)
            if last is not None and now - last < self._refit_interval_s:
                continue
            del self._pending[key]
            self._refitted[key] = now
            if self._controller.autoscaler.allocations.get(key) != running:
                continue  # rescaled or gone since: its next reports will tell
            try:  # one job's failure (its annotation refused, say) is its own
                await self._observe(key, running)
                await self._revise(key, running)
            except Exception as err:
                _log.warning("progress.refit_failed", job=key, error=brief(err))

    async def _observe(self, key: str, running: Allocation) -> None:
        """The job's median step time where it runs, for its class's placement memory
        (the core's, where it keeps one: ``controller.progress.learnPlacements``). Its
        pods' nodes are not known here: taken as the fewest, which the placement asks
        for (``controller.placement: pack``)."""
        seconds = self._learner.step_seconds(key, running.gpus, running.batch)
        if seconds is not None:
            step = ObservedStep(running.gpus, running.batch, seconds)
            if await self._controller.observe_step(key, step):
                _log.info("job.placement_learned", job=key, at=str(running), step_s=seconds)

    async def _mark(self, key: str, reason: str) -> None:
        """Flag a job whose reports do not hold together, once (an Event, a metric)."""
        if key in self._inconsistent:
            return
        self._inconsistent.add(key)
        self._observer.inconsistent(key, True)
        _log.warning("job.inconsistent_progress", job=key, reason=reason)
        message = (
            f"progress reports do not hold together ({reason[:300]}); Bellows keeps the job's "
            "last good fit and ignores such reports"
        )
        await self._controller.notify(key, "InconsistentProgress", message)

    async def _revise(self, key: str, running: Allocation) -> None:
        auto = self._controller.autoscaler
        on = gpu_type_of(auto, key)
        revised = revision(self._learner, key, self._priors[key], goodput=auto.goodput,
                           gpu_type=on, current=auto.job(key) if on else None)  # fmt: skip
        fit, learned, efficiency = revised.fit, revised.learned, revised.efficiency
        new_efficiency = efficiency_moved(
            self._efficiencies.get(key), efficiency, tolerance=REVISE_TOLERANCE
        )
        if (
            not moved(self._learned.get(key), learned)
            and not new_efficiency
            and not self._drifted(key, revised.done, revised.since)
        ):
            return
        done, since = revised.done, revised.since
        if efficiency is None:
            taken = await self._controller.revise(revised.spec, done=done, since=since)
        else:
            taken = await self._controller.revise(
                revised.spec, done=done, since=since, efficiency=efficiency
            )
        if taken:
            self._learned[key] = learned
            if efficiency is not None:
                self._efficiencies[key] = efficiency
            if self._memory is not None:
                await self._memory.keep(key, self._controller.uid(key))
            if self._annotate is not None:
                await self._annotate(key, fit_text(fit, learned.restart_s, efficiency))
            _log.info("job.revised", job=key, at=str(running), **revision_fields(revised))

    def _take_recalled(self) -> None:
        """Go on from what the rebuild recalled of each job (:class:`Memory`): the prior
        its learning starts from and the revision the core has."""
        if self._memory is None:
            return
        for key, (prior, revised) in self._memory.recalled().items():
            self._priors[key] = prior
            self._learned[key] = revised.learned
            if revised.efficiency is not None:
                self._efficiencies[key] = revised.efficiency

    def _drifted(self, key: str, done: float | None, since: float | None) -> bool:
        """Whether the core's estimate of the samples done is off the reported ones by more
        than :data:`REVISE_TOLERANCE` of the job's work (restart pricing needs them)."""
        if done is None or since is None:
            return False
        auto = self._controller.autoscaler
        return drifted(auto.estimated_done(key, since), done, auto.job(key).work)

    def _drop(self, reason: Rejection, subject: str, detail: str) -> Rejection:
        """Count a dropped report; log it while its reason has logged fewer than
        :data:`DROP_LOGS_PER_MINUTE` drops in the current minute of the loop's clock (a flood
        is counted in full, but logged as one line a minute with how many went unlogged)."""
        self._observer.rejected(reason)
        now = self._now()
        start, count = self._drop_window.get(reason, (now, 0))
        if now - start >= 60.0:
            if count > DROP_LOGS_PER_MINUTE:
                _log.info(
                    "progress.dropped_unlogged",
                    reason=reason.value,
                    count=count - DROP_LOGS_PER_MINUTE,
                )
            start, count = now, 0
        self._drop_window[reason] = (start, count + 1)
        if count < DROP_LOGS_PER_MINUTE:
            _log.info("progress.dropped", reason=reason.value, subject=subject[:300], detail=detail)
        return reason

    async def check(self) -> list[str]:
        """Flag newly stalled jobs (an Event each), forget jobs that left; the stalled jobs."""
        auto = self._controller.autoscaler
        running = list(auto.allocations)
        self._take_recalled()
        for key in [k for k in self._priors if k not in running and k not in auto.queued]:
            self._priors.pop(key)
            self._learned.pop(key, None)
            self._efficiencies.pop(key, None)
            self._pending.pop(key, None)
            self._refitted.pop(key, None)
            self._learner.forget(key)
            if self._memory is not None:
                await self._memory.forget(key)
        for key in [k for k in self._inconsistent if k not in running and k not in auto.queued]:
            self._inconsistent.discard(key)
            self._observer.inconsistent(key, False)
        for key in [k for k in self._stalled if k not in running]:
            self._stalled.discard(key)
            self._observer.stalled(key, False)
        stalled = self._learner.stalled(running, self._now())
        for key in stalled:
            if key not in self._stalled:
                self._stalled.add(key)
                self._observer.stalled(key, True)
                message = (
                    f"no progress report for more than {self._learner.stall_after_s:g} s; "
                    "Bellows leaves the job as it is"
                )
                _log.warning("job.stalled", job=key)
                await self._controller.notify(key, "Stalled", message)
        return stalled

    async def run(
        self, sub: JetStreamContext.PullSubscription, stop: asyncio.Event, *, check_s: float
    ) -> None:
        """Until ``stop``: fetch, learn, ack; :meth:`check` every ``check_s`` clock seconds.

        Reports are acked whatever became of them (a hint is never redelivered); a failure
        to fetch or to apply one is logged and the loop goes on.
        """
        next_check = self._now() + check_s
        while not stop.is_set():
            try:
                messages = await sub.fetch(FETCH_BATCH, timeout=1.0)
            except TimeoutError:  # nats.errors.TimeoutError or a bare one: nothing came
                messages = []
            except Exception as err:  # the server gone a while: try again
                _log.warning("progress.fetch_failed", error=brief(err))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
                continue
            for msg in messages:
                try:
                    await self.accept(msg.subject, msg.data)
                except Exception as err:  # e.g. the API server down for an Event
                    _log.warning("progress.take_failed", subject=msg.subject, error=brief(err))
                with contextlib.suppress(Exception):
                    await msg.ack()
            try:  # one refit per job per batch (and per refit interval), however many reports
                await self.flush()
            except Exception as err:
                _log.warning("progress.refit_failed", error=brief(err))
            if self._now() >= next_check:
                next_check = self._now() + check_s
                try:
                    await self.check()
                except Exception as err:
                    _log.warning("progress.check_failed", error=brief(err))


async def open_progress_subscription(
    js: JetStreamContext, settings: NatsSettings
) -> JetStreamContext.PullSubscription:
    """An ephemeral pull consumer of the progress stream, from its oldest report.

    Ephemeral: a new leader reads the (bounded) reports of the last hour again, which is how
    a restarted controller learns the samples and speed of the jobs it adopts. A server that
    does not answer (a restart) is asked again for a minute (:func:`bellows.bus.transient.
    ride_out`).
    """
    return await ride_out(lambda: _subscribe(js, settings), what="progress.subscribe")


async def _subscribe(
    js: JetStreamContext, settings: NatsSettings
) -> JetStreamContext.PullSubscription:
    await ensure_progress_stream(js, settings)
    config = ConsumerConfig(
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        max_ack_pending=FETCH_BATCH * 4,
        inactive_threshold=max(60.0, settings.ack_wait_s * 4),
        ack_wait=settings.ack_wait_s,
    )
    return await js.pull_subscribe(
        progress_wildcard(settings.subject_prefix),
        stream=progress_stream_name(settings),
        config=config,
    )


class MetricsProgressObserver(ProgressObserver):
    """``bellows_progress_rejected_total{reason}`` and ``bellows_job_stalled{job}``."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def rejected(self, reason: Rejection) -> None:
        self._metrics.progress_rejected.labels(reason=reason.value).inc()

    def stalled(self, job: str, stalled: bool) -> None:
        if stalled:
            self._metrics.job_stalled.labels(job=job).set(1)
        else:
            with contextlib.suppress(KeyError):
                self._metrics.job_stalled.remove(job)

    def inconsistent(self, job: str, inconsistent: bool) -> None:
        if inconsistent:
            self._metrics.job_inconsistent.labels(job=job).set(1)
        else:
            with contextlib.suppress(KeyError):
                self._metrics.job_inconsistent.remove(job)


async def start_progress_loop(
    js: JetStreamContext,
    settings: NatsSettings,
    *,
    controller: Revising,
    api: KubeApi,
    cluster: ClusterProfile,
    stall_after_s: float,
    now: Callable[[], float],
    wall_to_clock: Callable[[datetime], float],
    namespaces: Sequence[str | None],
    metrics: Metrics,
    stop: asyncio.Event,
    limits: ProgressLimits | None = None,
    refit_interval_s: float = 0.0,
    memory: Memory | None = None,
) -> asyncio.Task[None]:
    """Subscribe and run a :class:`ProgressLoop` for ``controller`` until ``stop`` (or the
    task is cancelled); the subscription goes with it. With ``memory``, its learner learns
    (``stall_after_s`` is then that learner's) and what it learns is kept there."""
    sub = await open_progress_subscription(js, settings)
    learner = (
        ProgressLearner(cluster, stall_after_s=stall_after_s) if memory is None else memory.learner
    )
    loop = ProgressLoop(
        controller=controller,
        learner=learner,
        memory=memory,
        prefix=settings.subject_prefix,
        now=now,
        namespaces=namespaces,
        observer=MetricsProgressObserver(metrics),
        annotate=fit_annotator(api),
        wall_to_clock=wall_to_clock,
        limits=limits,
        refit_interval_s=refit_interval_s,
    )

    async def run() -> None:
        try:
            await loop.run(sub, stop, check_s=min(CHECK_S, stall_after_s / 2))
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    return asyncio.create_task(run(), name="progress-loop")
