"""Reading the cluster: opted-in jobs as validated ``JobSpec``s, or the reason they are not.

:class:`JobReader` lists and then watches every job kind, and turns each change into an
:class:`Observation`: a job arrived (with its spec and, for a job Bellows already runs,
the allocation its journal records, so a restarted controller rebuilds its state), a job
finished or was deleted, or a job's settings are wrong (the actuator reports those to the
owner; a job in a Kueue queue is refused so while Kueue cooperation is off), or another
controller runs the job (``spec.runPolicy.managedBy``: skipped, never
written to). A job without ``bellows.io/`` annotations yields nothing: its metadata is the only
part read. A watch that expires (410) is answered by listing again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from bellows.inputs import DATA_ERRORS, brief
from bellows.jobs import Allocation, JobSpec, SpecError
from bellows.kube import keys
from bellows.kube.adapters import KINDS
from bellows.kube.client import ExpiredError, KubeApi
from bellows.kube.examining import LeftAlone, opted_job
from bellows.kube.journal import Journal, Phase
from bellows.kube.kinds import JobView, KindAdapter
from bellows.kube.readback import Distrusted, checked_journal
from bellows.kube.specs import build_spec
from bellows.refs import job_key
from bellows.scaling import EfficiencyProfile, JobProfile

__all__ = ["Arrived", "Deleted", "Finished", "Invalid", "JobReader", "Observation", "Skipped"]

_log = structlog.get_logger("bellows.reader")

MANAGED_BY = "managed-by"  # Skipped.reason of a job spec.runPolicy.managedBy gives away


@dataclass(frozen=True)
class Arrived:
    """An opted-in job with valid settings (seen for the first time, or with a new spec).

    ``running`` is the allocation the journal says the job runs with (``None`` for a job
    Bellows has not started, or has suspended again, or whose journal's allocation its
    settings or replicas rule out: ``distrusted`` says which).
    """

    spec: JobSpec
    view: JobView
    running: Allocation | None
    # journal values read back and not trusted (bellows.kube.readback): they read as absent
    distrusted: tuple[Distrusted, ...] = ()
    # its profile's efficiency section, relative to its batch_size (bellows.scaling.priors)
    efficiency: EfficiencyProfile | None = None


@dataclass(frozen=True)
class Finished:
    """The job's ``Succeeded`` or ``Failed`` condition turned ``True``."""

    job: str
    state: str


@dataclass(frozen=True)
class Invalid:
    """The job opted in, but Bellows must leave it alone; ``problem`` says why.

    ``refused`` marks a job another controller sizes (Kueue, an HPA), as opposed to
    settings that are wrong.
    """

    job: str
    problem: str
    refused: bool = False


@dataclass(frozen=True)
class Skipped:
    """The job opted in, but another controller runs it and Bellows must not even write to
    it (no status annotation): ``reason`` is the metric's label (``managed-by``),
    ``message`` the Event's."""

    job: str
    reason: str
    message: str


@dataclass(frozen=True)
class Deleted:
    """The job is gone."""

    job: str


Observation = Arrived | Finished | Invalid | Skipped | Deleted


class JobReader:
    """Lists and watches opted-in jobs of every kind; see the module docstring."""

    def __init__(
        self,
        api: KubeApi,
        *,
        kinds: Iterable[KindAdapter] = KINDS,
        namespace: str | None = None,
        watch_timeout_s: int = 300,
        kueue: bool = False,
    ) -> None:
        """``kueue``: examine the jobs that name a Kueue LocalQueue as any other
        (``controller.kueue.enabled``); when false, each is :class:`Invalid` (refused)."""
        self._api = api
        self._kueue = kueue
        self._kinds = tuple(kinds)
        self._namespace = namespace
        self._watch_timeout_s = watch_timeout_s

    async def examine(self, kind: KindAdapter, obj: Mapping[str, Any]) -> Observation | None:
        """What ``obj`` means to Bellows; ``None`` for a job that did not opt in.

        Whatever a job carries, the answer is an observation: a value no check foresaw makes
        the job :class:`Invalid` too (one bad object is that object's problem). Only API
        errors (reading its profile ConfigMap) propagate, to be retried.
        """
        meta = obj.get("metadata") or {}
        notes = meta.get("annotations") or {}
        if not keys.opted_in(notes):
            return None
        key = job_key(kind.kind, meta.get("namespace", ""), meta.get("name", ""))
        try:
            return await self._examine(key, kind, obj, notes)
        except SpecError as err:
            return Invalid(key, str(err))
        except DATA_ERRORS as err:
            _log.exception("job.unreadable", job=key)
            return Invalid(key, f"its spec could not be read ({brief(err)})")

    async def _examine(
        self, key: str, kind: KindAdapter, obj: Mapping[str, Any], notes: Mapping[str, str]
    ) -> Observation:
        seen = opted_job(kind, obj, kueue=self._kueue)
        if isinstance(seen, LeftAlone):
            if seen.why == "finished":
                return Finished(key, seen.detail)
            if seen.why == "refused":
                return Invalid(key, seen.detail, refused=True)
            return Skipped(
                key,
                MANAGED_BY,
                f"spec.runPolicy.managedBy={seen.detail!r}: another controller runs this job "
                "(a MultiKueue worker cluster for kueue.x-k8s.io/multikueue), so Bellows "
                "never patches or suspends it here",
            )
        view, settings = seen.view, seen.settings
        profile = await self._profile(view.ref.namespace, settings.profile)
        spec = build_spec(view, settings, profile)
        journal, distrusted = checked_journal(Journal.read(notes), spec, view)
        running = None
        # A Kueue job sized by Bellows (within its ClusterQueue's quota) runs at its
        # allocation even while it waits, suspended, for Kueue to admit it.
        waiting = view.queue is not None and view.suspended
        if journal.phase is Phase.DONE and journal.allocation and (not view.suspended or waiting):
            running = Allocation(*journal.allocation)
        prior = profile.efficiency
        efficiency = None if prior is None else prior.rebased(spec.batch_size)
        return Arrived(spec, view, running, distrusted, efficiency)

    async def _profile(self, namespace: str, source: JobProfile | keys.ConfigMapRef) -> JobProfile:
        if isinstance(source, JobProfile):
            return source
        where = f"configmap {source.name}"
        configmap = await self._api.get_configmap(namespace, source.name)
        if configmap is None:
            raise SpecError(keys.PROFILE_CONFIGMAP, source.name, f"a ConfigMap in {namespace}")
        text = (configmap.get("data") or {}).get(source.key)
        if text is None:
            raise SpecError(f"{where} data.{source.key}", None, "a JobProfile JSON document")
        return keys.parse_profile_text(f"{where} data.{source.key}", text)

    async def snapshot(self, namespace: str | None = None) -> list[Observation]:
        """One observation per opted-in job now in the cluster (or in ``namespace``)."""
        out: list[Observation] = []
        for kind in self._kinds:
            async for page, _ in self._api.list_job_pages(kind, namespace or self._namespace):
                for obj in page:
                    seen = await self.examine(kind, obj)
                    if seen is not None:
                        out.append(seen)
        return out

    async def observe(self) -> AsyncIterator[Observation]:
        """Every change that matters, as it happens, forever (close the iterator to stop).

        Each job's observation is yielded when it differs from the last one yielded for it
        (the writes Bellows itself makes change nothing here).
        """
        queue: asyncio.Queue[Observation | BaseException] = asyncio.Queue()
        tasks = [asyncio.create_task(self._follow(kind, queue)) for kind in self._kinds]
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _follow(
        self, kind: KindAdapter, out: asyncio.Queue[Observation | BaseException]
    ) -> None:
        last: dict[str, tuple[str, Observation]] = {}  # job -> (uid, last observation)

        async def note(obj: Mapping[str, Any]) -> None:
            seen = await self.examine(kind, obj)
            meta = obj["metadata"]
            key = job_key(kind.kind, meta["namespace"], meta["name"])
            if seen is None:
                return
            previous = last.get(key)
            if previous is not None and previous[0] != meta["uid"]:
                await out.put(Deleted(key))  # deleted and created again under the same name
                previous = None
            if previous is None or _differs(previous[1], seen):
                last[key] = (meta["uid"], seen)
                await out.put(seen)

        try:
            while True:
                present = set()
                version = ""
                async for page, page_version in self._api.list_job_pages(kind, self._namespace):
                    version = page_version
                    for obj in page:
                        meta = obj["metadata"]
                        present.add(job_key(kind.kind, meta["namespace"], meta["name"]))
                        await note(obj)
                for key in [k for k in last if k not in present]:
                    del last[key]
                    await out.put(Deleted(key))
                try:
                    while True:
                        async for event, obj in self._api.watch_jobs(
                            kind, self._namespace, version, timeout_s=self._watch_timeout_s
                        ):
                            version = obj["metadata"]["resourceVersion"]
                            if event == "DELETED":
                                meta = obj["metadata"]
                                key = job_key(kind.kind, meta["namespace"], meta["name"])
                                if last.pop(key, None) is not None:
                                    await out.put(Deleted(key))
                            elif event in ("ADDED", "MODIFIED"):
                                await note(obj)
                except ExpiredError:
                    continue  # list again from now
        except asyncio.CancelledError:
            raise
        except Exception as err:
            await out.put(err)


def _differs(before: Observation, after: Observation) -> bool:
    if isinstance(before, Arrived) and isinstance(after, Arrived):
        return before.spec != after.spec
    return before != after
