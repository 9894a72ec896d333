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

On a cluster of several GPU types (``typed``, Bellows mode), the default pool's core is a
:class:`~bellows.autoscaler.typed.TypedAutoscaler`: it gives each job its type and count,
its capacity is kept per type (:meth:`Pools.set_types`, from the capacity watch), and the
decisions carry the type the actuator pins the job to. A ClusterQueue whose GPU flavors
stand for two types or more (their ResourceFlavors' ``nodeLabels`` on the type label) is a
typed pool too, on each type's quota, but Kueue assigns its jobs' flavors: its core never
picks a type (``assigned``: a waiting job is expected where Kueue would admit it, the first
flavor in the queue's order with room), a job Kueue admitted elsewhere is moved in the core
to the type its pods run on (:meth:`~bellows.autoscaler.TypedAutoscaler.relocate`), and
Bellows writes such a job no type: it sizes it within the flavor Kueue admitted it to.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

import structlog

from bellows.autoscaler import (
    AnyAutoscaler,
    Autoscaler,
    AutoscalerConfig,
    Decision,
    Engines,
    Mode,
    TypedAutoscaler,
)
from bellows.bus import Event, Settled, event_key
from bellows.inputs import brief
from bellows.jobs import JobSpec
from bellows.kube import Actuator, JobReader, KubeApi
from bellows.kube.kueue import ClusterQueueView
from bellows.scaling import ClusterProfile, EfficiencyProfile
from bellows.scaling.gpu_types import TypedCluster
from bellows.scaling.placement_memory import ObservedStep, PlacementMemory
from bellows.service.controller import Controller, EventsNotTakenError
from bellows.service.memory import Memory
from bellows.service.observing import ControllerObserver
from bellows.service.pool_totals import Cores, Pool, PoolObserver, Totals
from bellows.service.queues import QueueChange, QueueIndex

__all__ = ["Cores", "Pools"]

_log = structlog.get_logger("bellows.pools")


def _types_of(controller: Controller) -> tuple[str, ...] | None:
    """The GPU types a pool's core decides over (``None``: one pool)."""
    core = controller.autoscaler
    return core.cluster.names if isinstance(core, TypedAutoscaler) else None


class Pools:
    """The controllers of every pool; see the module docstring.

    The keyword arguments are :class:`Controller`'s (shared by every pool), plus ``core``
    (the autoscaler's settings; a ClusterQueue's pool takes its ``backfill`` from the
    queue's strategy), ``cluster`` and ``capacity`` (the default pool's GPUs), and
    ``queues``: the :class:`QueueIndex` (``None``: Kueue cooperation off, one pool), and
    ``engines``: the optimizer's (:class:`~bellows.autoscaler.Engines`, its rent rule and the
    compile-ahead worker of whoever started it), shared by every pool's core. ``typed``: the
    cluster's GPU types (the module docstring; ``None``: one type), which the node label
    ``type_label`` names.
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
        typed: TypedCluster | None = None,
        type_label: str = "nvidia.com/gpu.product",
    ) -> None:
        self._api = api
        self._type_label = type_label  # the node label a flavor's nodeLabels type it by
        # several GPU types: the default pool's core decides (type, count) in Bellows mode
        self._typed = typed if typed is not None and core.mode is Mode.BELLOWS else None
        self._by_type: dict[str, int] = {}  # the nodes' GPUs per type, as last told
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
        self._totals = Totals(observer or ControllerObserver())
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
    def autoscaler(self) -> AnyAutoscaler | Cores:
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

    @property
    def typed(self) -> TypedCluster | None:
        """The GPU types the default pool decides over (``None``: one type)."""
        return self._typed

    def set_types(self, gpus: Mapping[str, int]) -> None:
        """The nodes' GPUs per type now (the capacity watch's ``on_types``, told before its
        total): a typed default pool takes them at the next :meth:`set_capacity`."""
        self._by_type = dict(gpus)

    async def set_capacity(self, gpus: int) -> None:
        """The nodes' GPUs changed: the default pool's capacity (see
        :meth:`Controller.set_capacity`; per type on several types, as :meth:`set_types`
        last said); a ClusterQueue's is its quota."""
        if self._typed is not None:
            await self._default.set_types(self._by_type)
        else:
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
        typed = self._typed_queue(view)
        if (
            entry is not None
            and entry[0].strategy == view.strategy
            and not entry[1].stale
            and _types_of(entry[1]) == (None if typed is None else typed[0].names)
        ):
            _, controller = entry
            if typed is not None:
                await controller.set_types(typed[1])
            elif controller.autoscaler.capacity != view.gpus:
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
        controller = self._controller(name, core, view.gpus, typed)
        _log.info("pools.built", pool=name, gpus=view.gpus, strategy=view.strategy,
                  types=None if typed is None else typed[1])  # fmt: skip
        await controller.rebuild()
        self._pools[name] = (view, controller)
        self._stale.discard(name)

    def _typed_queue(self, view: ClusterQueueView) -> tuple[TypedCluster, dict[str, int]] | None:
        """A ClusterQueue whose GPU flavors stand for two of the cluster's types or more
        (their ``nodeLabels`` on the type label): those types, and each one's quota summed
        over its flavors; ``None``: one pool (a flavor of no known type counts as none)."""
        if self._typed is None or self._queues is None:
            return None
        names = {t.product: t.name for t in self._typed.types if t.product}
        quotas: dict[str, int] = {}
        for product, quota in self._queues.flavor_gpus(view, self._type_label):
            kind = names.get(product) if product is not None else None
            if kind is not None:
                quotas[kind] = quotas.get(kind, 0) + quota
        if len(quotas) < 2:
            return None
        by_name = {t.name: t for t in self._typed.types}
        return TypedCluster(tuple(by_name[n] for n in quotas)), quotas  # the flavors' order

    def _controller(
        self,
        pool: Pool,
        core: AutoscalerConfig,
        capacity: int,
        typed: tuple[TypedCluster, dict[str, int]] | None = None,
    ) -> Controller:
        autoscaler: AnyAutoscaler
        if pool is None and self._typed is not None:
            autoscaler = TypedAutoscaler(core, cluster=self._typed, engines=self._engines)
            for name, gpus in self._by_type.items():  # a renewed pool: the GPUs as last told
                if name in self._typed.names:
                    autoscaler.set_capacity(gpus, self._now(), name)
        elif typed is not None and core.mode is Mode.BELLOWS:  # Kueue assigns the types
            cluster, quotas = typed
            autoscaler = TypedAutoscaler(
                core, cluster=cluster, engines=self._engines, assigned=True
            )
            for name, gpus in quotas.items():
                autoscaler.set_capacity(gpus, self._now(), name)
        else:
            autoscaler = Autoscaler(
                core,
                capacity=capacity,
                cluster=self._cluster,
                engines=self._engines,
                measured=self._placements,
            )
        return Controller(
            api=self._api,
            autoscaler=autoscaler,
            actuator=self._actuator,
            reader=self._reader,
            now=self._now,
            namespaces=self._namespaces,
            wall_to_clock=self._wall_to_clock,
            observer=PoolObserver(self._totals, pool),
            timer=self._timer,
            pool=pool,
            queues=self._queues,
            memory=self._memory,
        )
