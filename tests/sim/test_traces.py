"""The JSON Lines trace format: round trip, schema, refusals naming the line and field."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from bellows.jobs import (
    MAX_BATCH,
    MAX_GPUS,
    MAX_LOCAL_BATCH,
    MAX_PROFILE_POINTS,
    MAX_STEP_SECONDS,
    MAX_WEIGHTS,
    MAX_WORK,
    SpecError,
)
from bellows.sim.workloads import traces
from bellows.sim.workloads.traces import (
    MAX_ARRIVAL_S,
    TraceError,
    TraceJob,
    read_trace,
    schema,
    to_record,
    write_trace,
)
from tests.strategies import make_job


def _line(**changes: object) -> str:
    record = to_record(TraceJob(12.5, make_job("a"), "imagenet"))
    record.update(changes)
    return json.dumps(record)


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())


def test_round_trip(tmp_path: Path) -> None:
    jobs = [TraceJob(float(i), make_job(f"j{i}", batch_size=64), "m") for i in range(3)]
    path = tmp_path / "t.jsonl"
    assert write_trace(jobs, path) == 3
    assert read_trace(path) == tuple(jobs)


def test_optional_fields_default() -> None:
    record = json.loads(_line())
    for key in ("elastic", "gpus", "category", "model"):
        record.pop(key)
    (job,) = read_trace([json.dumps(record)])
    assert job.spec.elastic
    assert job.spec.gpus == 1
    assert job.model == ""


@pytest.mark.parametrize(
    ("lines", "line", "field"),
    [
        ([_line(), _line(name="b", b_min="x")], 2, "b_min"),
        ([_line(arrival_s=-1)], 1, "arrival_s"),
        ([_line(), _line(name="c"), "{not json"], 3, "<line>"),
        ([_line(surprise=1)], 1, "<line>"),
        ([_line(profile={"local_batches": [8], "seconds": [0]})], 1, "profile.seconds.0"),
        ([_line(b_min=600)], 1, "b_min"),  # JobSpec rule: b_min <= b_max
        ([_line(), _line()], 2, "name"),  # duplicate
    ],
)
def test_bad_lines_are_refused_with_line_and_field(lines: list[str], line: int, field: str) -> None:
    with pytest.raises(TraceError) as caught:
        read_trace(lines)
    assert caught.value.line == line
    assert caught.value.field == field
    assert str(caught.value).startswith(f"line {line}: {field}=")


def test_missing_field_is_named() -> None:
    record = json.loads(_line())
    del record["work"]
    with pytest.raises(TraceError, match=r"line 1: work=None .*required"):
        read_trace([json.dumps(record)])


def test_schema_maxima_are_the_documented_job_bounds() -> None:
    fields = schema()["properties"]
    profile = fields["profile"]["properties"]
    assert fields["arrival_s"]["maximum"] == MAX_ARRIVAL_S
    assert fields["k_max"]["maximum"] == fields["gpus"]["maximum"] == MAX_GPUS
    for name in ("b_min", "b_max", "batch_size"):
        assert fields[name]["maximum"] == MAX_BATCH
    assert fields["m_max"]["maximum"] == profile["local_batches"]["items"]["maximum"]
    assert fields["m_max"]["maximum"] == MAX_LOCAL_BATCH
    assert fields["weights"]["maximum"] == MAX_WEIGHTS
    assert fields["work"]["maximum"] == MAX_WORK
    assert profile["seconds"]["items"]["maximum"] == MAX_STEP_SECONDS
    assert profile["seconds"]["maxItems"] == profile["local_batches"]["maxItems"]
    assert profile["seconds"]["maxItems"] == MAX_PROFILE_POINTS


def test_a_file_error_names_the_file_and_an_in_memory_one_does_not(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(_line() + "\n" + _line(name="b", arrival_s=1e9) + "\n")
    with pytest.raises(
        TraceError,
        match=rf"^{path}: line 2: arrival_s=1000000000.0 is invalid: expected a number <= 1e\+08",
    ):
        read_trace(path)
    with pytest.raises(TraceError, match=r"^line 1: <line>="):
        read_trace(["[1, 2]"])
    with pytest.raises(SpecError, match=rf"^{tmp_path}=.* expected a readable trace file"):
        read_trace(tmp_path)


def _both_paths(line: str | bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    """What the fast path (orjson + plain check) and the strict path alone make of ``line``:
    the job, or the refusal's message."""

    def outcome() -> object:
        try:
            return read_trace([line])  # type: ignore[list-item]
        except TraceError as err:
            return str(err)

    fast = outcome()
    with monkeypatch.context() as patch:
        patch.setattr(traces, "_fast_record", lambda _text: None)
        strict = outcome()
    return fast, strict


_PROFILE = {"local_batches": [1, 2], "seconds": [0.1, 0.15]}


@pytest.mark.parametrize(
    "line",
    [
        _line(),
        _line() + "  \r\n",
        _line(name="a", weights=2**63),  # beyond 64 bits signed: the hooks refuse it
        _line(weights=2**64),  # beyond what orjson reads
        _line(weights=10.0),  # an integral float: jsonschema takes it, the plain check not
        _line(profile={"local_batches": [1.0, 2], "seconds": [0.1, 0.15]}),
        _line(profile={**_PROFILE, "extra": [[[1]]]}),  # deeper, and a closed object
        _line(extra={"a": {"b": {"c": 1}}}),
        _line(name="x" * (64 * 1024)),  # over the line's byte limit
        _line(name="\ud800"),  # a lone surrogate: json reads it, orjson does not
        _line(work=1e-400),  # underflows to 0: not a positive work
        _line().replace('"work":', '"work": 1, "work":'),  # duplicate keys: the last wins
        _line().replace('"work": ', '"work": NaN, "ignored": '),
        _line().replace('"work": ', '"work": 1e400, "ignored": '),
        "\ufeff" + _line(),  # a byte-order mark
        "[1, 2]",
        "",
    ],
)
def test_the_fast_path_decides_every_line_as_the_strict_path(
    line: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, strict = _both_paths(line, monkeypatch)
    assert fast == strict
    fast_bytes, strict_bytes = _both_paths(line.encode("utf-8", "surrogatepass"), monkeypatch)
    assert fast_bytes == strict_bytes


def test_jobs_of_one_template_share_one_profile() -> None:
    lines = [_line(name=f"j{i}") for i in range(3)] + [_line(name="k", profile=_PROFILE)]
    jobs = read_trace(lines)
    assert jobs[0].spec.profile is jobs[1].spec.profile is jobs[2].spec.profile
    assert jobs[3].spec.profile is not jobs[0].spec.profile
    assert jobs[3].spec.profile.local_batches == (1, 2)
