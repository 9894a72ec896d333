"""Arrival and completion events: the facts the bridge publishes and the controller consumes.

Plain frozen dataclasses with no I/O. An event names its job by kind, namespace, name and
uid; the pair ``(uid, type)`` identifies the fact, so the same fact published twice (by a
restarted bridge, or by a pipeline step and the bridge) is one event to every consumer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from bellows.jobs import SpecError

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


class JobKind(StrEnum):
    """The Kubeflow resource kinds Bellows manages."""

    PYTORCHJOB = "PyTorchJob"
    MPIJOB = "MPIJob"
    TRAINJOB = "TrainJob"  # Kubeflow Trainer v2


class Outcome(StrEnum):
    """How a job finished: the operator's terminal condition that is ``True``.

    ``Deleted``: the job object was deleted before either condition became true; its GPUs
    are free all the same.
    """

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    DELETED = "Deleted"


# Kubernetes object names (DNS-1123 subdomain) and namespaces (DNS-1123 label) are at most
# 253 and 63 characters; a longer value cannot name a real object.
_MAX_NAME = 253
_MAX_NAMESPACE = 63


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _require_dns(name: str, value: object, pattern: re.Pattern[str], *, limit: int) -> str:
    text = _require_text(name, value, limit=limit)
    if not pattern.fullmatch(text):
        kind = "label" if pattern is _DNS_LABEL else "subdomain"
        raise SpecError(name, value, f"a DNS-1123 {kind} (lower-case letters, digits, '-')")
    return text


def _require_text(name: str, value: object, *, limit: int) -> str:
    if not isinstance(value, str) or not value or len(value) > limit:
        raise SpecError(name, value, f"a non-empty string of at most {limit} characters")
    if any(c.isspace() for c in value):
        raise SpecError(name, value, "a string without whitespace")
    return value


@dataclass(frozen=True)
class JobRef:
    """Which Kubernetes object an event is about."""

    kind: JobKind
    namespace: str
    name: str
    uid: str

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", JobKind(self.kind))
        except ValueError:
            valid = " or ".join(repr(k.value) for k in JobKind)
            raise SpecError("job.kind", self.kind, valid) from None
        _require_dns("job.namespace", self.namespace, _DNS_LABEL, limit=_MAX_NAMESPACE)
        _require_dns("job.name", self.name, _DNS_SUBDOMAIN, limit=_MAX_NAME)
        _require_text("job.uid", self.uid, limit=_MAX_NAME)

    @property
    def qualified_name(self) -> str:
        """``namespace/name``, the form Kubernetes tools print."""
        return f"{self.namespace}/{self.name}"


def _require_time(value: object) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise SpecError("time", value, "a timezone-aware datetime")
    return value.astimezone(UTC)


def _require_resource_version(value: object) -> str | None:
    if value is None:
        return None
    return _require_text("job.resourceVersion", value, limit=_MAX_NAME)


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
        object.__setattr__(self, "time", _require_time(self.time))
        _require_resource_version(self.resource_version)
        _require_text("source", self.source, limit=_MAX_NAME)
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
        object.__setattr__(self, "time", _require_time(self.time))
        try:
            object.__setattr__(self, "outcome", Outcome(self.outcome))
        except ValueError:
            valid = " or ".join(repr(o.value) for o in Outcome)
            raise SpecError("outcome", self.outcome, valid) from None
        _require_resource_version(self.resource_version)
        _require_text("source", self.source, limit=_MAX_NAME)

    @property
    def type(self) -> EventType:
        return EventType.COMPLETED


Event = JobArrived | JobCompleted

EventKey = tuple[str, EventType]
"""``(job uid, event type)``: what makes two events the same fact."""


def event_key(event: Event) -> EventKey:
    """The identity of the fact ``event`` reports, whoever published it."""
    return (event.job.uid, event.type)
