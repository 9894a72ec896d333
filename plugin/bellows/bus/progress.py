"""Progress events: what a running training job says about its own speed (``docs/events.md``).

A training process publishes, on ``<prefix>.progress.v1.<namespace>.<job>``, either

* ``job.progress`` — samples seen so far, the median step time over the last window of
  steps, the world size and the global batch it ran with; or
* ``job.started`` — once per start, the seconds from process start to the first finished
  step (the restart cost actually paid), with the same world size, batch and samples.

Version 2 of the payload (``apiVersion: bellows.io/v2``, on the same subjects) adds two
optional fields to ``job.progress``: ``gradSqr`` and ``gradVar``, the job's smoothed estimates
of the squared norm of its true gradient ``|G|^2`` and of the per-sample gradient variance
``tr(Sigma)`` (so that ``gradVar / gradSqr`` is its gradient noise scale in samples,
:mod:`bellows.scaling.noise`); both or neither. A version 1 payload is read as before.

A progress event is a hint, never an order. :func:`decode_progress` accepts one only when its
subject names the same job as its payload, and every value is within the bounds of
:mod:`bellows.jobs`; everything goes through :mod:`bellows.inputs`. A refusal is a
:class:`bellows.inputs.SpecError` whose text is the reason to log. Pure: no I/O.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from bellows.bus.subjects import name_from_token, name_token
from bellows.inputs import SpecError, check_float, check_int, check_name, parse_json, parse_time
from bellows.jobs import MAX_BATCH, MAX_GPUS, MAX_STEP_SECONDS, MAX_WORK, check_restart_s

__all__ = [
    "MAX_GRAD_STAT",
    "MAX_PROGRESS_BYTES",
    "PAYLOAD_VERSIONS",
    "PROGRESS_PARTITIONS",
    "PROGRESS_VERSION",
    "ProgressEvent",
    "ProgressType",
    "decode_progress",
    "encode_progress",
    "progress_partition",
    "progress_subject",
    "progress_wildcard",
]

PROGRESS_VERSION: Final = 1
"""The subjects' version: ``<prefix>.progress.v1.*`` carries payloads of both versions."""
PAYLOAD_VERSIONS: Final = ("bellows.io/v1", "bellows.io/v2")
MAX_GRAD_STAT: Final = 1e30
"""Largest ``gradSqr`` or ``gradVar`` accepted (finite, far above any gradient's)."""
MAX_PROGRESS_BYTES: Final = 4096  # a report is a few hundred bytes
PROGRESS_PARTITIONS: Final = 32
"""Subjects a namespace's reports are stored under (``bellows.bus.streams``): the stream
maps ``<namespace>.<job>`` to ``<namespace>.<partition>``, NATS' ``partition`` function."""
_API_VERSION: Final = "bellows.io/v1"
_API_VERSION_2: Final = "bellows.io/v2"
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_NAME = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_FIELDS: Final = frozenset(
    {"apiVersion", "type", "namespace", "name", "time", "samplesSeen", "worldSize"}
    | {"globalBatch", "stepSeconds", "steps", "restartSeconds"}
)
_GRAD_FIELDS: Final = frozenset({"gradSqr", "gradVar"})  # bellows.io/v2 only


class ProgressType(StrEnum):
    """Which report: a window of steps, or a start."""

    PROGRESS = "job.progress"
    STARTED = "job.started"


@dataclass(frozen=True)
class ProgressEvent:
    """One report of a running job. ``step_seconds``/``steps`` are set for ``job.progress``,
    ``restart_s`` (the job's restart cost, :func:`bellows.jobs.check_restart_s`) for
    ``job.started``. ``grad_sqr``/``grad_var`` (both or neither, ``job.progress`` only) are
    the gradient statistics of payload version 2: ``grad_sqr > 0``, ``grad_var >= 0``, both
    at most :data:`MAX_GRAD_STAT`."""

    type: ProgressType
    namespace: str
    name: str
    time: datetime
    samples_seen: int
    world_size: int
    global_batch: int
    step_seconds: float | None = None
    steps: int | None = None
    restart_s: float | None = None
    grad_sqr: float | None = None
    grad_var: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", ProgressType(self.type))
        check_name("namespace", self.namespace, _NAMESPACE, "a DNS-1123 label")
        check_name("name", self.name, _NAME, "a DNS-1123 subdomain")
        if not isinstance(self.time, datetime) or self.time.tzinfo is None:
            raise SpecError("time", self.time, "a datetime with a time zone")
        check_int("samplesSeen", self.samples_seen, minimum=0, maximum=int(MAX_WORK))
        check_int("worldSize", self.world_size, minimum=1, maximum=MAX_GPUS)
        check_int("globalBatch", self.global_batch, minimum=1, maximum=MAX_BATCH)
        if self.type is ProgressType.PROGRESS:
            if self.step_seconds is None or self.steps is None:
                raise SpecError("stepSeconds", self.step_seconds, "set in a job.progress event")
            check_float(
                "stepSeconds", self.step_seconds, minimum=0.0, maximum=MAX_STEP_SECONDS,
                open_min=True,
            )  # fmt: skip
            check_int("steps", self.steps, minimum=1, maximum=10**9)
        elif self.restart_s is None:
            raise SpecError("restartSeconds", None, "set in a job.started event")
        if self.restart_s is not None:
            object.__setattr__(self, "restart_s", check_restart_s("restartSeconds", self.restart_s))
        if (self.grad_sqr is None) != (self.grad_var is None):
            missing = "gradVar" if self.grad_var is None else "gradSqr"
            raise SpecError(missing, None, "set with the other gradient statistic, or neither")
        if self.grad_sqr is not None and self.grad_var is not None:
            if self.type is not ProgressType.PROGRESS:
                raise SpecError("gradSqr", self.grad_sqr, "only in a job.progress event")
            sqr = check_float(
                "gradSqr", self.grad_sqr, minimum=0.0, maximum=MAX_GRAD_STAT, open_min=True
            )
            var = check_float("gradVar", self.grad_var, minimum=0.0, maximum=MAX_GRAD_STAT)
            object.__setattr__(self, "grad_sqr", sqr)
            object.__setattr__(self, "grad_var", var)


def progress_subject(prefix: str, namespace: str, name: str) -> str:
    """``<prefix>.progress.v1.<namespace>.<name>`` (dots in the name become underscores)."""
    return f"{prefix}.progress.v{PROGRESS_VERSION}.{namespace}.{name_token(name)}"


def progress_partition(name: str, partitions: int = PROGRESS_PARTITIONS) -> str:
    """The partition token the progress stream stores job ``name``'s reports under: NATS'
    subject-mapping ``partition`` (FNV-1a, 32 bits, of the subject token, modulo
    ``partitions``), so the decoder can check a stored subject against its payload."""
    digest = 0x811C9DC5
    for byte in name_token(name).encode():
        digest = ((digest ^ byte) * 0x01000193) & 0xFFFFFFFF
    return str(digest % partitions)


def progress_wildcard(prefix: str, namespace: str = "*") -> str:
    """Every progress subject of version 1, of one namespace or (``*``) all."""
    return f"{prefix}.progress.v{PROGRESS_VERSION}.{namespace}.*"


def encode_progress(event: ProgressEvent) -> bytes:
    """The JSON payload of ``event`` (what :func:`decode_progress` reads back): version 2
    when it carries gradient statistics, else version 1, as before."""
    doc: dict[str, Any] = {
        "apiVersion": _API_VERSION if event.grad_sqr is None else _API_VERSION_2,
        "type": event.type.value,
        "namespace": event.namespace,
        "name": event.name,
        "time": event.time.isoformat(),
        "samplesSeen": event.samples_seen,
        "worldSize": event.world_size,
        "globalBatch": event.global_batch,
    }
    for key, value in (
        ("stepSeconds", event.step_seconds),
        ("steps", event.steps),
        ("restartSeconds", event.restart_s),
        ("gradSqr", event.grad_sqr),
        ("gradVar", event.grad_var),
    ):
        if value is not None:
            doc[key] = value
    return json.dumps(doc, separators=(",", ":")).encode()


def _number(doc: dict[str, Any], key: str) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SpecError(key, value, "a finite number")
    return float(value)


def _integer(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(key, value, "an integer")
    return value


def _optional_integer(doc: dict[str, Any], key: str) -> int | None:
    return None if doc.get(key) is None else _integer(doc, key)


def decode_progress(prefix: str, subject: str, data: bytes) -> ProgressEvent:
    """The event in ``data`` published on ``subject``; :class:`SpecError` says why not.

    The subject must be ``<prefix>.progress.v1.<namespace>.<name>`` and name the same job as
    the payload: a report about one job can never be read as another's. As stored, the
    subject's last token is the job's partition (:func:`progress_partition`) instead.
    """
    head = f"{prefix}.progress.v{PROGRESS_VERSION}."
    tokens = subject[len(head) :].split(".") if subject.startswith(head) else []
    if len(tokens) != 2:
        raise SpecError("subject", subject, f"{head}<namespace>.<name>")
    doc = parse_json("progress", data, max_bytes=MAX_PROGRESS_BYTES, max_depth=2)
    if not isinstance(doc, dict):
        raise SpecError("progress", doc, "a JSON object")
    version = doc.get("apiVersion")
    if version not in PAYLOAD_VERSIONS:
        raise SpecError("apiVersion", version, " or ".join(map(repr, PAYLOAD_VERSIONS)))
    fields = _FIELDS if version == _API_VERSION else _FIELDS | _GRAD_FIELDS
    unknown = sorted(set(doc) - fields)
    if unknown:
        extra = "" if version == _API_VERSION_2 else f" ({_API_VERSION_2} adds gradSqr, gradVar)"
        raise SpecError(
            "progress", unknown, f"only the fields {', '.join(sorted(fields))} in {version}{extra}"
        )
    try:
        kind = ProgressType(str(doc.get("type")))
    except ValueError:
        raise SpecError("type", doc.get("type"), "job.progress or job.started") from None
    event = ProgressEvent(
        type=kind,
        namespace=doc.get("namespace", ""),  # checked in __post_init__
        name=doc.get("name", ""),
        time=parse_time("time", doc.get("time")),
        samples_seen=_integer(doc, "samplesSeen"),
        world_size=_integer(doc, "worldSize"),
        global_batch=_integer(doc, "globalBatch"),
        step_seconds=_number(doc, "stepSeconds"),
        steps=_optional_integer(doc, "steps"),
        restart_s=_number(doc, "restartSeconds"),
        grad_sqr=_number(doc, "gradSqr"),
        grad_var=_number(doc, "gradVar"),
    )
    named = tokens[1] == progress_partition(event.name) or (
        name_from_token(tokens[1]) == event.name
    )
    if tokens[0] != event.namespace or not named:
        raise SpecError(
            "subject", subject, f"the job of the payload ({event.namespace}/{event.name})"
        )
    return event
