"""The controller: job events in, the core's decisions out, applied before the events are acked.

One :class:`Controller` owns one :class:`~bellows.autoscaler.Autoscaler`. The event pump
(:class:`bellows.bus.EventPump`) hands it the facts of each fetch at once through
:meth:`Controller.apply`; the controller reads each arrived job from the cluster (the jobs
are the source of truth, the event only says where to look), feeds the core, runs its step
and drives the cluster to the decisions through the :class:`~bellows.kube.Actuator`. On
start, :meth:`Controller.rebuild` recovers the state from the cluster before anything is
consumed.

When a round is due is the core's to say, in every mode, as in the simulator
(:class:`~bellows.autoscaler.rounds.RoundClock`: the Δ grid on the service clock and the
paper's hybrid trigger): the rounds come through :meth:`Controller.tick` when the core
says they are due, and an arrival or a completion that leaves GPUs free starts waiting jobs
at once in Bellows mode (a fill), within the event-to-patch latency. The pump acks a fetch's
deliveries when ``apply`` returned, or, while the core has a round due that will decide on
their facts, once that round has run (at-least-once: the decisions applied, then the acks).

The controller is a thin loop, one lock around each step, over its parts, each in a module
of its own:

* :mod:`~bellows.service.intake`: each event read against the cluster, the job fed to the
  core (queued, held, adopted, finished);
* :mod:`~bellows.service.scoping`: which jobs this controller takes (its namespaces; beside
  Kueue, its pool's: :mod:`bellows.service.pools` runs one controller per pool);
* :mod:`~bellows.service.rebuilding`: the state recovered from the cluster at start, and
  the optimizer's rehearsal;
* :mod:`~bellows.service.settling`: the rounds, and their decisions driven to the cluster
  (frees before claims; a decision the cluster does not take is retried, at the next step
  or sooner through :meth:`Controller.retry_pending`);
* :mod:`~bellows.service.roster`: what the controller holds beside the core (the GPUs each
  job may hold on the cluster, the decisions not taken yet);
* :mod:`~bellows.service.reports`: the Events and counts of the jobs it leaves alone;
* :mod:`~bellows.service.observing`: the hooks for metrics and records.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

import structlog

from bellows.autoscaler import AnyAutoscaler, Decision, TypedAutoscaler
from bellows.bus import Event, PartlyAppliedError, Settled
from bellows.inputs import brief
from bellows.jobs import JobSpec
from bellows.kube import Actuator, JobReader, KubeApi
from bellows.scaling import EfficiencyProfile
from bellows.scaling.placement_memory import ObservedStep
from bellows.service.intake import Intake
from bellows.service.memory import Memory
from bellows.service.observing import ControllerObserver
from bellows.service.parts import Parts
from bellows.service.queues import QueueIndex
from bellows.service.rebuilding import Rebuild
from bellows.service.reports import Reports
from bellows.service.roster import Roster
from bellows.service.scoping import Scope
from bellows.service.settling import Settler

__all__ = ["Controller", "EventsNotTakenError"]

_log = structlog.get_logger("bellows.controller")


class EventsNotTakenError(PartlyAppliedError):
    """Some events of a fetch could not be read (API errors); the pump redelivers them.

    The fetch's other events were taken and the core's step ran before this was raised; the
    pump acks those.
    """

    def __init__(self, failures: Sequence[tuple[Event, BaseException]]) -> None:
        self.failures = tuple(failures)
        super().__init__([(event, brief(err)) for event, err in failures])


class Controller:
    """Feeds the core from events and the cluster, and applies its decisions."""

    def __init__(
        self,
        *,
        api: KubeApi,
        autoscaler: AnyAutoscaler,
        actuator: Actuator,
        reader: JobReader,
        now: Callable[[], float],
        namespaces: Sequence[str | None] = (None,),
        wall_to_clock: Callable[[datetime], float],
        observer: ControllerObserver | None = None,
        timer: Callable[[], float] | None = None,
        pool: str | None = None,
        queues: QueueIndex | None = None,
        memory: Memory | None = None,
    ) -> None:
        """``pool`` and ``queues``: with a :class:`QueueIndex` (Kueue cooperation on), this
        controller takes only the jobs that ``queues`` routes to ``pool`` (a ClusterQueue's
        name; ``None``: the default pool); without one, every job. ``memory``: what an
        earlier leader learned of the jobs, recalled as the rebuild takes them."""
        self._auto = autoscaler
        self._now = now
        observer = observer or ControllerObserver()
        self._observer = observer
        self._timer = timer or now
        self._reports = Reports(actuator, observer)
        self._roster = Roster(autoscaler, reports=self._reports, observer=observer, pool=pool)
        parts = Parts(api, reader, actuator, self._roster, self._reports, observer, memory)
        self._scope = Scope(parts, namespaces=namespaces, queues=queues)
        self._settler = Settler(parts, now=now, timer=self._timer)
        self._intake = Intake(
            parts, scope=self._scope, settler=self._settler, wall_to_clock=wall_to_clock
        )
        self._rebuild = Rebuild(parts, scope=self._scope, intake=self._intake, timer=self._timer)
        self._lock = asyncio.Lock()  # one window, retry or rebuild at a time
        autoscaler.note_keeps = True  # each round says which jobs it kept, and why

    @property
    def autoscaler(self) -> AnyAutoscaler:
        return self._auto

    @property
    def pool(self) -> str | None:
        """The ClusterQueue whose jobs this controller takes (``None``: the default pool)."""
        return self._roster.pool

    @property
    def stale(self) -> bool:
        """Whether a job left this pool (its queue moved or went): the core remembers it as
        finished and would not take it back, so the pool wants a fresh controller
        (:class:`~bellows.service.pools.Pools` renews it)."""
        return self._roster.let_go_some

    @property
    def pending(self) -> tuple[Decision, ...]:
        """Decisions the cluster has not taken yet (retried by :meth:`retry_pending`)."""
        return tuple(self._roster.retry.values())

    @property
    def held(self) -> dict[str, int]:
        """The upper bound of GPUs each job may hold on the cluster (a copy)."""
        return dict(self._roster.held)

    # ------------------------------------------------------------------ start-up
    async def rebuild(self) -> None:
        """Recover the core's state from the cluster, then run a round
        (:mod:`bellows.service.rebuilding`); last, the optimizer rehearses the next rounds.
        """
        async with self._lock:
            now = self._now()
            started = self._timer()
            # the pages and the waiting jobs read are the callee's locals: gone before the
            # round, so the rehearsal's compilations (the start-up's peak) do not meet them
            await self._rebuild.recover_all(now)
            _log.info(
                "rebuild.done", running=len(self._auto.allocations), queued=len(self._auto.queued)
            )
            rebuilt = self._timer() - started
            self._observer.started("rebuild", rebuilt)
            step = await self._settler.round(now)
            self._observer.started("first-round", step)
            _log.info(
                "rebuild.first_round", rebuild_s=round(rebuilt, 3), step_s=round(step, 3),
                seconds=round(self._timer() - started, 3), running=len(self._auto.allocations),
                queued=len(self._auto.queued),
            )  # fmt: skip
            # in the loop, not on a worker thread: there the cold start's peak RSS was 458-471
            # MiB in 3 runs at 10 000 jobs, 451-458 here (its compiles' memory from another
            # malloc arena, likely); the bound is 450 (docs/live.md, "Takeover")
            self._observer.started("rehearsal", self._rebuild.rehearse(now))

    # ------------------------------------------------------------------ the pump's callback
    async def apply(self, events: tuple[Event, ...]) -> Settled | None:
        """Take one fetch's facts, run the core's step, drive the cluster to it.

        Returns, while the core has a round due (the facts wait for it), the check that says
        when that round has run, so that the pump acks the deliveries then; ``None`` when
        nothing waits. Raises :class:`EventsNotTakenError` (after the step) when some events
        could not be read from the cluster, so that the pump hands them back for
        redelivery; taking an event twice is harmless.
        """
        async with self._lock:
            now = self._now()
            failures: list[tuple[Event, BaseException]] = []
            for event in events:
                try:
                    await self._intake.take(event, now)
                except Exception as err:  # an API error: the event comes back later
                    failures.append((event, err))
            await self._settler.round(now)
            settled = self._settled()
        if failures:
            raise EventsNotTakenError(failures)
        return settled

    @property
    def rounds(self) -> int:
        """The core's rounds run so far (not its fills)."""
        return self._settler.rounds

    def _settled(self) -> Settled | None:
        """While the core has a round due: whether a round has run since now."""
        if self._auto.next_round_at() is None:
            return None
        rounds = self.rounds
        return lambda: self.rounds > rounds

    async def retry_pending(self) -> None:
        """Drive the decisions the cluster has not taken yet (no new round)."""
        async with self._lock:
            if self._roster.retry:
                await self._settler.settle([], self._now(), seconds=0.0)

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
                wait = min(wait, max(0.0, due - self._now()) / speedup)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
            if stop.is_set():
                return
            try:
                await self.tick()
                if self._roster.retry:
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
            now = self._now()
            at = None if since is None else min(since, now)
            known = spec.name in self._auto.allocations or spec.name in self._auto.queued
            if efficiency is not None and known:
                self._auto.charge(spec.name, efficiency)
            return self._auto.revise(spec, now, done=done, since=at)

    async def notify(self, job: str, reason: str, message: str) -> None:
        """A warning Event on ``job`` (best effort, nothing else written)."""
        await self._reports.notify(job, reason, message)

    async def observe_step(self, job: str, step: ObservedStep) -> bool:
        """A step ``job`` measured, for its class (:meth:`Autoscaler.observe_step`)."""
        async with self._lock:
            return self._auto.observe_step(job, self._now(), step)

    def uid(self, job: str) -> str | None:
        """The uid of the object the core's ``job`` is (``None``: not this pool's)."""
        return self._roster.uids.get(job)

    async def set_capacity(self, gpus: int) -> None:
        """The cluster's GPUs changed (nodes lost or added). When the running jobs no longer
        fit, the newest are halted at once; when GPUs come back, waiting jobs (those halted
        included) start on them (Bellows mode) or at the next round (paper mode)."""
        async with self._lock:
            if gpus == self._auto.capacity:
                return
            now = self._now()
            _log.info("capacity.changed", was=self._auto.capacity, gpus=gpus)
            self._auto.set_capacity(gpus, now)
            self._roster.widest = max(self._roster.widest, gpus)
            await self._settler.round(now)

    async def set_types(self, gpus: Mapping[str, int]) -> None:
        """The nodes' GPUs per type changed (a core of several types; one type: their sum,
        as :meth:`set_capacity`). A type the core does not decide over is not counted."""
        auto = self._auto
        if not isinstance(auto, TypedAutoscaler):
            await self.set_capacity(sum(gpus.values()))
            return
        async with self._lock:
            now = self._now()
            changed = False
            for name in auto.cluster.names:
                count = int(gpus.get(name, 0))
                if count != auto.capacities[name]:
                    _log.info("capacity.changed", gpu_type=name, was=auto.capacities[name],
                              gpus=count)  # fmt: skip
                    auto.set_capacity(count, now, name)
                    changed = True
            if changed:
                self._roster.widest = max(self._roster.widest, auto.capacity)
                await self._settler.round(now)

    async def rescope(self) -> None:
        """Read again the jobs left alone because their queue could not be resolved (Kueue's
        queues changed): one whose queue resolves now is no longer counted as skipped, and
        the pool it belongs to takes it (its rebuild, or its next event)."""
        async with self._lock:
            await self._scope.rescope(self._now())

    async def tick(self) -> bool:
        """Run the core's step if one is due by now (Bellows mode's rounds); whether it ran."""
        async with self._lock:
            now = self._now()
            due = self._auto.next_round_at()
            if due is None or due > now:
                return False
            await self._settler.round(now)
            return True
