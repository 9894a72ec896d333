"""The controller: job events in, the core's decisions out, applied before the events are acked.

One :class:`Controller` owns one :class:`~bellows.autoscaler.Autoscaler`. The event pump
(:class:`bellows.bus.EventPump`) hands it the facts of each closed Δ window through
:meth:`Controller.apply`; the controller reads each arrived job from the cluster (the jobs
are the source of truth, the event only says where to look), feeds the core, runs the round
and drives the cluster to the decisions through the :class:`~bellows.kube.Actuator`. Only
when that returns does the pump ack the window's messages (at-least-once). On start,
:meth:`Controller.rebuild` recovers the state from the cluster before anything is consumed.

The core runs with ``delta_s = 0`` here: the pump's window *is* the paper's Δ, so each window
with news is one round, on the same grid the simulator uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import structlog

from bellows.autoscaler import Autoscaler, Decision, Preempt, Reject, Rescale, Start
from bellows.bus import Event, JobArrived, JobCompleted
from bellows.kube import (
    ActuationError,
    Actuator,
    Arrived,
    Deleted,
    Finished,
    Invalid,
    JobReader,
    JobRef,
    KubeApi,
    Observation,
    Outcome,
    kind_named,
)
from bellows.kube.journal import Journal, Phase
from bellows.service.ledger import Ledger

__all__ = ["Controller", "ControllerObserver", "NullControllerObserver"]

_log = structlog.get_logger("bellows.controller")


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


NullControllerObserver = ControllerObserver


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
        ledger: Ledger | None = None,
        observer: ControllerObserver | None = None,
        timer: Callable[[], float] | None = None,
    ) -> None:
        self._api = api
        self._auto = autoscaler
        self._actuator = actuator
        self._reader = reader
        self._namespaces = tuple(namespaces)
        self._clock = _Clock(now, wall_to_clock)
        self.ledger = ledger
        self._observer = observer or ControllerObserver()
        self._timer = timer or now
        self._retry: dict[str, Decision] = {}  # decisions the cluster has not taken yet

    @property
    def autoscaler(self) -> Autoscaler:
        return self._auto

    # ------------------------------------------------------------------ start-up
    async def rebuild(self) -> None:
        """Recover the core's state from the cluster, then run a round.

        Interrupted rescales are finished first; jobs Bellows runs are adopted at their
        allocation; jobs waiting (suspended, not rejected) re-enter the queue in creation
        order; jobs with invalid settings are reported.
        """
        now = self._clock.now()
        observations: list[Observation] = []
        for namespace in self._namespaces:
            for outcome in await self._actuator.resume_interrupted(namespace):
                _log.info("rebuild.resumed", job=outcome.job, result=outcome.result)
            observations.extend(await self._reader.snapshot(namespace))
        waiting: list[Arrived] = []
        for seen in observations:
            if isinstance(seen, Arrived):
                if seen.running is not None:
                    self._auto.adopt(seen.spec, seen.running, now)
                    if self.ledger is not None:
                        self.ledger.arrived(seen.spec, now)
                        self.ledger.applied(
                            Start(seen.spec.name, seen.running.gpus, seen.running.batch), now
                        )
                elif Journal.read(seen.view.annotations).phase is not Phase.REJECTED:
                    waiting.append(seen)
            elif isinstance(seen, Invalid):
                await self._report(seen)
        waiting.sort(key=_created)
        for seen in waiting:
            await self._admit(seen, now, arrived_at=now)
        _log.info(
            "rebuild.done",
            running=len(self._auto.allocations),
            queued=len(self._auto.queued),
        )
        await self._round(now)

    # ------------------------------------------------------------------ the pump's callback
    async def apply(self, events: tuple[Event, ...]) -> None:
        """Take one closed window's facts, run the round, drive the cluster to it."""
        now = self._clock.now()
        for event in events:
            await self._take(event, now)
        await self._round(now)

    async def _take(self, event: Event, now: float) -> None:
        ref = JobRef(event.job.kind.value, event.job.namespace, event.job.name)
        if isinstance(event, JobCompleted):
            self._finish(ref.key, now, self._clock.at(event.time))
            return
        assert isinstance(event, JobArrived)
        kind = kind_named(ref.kind)
        obj = await self._api.get_job(kind, ref.namespace, ref.name)
        if obj is None or obj["metadata"].get("uid") != event.job.uid:
            _log.info("event.stale", job=ref.key, reason="job gone or recreated")
            return
        seen = await self._reader.examine(kind, obj)
        await self._observe(seen, now, arrived_at=self._clock.at(event.time))

    async def _observe(self, seen: Observation | None, now: float, *, arrived_at: float) -> None:
        if seen is None:
            return  # not opted in: never touched
        if isinstance(seen, Invalid):
            await self._report(seen)
        elif isinstance(seen, Finished | Deleted):
            self._finish(seen.job, now, now)
        elif seen.running is not None:
            if self._auto.adopt(seen.spec, seen.running, now) and self.ledger is not None:
                self.ledger.arrived(seen.spec, arrived_at)
        elif Journal.read(seen.view.annotations).phase is not Phase.REJECTED:
            await self._admit(seen, now, arrived_at=arrived_at)

    async def _admit(self, seen: Arrived, now: float, *, arrived_at: float) -> None:
        if not seen.view.suspended and seen.spec.name not in self._auto.allocations:
            outcome = await self._actuator.hold(seen.spec.name)
            _log.info("job.held", job=seen.spec.name, result=outcome.result)
        if self._auto.arrive(seen.spec, now):
            _log.info("job.arrived", job=seen.spec.name)
            if self.ledger is not None:
                self.ledger.arrived(seen.spec, arrived_at)

    def _finish(self, job: str, now: float, at: float) -> None:
        if self._auto.finish(job, now):
            _log.info("job.finished", job=job)
            self._retry.pop(job, None)
            if self.ledger is not None:
                self.ledger.finished(job, at)

    async def _report(self, seen: Invalid) -> None:
        reason = "Refused" if seen.refused else "InvalidSettings"
        try:
            await self._actuator.report_problem(seen.job, seen.problem, reason=reason)
        except ActuationError as err:
            _log.warning("job.report_failed", job=seen.job, error=str(err))
        _log.warning("job.not_managed", job=seen.job, problem=seen.problem)

    # ------------------------------------------------------------------ rounds
    async def _round(self, now: float) -> None:
        started = self._timer()
        decisions = self._auto.step(now)
        seconds = self._timer() - started
        # a decision the cluster did not take yet is retried, unless a newer one replaces it
        pending = list({**self._retry, **{d.job: d for d in decisions}}.values())
        self._retry.clear()
        # halts and scale-downs free GPUs before scale-ups and starts claim them
        frees = [d for d in pending if _frees(d)]
        claims = [d for d in pending if not _frees(d)]
        for phase in (frees, claims):
            await asyncio.gather(*(self._drive(d, now) for d in phase))
        allocations = self._auto.allocations
        self._observer.round_done(
            seconds,
            decisions,
            running=len(allocations),
            queued=len(self._auto.queued),
            gpus_allocated=sum(a.gpus for a in allocations.values()),
            capacity=self._auto.capacity,
        )

    async def _drive(self, decision: Decision, now: float) -> None:
        try:
            outcome = await self._actuator.apply(decision)
        except Exception as err:  # one job must not stop the loop: retry it next round
            _log.warning("decision.failed", job=decision.job, error=f"{type(err).__name__}: {err}")
            self._retry[decision.job] = decision
            return
        self._observer.applied(decision, outcome)
        _log.info(
            "decision.applied", job=decision.job, result=outcome.result, detail=outcome.detail
        )
        if outcome.result == "dropped":
            self._finish(decision.job, now, now)
        elif outcome.result == "pending":
            self._retry[decision.job] = decision
        elif self.ledger is not None:
            # GPUs are held from when the pods run again, not from when the round decided
            self.ledger.applied(decision, max(now, self._clock.now()))


def _frees(decision: Decision) -> bool:
    if isinstance(decision, Rescale):
        return decision.gpus < decision.gpus_from
    return isinstance(decision, Preempt | Reject)


def _created(seen: Arrived) -> str:
    created = seen.view.raw.get("metadata", {}).get("creationTimestamp")
    return str(created or "")
