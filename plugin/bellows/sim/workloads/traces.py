"""Job arrival traces: JSON Lines files of jobs and their arrival times, read and written.

One job per line, each line an object of the published JSON Schema (``trace.schema.json``
beside this module). Reading is strict: the first line that breaks the schema or the job
rules of :class:`bellows.jobs.JobSpec` is refused with its line number and field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from bellows.jobs import JobSpec, SpecError, StepProfile

__all__ = ["TraceError", "TraceJob", "read_trace", "schema", "to_record", "write_trace"]


class TraceError(SpecError):
    """A trace line breaks the schema or the job rules; ``line`` is 1-based."""

    def __init__(self, line: int, field: str, value: object, valid: str) -> None:
        self.line = line
        super().__init__(field, value, valid)
        self.args = (f"line {line}: {self.args[0]}",)


@dataclass(frozen=True)
class TraceJob:
    """A job and the second it arrives."""

    arrival_s: float
    spec: JobSpec
    model: str = ""


@cache
def schema() -> dict[str, Any]:
    """The published JSON Schema of one trace line."""
    text = resources.files(__package__).joinpath("trace.schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema())


def to_record(job: TraceJob) -> dict[str, Any]:
    """The JSON object of one trace line."""
    spec = job.spec
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
    """Parse a trace file (or its lines); raise :class:`TraceError` on the first bad line."""
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    for number, text in _numbered_lines(source):
        job = _parse_line(number, text)
        first = seen.setdefault(job.spec.name, number)
        if first != number:
            raise TraceError(
                number, "name", job.spec.name, f"a name not used before (line {first})"
            )
        jobs.append(job)
    return tuple(jobs)


def _numbered_lines(source: Path | Sequence[str]) -> Iterator[tuple[int, str]]:
    if isinstance(source, Path):
        with source.open(encoding="utf-8") as lines:
            yield from enumerate(lines, start=1)
    else:
        yield from enumerate(source, start=1)


def _parse_line(number: int, text: str) -> TraceJob:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise TraceError(
            number, "<line>", text.strip()[:60], f"a JSON object ({error.msg})"
        ) from None
    invalid = jsonschema.exceptions.best_match(_validator().iter_errors(record))
    if invalid is not None:
        raise _schema_error(number, invalid)
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
            profile=StepProfile(
                tuple(record["profile"]["local_batches"]), tuple(record["profile"]["seconds"])
            ),
            elastic=record.get("elastic", True),
            gpus=record.get("gpus", 1),
            category=record.get("category", ""),
        )
    except SpecError as bad:
        raise TraceError(number, bad.field, bad.value, bad.valid) from None
    return TraceJob(float(record["arrival_s"]), spec, record.get("model", ""))


def _schema_error(number: int, error: jsonschema.ValidationError) -> TraceError:
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "required":
        missing = str(error.message).split("'")[1] if "'" in error.message else "?"
        field = f"{path}.{missing}" if path else missing
        return TraceError(number, field, None, "a value (the field is required)")
    if error.validator == "additionalProperties":
        return TraceError(number, path or "<line>", error.message, "only the schema's fields")
    return TraceError(number, path or "<line>", error.instance, _expected(error))


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
    if keyword == "minLength":
        return "a non-empty string"
    if keyword == "minItems":
        return f"at least {bound} item(s)"
    return f"{keyword} {bound!r}"
