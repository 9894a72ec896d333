"""A controller's intake: each job event read against the cluster, and the job fed to the core.

The cluster is the source of truth: an event only says where to look. An arrival is read
(:meth:`JobReader.examine <bellows.kube.JobReader.examine>`), checked against the pool's
scope, sized for the cluster, and then queued, held, or adopted at the size it runs at; a
completion frees the job's GPUs only once the cluster shows it finished (or gone).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import structlog

from bellows.autoscaler import Start, TypedAutoscaler
from bellows.bus import Event, JobArrived, JobCompleted
from bellows.inputs import SpecError
from bellows.jobs import Allocation, JobSpec, TypeSection, fit_to_cluster, is_feasible
from bellows.kube import (
    Arrived,
    Deleted,
    Finished,
    Invalid,
    Observation,
    Skipped,
    keys,
    kind_named,
)
from bellows.kube.journal import Journal, Phase
from bellows.kube.kinds import KindAdapter, finished_state, running_since
from bellows.kube.readback import checked_journal
from bellows.service.memory import Revision
from bellows.service.parts import Part, Parts
from bellows.service.scoping import Scope, object_key
from bellows.service.settling import Settler

__all__ = ["Intake"]

_log = structlog.get_logger("bellows.controller")


class Intake(Part):
    """Takes one controller's events and the jobs they name; see the module docstring."""

    def __init__(
        self,
        parts: Parts,
        *,
        scope: Scope,
        settler: Settler,
        wall_to_clock: Callable[[datetime], float],
    ) -> None:
        super().__init__(parts)
        self._scope = scope
        self._settler = settler
        self._at = wall_to_clock

    async def take(self, event: Event, now: float) -> None:
        """Take one event (API errors propagate: the event comes back later)."""
        ref = event.job
        if not self._scope.covers(ref):
            # a forged or misrouted event: never read, let alone touch, a job out of scope
            _log.warning("event.out_of_scope", job=ref.key, namespaces=self._scope.namespaces)
            return
        kind = kind_named(ref.kind)
        if isinstance(event, JobCompleted) and ref.key not in self._roster.active:
            self._reports.set_invalid(ref.key, False)
            self._reports.unskip(ref.key)
            return  # never arrived here, or already finished: nothing to free
        obj = await self._api.get_job(kind, ref.namespace, ref.name)
        if isinstance(event, JobCompleted):
            await self._complete(event, obj, now)
            return
        assert isinstance(event, JobArrived)
        if obj is None or obj["metadata"].get("uid") != ref.uid:
            _log.info("event.stale", job=ref.key, reason="job gone or recreated")
            return
        await self._arrive(kind, obj, now, arrived_at=self._at(event.time))

    async def _arrive(
        self, kind: KindAdapter, obj: Mapping[str, Any], now: float, *, arrived_at: float
    ) -> None:
        """Take the job ``obj`` as it is now. Under the name of a job the core has, it is
        that job (the same uid, or a copy this controller's resizes made of it), or else a
        new job: the one the core has is gone (deleted, and another submitted under its
        name), so it is finished first, and this one starts like any new job."""
        meta = obj["metadata"]
        key, uid = object_key(kind, obj), str(meta.get("uid", ""))
        known = self._roster.uids.get(key)
        if known is not None and known != uid:
            if self._actuator.descends(uid, known):
                self._roster.uids[key] = uid  # its copy: the same job
            else:
                _log.info("job.replaced", job=key, uid=uid, was=known)
                self._roster.finish(key, now, now)
        if not await self._scope.takes(kind, obj, now):
            return
        seen = await self._reader.examine(kind, obj)
        await self._observe(seen, now, arrived_at=arrived_at)

    async def _complete(
        self, event: JobCompleted, obj: Mapping[str, Any] | None, now: float
    ) -> None:
        """Free a job's GPUs once the cluster shows it finished or gone. The completion is of
        the object ``event.job.uid``: of an older copy of the job the core has (a resize
        re-created it since), or of another object than the core's, it changes nothing.
        What a job says of itself (``bellows.io/recreated-from``) decides nothing: only the
        copies this controller created are known as copies."""
        ref, uid = event.job, event.job.uid
        known = self._roster.uids.get(ref.key, uid)
        if known != uid and not self._actuator.descends(uid, known):
            _log.info("event.stale", job=ref.key, reason="not the job the core has", uid=uid)
            return
        current = None if obj is None else str(obj["metadata"].get("uid", ""))
        if current is not None and current != uid and self._actuator.descends(current, uid):
            self._roster.uids[ref.key] = current  # re-created by its resize: the same job
            _log.info("event.stale", job=ref.key, reason="re-created by its resize")
            return
        if obj is None or finished_state(obj):
            # a TrainJob gone may be between its resize's delete and create (the create
            # failed): its record creates it now; one finished may have left a record
            # behind (finished before the delete), which goes
            outcome = await self._actuator.finish_recreation(ref.key)
            if outcome is not None and outcome.result == "invalid":  # its record: refused
                self._observer.job_set_aside("record")
            if obj is None and outcome is not None and outcome.result not in ("dropped", "invalid"):
                _log.info("event.stale", job=ref.key, reason="re-created from its record")
                return
        if current is not None and current == uid and finished_state(obj or {}) is None:
            # the cluster is the truth: a completion it does not show frees no GPUs yet
            _log.warning("event.premature", job=ref.key, reason="the job has not finished")
            return
        self._roster.finish(ref.key, now, self._at(event.time))
        if obj is not None and current != uid:  # another job now has the name: a new one
            await self._arrive(kind_named(ref.kind), obj, now, arrived_at=now)

    async def _observe(self, seen: Observation | None, now: float, *, arrived_at: float) -> None:
        if seen is None:
            return  # not opted in: never touched
        if isinstance(seen, Invalid):
            await self._reports.report(seen)
        elif isinstance(seen, Skipped):
            await self._reports.skip(seen)
        elif isinstance(seen, Finished | Deleted):
            self._roster.finish(seen.job, now, now)
        elif (seen := await self.fit(seen)) is None:
            return
        elif seen.running is not None and (typed := self.typed_of(seen)) is not None:
            done, since = self.progress(seen, now)
            self.charge(seen)
            if self.adopt(seen, seen.running, now, done=done, since=since, gpu_type=typed):
                self._roster.held[seen.spec.name] = seen.running.gpus
                self._roster.known(seen.spec.name, seen.view.uid)
                self._observer.arrived(seen.spec, arrived_at)
        elif Journal.read(seen.view.annotations).phase is not Phase.REJECTED:
            await self.admit(seen, now, arrived_at=arrived_at)

    def typed_of(self, seen: Arrived) -> str | None:
        """The GPU type job ``seen`` runs on, for a core of several types to adopt it there
        (:meth:`Actuator.gpu_type_of`; ``""`` on one type), or ``None`` when that is not
        known, or the job does not fit there: it is then queued (held, and sized afresh on
        a type the core picks)."""
        auto = self._auto
        if not isinstance(auto, TypedAutoscaler):
            return ""
        gpu_type = self._actuator.gpu_type_of(seen.view)
        on = None if gpu_type is None else seen.spec.on(gpu_type)
        if gpu_type is None or gpu_type not in auto.cluster.names or on is None:
            _log.info("job.type_unknown", job=seen.spec.name, gpu_type=gpu_type)
            return None
        return gpu_type

    def adopt(
        self,
        seen: Arrived,
        running: Allocation,
        now: float,
        *,
        done: float = 0.0,
        since: float | None = None,
        gpu_type: str = "",
    ) -> bool:
        """The core takes ``seen`` running at ``running`` (on ``gpu_type``: a core of
        several types, :meth:`typed_of`)."""
        auto = self._auto
        if isinstance(auto, TypedAutoscaler):
            return auto.adopt(seen.spec, running, now, done=done, since=since, gpu_type=gpu_type)
        return auto.adopt(seen.spec, running, now, done=done, since=since)

    async def admit(
        self, seen: Arrived, now: float, *, arrived_at: float, quiet: bool = False
    ) -> None:
        """Queue a waiting job in the core (held on the cluster if it is not suspended).
        ``quiet``: its ``job.arrived`` line at debug (a rebuild queues thousands at once and
        says how many in one line: 10 000 lines cost its takeover 0.7 s of CPU)."""
        # a Kueue job is held even when suspended: its Workload is deactivated, so that
        # Kueue does not admit (and resume) it before Bellows has sized it
        kueue = seen.view.queue is not None and seen.spec.name not in self._roster.active
        if kueue and not seen.view.suspended:
            self._observer.kueue_admitted_first(seen.spec.name)
            if await self._take_admitted(seen, now, arrived_at):
                return
        if (not seen.view.suspended or kueue) and seen.spec.name not in self._auto.allocations:
            outcome = await self._actuator.hold(seen.spec.name)
            _log.info("job.held", job=seen.spec.name, result=outcome.result)
        self.charge(seen)
        if self._auto.arrive(seen.spec, now):
            self._roster.known(seen.spec.name, seen.view.uid)
            (_log.debug if quiet else _log.info)("job.arrived", job=seen.spec.name)
            self._observer.arrived(seen.spec, arrived_at)

    def charge(self, seen: Arrived) -> None:
        """Decide a job whose profile states its efficiency by goodput from its first round
        (Bellows mode; docs/jsa.md), before the core takes it: a job the core has already
        keeps what it is decided by (its prior, or what its reports taught)."""
        if seen.efficiency is None:
            return
        try:
            self._auto.job(seen.spec.name)
        except KeyError:
            self._auto.charge(seen.spec.name, seen.efficiency)

    def recalled(self, seen: Arrived) -> tuple[Arrived, Revision | None]:
        """``seen`` as an earlier leader's learning revised it (its profile refitted, its
        restart measured, its efficiency learned: :class:`~bellows.service.memory.Memory`),
        and that revision; ``seen`` itself when nothing was kept of this object."""
        if self._memory is None:
            return seen, None
        revised = self._memory.recall(seen.spec, seen.view.uid, goodput=self._auto.goodput)
        if revised is None:
            return seen, None
        efficiency = seen.efficiency if revised.efficiency is None else revised.efficiency
        return dataclasses.replace(seen, spec=revised.spec, efficiency=efficiency), revised

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
        self.charge(seen)
        typed = self.typed_of(seen)
        if typed is None or not self.adopt(seen, running, now, gpu_type=typed):
            return False
        self._roster.known(spec.name, seen.view.uid)
        self._roster.held[spec.name] = gpus
        _log.info("job.taken_as_admitted", job=spec.name, gpus=gpus, batch=batch)
        self._observer.arrived(spec, arrived_at)
        await self._settler.drive(Start(spec.name, gpus, batch), now)  # journals it; no restart
        return True

    async def fit(self, seen: Arrived) -> Arrived | None:
        """The job sized for this cluster: a ``max-gpus`` above the cluster's GPUs (the most
        it has had since this controller started, so that a node down at the job's arrival
        does not shrink it for good) is clamped to them, and an Event says so; ``None`` (the
        job reported) when it cannot run on the cluster."""
        seen = self._on_owners_type(seen)
        name, capacity = seen.spec.name, self._roster.widest
        try:
            spec = fit_to_cluster(seen.spec, capacity)
        except SpecError as err:
            await self._reports.report(Invalid(name, f"{err} (bellows.io/max-gpus)"))
            return None
        self._reports.set_invalid(name, False)
        capped = await self._cap_min_runtime(spec)
        if capped is seen.spec:
            return await self._trusted(seen)
        if spec is not seen.spec and name not in self._roster.active:
            pool = self._roster.pool
            where = "the cluster's" if pool is None else f"ClusterQueue {pool}'s"
            message = (
                f"bellows.io/max-gpus={seen.spec.k_max} is more than {where} {capacity} "
                f"GPUs; Bellows gives the job at most {spec.k_max}"
            )
            await self._actuator.notify(name, "Clamped", message, warning=True)
            _log.info("job.clamped", job=name, k_max=seen.spec.k_max, to=spec.k_max)
        return await self._trusted(dataclasses.replace(seen, spec=capped))

    def _on_owners_type(self, seen: Arrived) -> Arrived:
        """On a core of several GPU types, a job whose pod templates require a type of
        their own (its owner's node selector on the type label: :meth:`Actuator.owner_type`)
        is decided on that type only: its section there, or its own profile where it has
        none. The owner's selector stands; Bellows does not write another."""
        auto = self._auto
        if not isinstance(auto, TypedAutoscaler):
            return seen
        owners = self._actuator.owner_type(seen.view)
        if owners is None or owners not in auto.cluster.names:
            return seen
        spec = seen.spec
        section = spec.section(owners) or TypeSection(owners, spec.profile, spec.weights,
                                                      spec.m_max)  # fmt: skip
        return dataclasses.replace(seen, spec=dataclasses.replace(spec, types=(section,)))

    async def _cap_min_runtime(self, spec: JobSpec) -> JobSpec:
        """``spec`` with its own minimum runtime (``bellows.io/min-runtime-seconds``) no
        longer than the admin's cap (``controller.maxMinRuntimeSeconds``): a tenant's job
        must not keep its GPUs from every other for a day. A Warning Event ``Clamped`` says
        so as the job arrives (not again at each rebuild). ``spec`` itself when within."""
        most, own = self._auto.config.max_min_runtime_s, spec.min_runtime_s
        if own is None or own <= most:
            return spec
        if spec.name not in self._roster.active:
            message = (
                f"bellows.io/min-runtime-seconds={own:g} is more than the cluster's cap of "
                f"{most:g} s (controller.maxMinRuntimeSeconds); rounds may shrink the job "
                f"{most:g} s after each start or resume"
            )
            await self._actuator.notify(spec.name, "Clamped", message, warning=True)
            _log.info("job.clamped", job=spec.name, min_runtime_s=own, to=most)
        return dataclasses.replace(spec, min_runtime_s=most)

    def journal(self, seen: Arrived) -> Journal:
        """The journal on the job, every value its (fitted) settings, its replicas or the
        cluster's GPUs rule out read as absent (:mod:`bellows.kube.readback`)."""
        journal = Journal.read(seen.view.annotations)
        return checked_journal(journal, seen.spec, seen.view, capacity=self._roster.widest)[0]

    async def _trusted(self, seen: Arrived) -> Arrived:
        """``seen`` with a running allocation only where its journal holds up against the
        fitted settings and the cluster's GPUs; each value that does not is said on the job
        (a Warning Event) and counted, once per value."""
        journal = Journal.read(seen.view.annotations)
        _, distrusted = checked_journal(journal, seen.spec, seen.view, capacity=self._roster.widest)
        found = {*seen.distrusted, *distrusted}
        if not found:
            return seen
        await self._reports.distrust(seen.spec.name, sorted(found, key=lambda d: d.key))
        if any(d.key == keys.ALLOCATION for d in found):
            seen = dataclasses.replace(seen, running=None)
        return seen

    def progress(self, seen: Arrived, now: float) -> tuple[float, float | None]:
        """What the journal and the cluster know of a running job's progress: the samples it
        had done when it last resumed, and when that was (on this clock). Without a journal
        entry (a job Bellows started before it kept one), the cluster's ``Running``
        condition says since when it runs, with the samples before unknown (0)."""
        journal = Journal.read(seen.view.annotations)
        samples, at = journal.progress or (0.0, running_since(seen.view.raw))
        return samples, None if at is None else min(self._at(at), now)
