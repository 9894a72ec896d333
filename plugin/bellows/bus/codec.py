"""The versioned JSON encoding of events: pure encode/decode functions, no connection.

The wire format (schema version 1, JSON Schema in ``event.v1.schema.json``)::

    {"version": 1, "type": "job.arrived", "time": "2025-05-01T12:00:00Z",
     "source": "bridge",
     "job": {"kind": "PyTorchJob", "namespace": "team-a", "name": "resnet",
             "uid": "6f1c…", "resourceVersion": "4711"},
     "spec": {...}}                    # job.arrived only, optional
     "outcome": "Succeeded"            # job.completed only, required

:func:`decode` never raises anything but :class:`EventError`, whose ``code`` is the
dead-letter reason: ``malformed_json``, ``unknown_version``, ``unknown_type`` or
``invalid_event``. Unknown fields are refused: a new field means a new version.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib import resources
from typing import Any, Final

from bellows.bus.events import Event, EventType, JobArrived, JobCompleted
from bellows.inputs import SpecError, parse_json, parse_time, shown
from bellows.refs import JobRef

__all__ = [
    "SCHEMA_VERSION",
    "EventError",
    "decode",
    "encode",
    "event_schema",
    "message_id",
]

SCHEMA_VERSION: Final = 1
MALFORMED_JSON: Final = "malformed_json"
UNKNOWN_VERSION: Final = "unknown_version"
UNKNOWN_TYPE: Final = "unknown_type"
INVALID_EVENT: Final = "invalid_event"

_COMMON = frozenset({"version", "type", "time", "source", "job"})
_FIELDS: dict[EventType, frozenset[str]] = {
    EventType.ARRIVED: _COMMON | {"spec"},
    EventType.COMPLETED: _COMMON | {"outcome"},
}
_JOB_FIELDS = frozenset({"kind", "namespace", "name", "uid", "resourceVersion"})
MAX_EVENT_BYTES: Final = 256 * 1024
MAX_EVENT_DEPTH: Final = 16


class EventError(ValueError):
    """A message that is not a valid event; ``code`` is the machine-readable reason."""

    def __init__(self, code: str, reason: str) -> None:
        self.code = code
        self.reason = reason
        super().__init__(f"{code}: {reason}")


def message_id(event: Event) -> str:
    """The ``Nats-Msg-Id`` of ``event``: the same fact always gets the same id.

    JetStream drops a second message with this id inside the stream's duplicate window,
    whichever producer sent it.
    """
    return f"{event.job.uid}/{event.type.value}"


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` suffix and microseconds only when present."""
    text = moment.astimezone(UTC).isoformat()
    return text.removesuffix("+00:00") + "Z"


def to_json(event: Event) -> dict[str, Any]:
    """``event`` as the JSON object of the current schema version."""
    job: dict[str, Any] = {
        "kind": event.job.kind.value,
        "namespace": event.job.namespace,
        "name": event.job.name,
        "uid": event.job.uid,
        "resourceVersion": event.resource_version,
    }
    out: dict[str, Any] = {
        "version": SCHEMA_VERSION,
        "type": event.type.value,
        "time": format_time(event.time),
        "source": event.source,
        "job": job,
    }
    if isinstance(event, JobArrived):
        if event.spec is not None:
            out["spec"] = dict(event.spec)
    else:
        out["outcome"] = event.outcome.value
    return out


def encode(event: Event) -> bytes:
    """``event`` as compact UTF-8 JSON."""
    return json.dumps(to_json(event), separators=(",", ":"), sort_keys=True).encode()


def decode(data: bytes) -> Event:
    """The event in ``data``, or :class:`EventError` saying why it is not one."""
    try:
        raw = parse_json(
            "message", data, max_bytes=MAX_EVENT_BYTES, max_depth=MAX_EVENT_DEPTH, what="an event"
        )
    except SpecError as exc:
        raise EventError(MALFORMED_JSON, f"not UTF-8 JSON within limits: {exc}") from None
    return from_json(raw)


def from_json(raw: object) -> Event:
    """The event in an already parsed JSON value (see :func:`decode`)."""
    try:
        return _from_json(raw)
    except EventError:
        raise
    except (ValueError, TypeError, LookupError, ArithmeticError, RecursionError) as exc:
        # every check below raises SpecError; anything else is a value no check foresaw
        raise EventError(INVALID_EVENT, f"{type(exc).__name__}: {str(exc)[:200]}") from None


def _from_json(raw: object) -> Event:
    if not isinstance(raw, dict):
        raise EventError(INVALID_EVENT, f"expected a JSON object, got {type(raw).__name__}")
    version = raw.get("version")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise EventError(
            UNKNOWN_VERSION,
            f"version={shown(version)} is not supported: expected {SCHEMA_VERSION}",
        )
    try:
        kind = EventType(raw["type"] if isinstance(raw.get("type"), str) else "")
    except ValueError:
        valid = " or ".join(repr(t.value) for t in EventType)
        raise EventError(UNKNOWN_TYPE, f"type={shown(raw.get('type'))}: expected {valid}") from None
    _refuse_unknown(raw, _FIELDS[kind], "")
    try:
        return _build(kind, raw)
    except SpecError as exc:
        raise EventError(INVALID_EVENT, str(exc)) from None


def _refuse_unknown(raw: Mapping[str, object], known: frozenset[str], prefix: str) -> None:
    for key in raw:
        if key not in known:
            allowed = ", ".join(sorted(known))
            raise EventError(
                INVALID_EVENT, f"unknown field '{prefix}{shown(key)[1:-1]}': expected {allowed}"
            )


def _build(kind: EventType, raw: dict[str, Any]) -> Event:
    job_raw = raw.get("job")
    if not isinstance(job_raw, dict):
        raise SpecError("job", job_raw, "a JSON object")
    _refuse_unknown(job_raw, _JOB_FIELDS, "job.")
    ref = JobRef(
        kind=job_raw.get("kind"),  # type: ignore[arg-type]  # validated by JobRef
        namespace=job_raw.get("namespace"),  # type: ignore[arg-type]
        name=job_raw.get("name"),  # type: ignore[arg-type]
        uid=job_raw.get("uid"),  # type: ignore[arg-type]
    )
    time = parse_time("time", raw.get("time"))
    source = raw.get("source", "unknown")
    resource_version = job_raw.get("resourceVersion")
    if kind is EventType.ARRIVED:
        spec = raw.get("spec")
        if spec is not None and not isinstance(spec, dict):
            raise SpecError("spec", spec, "a JSON object or null")
        return JobArrived(ref, time, resource_version, source, spec)
    if "outcome" not in raw:
        raise SpecError("outcome", None, "'Succeeded' or 'Failed' (required)")
    return JobCompleted(ref, time, raw["outcome"], resource_version, source)


def event_schema() -> dict[str, Any]:
    """The JSON Schema of the current event version (shipped beside this module)."""
    text = resources.files("bellows.bus").joinpath("event.v1.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema
