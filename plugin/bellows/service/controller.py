"""The controller: job events in, the core's decisions out, applied before the events are acked.

One :class:`Controller` owns one :class:`~bellows.autoscaler.Autoscaler`. The event pump
(:class:`bellows.bus.EventPump`) hands it the facts of each closed Δ window through
:meth:`Controller.apply`; the controller reads each arrived job from the cluster (the jobs
are the source of truth, the event only says where to look), feeds the core, runs the round
and drives the cluster to the decisions through the :class:`~bellows.kube.Actuator`. Only
when that returns does the pump ack the window's messages (at-least-once). On start,
:meth:`Controller.rebuild` recovers the state from the cluster before anything is consumed.

In paper mode the core runs with ``delta_s = 0``: the pump's window *is* the paper's Δ, so
each window with news is one round, on the same grid the simulator uses. In Bellows mode the
pump hands over every event at once and the core keeps its own Δ grid on the service clock:
an arrival or a completion that leaves GPUs free starts waiting jobs within the
event-to-patch latency, and the rounds that move running jobs come when the core says they
are due, through :meth:`Controller.tick`.

Pools: beside Kueue (``controller.kueue.enabled``) one controller runs per pool
(:mod:`bellows.service.pools`): each ClusterQueue's, and the default pool of the jobs
without a queue name. Every controller hears every event and reads every job, but takes
only the jobs its ``pool`` is (:class:`~bellows.service.queues.QueueIndex`); the default
pool's controller says once, in an Event (reason ``QueueUnknown``) and the skipped gauge,
that a job's queue cannot be resolved, and leaves that job alone.

Faults: a decision the cluster does not take (an API error, a halt that times out) is kept
and retried — at the next window, or sooner through :meth:`Controller.retry_pending`. The
controller keeps an upper bound of the GPUs each job may hold on the cluster; a start or
scale-up whose GPUs are not yet free there (a scale-down before it failed) waits instead
of over-committing the cluster. A completion is believed only once the cluster shows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import structlog

from bellows.autoscaler import Autoscaler, Decision, Preempt, Reject, Rescale, Start
from bellows.bus import Event, JobArrived, JobCompleted, PartlyAppliedError
from bellows.inputs import DATA_ERRORS, SpecError, brief
from bellows.jobs import Allocation, JobSpec, fit_to_cluster, is_feasible
from bellows.kube import (
    ActuationError,
    Actuator,
    Arrived,
    Deleted,
    Finished,
    Invalid,
    JobReader,
    JobView,
    KindAdapter,
    KubeApi,
    Observation,
    Outcome,
    Skipped,
    keys,
    kind_named,
)
from bellows.kube.journal import Journal, Phase
from bellows.kube.kinds import finished_state, foreign_manager, running_since
from bellows.optimizer.solving import RENT
from bellows.refs import job_key
from bellows.scaling import EfficiencyProfile
from bellows.service.queues import QueueIndex, QueueProblem

__all__ = [
    "QUEUE_UNKNOWN",
    "Controller",
    "ControllerObserver",
    "EventsNotTakenError",
    "NullControllerObserver",
]

QUEUE_UNKNOWN = "queue-unknown"  # skipped reason: the job's LocalQueue/ClusterQueue unreadable

_log = structlog.get_logger("bellows.controller")
_T = TypeVar("_T")


class ControllerObserver:
    """Hooks for metrics; the base class ignores everything."""

    def round_done(
        self,
        seconds: float,
        decisions: Sequence[Decision],
        *,
        running: int,
        queued: int,
        gpus_allocated: int,
        capacity: int,
    ) -> None:
        """A round ran in ``seconds`` (optimizer included); the core's state after it."""

    def applied(self, decision: Decision, outcome: Outcome) -> None:
        """One decision was driven to ``outcome`` on the cluster."""

    def invalid_jobs(self, count: int) -> None:
        """``count`` opted-in jobs are left alone now because their data is invalid."""

    def skipped_jobs(self, reason: str, count: int) -> None:
        """``count`` opted-in jobs are skipped now, never written to, for ``reason``
        (``managed-by``: another controller runs them; ``queue-unknown``: their Kueue
        queue cannot be resolved)."""

    def started(self, step: str, seconds: float) -> None:
        """A step of the controller's start-up took ``seconds``: ``rebuild`` (the jobs read
        from the cluster), ``first-round`` (the core's first step on them, the optimizer
        included) or ``rehearsal`` (the optimizer meeting the next rounds' shapes)."""

    def arrived(self, spec: JobSpec, at: float) -> None:
        """The core took ``spec`` (queued, or adopted running); it arrived at ``at`` (the
        controller's clock)."""

    def took_effect(self, decision: Decision, at: float) -> None:
        """The cluster took ``decision`` at ``at``: the job holds its GPUs from then (or
        none); a running job adopted at start-up counts as a :class:`Start` then."""

    def finished(self, job: str, at: float) -> None:
        """The core let ``job`` go: it finished (or went) at ``at``."""

    def kueue_admitted_first(self, job: str) -> None:
        """Kueue admitted ``job`` at its owner's size before Bellows held or sized it."""


NullControllerObserver = ControllerObserver


class EventsNotTakenError(PartlyAppliedError):
    """Some events of a window could not be read (API errors); the pump redelivers them.

    The window's other events were taken and its round ran before this was raised; the
    pump acks those.
    """

    def __init__(self, failures: Sequence[tuple[Event, BaseException]]) -> None:
        self.failures = tuple(failures)
        super().__init__([(event, brief(err)) for event, err in failures])


@dataclass(frozen=True)
class _Clock:
    now: Callable[[], float]
    at: Callable[[datetime], float]


class Controller:
    """Feeds the core from events and the cluster, and applies its decisions."""

    def __init__(
        self,
        *,
        api: KubeApi,
        autoscaler: Autoscaler,
        actuator: Actuator,
        reader: JobReader,
        now: Callable[[], float],
        namespaces: Sequence[str | None] = (None,),
        wall_to_clock: Callable[[datetime], float],
        observer: ControllerObserver | None = None,
        timer: Callable[[], float] | None = None,
        pool: str | None = None,
        queues: QueueIndex | None = None,
    ) -> None:
        """``pool`` and ``queues``: with a :class:`QueueIndex` (Kueue cooperation on), this
        controller takes only the jobs that ``queues`` routes to ``pool`` (a ClusterQueue's
        name; ``None``: the default pool); without one, every job."""
        self._api = api
        self._auto = autoscaler
        self._actuator = actuator
        self._reader = reader
        self._namespaces = tuple(namespaces)
        self._clock = _Clock(now, wall_to_clock)
        self._observer = observer or ControllerObserver()
        self._timer = timer or now
        self._retry: dict[str, Decision] = {}  # decisions the cluster has not taken yet
        # GPUs each job may hold on the cluster now: what the last applied decision gave it,
        # or, while a decision is unsettled, the larger of before and after (an upper bound)
        self._held: dict[str, int] = {}
        self._active: set[str] = set()  # jobs the core runs or queues (not finished)
        self._invalid: set[str] = set()  # opted-in jobs left alone for their data
        self._skipped: dict[str, str] = {}  # opted-in jobs another controller runs: reason
        self._widest = autoscaler.capacity  # the most GPUs the cluster has had: k_max's bound
        self._pool = pool
        self._queues = queues
        self._let_go_some = False  # a job left this pool: its core cannot take it back
        self._lock = asyncio.Lock()  # one window, retry or rebuild at a time
        autoscaler.note_keeps = True  # each round says which jobs it kept, and why
        self._kept: dict[str, str] = {}  # the reason last written on each kept job

    @property
    def autoscaler(self) -> Autoscaler:
        return self._auto

    @property
    def pool(self) -> str | None:
        """The ClusterQueue whose jobs this controller takes (``None``: the default pool)."""
        return self._pool

    @property
    def stale(self) -> bool:
        """Whether a job left this pool (its queue moved or went): the core remembers it as
        finished and would not take it back, so the pool wants a fresh controller
        (:class:`~bellows.service.pools.Pools` renews it)."""
        return self._let_go_some

    @property
    def pending(self) -> tuple[Decision, ...]:
        """Decisions the cluster has not taken yet (retried by :meth:`retry_pending`)."""
        return tuple(self._retry.values())

    @property
    def held(self) -> dict[str, int]:
        """The upper bound of GPUs each job may hold on the cluster (a copy)."""
        return dict(self._held)

    # ------------------------------------------------------------------ start-up
    async def rebuild(self) -> None:
        """Recover the core's state from the cluster, then run a round.

        Interrupted rescales are finished first; jobs Bellows runs are adopted at their
        allocation; jobs waiting (suspended, not rejected) re-enter the queue in creation
        order; jobs with invalid settings are reported. The jobs are read a page at a time
        and only their specs are kept. Last, the optimizer rehearses the next rounds.
        """
        async with self._lock:
            now = self._clock.now()
            started = self._timer()
            # the pages and the waiting jobs read are the callee's locals: gone before the
            # round, so the rehearsal's compilations (the start-up's peak) do not meet them
            await self._recover_all(now)
            _log.info(
                "rebuild.done", running=len(self._auto.allocations), queued=len(self._auto.queued)
            )
            self._observer.started("rebuild", self._timer() - started)
            self._observer.started("first-round", await self._round(now))
            self._observer.started("rehearsal", self._rehearse(now))

    async def _recover_all(self, now: float) -> None:
        """Read every job of the cluster a page at a time into the core: the running ones
        adopted as they are met, the waiting ones queued after, in creation order."""
        waiting: list[tuple[str, Arrived]] = []
        for namespace in self._namespaces:
            # a TrainJob a killed controller deleted to re-create it is in no list: its
            # record is; the copy is then read below, running at the journal's allocation
            for outcome in await self._actuator.finish_recreations(namespace):
                _log.info("rebuild.recreated", job=outcome.job, result=outcome.result)
            for kind in self._actuator.kinds:
                async for page, _ in self._api.list_job_pages(kind, namespace):
                    for obj in page:
                        key = _key(kind, obj)
                        found = await self._isolated(key, self._recovered(kind, obj, now))
                        if found is not None:
                            waiting.append(found)
        waiting.sort(key=lambda item: item[0])
        for _, job in waiting:
            await self._isolated(job.spec.name, self._admit(job, now, arrived_at=now))

    async def _isolated(self, job: str, work: Awaitable[_T]) -> _T | None:
        """``work`` for one job; a value in that job that no check foresaw marks the job
        invalid and the caller goes on (API errors propagate, to be retried)."""
        try:
            return await work
        except DATA_ERRORS as err:
            _log.exception("job.failed", job=job)
            await self._report(Invalid(job, f"Bellows could not take the job ({brief(err)})"))
            return None

    async def _recovered(
        self, kind: KindAdapter, obj: dict[str, Any], now: float
    ) -> tuple[str, Arrived] | None:
        """Take one job found at start-up; a job that waits is returned (creation, job)."""
        if not await self._in_scope(kind, obj, now):
            return None
        seen = await self._reader.examine(kind, obj)
        if isinstance(seen, Invalid):
            await self._report(seen)
        elif isinstance(seen, Skipped):
            await self._skip(seen)
        if not isinstance(seen, Arrived) or (seen := await self._fit(seen)) is None:
            return None
        journal = Journal.read(seen.view.annotations)
        running = seen.running
        if journal.phase in (Phase.SUSPENDING, Phase.PATCHED) and journal.target:
            # a scaling the previous controller left half done: finish it first
            gpus, batch = journal.target
            was = journal.allocation or journal.target
            outcome = await self._actuator.apply(Rescale(seen.spec.name, *was, gpus, batch))
            _log.info("rebuild.resumed", job=outcome.job, result=outcome.result)
            if outcome.result == "dropped":
                return None
            if outcome.result == "pending":  # its pods may still run: count their GPUs
                self._held[seen.spec.name] = seen.view.gpus
            else:
                running = Allocation(gpus, batch)
        if running is not None:
            self._held[seen.spec.name] = running.gpus
            self._active.add(seen.spec.name)
            done, since = self._progress(seen, now)
            adopted = self._auto.adopt(seen.spec, running, now, done=done, since=since)
            if adopted:
                self._observer.arrived(seen.spec, now)
                self._observer.took_effect(Start(seen.spec.name, running.gpus, running.batch), now)
            return None
        if journal.phase is Phase.REJECTED:
            return None
        return _created(seen), Arrived(seen.spec, _lean(seen.view), None)

    def _rehearse(self, now: float) -> float:
        """Run the next likely rounds on copies of the core: for each kind of job (category)
        one more of it arriving, and one of it finishing.

        The optimizer compiles a kernel for each new problem shape it meets, once per
        process, which takes a second or more; meeting the likely shapes now, before events
        are consumed, keeps those seconds out of the first windows' latency (later, in
        ``run_controller``, a kernel not met here compiles in the background while the
        NumPy engine answers: :meth:`RentRule.in_background`). The copies
        (:meth:`Autoscaler.fork`) and their decisions are thrown away. The NumPy path
        compiles nothing, so it skips this. Returns the seconds it took.
        """
        if self._auto.config.optimizer == "numpy":
            return 0.0
        names = [*self._auto.allocations, *self._auto.queued]
        kinds = {self._auto.job(name).category: name for name in names}
        started = self._timer()
        later = now + 1.0
        # "auto" would rent NumPy for a new shape (docs/optimizer.md): here it compiles now
        with RENT.compiling():
            for name in kinds.values():
                leaving = self._auto.fork()
                leaving.finish(name, later)
                leaving.step(later)
                coming = self._auto.fork()
                spec = self._auto.job(name)
                coming.arrive(dataclasses.replace(spec, name=f"{spec.name}-rehearsal"), later)
                coming.step(later)
        seconds = self._timer() - started
        if kinds:
            _log.info("rebuild.rehearsed", seconds=round(seconds, 3))
        return seconds

    def closes_window(self, events: Sequence[Event]) -> bool:
        """The paper's hybrid trigger, live: whether the open window's completions of running
        jobs reach ``early_share`` of the jobs running now, so its round should not wait
        for Δ (the pump asks; the round still checks each completion against the cluster).
        """
        share = self._auto.config.early_share
        running = self._auto.allocations
        if share is None or not running:
            return False
        finished = {
            key for e in events if isinstance(e, JobCompleted) and (key := e.job.key) in running
        }
        return len(finished) >= share * len(running)

    # ------------------------------------------------------------------ the pump's callback
    async def apply(self, events: tuple[Event, ...]) -> None:
        """Take one closed window's facts, run the round, drive the cluster to it.

        Raises :class:`EventsNotTakenError` (after the round) when some events could not be read
        from the cluster, so that the pump hands them back for redelivery; taking an event
        twice is harmless.
        """
        async with self._lock:
            now = self._clock.now()
            failures: list[tuple[Event, BaseException]] = []
            for event in events:
                try:
                    await self._take(event, now)
                except Exception as err:  # an API error: the event comes back later
                    failures.append((event, err))
            await self._round(now)
        if failures:
            raise EventsNotTakenError(failures)

    async def retry_pending(self) -> None:
        """Drive the decisions the cluster has not taken yet (no new round)."""
        async with self._lock:
            if self._retry:
                await self._settle([], self._clock.now(), seconds=0.0)

    async def keep_house(
        self, stop: asyncio.Event, *, retry_s: float = 1.0, speedup: float = 1.0
    ) -> None:
        """Until ``stop``: retry the decisions the cluster did not take, every ``retry_s``
        real seconds, and run the core's rounds as they fall due (Bellows mode), without
        waiting for the next event. ``speedup`` is clock seconds per real second."""
        while not stop.is_set():
            due = self._auto.next_round_at()
            wait = retry_s
            if due is not None:
                wait = min(wait, max(0.0, due - self._clock.now()) / speedup)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
            if stop.is_set():
                return
            try:
                await self.tick()
                if self._retry:
                    await self.retry_pending()
            except Exception as err:  # the next attempt comes in retry_s
                _log.warning("controller.housekeeping_failed", error=brief(err))

    async def revise(
        self,
        spec: JobSpec,
        *,
        done: float | None,
        since: float | None,
        efficiency: EfficiencyProfile | None = None,
    ) -> bool:
        """What progress taught about a job, for the core's next round (see
        :meth:`Autoscaler.revise`; ``since`` on this clock). Whether the core took it.
        ``efficiency`` (learned online): decide the job by goodput from now on
        (:meth:`Autoscaler.charge`), ``done`` then in reference samples."""
        async with self._lock:
            now = self._clock.now()
            at = None if since is None else min(since, now)
            known = spec.name in self._auto.allocations or spec.name in self._auto.queued
            if efficiency is not None and known:
                self._auto.charge(spec.name, efficiency)
            return self._auto.revise(spec, now, done=done, since=at)

    async def notify(self, job: str, reason: str, message: str) -> None:
        """A warning Event on ``job`` (best effort, nothing else written)."""
        try:
            await self._actuator.notify(job, reason, message, warning=True)
        except ActuationError as err:
            _log.warning("job.notify_failed", job=job, error=str(err))

    async def set_capacity(self, gpus: int) -> None:
        """The cluster's GPUs changed (nodes lost or added). When the running jobs no longer
        fit, the newest are halted at once; when GPUs come back, waiting jobs (those halted
        included) start on them (Bellows mode) or at the next round (paper mode)."""
        async with self._lock:
            if gpus == self._auto.capacity:
                return
            now = self._clock.now()
            _log.info("capacity.changed", was=self._auto.capacity, gpus=gpus)
            self._auto.set_capacity(gpus, now)
            self._widest = max(self._widest, gpus)
            await self._round(now)

    async def rescope(self) -> None:
        """Read again the jobs left alone because their queue could not be resolved (Kueue's
        queues changed): one whose queue resolves now is no longer counted as skipped, and
        the pool it belongs to takes it (its rebuild, or its next event)."""
        async with self._lock:
            now = self._clock.now()
            for job in [j for j, reason in self._skipped.items() if reason == QUEUE_UNKNOWN]:
                ref = self._actuator.ref(job)
                kind = kind_named(ref.kind)
                obj = await self._api.get_job(kind, ref.namespace, ref.name)
                if obj is None:
                    self._unskip(job)
                else:
                    await self._in_scope(kind, obj, now)

    async def tick(self) -> bool:
        """Run the core's step if one is due by now (Bellows mode's rounds); whether it ran."""
        async with self._lock:
            now = self._clock.now()
            due = self._auto.next_round_at()
            if due is None or due > now:
                return False
            await self._round(now)
            return True

    async def _take(self, event: Event, now: float) -> None:
        ref = event.job
        if None not in self._namespaces and ref.namespace not in self._namespaces:
            # a forged or misrouted event: never read, let alone touch, a job out of scope
            _log.warning("event.out_of_scope", job=ref.key, namespaces=self._namespaces)
            return
        kind = kind_named(ref.kind)
        if isinstance(event, JobCompleted) and ref.key not in self._active:
            self._set_invalid(ref.key, False)
            self._unskip(ref.key)
            return  # never arrived here, or already finished: nothing to free
        obj = await self._api.get_job(kind, ref.namespace, ref.name)
        gone = obj is None or obj["metadata"].get("uid") != event.job.uid
        if isinstance(event, JobCompleted) and gone and _recreated(obj, event.job.uid):
            # a TrainJob Bellows deleted and created again to resize it: the same job
            _log.info("event.stale", job=ref.key, reason="re-created by its resize")
            return
        if isinstance(event, JobCompleted):
            # the cluster is the truth: a completion it does not show frees no GPUs yet
            if gone or finished_state(obj or {}) is not None:
                self._finish(ref.key, now, self._clock.at(event.time))
            else:
                _log.warning("event.premature", job=ref.key, reason="the job has not finished")
            return
        assert isinstance(event, JobArrived)
        if gone:
            _log.info("event.stale", job=ref.key, reason="job gone or recreated")
            return
        assert obj is not None
        if not await self._in_scope(kind, obj, now):
            return
        seen = await self._reader.examine(kind, obj)
        await self._observe(seen, now, arrived_at=self._clock.at(event.time))

    async def _in_scope(self, kind: KindAdapter, obj: Mapping[str, Any], now: float) -> bool:
        """Whether this controller takes ``obj`` (its pool's job). The default pool's says
        once that a job's queue cannot be resolved; a job this controller held that now
        belongs elsewhere is let go here (never written to)."""
        if self._queues is None:
            return True  # Kueue cooperation off: one pool, every job
        meta = obj.get("metadata") or {}
        if not keys.opted_in(meta.get("annotations") or {}):
            return self._pool is None  # examined (metadata only) by one controller
        key = _key(kind, obj)
        # MultiKueue: never routed by its queue; the default pool says it is skipped
        foreign = foreign_manager(obj, kind.manager) is not None
        route = None if foreign else self._queues.pool_of(obj)
        if isinstance(route, QueueProblem):
            if self._pool is None and finished_state(obj) is None:
                message = f"{route.message}: Bellows leaves the job alone until it can read it"
                skipped = Skipped(key, QUEUE_UNKNOWN, message)
                await self._skip(skipped, event="QueueUnknown", warning=True)
            elif self._pool is None:
                self._unskip(key)
            self._let_go(key, now)
            return False
        if self._skipped.get(key) == QUEUE_UNKNOWN:
            self._unskip(key)  # resolved now
        if route != self._pool:
            self._let_go(key, now)
            return False
        return True

    def _let_go(self, job: str, now: float) -> None:
        """Forget a job of this pool that is no longer routed here (its LocalQueue moved or
        went): nothing is written to it; the pool it now belongs to takes it. The core keeps
        it as finished, so this controller is :attr:`stale` from now on."""
        if job not in self._active:
            return
        _log.warning("job.left_pool", job=job, pool=self._pool)
        self._let_go_some = True
        self._auto.finish(job, now)
        self._retry.pop(job, None)
        self._held.pop(job, None)
        self._active.discard(job)

    async def _observe(self, seen: Observation | None, now: float, *, arrived_at: float) -> None:
        if seen is None:
            return  # not opted in: never touched
        if isinstance(seen, Invalid):
            await self._report(seen)
        elif isinstance(seen, Skipped):
            await self._skip(seen)
        elif isinstance(seen, Finished | Deleted):
            self._finish(seen.job, now, now)
        elif (seen := await self._fit(seen)) is None:
            return
        elif seen.running is not None:
            done, since = self._progress(seen, now)
            if self._auto.adopt(seen.spec, seen.running, now, done=done, since=since):
                self._held[seen.spec.name] = seen.running.gpus
                self._active.add(seen.spec.name)
                self._observer.arrived(seen.spec, arrived_at)
        elif Journal.read(seen.view.annotations).phase is not Phase.REJECTED:
            await self._admit(seen, now, arrived_at=arrived_at)

    async def _admit(self, seen: Arrived, now: float, *, arrived_at: float) -> None:
        # a Kueue job is held even when suspended: its Workload is deactivated, so that
        # Kueue does not admit (and resume) it before Bellows has sized it
        kueue = seen.view.queue is not None and seen.spec.name not in self._active
        if kueue and not seen.view.suspended:
            self._observer.kueue_admitted_first(seen.spec.name)
            if await self._take_admitted(seen, now, arrived_at):
                return
        if (not seen.view.suspended or kueue) and seen.spec.name not in self._auto.allocations:
            outcome = await self._actuator.hold(seen.spec.name)
            _log.info("job.held", job=seen.spec.name, result=outcome.result)
        if self._auto.arrive(seen.spec, now):
            self._active.add(seen.spec.name)
            _log.info("job.arrived", job=seen.spec.name)
            self._observer.arrived(seen.spec, arrived_at)

    async def _take_admitted(self, seen: Arrived, now: float, arrived_at: float) -> bool:
        """Take a Kueue job that Kueue admitted and resumed at its owner's size before Bellows
        could hold it (Kueue admits within milliseconds of a job's creation) as running at
        that size, rather than evicting and restarting it at once: when that size is one the
        job allows, it fits the pool's free GPUs and no job waits before it. The next round
        may still rescale it, as any running job, when the move pays for its restart.
        Whether it was taken (else it is held)."""
        spec, gpus = seen.spec, seen.view.gpus
        batch = spec.batch_size
        if gpus < 1 or self._auto.queued or self._auto.in_use + gpus > self._auto.capacity:
            return False
        running = Allocation(gpus, batch)
        # the owner's batch on the GPUs Kueue gave it: allowed as the fixed-batch policy allows
        if not is_feasible(spec, running, fixed_batch=True):
            return False
        if not self._auto.adopt(spec, running, now):
            return False
        self._active.add(spec.name)
        self._held[spec.name] = gpus
        _log.info("job.taken_as_admitted", job=spec.name, gpus=gpus, batch=batch)
        self._observer.arrived(spec, arrived_at)
        await self._drive(Start(spec.name, gpus, batch), now)  # journals it; no restart
        return True

    async def _fit(self, seen: Arrived) -> Arrived | None:
        """The job sized for this cluster: a ``max-gpus`` above the cluster's GPUs (the most
        it has had since this controller started, so that a node down at the job's arrival
        does not shrink it for good) is clamped to them, and an Event says so; ``None`` (the
        job reported) when it cannot run on the cluster."""
        name, capacity = seen.spec.name, self._widest
        try:
            spec = fit_to_cluster(seen.spec, capacity)
        except SpecError as err:
            await self._report(Invalid(name, f"{err} (bellows.io/max-gpus)"))
            return None
        self._set_invalid(name, False)
        if spec is seen.spec:
            return seen
        if name not in self._active:
            where = "the cluster's" if self._pool is None else f"ClusterQueue {self._pool}'s"
            message = (
                f"bellows.io/max-gpus={seen.spec.k_max} is more than {where} {capacity} "
                f"GPUs; Bellows gives the job at most {spec.k_max}"
            )
            await self._actuator.notify(name, "Clamped", message, warning=True)
            _log.info("job.clamped", job=name, k_max=seen.spec.k_max, to=spec.k_max)
        return dataclasses.replace(seen, spec=spec)

    def _progress(self, seen: Arrived, now: float) -> tuple[float, float | None]:
        """What the journal and the cluster know of a running job's progress: the samples it
        had done when it last resumed, and when that was (on this clock). Without a journal
        entry (a job Bellows started before it kept one), the cluster's ``Running``
        condition says since when it runs, with the samples before unknown (0)."""
        journal = Journal.read(seen.view.annotations)
        samples, at = journal.progress or (0.0, running_since(seen.view.raw))
        return samples, None if at is None else min(self._clock.at(at), now)

    def _set_invalid(self, job: str, invalid: bool) -> None:
        before = len(self._invalid)
        if invalid:
            self._invalid.add(job)
        else:
            self._invalid.discard(job)
        if len(self._invalid) != before:
            self._observer.invalid_jobs(len(self._invalid))

    def _finish(self, job: str, now: float, at: float) -> None:
        self._set_invalid(job, False)
        self._unskip(job)
        if self._auto.finish(job, now):
            _log.info("job.finished", job=job)
            self._retry.pop(job, None)
            self._held.pop(job, None)
            self._kept.pop(job, None)
            self._active.discard(job)
            self._observer.finished(job, at)

    async def _skip(self, seen: Skipped, *, event: str = "Skipped", warning: bool = False) -> None:
        """Say once per job, in an Event (``event`` its reason) and the metric, that it is
        skipped; nothing is written to the job itself (not even the status annotation)."""
        was = self._skipped.get(seen.job)
        if was == seen.reason:
            return
        self._skipped[seen.job] = seen.reason
        if was is not None:
            self._count_skipped(was)
        self._count_skipped(seen.reason)
        _log.info("job.skipped", job=seen.job, reason=seen.reason)
        try:
            await self._actuator.notify(seen.job, event, seen.message, warning=warning)
        except ActuationError as err:
            _log.warning("job.notify_failed", job=seen.job, error=str(err))

    def _unskip(self, job: str) -> None:
        reason = self._skipped.pop(job, None)
        if reason is not None:
            self._count_skipped(reason)

    def _count_skipped(self, reason: str) -> None:
        count = sum(1 for r in self._skipped.values() if r == reason)
        self._observer.skipped_jobs(reason, count)

    async def _report(self, seen: Invalid) -> None:
        self._set_invalid(seen.job, not seen.refused)
        reason = "Refused" if seen.refused else "InvalidSettings"
        try:
            await self._actuator.report_problem(seen.job, seen.problem, reason=reason)
        except ActuationError as err:
            _log.warning("job.report_failed", job=seen.job, error=str(err))
        _log.warning("job.not_managed", job=seen.job, problem=seen.problem)

    # ------------------------------------------------------------------ rounds
    async def _round(self, now: float) -> float:
        """Step the core and drive its decisions; returns the seconds of the step."""
        started = self._timer()
        decisions = self._auto.step(now)
        seconds = self._timer() - started
        await self._settle(decisions, now, seconds=seconds)
        await self._note_keeps(decisions)
        return seconds

    async def _note_keeps(self, decisions: Sequence[Decision]) -> None:
        """Write on each job the round kept why (once per reason: the controller remembers
        what it wrote); a job a decision touched says that decision's reason instead."""
        for decision in decisions:
            self._kept.pop(decision.job, None)
        keeps = [k for k in self._auto.keeps if self._kept.get(k.job) != k.reason]
        self._auto.keeps = ()
        noted = await asyncio.gather(
            *(self._actuator.note_kept(k) for k in keeps), return_exceptions=True
        )
        for keep, outcome in zip(keeps, noted, strict=True):
            if isinstance(outcome, BaseException):  # best effort, as an Event
                _log.warning("job.note_failed", job=keep.job, error=brief(outcome))
            else:
                self._kept[keep.job] = keep.reason

    async def _settle(self, decisions: Sequence[Decision], now: float, *, seconds: float) -> None:
        """Drive ``decisions`` and the retried ones: frees first, then what fits of the claims."""
        # a decision the cluster did not take yet is retried, unless a newer one replaces it
        pending = list({**self._retry, **{d.job: d for d in decisions}}.values())
        self._retry.clear()
        # halts and scale-downs free GPUs before scale-ups and starts claim them
        frees = [d for d in pending if _frees(d)]
        await asyncio.gather(*(self._drive(d, now) for d in frees))
        claims = [d for d in pending if not _frees(d)]
        await asyncio.gather(*(self._drive(d, now) for d in self._admissible(claims)))
        allocations = self._auto.allocations
        self._observer.round_done(
            seconds,
            decisions,
            running=len(allocations),
            queued=len(self._auto.queued),
            gpus_allocated=sum(a.gpus for a in allocations.values()),
            capacity=self._auto.capacity,
        )

    def _admissible(self, claims: Sequence[Decision]) -> list[Decision]:
        """The claims whose GPUs are free on the cluster now; the others wait for a retry.

        The core's allocations always fit; the cluster's may not yet, when a scale-down or
        halt before them failed. Each admitted claim reserves its GPUs at once.
        """
        out: list[Decision] = []
        in_use = sum(self._held.values())
        for claim in claims:
            assert isinstance(claim, Start | Rescale)
            more = claim.gpus - self._held.get(claim.job, 0)
            if more > 0 and in_use + more > self._auto.capacity:
                _log.info("decision.deferred", job=claim.job, gpus=claim.gpus, in_use=in_use)
                self._retry[claim.job] = claim
                continue
            if more > 0:
                in_use += more
                self._held[claim.job] = claim.gpus
            out.append(claim)
        return out

    async def _drive(self, decision: Decision, now: float) -> None:
        try:
            done = (
                self._auto.estimated_done(decision.job, now)
                if isinstance(decision, Start | Rescale) and decision.job in self._auto.allocations
                else None
            )
            outcome = await self._actuator.apply(decision, done=done)
        except Exception as err:  # one job must not stop the loop: retry it next round
            _log.warning("decision.failed", job=decision.job, error=brief(err))
            self._retry[decision.job] = decision
            return
        self._observer.applied(decision, outcome)
        _log.info(
            "decision.applied", job=decision.job, result=outcome.result, detail=outcome.detail
        )
        if outcome.result == "dropped":
            self._finish(decision.job, now, now)
            return
        if outcome.result == "pending":
            self._retry[decision.job] = decision
            return
        if isinstance(decision, Start | Rescale):
            self._held[decision.job] = decision.gpus
        else:
            self._held.pop(decision.job, None)
            if isinstance(decision, Reject):
                self._active.discard(decision.job)
        # GPUs are held from when the pods run again, not from when the round decided
        self._observer.took_effect(decision, max(now, self._clock.now()))


def _key(kind: KindAdapter, obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return job_key(kind.kind, str(meta.get("namespace", "")), str(meta.get("name", "")))


def _frees(decision: Decision) -> bool:
    if isinstance(decision, Rescale):
        return decision.gpus < decision.gpus_from
    return isinstance(decision, Preempt | Reject)


def _lean(view: JobView) -> JobView:
    """What :meth:`Controller._admit` reads of a waiting job's view, kept until the rebuild
    queues it: not the raw object, its annotations (the profile's JSON text among them) nor
    its env values. 10 000 of those, held through the rebuild, cost ~20 MiB of heap, and
    the Python allocator's arenas they pin stay resident after (docs/live.md)."""
    return dataclasses.replace(view, annotations={}, env={}, raw={})


def _created(seen: Arrived) -> str:
    created = seen.view.raw.get("metadata", {}).get("creationTimestamp")
    return str(created or "")


def _recreated(obj: Mapping[str, Any] | None, uid: str) -> bool:
    """Whether ``obj`` is the copy of the job ``uid`` that a resize re-created (a TrainJob,
    ``bellows.kube.recreation``): its ``bellows.io/recreated-from`` names that uid."""
    notes = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return notes.get(keys.RECREATED_FROM) == uid
