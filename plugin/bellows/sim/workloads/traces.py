"""Job arrival traces: JSON Lines files of jobs and their arrival times, read and written.

One job per line, each line an object of the published JSON Schema (``trace.schema.json``
beside this module). Reading is strict and bounded: each line goes through
:func:`bellows.inputs.parse_json` (at most :data:`MAX_LINE_BYTES`, UTF-8, no ``NaN`` or
``Infinity``, nested at most three deep), a file holds at most :data:`MAX_TRACE_JOBS` jobs,
and the first line that breaks the schema or the job rules of :class:`bellows.jobs.JobSpec`
is refused with its file, line number and field.

Fast path: a line is first decoded by ``orjson`` (ten times faster than ``json`` with
``parse_json``'s hooks) and checked by the plain schema check; a line both accept is one
``parse_json`` and the schema accept too (the schema closes every object and bounds every
number, so no deeper nesting, longer integer or non-finite number can pass), and any other
line takes the strict path above, which decides and names the error. Jobs of one template
share one :class:`~bellows.jobs.StepProfile`, validated once per read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from bellows.inputs import MAX_INT_DIGITS, check_float, parse_json
from bellows.jobs import JobSpec, SpecError, StepProfile, fit_to_cluster
from bellows.sim.workloads.plain_schema import Check, compile_check

if TYPE_CHECKING:
    import jsonschema  # imported when a line breaks the schema: ~0.1 s a valid trace saves

__all__ = [
    "MAX_ARRIVAL_S",
    "MAX_LINE_BYTES",
    "MAX_TRACE_JOBS",
    "TraceError",
    "TraceJob",
    "fit_trace",
    "read_trace",
    "schema",
    "to_record",
    "write_trace",
]

MAX_TRACE_JOBS: Final = 1_000_000  # jobs in one trace (ITP's largest cluster has ~16 000)
MAX_ARRIVAL_S: Final = 1e8  # arrival times: about three years from the trace's start
MAX_LINE_BYTES: Final = 64 * 1024  # one job (a 256-point profile takes about 10 KiB)
_LINE_DEPTH: Final = 3  # the object, its profile, the profile's lists
_WHAT: Final = "a JSON object (one job)"


class TraceError(SpecError):
    """A trace line breaks the schema or the job rules; ``line`` is 1-based.

    ``source`` is the file (empty for lines given in memory); the message starts with it.
    """

    def __init__(
        self, line: int, field: str, value: object, valid: str, *, source: str = ""
    ) -> None:
        self.line = line
        self.source = source
        super().__init__(field, value, valid)
        where = f"{source}: line {line}" if source else f"line {line}"
        self.args = (f"{where}: {self.args[0]}",)


@dataclass(frozen=True)
class TraceJob:
    """A job and the second it arrives."""

    arrival_s: float
    spec: JobSpec
    model: str = ""

    def __post_init__(self) -> None:
        arrival = check_float("arrival_s", self.arrival_s, minimum=0.0, maximum=MAX_ARRIVAL_S)
        object.__setattr__(self, "arrival_s", arrival)
        if not isinstance(self.spec, JobSpec):
            raise SpecError("spec", self.spec, "a JobSpec")
        if not isinstance(self.model, str):
            raise SpecError("model", self.model, "a string")


@cache
def schema() -> dict[str, Any]:
    """The published JSON Schema of one trace line."""
    text = resources.files(__package__).joinpath("trace.schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def _validator() -> jsonschema.Draft202012Validator:
    import jsonschema  # noqa: PLC0415 - lazy, see the import above

    return jsonschema.Draft202012Validator(schema())


@cache
def _plain_check() -> Check:
    return compile_check(schema())


def to_record(job: TraceJob) -> dict[str, Any]:
    """The JSON object of one trace line (a job's measured placements are not carried by
    one: such a job is refused, rather than written without them)."""
    spec = job.spec
    if spec.placements:
        raise SpecError(
            "placements", f"{spec.name}: {len(spec.placements)} measured placements",
            "none: a trace line carries one-GPU step times only (measured placements go in "
            "the job's profile document)",
        )  # fmt: skip
    record: dict[str, Any] = {
        "name": spec.name,
        "arrival_s": job.arrival_s,
        "b_min": spec.b_min,
        "b_max": spec.b_max,
        "batch_size": spec.batch_size,
        "k_max": spec.k_max,
        "m_max": spec.m_max,
        "weights": spec.weights,
        "work": spec.work,
        "profile": {
            "local_batches": list(spec.profile.local_batches),
            "seconds": list(spec.profile.seconds),
        },
        "elastic": spec.elastic,
        "gpus": spec.gpus,
        "category": spec.category,
    }
    if spec.restart_s is not None:
        record["restart_s"] = spec.restart_s
    if spec.min_runtime_s is not None:
        record["min_runtime_s"] = spec.min_runtime_s
    if job.model:
        record["model"] = job.model
    return record


def write_trace(jobs: Iterable[TraceJob], path: Path) -> int:
    """Write ``jobs`` as JSON Lines to ``path``; returns how many were written."""
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for job in jobs:
            out.write(json.dumps(to_record(job), separators=(",", ":")) + "\n")
            count += 1
    return count


def read_trace(source: Path | Sequence[str]) -> tuple[TraceJob, ...]:
    """Parse a trace file (or its lines); raise :class:`TraceError` on the first bad line.

    Only :class:`~bellows.jobs.SpecError` (a :class:`TraceError` for a line) leaves here: an
    unreadable file is one too, naming the file and the reason.
    """
    where = str(source) if isinstance(source, Path) else ""
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    profiles: _Profiles = {}
    try:
        for number, text in _numbered_lines(source, where):
            job = _parse_line(number, text, where, profiles)
            first = seen.setdefault(job.spec.name, number)
            if first != number:
                raise TraceError(
                    number, "name", job.spec.name, f"a name not used before (line {first})",
                    source=where,
                )  # fmt: skip
            jobs.append(job)
    except OSError as err:
        raise SpecError(
            where, err.strerror or type(err).__name__, "a readable trace file"
        ) from None
    return tuple(jobs)


def _numbered_lines(source: Path | Sequence[str], where: str) -> Iterator[tuple[int, str | bytes]]:
    """The lines, numbered from 1, each at most MAX_LINE_BYTES (a longer one is refused
    before it is read whole), at most MAX_TRACE_JOBS of them."""
    if isinstance(source, Path):
        with source.open("rb") as handle:
            number = 0
            while raw := handle.readline(MAX_LINE_BYTES + 1):
                number += 1
                _check_count(number, where)
                if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                    raise TraceError(
                        number, "<line>", f"more than {MAX_LINE_BYTES} bytes",
                        f"a line of at most {MAX_LINE_BYTES} bytes", source=where,
                    )  # fmt: skip
                yield number, raw
    else:
        for number, text in enumerate(source, start=1):
            _check_count(number, where)
            yield number, text


def _check_count(number: int, where: str) -> None:
    if number > MAX_TRACE_JOBS:
        raise TraceError(
            number, "<file>", f"more than {MAX_TRACE_JOBS} lines",
            f"a trace of at most {MAX_TRACE_JOBS} jobs", source=where,
        )  # fmt: skip


_Profiles = dict[tuple[tuple[int, ...], tuple[float, ...]], StepProfile]


def _fast_record(text: str | bytes) -> dict[str, Any] | None:
    """The line's object when ``orjson`` decodes it and the plain check accepts it, else
    ``None``: the strict path decides (see the module docstring)."""
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_LINE_BYTES:
        return None
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return record if _plain_check()(record) else None


def _profile(record: dict[str, Any], profiles: _Profiles) -> StepProfile:
    """The record's profile, shared with the jobs of the same template read before it
    (the plain check has made its batches ``int`` and its times numbers)."""
    key = (tuple(record["profile"]["local_batches"]), tuple(record["profile"]["seconds"]))
    profile = profiles.get(key)
    if profile is None:
        profile = profiles[key] = StepProfile(*key)
    return profile


def _parse_line(
    number: int, text: str | bytes, where: str = "", profiles: _Profiles | None = None
) -> TraceJob:
    record = _fast_record(text)
    if record is None:
        record = _strict_record(number, text, where)
        profiles = None  # not held to the plain check: its numbers' types are unchecked
    try:
        spec = JobSpec(
            name=record["name"],
            b_min=record["b_min"],
            b_max=record["b_max"],
            batch_size=record["batch_size"],
            k_max=record["k_max"],
            m_max=record["m_max"],
            weights=record["weights"],
            work=record["work"],
            profile=(
                _profile(record, profiles)
                if profiles is not None
                else StepProfile(
                    tuple(record["profile"]["local_batches"]),
                    tuple(record["profile"]["seconds"]),
                )
            ),
            elastic=record.get("elastic", True),
            gpus=record.get("gpus", 1),
            category=record.get("category", ""),
            restart_s=record.get("restart_s"),
            min_runtime_s=record.get("min_runtime_s"),
        )
        return TraceJob(record["arrival_s"], spec, record.get("model", ""))
    except SpecError as bad:
        raise TraceError(number, bad.field, bad.value, bad.valid, source=where) from None


def _strict_record(number: int, text: str | bytes, where: str) -> dict[str, Any]:
    """The line's object through ``parse_json`` and the schema, or the error naming why."""
    try:
        record = parse_json(
            "<line>", text, max_bytes=MAX_LINE_BYTES, max_depth=_LINE_DEPTH, what=_WHAT
        )
    except SpecError as bad:
        # parse_json names the line; a refused number is worth naming by its field
        located = _locate(text) if bad.valid == _WHAT else None
        if located is not None:
            raise TraceError(
                number, located[0], located[1],
                "a finite number that JSON allows (no NaN, Infinity or overflowing value)",
                source=where,
            ) from None  # fmt: skip
        raise TraceError(number, bad.field, bad.value, bad.valid, source=where) from None
    if not _plain_check()(record):  # a valid line skips jsonschema's slower walk
        from jsonschema.exceptions import best_match  # noqa: PLC0415 - lazy, as above

        invalid = best_match(_validator().iter_errors(record))
        if invalid is not None:
            raise _schema_error(number, invalid, where)
    return record  # type: ignore[no-any-return]


class _Refused:
    """A number that :func:`parse_json` refuses, kept by the second, diagnostic parse."""

    def __init__(self, text: str) -> None:
        self.text = text


def _refused_float(text: str) -> object:
    return _Refused(text) if not math.isfinite(float(text)) else 0.0


def _refused_int(text: str) -> object:
    digits = text.lstrip("-")
    if len(digits) > MAX_INT_DIGITS or abs(int(text)) >= 1 << 63:
        return _Refused(text[:40])
    return 0


def _locate(text: str | bytes) -> tuple[str, str] | None:
    """The field (as ``profile.seconds.0``) and text of the first number JSON forbids in a
    line ``parse_json`` refused: it only names what was refused, nothing else is taken
    from this parse. ``None`` when the line was refused for another reason."""
    try:
        document = json.loads(
            text, parse_constant=_Refused, parse_float=_refused_float, parse_int=_refused_int
        )
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[str, object]] = [("", document)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, _Refused):
            return path or "<line>", item.text
        if isinstance(item, dict):
            children = [(str(k), v) for k, v in item.items()]
        elif isinstance(item, list):
            children = [(str(i), v) for i, v in enumerate(item)]
        else:
            continue
        stack.extend((f"{path}.{key}" if path else key, v) for key, v in reversed(children))
    return None


def fit_trace(
    jobs: Sequence[TraceJob], gpus: int, *, source: str = ""
) -> tuple[tuple[TraceJob, ...], int]:
    """``jobs`` sized for a cluster of ``gpus`` GPUs, and how many of them were changed.

    Each job goes through :func:`bellows.jobs.fit_to_cluster`, as in the live controller: a
    ``k_max`` above the cluster is lowered to it (a rigid job keeps its GPU count), so that no
    table is sized by a ``k_max`` the cluster cannot give. :class:`TraceError` (``line`` is
    the job's position + 1, its line in ``source``) names a job no batch fits on ``gpus``
    GPUs.
    """
    fitted: list[TraceJob] = []
    changed = 0
    for index, job in enumerate(jobs):
        try:
            spec = fit_to_cluster(job.spec, gpus)
        except SpecError as bad:
            raise TraceError(index + 1, bad.field, bad.value, bad.valid, source=source) from None
        if spec.k_max == job.spec.k_max:
            fitted.append(job)
        else:
            changed += 1
            fitted.append(TraceJob(job.arrival_s, spec, job.model))
    return tuple(fitted), changed


def _schema_error(number: int, error: jsonschema.ValidationError, where: str) -> TraceError:
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "required":
        missing = str(error.message).split("'")[1] if "'" in error.message else "?"
        field = f"{path}.{missing}" if path else missing
        return TraceError(number, field, None, "a value (the field is required)", source=where)
    if error.validator == "additionalProperties":
        return TraceError(
            number, path or "<line>", error.message, "only the schema's fields", source=where
        )
    return TraceError(number, path or "<line>", error.instance, _expected(error), source=where)


_TYPE_WORDS = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
}


def _expected(error: jsonschema.ValidationError) -> str:
    """What the schema keyword that failed would have accepted, in words."""
    keyword, bound = error.validator, error.validator_value
    if keyword == "type":
        return _TYPE_WORDS.get(str(bound), f"type {bound}")
    if keyword == "minimum":
        return f"a number >= {bound}"
    if keyword == "exclusiveMinimum":
        return f"a number > {bound}"
    if keyword == "maximum":
        return f"a number <= {bound if isinstance(bound, int) else f'{bound:g}'}"
    if keyword == "maxItems":
        return f"at most {bound} item(s)"
    if keyword == "minLength":
        return "a non-empty string"
    if keyword == "minItems":
        return f"at least {bound} item(s)"
    return f"{keyword} {bound!r}"
