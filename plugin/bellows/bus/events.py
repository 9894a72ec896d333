"""Arrival and completion events: the facts the bridge publishes and the controller consumes.

Plain frozen dataclasses with no I/O. An event names its job by kind, namespace, name and
uid; the pair ``(uid, type)`` identifies the fact, so the same fact published twice (by a
restarted bridge, or by a pipeline step and the bridge) is one event to every consumer.
:class:`JobKind` and :class:`JobRef` are :mod:`bellows.refs`' (the kube side's too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from bellows.jobs import SpecError
from bellows.refs import MAX_NAME, JobKind, JobRef, require_text

__all__ = [
    "Event",
    "EventKey",
    "EventType",
    "JobArrived",
    "JobCompleted",
    "JobKind",
    "JobRef",
    "Outcome",
    "event_key",
]


class EventType(StrEnum):
    """What happened to the job."""

    ARRIVED = "job.arrived"
    COMPLETED = "job.completed"


class Outcome(StrEnum):
    """How a job finished: the operator's terminal condition that is ``True``.

    ``Deleted``: the job object was deleted before either condition became true; its GPUs
    are free all the same.
    """

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    DELETED = "Deleted"


def _require_time(value: object) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise SpecError("time", value, "a timezone-aware datetime")
    return value.astimezone(UTC)


def _require_uid(job: JobRef) -> None:
    """An event is about one object: its ref carries the object's uid."""
    require_text("job.uid", job.uid, limit=MAX_NAME)


def _require_resource_version(value: object) -> str | None:
    if value is None:
        return None
    return require_text("job.resourceVersion", value, limit=MAX_NAME)


@dataclass(frozen=True)
class JobArrived:
    """An opted-in job was created and waits for GPUs.

    ``spec`` optionally carries the job's Bellows settings (the annotations, as a JSON
    object) so a consumer can act without reading the job back; the cluster stays the
    source of truth.
    """

    job: JobRef
    time: datetime
    resource_version: str | None = None
    source: str = "bridge"
    spec: Mapping[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        _require_uid(self.job)
        object.__setattr__(self, "time", _require_time(self.time))
        _require_resource_version(self.resource_version)
        require_text("source", self.source, limit=MAX_NAME)
        if self.spec is not None and not isinstance(self.spec, Mapping):
            raise SpecError("spec", self.spec, "a JSON object or null")

    @property
    def type(self) -> EventType:
        return EventType.ARRIVED


@dataclass(frozen=True)
class JobCompleted:
    """An opted-in job finished (``Succeeded`` or ``Failed`` became true, or it was deleted)."""

    job: JobRef
    time: datetime
    outcome: Outcome
    resource_version: str | None = None
    source: str = "bridge"

    def __post_init__(self) -> None:
        _require_uid(self.job)
        object.__setattr__(self, "time", _require_time(self.time))
        try:
            object.__setattr__(self, "outcome", Outcome(self.outcome))
        except ValueError:
            valid = " or ".join(repr(o.value) for o in Outcome)
            raise SpecError("outcome", self.outcome, valid) from None
        _require_resource_version(self.resource_version)
        require_text("source", self.source, limit=MAX_NAME)

    @property
    def type(self) -> EventType:
        return EventType.COMPLETED


Event = JobArrived | JobCompleted

EventKey = tuple[str, EventType]
"""``(job uid, event type)``: what makes two events the same fact."""


def event_key(event: Event) -> EventKey:
    """The identity of the fact ``event`` reports, whoever published it."""
    return (event.job.uid, event.type)
