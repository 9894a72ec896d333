"""What the controller learned, kept where the next leader finds it and no tenant can write.

The progress loop learns each job's speed, restart cost and statistical efficiency from its
reports (:class:`~bellows.service.learning.ProgressLearner`) and revises the job in the core
(:func:`revision`). :class:`Memory` keeps that learning across leaders: after each revision
it writes the job's learned state (:mod:`bellows.service.learned_state`) to a JetStream
key-value bucket of the controller's own (``nats.learnedBucket``, :class:`LearnedStore`), one
record per job, and deletes it when the job leaves. A new leader loads the bucket before it
rebuilds; as the rebuild takes each job, :meth:`Memory.recall` puts the job's state back into
the learner and hands the rebuild the same revision the last leader's core had, so the first
round decides from the same knowledge. The progress loop then goes on from there
(:meth:`Memory.recalled`), reading the reports since that revision again from its stream.

Trust (docs/security.md): only the controller's NATS user may read or write the bucket; a
tenant's NATS user may publish only its namespace's progress subjects, and nothing a tenant
writes on the cluster (annotations such as ``bellows.io/fit``, which Bellows writes for people
to read) is read back as learning. A record counts only for the object it was made for (its
uid): a job deleted and created again under the same name starts afresh. A record that does
not decode is logged and dropped, never trusted in part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import structlog
from nats.js import JetStreamContext

from bellows.bus.learned import KvLearnedStore
from bellows.bus.settings import NatsSettings
from bellows.bus.streams import ensure_learned_kv
from bellows.bus.transient import ride_out
from bellows.inputs import SpecError, brief
from bellows.jobs import JobSpec
from bellows.scaling import ClusterProfile, EfficiencyProfile, JobProfile
from bellows.scaling.online import Learned, OnlineFit
from bellows.service.fit_annotation import efficiency_fields
from bellows.service.learned_state import JobLearning, decode, encode
from bellows.service.learning import ProgressLearner
from bellows.service.progress_interfaces import Core

__all__ = ["LearnedStore", "Memory", "Revision", "open_memory", "revision", "revision_fields"]

_log = structlog.get_logger("bellows.progress")


class LearnedStore(Protocol):
    """Where records are kept: :class:`bellows.bus.learned.KvLearnedStore` (a bucket)."""

    async def load(self) -> Mapping[str, bytes]: ...

    async def save(self, job: str, record: bytes) -> None: ...

    async def delete(self, job: str) -> None: ...


@dataclass(frozen=True)
class Revision:
    """A job's spec as its learning revises it, and what the revision used."""

    spec: JobSpec
    fit: OnlineFit
    learned: Learned  # the fitted factors and measured restart: what ``moved`` compares
    efficiency: EfficiencyProfile | None  # learned or primed (Bellows mode), else None
    done: float | None  # the samples last reported (reference samples once efficient)
    since: float | None  # when, on the learner's clock


def revision(
    learner: ProgressLearner, job: str, prior: JobSpec, *, goodput: bool, gpu_type: str = "",
    current: JobSpec | None = None,
) -> Revision:  # fmt: skip
    """``prior`` (the job's spec before it reported) revised by what ``learner`` knows of
    ``job``: its refitted profile, its measured restart cost (unless its owner gave one),
    its efficiency when the core decides by goodput, and the samples it last reported.

    A job with sections per GPU type, running on ``gpu_type``, is refitted in that type's
    section (the learner keeps its step times per type), which is then measured, no longer
    imputed (issue 39); its other sections are ``current``'s (what the core has: learned
    where it ran before), else ``prior``'s. Without a type (a recall, or one type) the job
    is refitted against its own profile and its sections stand. Measured placements its
    reports refute are dropped (:meth:`ProgressLearner.refutes`): a new leader's recall
    keeps them out, as the core that revoked them did."""
    if learner.refutes(job, prior):  # its measured placements, off what it reported
        prior = dataclasses.replace(prior, placements=())
    section = next((t for t in prior.types if t.gpu_type == gpu_type), None) if gpu_type else None
    own = (prior.weights, prior.profile) if section is None else (section.weights, section.profile)
    fit = learner.fit(job, JobProfile(weights=own[0], step=own[1]))
    measured = learner.restart_s(job)
    efficiency = learner.efficiency(job, prior.batch_size) if goodput else None
    samples = learner.samples(job)
    done, since = (None, None) if samples is None else samples
    # a measured restart replaces the cluster's default; the owner's figure stays
    restart = prior.restart_s if prior.restart_s is not None else measured
    if section is None:
        spec = dataclasses.replace(
            prior, weights=fit.profile.effective_weights, profile=fit.profile.step,
            restart_s=restart,
        )  # fmt: skip
    else:
        learned = dataclasses.replace(
            section, profile=fit.profile.step, weights=fit.profile.effective_weights,
            imputed=section.imputed and fit.reports == 0,
        )  # fmt: skip
        kept = {t.gpu_type: t for t in (current or prior).types}
        types = tuple(learned if t is section else kept.get(t.gpu_type, t) for t in prior.types)
        spec = dataclasses.replace(prior, types=types, restart_s=restart)
    factors = Learned(fit.compute, fit.communication, measured)
    return Revision(spec, fit, factors, efficiency, done, since)


def revision_fields(revised: Revision) -> dict[str, object]:
    """What a revision used, as log fields (``job.revised``, ``job.recalled``)."""
    fit, learned = revised.fit, revised.learned
    return {
        "compute": round(fit.compute, 4),
        "communication": round(fit.communication, 4),
        "restart_s": learned.restart_s,
        "reports": fit.reports,
        "configurations": fit.configurations,
        **efficiency_fields(revised.efficiency),
    }


class Memory:
    """The learner and its records; see the module docstring.

    ``wall`` and ``clock`` turn the learner's clock readings into wall times and back (the
    service clock's :meth:`~bellows.service.clock.ServiceClock.wall` and ``at``)."""

    def __init__(
        self,
        learner: ProgressLearner,
        store: LearnedStore | None,
        *,
        wall: Callable[[float], datetime],
        clock: Callable[[datetime], float],
    ) -> None:
        self.learner = learner
        self._store = store
        self._wall = wall
        self._clock = clock
        self._records: dict[str, tuple[str, JobLearning]] = {}  # loaded: (uid, learning)
        self._recalled: dict[str, tuple[JobSpec, Revision]] = {}  # job: (prior, revision)
        self._stale: set[str] = set()  # records of an object gone, its name taken again

    async def load(self) -> int:
        """Read every record of the store (what the last leader kept); how many hold. A
        record that does not decode, or is filed under another job than it names, is
        logged and deleted."""
        if self._store is None:
            return 0
        for key, data in (await self._store.load()).items():
            try:
                job, uid, learning = decode(data, clock=self._clock)
                if job != key:
                    raise SpecError("job", job, f"the job the record is kept under ({key})")
            except SpecError as err:
                _log.warning("memory.record_invalid", job=key[:300], problem=str(err))
                await self._delete(key)
                continue
            self._records[key] = (uid, learning)
        _log.info("memory.loaded", records=len(self._records))
        return len(self._records)

    def recall(self, prior: JobSpec, uid: str, *, goodput: bool) -> Revision | None:
        """The revision the last leader's core had of the job ``prior`` names (the object
        ``uid``), its learning put back into the learner; ``None`` when none was kept for
        that object (a new job, or one deleted and created again)."""
        kept = self._records.pop(prior.name, None)
        if kept is None:
            return None
        if kept[0] != uid:
            _log.info("memory.record_of_another_object", job=prior.name)
            self._stale.add(prior.name)
            return None
        self.learner.restore(prior.name, kept[1])
        revised = revision(self.learner, prior.name, prior, goodput=goodput)
        self._recalled[prior.name] = (prior, revised)
        _log.info("job.recalled", job=prior.name, **revision_fields(revised))
        return revised

    def recalled(self) -> dict[str, tuple[JobSpec, Revision]]:
        """The jobs :meth:`recall` gave back, each with the prior its revision started from
        (the progress loop takes them over once)."""
        recalled, self._recalled = self._recalled, {}
        return recalled

    async def prune(self, core: Core) -> None:
        """Delete the records loaded and not recalled, except those of the jobs ``core``
        holds (running or queued): what was kept of jobs gone while no one led, and of
        objects whose name a new one took."""
        kept = {*core.allocations, *core.queued}
        for job in [j for j in self._records if j not in kept]:
            del self._records[job]
            await self._delete(job)
        stale, self._stale = self._stale, set()
        for job in sorted(stale):
            await self._delete(job)

    async def keep(self, job: str, uid: str | None) -> None:
        """Write what is learned of ``job`` now (after a revision); best effort: a failed
        write is logged, and the next revision writes again."""
        learning = self.learner.snapshot(job)
        if self._store is None or learning is None or uid is None:
            return
        record = encode(learning, job=job, uid=uid, wall=self._wall)
        try:
            await self._store.save(job, record)
        except Exception as err:  # NATS away a while: the next revision writes again
            _log.warning("memory.save_failed", job=job, error=brief(err))

    async def forget(self, job: str) -> None:
        """The job left: its record goes."""
        self._records.pop(job, None)
        await self._delete(job)

    async def _delete(self, job: str) -> None:
        if self._store is None:
            return
        try:
            await self._store.delete(job)
        except Exception as err:
            _log.warning("memory.delete_failed", job=job[:300], error=brief(err))


class _Clock(Protocol):
    def wall(self, reading: float) -> datetime: ...

    def at(self, when: datetime) -> float: ...


async def open_memory(
    js: JetStreamContext,
    settings: NatsSettings,
    cluster: ClusterProfile,
    stall_after_s: float,
    clock: _Clock,
) -> Memory:
    """A learner (on ``cluster``, flagging jobs silent past ``stall_after_s``) and its
    memory in the controller's bucket (``nats.learnedBucket``), loaded. A
    bucket that cannot be opened or read (the NATS user not allowed, the server away) is
    logged: the controller then learns afresh, as before there was one, and keeps nothing. A
    server that does not answer (a restart) is asked again for a minute first
    (:func:`bellows.bus.transient.ride_out`): what earlier leaders learned is worth the wait."""
    store: LearnedStore | None = None
    try:
        bucket = await ride_out(lambda: ensure_learned_kv(js, settings), what="memory.open")
        store = KvLearnedStore(bucket)
    except Exception as err:
        _log.warning("memory.unavailable", bucket=settings.learned_bucket, error=brief(err))
    learner = ProgressLearner(cluster, stall_after_s=stall_after_s)
    memory = Memory(learner, store, wall=clock.wall, clock=clock.at)
    try:
        await ride_out(memory.load, what="memory.load")
    except Exception as err:
        _log.warning("memory.load_failed", bucket=settings.learned_bucket, error=brief(err))
    return memory
