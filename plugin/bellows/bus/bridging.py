"""The bridge's publishing side: job observations in, arrival/completion events out.

The Kubernetes watch is injected as a :data:`WatchSource`: a function that, given the last
resourceVersion stored (or ``None``), yields :class:`JobObserved` facts and
:class:`Bookmark` s. The bridge turns each observation into events (:func:`events_for`,
pure), publishes them with their message ids, and only then stores the observation's
resourceVersion, so a restarted bridge resumes after the last fact it published; whatever
it publishes again is dropped by the stream's duplicate window.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import nats.errors
import structlog
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from bellows.bus.events import (
    Event,
    EventKey,
    JobArrived,
    JobCompleted,
    Outcome,
    event_key,
)
from bellows.bus.publishing import EventPublisher
from bellows.refs import JobKind, JobRef

__all__ = [
    "Bookmark",
    "Bridge",
    "JobObserved",
    "KvResumeStore",
    "Observation",
    "ResumeStore",
    "WatchSource",
    "events_for",
    "watch_key",
]

_log = structlog.get_logger("bellows.bus")


@dataclass(frozen=True)
class JobObserved:
    """What the watch saw of one opted-in job at ``resource_version``.

    ``created`` is the job's creationTimestamp; ``finished``/``finished_at`` are set once
    a terminal condition is true (or the job was deleted); ``spec`` is the job's Bellows
    settings as JSON, passed through to the arrival event.
    """

    job: JobRef
    resource_version: str
    created: datetime
    finished: Outcome | None = None
    finished_at: datetime | None = None
    spec: Mapping[str, Any] | None = field(default=None, hash=False)


@dataclass(frozen=True)
class Bookmark:
    """The watch moved to ``resource_version`` with nothing to report (a BOOKMARK)."""

    resource_version: str


Observation = JobObserved | Bookmark
WatchSource = Callable[[str | None], AsyncIterator[Observation]]


def events_for(observed: JobObserved, *, source: str = "bridge") -> list[Event]:
    """The facts an observation carries: its arrival and, if it finished, its completion.

    A job seen for the first time already finished (the bridge was down) yields both, in
    that order, so the controller never sees a completion of a job it never saw arrive.
    """
    rv = observed.resource_version
    events: list[Event] = [JobArrived(observed.job, observed.created, rv, source, observed.spec)]
    if observed.finished is not None:
        at = observed.finished_at or observed.created
        events.append(JobCompleted(observed.job, at, observed.finished, rv, source))
    return events


def watch_key(kind: JobKind, namespace: str | None) -> str:
    """The resume-store key of one watch (one kind, one namespace or all)."""
    return f"{kind.value.lower()}.{namespace or '_all'}"


class ResumeStore(Protocol):
    """Where the bridge keeps the last resourceVersion it fully handled, per watch."""

    async def load(self, key: str) -> str | None: ...

    async def save(self, key: str, resource_version: str) -> None: ...


class KvResumeStore:
    """:class:`ResumeStore` in a JetStream key-value bucket (survives bridge restarts)."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def load(self, key: str) -> str | None:
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return None
        return entry.value.decode() if entry.value else None

    async def save(self, key: str, resource_version: str) -> None:
        await self._kv.put(key, resource_version.encode())


class Bridge:
    """Publishes the events of one watch and remembers how far it got.

    ``remember`` bounds the in-memory set of facts already published in this run (which
    saves a round trip per repeated MODIFIED event; the stream dedupes the rest).
    """

    def __init__(
        self,
        *,
        publisher: EventPublisher,
        store: ResumeStore,
        source: WatchSource,
        key: str,
        producer: str = "bridge",
        retry_s: float = 1.0,
        remember: int = 100_000,
    ) -> None:
        self._publisher = publisher
        self._store = store
        self._source = source
        self._key = key
        self._producer = producer
        self._retry_s = retry_s
        self._remember = remember
        self._sent: OrderedDict[EventKey, None] = OrderedDict()

    async def run(self, stop: asyncio.Event) -> None:
        """Watch and publish until ``stop`` is set; a failing watch restarts from the store.

        ``stop`` ends a watch that is waiting for its next change at once, not when the next
        change comes: what it published but did not save as handled is published again by
        the next run (the stream drops it by message id)."""
        while not stop.is_set():
            try:
                await _until(stop, self._follow(stop))
            except (nats.errors.Error, OSError) as exc:
                _log.warning("bridge.retry", key=self._key, error=str(exc))
                await _wait(stop, self._retry_s)
            else:
                return

    async def _follow(self, stop: asyncio.Event) -> None:
        resume_from = await self._store.load(self._key)
        _log.info("bridge.watch", key=self._key, resource_version=resume_from)
        async for observation in self._source(resume_from):
            if isinstance(observation, JobObserved):
                for event in events_for(observation, source=self._producer):
                    await self._publish_once(event)
            await self._store.save(self._key, observation.resource_version)
            if stop.is_set():
                return

    async def _publish_once(self, event: Event) -> None:
        key = event_key(event)
        if key in self._sent:
            return
        await self._publisher.publish(event)
        self._sent[key] = None
        if len(self._sent) > self._remember:
            self._sent.popitem(last=False)


async def _until(stop: asyncio.Event, work: Coroutine[object, object, None]) -> None:
    """Run ``work`` until it returns or ``stop`` is set, whichever comes first (``work``
    cancelled then); its exception, if it raised one first."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if not task.cancelled():
        task.result()


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
