"""The bridge's watch source: opted-in jobs of one kind, as facts, resumable by resourceVersion.

Turns :meth:`bellows.kube.KubeApi.watch_jobs` into the :data:`bellows.bus.WatchSource` the
:class:`bellows.bus.Bridge` publishes from. A job that did not opt in is read no further than
its metadata. When the stored resourceVersion is too old (410), the source lists again; the
stream's message ids drop the facts that listing repeats. Any other failed request (the API
server down or answering 5xx) is logged and tried again after ``retry_s``, from the last
resourceVersion seen, so the bridge outlives an API server outage.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
import urllib3
from kubernetes.client.rest import ApiException

from bellows.bus import (
    Bookmark,
    Bridge,
    EventPublisher,
    JobObserved,
    JobRef,
    Outcome,
    ResumeStore,
    WatchSource,
    watch_key,
)
from bellows.bus import Observation as BusObservation
from bellows.kube import KINDS, ExpiredError, KindAdapter, KubeApi
from bellows.kube.keys import opted_in
from bellows.kube.kinds import finished_state, parse_time

__all__ = ["kube_bridges", "kube_watch_source", "observed"]

_FRESH = timedelta(seconds=2)
# What a failed request may raise besides the translated 404/409/410.
_TRANSIENT = (ApiException, urllib3.exceptions.HTTPError, OSError)

_log = structlog.get_logger("bellows.bridge")


def observed(
    kind: KindAdapter, obj: Mapping[str, Any], *, now: Callable[[], datetime]
) -> JobObserved | None:
    """The fact ``obj`` carries for the bus, or ``None`` for a job that did not opt in."""
    meta = obj.get("metadata") or {}
    if not opted_in(meta.get("annotations")):
        return None
    state = finished_state(obj)
    finished = Outcome(state) if state is not None else None
    finished_at = None
    if finished is not None:
        finished_at = _stamp((obj.get("status") or {}).get("completionTime"), now)
    return JobObserved(
        job=JobRef(kind.kind, meta["namespace"], meta["name"], meta["uid"]),
        resource_version=str(meta["resourceVersion"]),
        created=_stamp(meta.get("creationTimestamp"), now),
        finished=finished,
        finished_at=finished_at,
    )


def _stamp(text: object, now: Callable[[], datetime]) -> datetime:
    """A Kubernetes timestamp, made precise when it is fresh.

    Kubernetes writes whole seconds. A fact the watch delivers within a second or two of its
    stamp happened "now" to well under a second, which matters under time compression
    (one real second is minutes of a ``bellows demo`` run); older stamps are kept as they are.
    """
    stamp, current = parse_time(text), now()
    if stamp is None or timedelta(0) <= current - stamp < _FRESH:
        return current
    return stamp


def kube_watch_source(
    api: KubeApi,
    kind: KindAdapter,
    namespace: str | None,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    timeout_s: int = 300,
    retry_s: float = 1.0,
) -> WatchSource:
    """A :data:`~bellows.bus.WatchSource` over ``kind`` in ``namespace`` (``None``: all)."""

    async def source(resume_from: str | None) -> AsyncIterator[BusObservation]:
        version = resume_from
        while True:
            try:
                if version is None:
                    listed = ""
                    async for page, page_version in api.list_job_pages(kind, namespace):
                        listed = page_version
                        for obj in page:
                            seen = observed(kind, obj, now=now)
                            if seen is not None:
                                yield seen
                    version = listed
                    yield Bookmark(version)
                async for event, obj in api.watch_jobs(
                    kind, namespace, version, timeout_s=timeout_s
                ):
                    version = str(obj["metadata"]["resourceVersion"])
                    seen = observed(kind, obj, now=now)
                    if seen is not None and event == "DELETED":
                        seen = JobObserved(
                            job=seen.job,
                            resource_version=version,
                            created=seen.created,
                            finished=seen.finished or Outcome.DELETED,
                            finished_at=seen.finished_at or now(),
                        )
                    yield seen if seen is not None else Bookmark(version)
            except ExpiredError:
                version = None  # too old: list again
            except _TRANSIENT as err:
                _log.warning(
                    "bridge.request_failed",
                    kind=kind.kind,
                    namespace=namespace,
                    error=f"{type(err).__name__}: {err}".splitlines()[0],
                )
                await asyncio.sleep(retry_s)

    return source


def kube_bridges(
    api: KubeApi,
    *,
    publisher: EventPublisher,
    store: ResumeStore,
    namespaces: Iterable[str | None],
    kinds: Iterable[KindAdapter] = KINDS,
) -> list[Bridge]:
    """One :class:`~bellows.bus.Bridge` per job kind and namespace (``None``: all), each
    resuming from the resourceVersion stored under its own watch key."""
    return [
        Bridge(
            publisher=publisher,
            store=store,
            source=kube_watch_source(api, kind, namespace),
            key=watch_key(kind.kind, namespace),
        )
        for kind in kinds
        for namespace in namespaces
    ]
