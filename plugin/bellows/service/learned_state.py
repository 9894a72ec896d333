"""What the controller learned of one job, as a record that outlives the process.

:class:`JobLearning` is the state :class:`~bellows.service.learning.ProgressLearner` keeps of
a job (its accepted step times per configuration, the restarts it measured, its gradient
noise and the samples it trained at each batch, the efficiency fitted and the prior it was
centred on), taken out and put back whole (:meth:`ProgressLearner.snapshot
<bellows.service.learning.ProgressLearner.snapshot>`, :meth:`~bellows.service.learning.
ProgressLearner.restore`). :func:`encode` and :func:`decode` write it as one JSON document
(version 1) for the controller's own key-value bucket (:mod:`bellows.service.memory`).

That bucket is not a place a tenant can write (docs/security.md), but a record is read as
data all the same: every field is checked by name, type and bound, and a record that does
not hold is refused whole with a :class:`~bellows.inputs.SpecError` naming the field, the
value and what is valid. Times are kept as wall times (ISO 8601), so a record made by one
process reads right on another's clock.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from bellows.inputs import check_float, check_int
from bellows.jobs import MAX_BATCH, MAX_GPUS, MAX_WORK, SpecError
from bellows.scaling.consistency import RunMark
from bellows.scaling.efficiency import EfficiencyProfile
from bellows.scaling.noise import NOISE_KEPT, SEGMENTS_KEPT, NoisePoint
from bellows.scaling.online import WINDOW, ProgressReport

__all__ = ["MAX_CONFIGURATIONS", "MAX_RECORD_BYTES", "VERSION", "JobLearning", "decode", "encode"]

VERSION: Final = 1
MAX_CONFIGURATIONS: Final = 512  # (GPUs, batch) configurations kept per job
MAX_RECORD_BYTES: Final = 256 * 1024  # a record's JSON text, at most (the bucket's value limit)
_MAX_RESTARTS: Final = 64
_MAX_SOURCE: Final = 1024
_MAX_STEP_S: Final = 86_400.0 * 7
_MAX_RESTART_S: Final = 86_400.0


@dataclass(frozen=True)
class JobLearning:
    """One job's learned state; times (``samples_at``, ``last_report``) on the caller's clock."""

    steps: Mapping[tuple[int, int], tuple[float, ...]]  # newest step times per (GPUs, batch)
    samples: float  # samples of the newest accepted report
    reports: int  # accepted reports, all told
    checked_samples: float  # the newest samples that held together (the checks' mark)
    run: RunMark | None  # the checks' current run
    restarts: tuple[float, ...]  # measured restarts, oldest first
    noise: tuple[NoisePoint, ...]  # gradient statistics kept, oldest first
    segments: tuple[tuple[int, float], ...]  # (batch, samples trained at it), in order
    noise_samples: float  # the samples the segments add up to
    prior: EfficiencyProfile | None  # the efficiency the job's profile states
    efficiency: EfficiencyProfile | None  # the last efficiency fitted (or the prior)
    efficiency_due: bool  # gradient statistics came since that fit
    samples_at: float | None
    last_report: float | None


def encode(
    learning: JobLearning, *, job: str, uid: str, wall: Callable[[float], datetime]
) -> bytes:
    """``learning`` of ``job`` (the object ``uid``) as one JSON document."""
    doc = {
        "version": VERSION,
        "job": job,
        "uid": uid,
        "steps": [[k, b, list(times)] for (k, b), times in sorted(learning.steps.items())],
        "samples": learning.samples,
        "reports": learning.reports,
        "checkedSamples": learning.checked_samples,
        "run": _run_json(learning.run, wall),
        "restarts": list(learning.restarts),
        "noise": [[p.batch, p.samples, p.grad_sqr, p.grad_var] for p in learning.noise],
        "segments": [[b, n] for b, n in learning.segments],
        "noiseSamples": learning.noise_samples,
        "prior": _efficiency_json(learning.prior),
        "efficiency": _efficiency_json(learning.efficiency),
        "efficiencyDue": learning.efficiency_due,
        "samplesAt": None if learning.samples_at is None else wall(learning.samples_at).isoformat(),
        "lastReport": None
        if learning.last_report is None
        else wall(learning.last_report).isoformat(),
    }
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()


def decode(data: bytes, *, clock: Callable[[datetime], float]) -> tuple[str, str, JobLearning]:
    """``(job, uid, learning)`` from a record :func:`encode` wrote; :class:`SpecError` names
    the first field that does not hold."""
    if len(data) > MAX_RECORD_BYTES:
        raise SpecError("record", f"{len(data)} bytes", f"at most {MAX_RECORD_BYTES} bytes")
    try:
        doc = json.loads(data, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError) as err:
        raise SpecError("record", data[:80], f"a JSON document ({err})") from None
    if not isinstance(doc, dict):
        raise SpecError("record", doc, "a JSON object")
    expected = {
        "version", "job", "uid", "steps", "samples", "reports", "checkedSamples", "run", "restarts",
        "noise", "segments", "noiseSamples", "prior", "efficiency", "efficiencyDue",
        "samplesAt", "lastReport",
    }  # fmt: skip
    if set(doc) != expected:
        raise SpecError("record", sorted(doc), f"exactly the fields {sorted(expected)}")
    if doc["version"] != VERSION:
        raise SpecError("version", doc["version"], f"{VERSION}")
    job, uid = _text("job", doc["job"], 512), _text("uid", doc["uid"], 128)
    prior = _efficiency("prior", doc["prior"])
    efficiency = _efficiency("efficiency", doc["efficiency"])
    learning = JobLearning(
        steps=_steps(doc["steps"]),
        samples=_samples("samples", doc["samples"]),
        reports=check_int("reports", doc["reports"], minimum=0),
        checked_samples=_samples("checkedSamples", doc["checkedSamples"]),
        run=_run(doc["run"], clock),
        restarts=tuple(
            check_float(f"restarts[{i}]", s, minimum=0.0, maximum=_MAX_RESTART_S)
            for i, s in enumerate(_list("restarts", doc["restarts"], _MAX_RESTARTS))
        ),
        noise=tuple(_point(i, p) for i, p in enumerate(_list("noise", doc["noise"], NOISE_KEPT))),
        segments=tuple(
            _segment(i, s) for i, s in enumerate(_list("segments", doc["segments"], SEGMENTS_KEPT))
        ),
        noise_samples=_samples("noiseSamples", doc["noiseSamples"]),
        prior=prior,
        # the fit that was the prior itself is the same object again (ProgressLearner asks)
        efficiency=prior if efficiency == prior else efficiency,
        efficiency_due=_flag("efficiencyDue", doc["efficiencyDue"]),
        samples_at=_when("samplesAt", doc["samplesAt"], clock),
        last_report=_when("lastReport", doc["lastReport"], clock),
    )
    return job, uid, learning


def _iso(reading: float | None, wall: Callable[[float], datetime]) -> str | None:
    return None if reading is None else wall(reading).isoformat()


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _text(field: str, value: object, most: int) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= most:
        raise SpecError(field, value, f"a string of 1 to {most} characters")
    return value


def _flag(field: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise SpecError(field, value, "true or false")
    return value


def _samples(field: str, value: object) -> float:
    return check_float(field, value, minimum=0.0, maximum=MAX_WORK)


def _list(field: str, value: object, most: int) -> Sequence[object]:
    if not isinstance(value, list) or len(value) > most:
        raise SpecError(field, value if not isinstance(value, list) else len(value),
                        f"a list of at most {most} items")  # fmt: skip
    return value


def _row(field: str, value: object, length: int) -> Sequence[object]:
    if not isinstance(value, list) or len(value) != length:
        raise SpecError(field, value, f"a list of {length} items")
    return value


def _steps(value: object) -> dict[tuple[int, int], tuple[float, ...]]:
    steps: dict[tuple[int, int], tuple[float, ...]] = {}
    for i, row in enumerate(_list("steps", value, MAX_CONFIGURATIONS)):
        k, b, times = _row(f"steps[{i}]", row, 3)
        key = (
            check_int(f"steps[{i}][0]", k, minimum=1, maximum=MAX_GPUS),
            check_int(f"steps[{i}][1]", b, minimum=1, maximum=MAX_BATCH),
        )
        if key in steps:
            raise SpecError(f"steps[{i}]", list(key), "a (GPUs, batch) configuration listed once")
        seconds = _list(f"steps[{i}][2]", times, WINDOW)
        if not seconds:
            raise SpecError(f"steps[{i}][2]", seconds, "at least one step time")
        steps[key] = tuple(
            check_float(f"steps[{i}][2][{j}]", s, minimum=0.0, maximum=_MAX_STEP_S, open_min=True)
            for j, s in enumerate(seconds)
        )
    return steps


def _point(i: int, value: object) -> NoisePoint:
    batch, samples, grad_sqr, grad_var = _row(f"noise[{i}]", value, 4)
    try:
        return NoisePoint(batch, samples, grad_sqr, grad_var)  # type: ignore[arg-type]
    except SpecError as err:
        raise err.within(f"noise[{i}]") from None


def _segment(i: int, value: object) -> tuple[int, float]:
    batch, samples = _row(f"segments[{i}]", value, 2)
    return (
        check_int(f"segments[{i}][0]", batch, minimum=1, maximum=MAX_BATCH),
        check_float(f"segments[{i}][1]", samples, minimum=0.0, maximum=MAX_WORK, open_min=True),
    )


def _efficiency_json(profile: EfficiencyProfile | None) -> dict[str, object] | None:
    if profile is None:
        return None
    return {
        "referenceBatch": profile.reference_batch,
        "noiseScale": profile.noise_scale,
        "growth": profile.growth,
        "batchExponent": profile.batch_exponent,
        "source": profile.source[:_MAX_SOURCE],
    }


def _efficiency(field: str, value: object) -> EfficiencyProfile | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {
        "referenceBatch", "noiseScale", "growth", "batchExponent", "source",
    }:  # fmt: skip
        raise SpecError(field, value, "null or {referenceBatch, noiseScale, growth, "
                        "batchExponent, source}")  # fmt: skip
    source = value["source"]
    if not isinstance(source, str) or len(source) > _MAX_SOURCE:
        raise SpecError(f"{field}.source", source, f"a string of at most {_MAX_SOURCE} characters")
    try:
        return EfficiencyProfile(
            value["referenceBatch"], value["noiseScale"], value["growth"],
            value["batchExponent"], source,
        )  # fmt: skip
    except SpecError as err:
        raise err.within(field) from None


def _when(field: str, value: object, clock: Callable[[datetime], float]) -> float | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 64:
        raise SpecError(field, value, "null or an ISO 8601 time with its offset")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise SpecError(field, value, "null or an ISO 8601 time with its offset") from None
    if when.tzinfo is None:
        raise SpecError(field, value, "a time with its UTC offset")
    reading = clock(when)
    if not math.isfinite(reading):
        raise SpecError(field, value, "a time the clock can read")
    return reading


_RUN_FIELDS = {"start", "startAt", "last", "lastAt", "stepping", "confirmed"}


def _report_json(report: ProgressReport) -> list[object]:
    return [
        report.gpus, report.batch, report.step_seconds, report.samples, report.grad_sqr,
        report.grad_var,
    ]  # fmt: skip


def _run_json(run: RunMark | None, wall: Callable[[float], datetime]) -> dict[str, object] | None:
    if run is None:
        return None
    return {
        "start": _report_json(run.start),
        "startAt": _iso(run.start_at, wall),
        "last": _report_json(run.last),
        "lastAt": _iso(run.last_at, wall),
        "stepping": run.stepping,
        "confirmed": run.confirmed,
    }


def _report(field: str, value: object) -> ProgressReport:
    gpus, batch, step, samples, grad_sqr, grad_var = _row(field, value, 6)
    try:
        return ProgressReport(gpus, batch, step, samples, grad_sqr, grad_var)  # type: ignore[arg-type]
    except SpecError as err:
        raise err.within(field) from None


def _run(value: object, clock: Callable[[datetime], float]) -> RunMark | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != _RUN_FIELDS:
        raise SpecError("run", value, f"null or an object of exactly {sorted(_RUN_FIELDS)}")
    start_at, last_at = (
        _when("run.startAt", value["startAt"], clock),
        _when("run.lastAt", value["lastAt"], clock),
    )
    if start_at is None or last_at is None:
        raise SpecError("run", value, "both times of the run")
    return RunMark(
        _report("run.start", value["start"]), start_at, _report("run.last", value["last"]),
        last_at, check_float("run.stepping", value["stepping"], minimum=0.0, maximum=MAX_WORK),
        _flag("run.confirmed", value["confirmed"]),
    )  # fmt: skip
