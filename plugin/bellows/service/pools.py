"""One optimizer round per pool: the default pool and, beside Kueue, one per ClusterQueue.

:class:`Pools` holds one :class:`~bellows.service.controller.Controller` (with its own
:class:`~bellows.autoscaler.Autoscaler`) per pool and offers the runner and the progress
loop what they used of the one controller before:

* the **default pool** takes the jobs without a queue name, on today's capacity (the
  configured GPUs, or the nodes' through :meth:`Pools.set_capacity`);
* each **ClusterQueue** is a pool on its GPU ``nominalQuota`` summed over its flavors (never
  what a cohort lends: a lender may reclaim it at any time), admitting in the order of its
  ``queueingStrategy``: ``BestEffortFIFO`` backfills, ``StrictFIFO`` does not.

Every event goes to every pool's controller; each takes only its own jobs
(:meth:`QueueIndex.pool_of <bellows.service.queues.QueueIndex.pool_of>`), and the default
pool's reports once a job whose queue cannot be resolved (Event ``QueueUnknown``, gauge
``bellows_jobs_skipped{reason="queue-unknown"}``) and leaves it alone. The pools follow the
:class:`~bellows.service.queues.QueueIndex`: a ClusterQueue created adds a pool (rebuilt
from the cluster), one deleted or malformed drops its pool, a quota changed calls that
pool's ``set_capacity``, a strategy changed rebuilds the pool, a LocalQueue that now points
at a ClusterQueue (or one deleted) rebuilds that pool (jobs that arrived before their queue
are taken, jobs whose queue went are let go; a pool a job left is renewed). A change that
could not be applied (API errors) is retried by :meth:`Pools.keep_house`.

With Kueue cooperation off there is no index and one pool, the default: the same code path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

import structlog

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Decision, Engines
from bellows.bus import Event, Settled, event_key
from bellows.inputs import brief
from bellows.jobs import Allocation, JobSpec
from bellows.kube import Actuator, JobReader, KubeApi, Outcome
from bellows.kube.kueue import ClusterQueueView
from bellows.scaling import ClusterProfile, EfficiencyProfile
from bellows.scaling.placement_memory import ObservedStep, PlacementMemory
from bellows.service.controller import Controller, EventsNotTakenError
from bellows.service.memory import Memory
from bellows.service.observing import ControllerObserver
from bellows.service.queues import QueueChange, QueueIndex

__all__ = ["Cores", "Pools"]

_log = structlog.get_logger("bellows.pools")

Pool = str | None  # a ClusterQueue's name; None: the default pool


class _Totals:
    """Adds up what each pool's controller reports, for the one cluster-wide observer."""

    def __init__(self, observer: ControllerObserver) -> None:
        self.observer = observer
        self._rounds: dict[Pool, tuple[int, int, int, int]] = {}
        self._invalid: dict[Pool, int] = {}
        self._skipped: dict[tuple[Pool, str], int] = {}

    def round_done(
        self, pool: Pool, seconds: float, decisions: Sequence[Decision], state: tuple[int, ...]
    ) -> None:
        running, queued, allocated, capacity = state
        self._rounds[pool] = (running, queued, allocated, capacity)
        totals = [sum(row[i] for row in self._rounds.values()) for i in range(4)]
        self.observer.round_done(
            seconds,
            decisions,
            running=totals[0],
            queued=totals[1],
            gpus_allocated=totals[2],
            capacity=totals[3],
        )

    def invalid(self, pool: Pool, count: int) -> None:
        self._invalid[pool] = count
        self.observer.invalid_jobs(sum(self._invalid.values()))

    def skipped(self, pool: Pool, reason: str, count: int) -> None:
        self._skipped[pool, reason] = count
        total = sum(n for (_, r), n in self._skipped.items() if r == reason)
        self.observer.skipped_jobs(reason, total)

    def drop(self, pool: Pool) -> None:
        """A pool is gone: its jobs no longer count."""
        self._rounds.pop(pool, None)
        if self._invalid.pop(pool, None):
            self.observer.invalid_jobs(sum(self._invalid.values()))
        for key in [k for k in self._skipped if k[0] == pool]:
            if self._skipped.pop(key):
                reason = key[1]
                total = sum(n for (_, r), n in self._skipped.items() if r == reason)
                self.observer.skipped_jobs(reason, total)


class _PoolObserver(ControllerObserver):
    def __init__(self, totals: _Totals, pool: Pool) -> None:
        self._totals = totals
        self._pool = pool

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
        state = (running, queued, gpus_allocated, capacity)
        self._totals.round_done(self._pool, seconds, decisions, state)

    def applied(self, decision: Decision, outcome: Outcome) -> None:
        self._totals.observer.applied(decision, outcome)

    def invalid_jobs(self, count: int) -> None:
        self._totals.invalid(self._pool, count)

    def skipped_jobs(self, reason: str, count: int) -> None:
        self._totals.skipped(self._pool, reason, count)

    def started(self, step: str, seconds: float) -> None:
        self._totals.observer.started(step, seconds)

    def arrived(self, spec: JobSpec, at: float) -> None:
        self._totals.observer.arrived(spec, at)

    def took_effect(self, decision: Decision, at: float) -> None:
        self._totals.observer.took_effect(decision, at)

    def finished(self, job: str, at: float) -> None:
        self._totals.observer.finished(job, at)

    def kueue_admitted_first(self, job: str) -> None:
        self._totals.observer.kueue_admitted_first(job)


class Cores:
    """The pools' cores read as one (what the progress loop reads: each job is in one)."""

    def __init__(self, controllers: Callable[[], Sequence[Controller]]) -> None:
        self._controllers = controllers

    @property
    def allocations(self) -> Mapping[str, Allocation]:
        out: dict[str, Allocation] = {}
        for controller in self._controllers():
            out.update(controller.autoscaler.allocations)
        return out

    @property
    def queued(self) -> tuple[str, ...]:
        return tuple(n for c in self._controllers() for n in c.autoscaler.queued)

    def _core(self, name: str) -> Autoscaler:
        for controller in self._controllers():
            core = controller.autoscaler
            if name in core.allocations or name in core.queued:
                return core
        raise KeyError(name)

    def job(self, name: str) -> JobSpec:
        return self._core(name).job(name)

    def estimated_done(self, name: str, now: float) -> float:
        return self._core(name).estimated_done(name, now)

    @property
    def goodput(self) -> bool:
        """Whether the pools decide jobs by goodput (they share the controller's mode)."""
        return all(c.autoscaler.goodput for c in self._controllers())

    def charged(self, name: str) -> EfficiencyProfile | None:
        return self._core(name).charged(name)


class Pools:
    """The controllers of every pool; see the module docstring.

    The keyword arguments are :class:`Controller`'s (shared by every pool), plus ``core``
    (the autoscaler's settings; a ClusterQueue's pool takes its ``backfill`` from the
    queue's strategy), ``cluster`` and ``capacity`` (the default pool's GPUs), and
    ``queues``: the :class:`QueueIndex` (``None``: Kueue cooperation off, one pool), and
    ``engines``: the optimizer's (:class:`~bellows.autoscaler.Engines`, its rent rule and the
    compile-ahead worker of whoever started it), shared by every pool's core.
    """

    def __init__(
        self,
        *,
        api: KubeApi,
        core: AutoscalerConfig,
        cluster: ClusterProfile,
        capacity: int,
        actuator: Actuator,
        reader: JobReader,
        now: Callable[[], float],
        wall_to_clock: Callable[[datetime], float],
        namespaces: Sequence[str | None] = (None,),
        observer: ControllerObserver | None = None,
        timer: Callable[[], float] | None = None,
        queues: QueueIndex | None = None,
        engines: Engines | None = None,
        memory: Memory | None = None,
        placements: PlacementMemory | None = None,
    ) -> None:
        self._api = api
        self._placements = placements  # what jobs measured, per class: every pool's cores'
        self._memory = memory  # what the last leader learned, recalled as pools rebuild
        self._engines = Engines() if engines is None else engines  # shared by every pool
        self._core = core
        self._cluster = cluster
        self._actuator = actuator
        self._reader = reader
        self._now = now
        self._wall_to_clock = wall_to_clock
        self._namespaces = tuple(namespaces)
        self._timer = timer
        self._queues = queues
        self._totals = _Totals(observer or ControllerObserver())
        self._default = self._controller(None, core, capacity)
        self._pools: dict[str, tuple[ClusterQueueView, Controller]] = {}
        self._stale: set[str] = set()  # pools to rebuild: their LocalQueues changed
        self._dirty = False  # the index changed since the pools last followed it
        self._lock = asyncio.Lock()  # one window, round, retry or change of pools at a time
        self._cores = Cores(lambda: self.controllers)
        if queues is not None:
            queues.subscribe(self._queue_changed)

    # ------------------------------------------------------------------ what the pools are
    @property
    def default(self) -> Controller:
        """The default pool's controller (jobs without a queue name)."""
        return self._default

    @property
    def controllers(self) -> tuple[Controller, ...]:
        """Every pool's controller, the default pool's first."""
        return (self._default, *(c for _, c in self._pools.values()))

    @property
    def queues(self) -> QueueIndex | None:
        """The index the pools follow (``None``: Kueue cooperation off)."""
        return self._queues

    @property
    def names(self) -> tuple[str | None, ...]:
        """The pools: ``None`` (the default) and the ClusterQueues', by name."""
        return (None, *sorted(self._pools))

    def controller(self, pool: str | None) -> Controller | None:
        """The controller of ``pool`` (``None``: the default), or ``None`` when no such pool."""
        if pool is None:
            return self._default
        entry = self._pools.get(pool)
        return None if entry is None else entry[1]

    @property
    def autoscaler(self) -> Autoscaler | Cores:
        """The core (one pool) or the pools' cores read as one."""
        return self._default.autoscaler if not self._pools else self._cores

    @property
    def pending(self) -> tuple[Decision, ...]:
        """Decisions the cluster has not taken yet, in every pool."""
        return tuple(d for c in self.controllers for d in c.pending)

    @property
    def held(self) -> dict[str, int]:
        """The upper bound of GPUs each job may hold on the cluster, in every pool (a copy)."""
        out: dict[str, int] = {}
        for controller in self.controllers:
            out.update(controller.held)
        return out

    # ------------------------------------------------------------------ start-up
    async def rebuild(self) -> None:
        """Read Kueue's queues (if cooperating), then rebuild every pool from the cluster:
        the default pool first, then one per readable ClusterQueue. API errors propagate
        (the caller starts over)."""
        if self._queues is not None and not self._queues.synced:
            await self._queues.sync()
        async with self._lock:
            await self._default.rebuild()
            await self._follow(strict=True)

    # ------------------------------------------------------------------ the pump's callbacks
    async def apply(self, events: tuple[Event, ...]) -> Settled | None:
        """Every pool takes the fetch's facts (each its own jobs) and runs its step.

        Returns, while some pool has a round due, the check that says when each such pool
        has run it (or is gone: renewed or dropped). The events some pool could not read
        come back in one :class:`EventsNotTakenError`.
        """
        async with self._lock:
            controllers = self.controllers
            results = await asyncio.gather(
                *(c.apply(events) for c in controllers), return_exceptions=True
            )
        failures: dict[object, tuple[Event, BaseException]] = {}
        unexpected: BaseException | None = None
        for result in results:
            if isinstance(result, EventsNotTakenError):
                for event, err in result.failures:
                    failures.setdefault(event_key(event), (event, err))
            elif isinstance(result, BaseException) and unexpected is None:
                unexpected = result
        if unexpected is not None:
            raise unexpected
        if failures:
            raise EventsNotTakenError(list(failures.values()))
        waiting = [(c, r) for c, r in zip(controllers, results, strict=True) if callable(r)]
        if not waiting:
            return None
        return lambda: all(r() or c not in self.controllers for c, r in waiting)

    async def retry_pending(self) -> None:
        """Drive the decisions the cluster has not taken yet, in every pool (no new round)."""
        async with self._lock:
            for controller in self.controllers:
                if controller.pending:
                    await controller.retry_pending()

    async def tick(self) -> bool:
        """Run each pool's step that is due by now; whether any ran."""
        async with self._lock:
            ran = False
            for controller in self.controllers:
                ran = await controller.tick() or ran
            return ran

    async def keep_house(
        self, stop: asyncio.Event, *, retry_s: float = 1.0, speedup: float = 1.0
    ) -> None:
        """Until ``stop``: what :meth:`Controller.keep_house` does, for every pool, and
        apply the changes of Kueue's queues that could not be applied when they came."""
        while not stop.is_set():
            wait = retry_s
            dues = [d for c in self.controllers if (d := c.autoscaler.next_round_at()) is not None]
            if dues:
                wait = min(wait, max(0.0, min(dues) - self._now()) / speedup)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
            if stop.is_set():
                return
            try:
                if self._dirty or any(c.stale for c in self.controllers):
                    await self.follow_queues()
                await self.tick()
                if self.pending:
                    await self.retry_pending()
            except Exception as err:  # the next attempt comes in retry_s
                _log.warning("pools.housekeeping_failed", error=brief(err))

    async def revise(
        self,
        spec: JobSpec,
        *,
        done: float | None,
        since: float | None,
        efficiency: EfficiencyProfile | None = None,
    ) -> bool:
        """Revise ``spec`` in the pool that holds the job (see :meth:`Controller.revise`)."""
        for controller in self.controllers:
            core = controller.autoscaler
            if spec.name in core.allocations or spec.name in core.queued:
                return await controller.revise(spec, done=done, since=since, efficiency=efficiency)
        return False

    async def notify(self, job: str, reason: str, message: str) -> None:
        """A warning Event on ``job`` (best effort, nothing else written)."""
        await self._default.notify(job, reason, message)

    async def observe_step(self, job: str, step: ObservedStep) -> bool:
        """A step ``job`` measured, in the pool that holds it (one placement memory
        serves every pool: the GPUs are the cluster's)."""
        for controller in self.controllers:
            if job in controller.autoscaler.allocations:
                return await controller.observe_step(job, step)
        return False

    def uid(self, job: str) -> str | None:
        """The uid of the object ``job`` is, in the pool that holds it."""
        for controller in self.controllers:
            if (uid := controller.uid(job)) is not None:
                return uid
        return None

    async def set_capacity(self, gpus: int) -> None:
        """The nodes' GPUs changed: the default pool's capacity (see
        :meth:`Controller.set_capacity`); a ClusterQueue's is its quota."""
        await self._default.set_capacity(gpus)

    # ------------------------------------------------------------------ following the queues
    async def follow_queues(self) -> None:
        """Make the pools what the index says now (API errors propagate; retried later)."""
        async with self._lock:
            await self._follow(strict=False)

    async def _queue_changed(self, change: QueueChange) -> None:
        """The index's listener: never raises (what fails is retried by keep_house)."""
        if change.routed:
            self._stale.add(change.cluster_queue)
        self._dirty = True
        try:
            await self.follow_queues()
        except Exception as err:
            _log.warning("pools.follow_failed", error=brief(err), change=change.cluster_queue)

    async def _follow(self, *, strict: bool) -> None:
        """Add, drop, resize or rebuild pools to match the index (lock held). With
        ``strict`` the first failure propagates; otherwise the others go on and the failed
        ones stay due."""
        if self._queues is None:
            return
        self._dirty = False
        if self._default.stale:  # a job left the default pool: a fresh core, same GPUs
            _log.info("pools.renewed", pool=None)
            self._totals.drop(None)
            default = self._controller(None, self._core, self._default.autoscaler.capacity)
            await default.rebuild()
            self._default = default
        wanted = self._queues.cluster_queues
        for name in [n for n in self._pools if n not in wanted]:
            _log.info("pools.dropped", pool=name)
            self._pools.pop(name)
            self._stale.discard(name)
            self._totals.drop(name)
        failed: BaseException | None = None
        for name, view in sorted(wanted.items()):
            try:
                await self._follow_one(name, view)
            except Exception as err:
                if strict:
                    raise
                _log.warning("pools.change_failed", pool=name, error=brief(err))
                self._dirty = True
                failed = failed or err
        if not strict:  # queues came or changed: jobs left alone for theirs may resolve now
            await self._default.rescope()
        if failed is not None:
            raise failed

    async def _follow_one(self, name: str, view: ClusterQueueView) -> None:
        entry = self._pools.get(name)
        if entry is not None and entry[0].strategy == view.strategy and not entry[1].stale:
            _, controller = entry
            if controller.autoscaler.capacity != view.gpus:
                await controller.set_capacity(view.gpus)
            self._pools[name] = (view, controller)
            if name in self._stale:  # its LocalQueues changed: take or let go their jobs
                await controller.rebuild()
                self._stale.discard(name)
            if not controller.stale:
                return
        # a new pool, a new admission order, or a job that left it (its core would not take
        # it back): a core of its own, rebuilt from the cluster
        if name in self._pools:
            self._pools.pop(name)
            self._totals.drop(name)
        core = replace(self._core, backfill=view.backfill)
        controller = self._controller(name, core, view.gpus)
        _log.info("pools.built", pool=name, gpus=view.gpus, strategy=view.strategy)
        await controller.rebuild()
        self._pools[name] = (view, controller)
        self._stale.discard(name)

    def _controller(self, pool: Pool, core: AutoscalerConfig, capacity: int) -> Controller:
        return Controller(
            api=self._api,
            autoscaler=Autoscaler(
                core,
                capacity=capacity,
                cluster=self._cluster,
                engines=self._engines,
                measured=self._placements,
            ),
            actuator=self._actuator,
            reader=self._reader,
            now=self._now,
            namespaces=self._namespaces,
            wall_to_clock=self._wall_to_clock,
            observer=_PoolObserver(self._totals, pool),
            timer=self._timer,
            pool=pool,
            queues=self._queues,
            memory=self._memory,
        )
