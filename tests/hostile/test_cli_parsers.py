"""The file parsers behind the commands, fuzzed: a trace line, the ITP and Pollux CSV
importers and the measurement CSVs give valid jobs and rows, or :class:`SpecError` naming
where; nothing else ever leaves them, whatever the bytes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bellows.inputs import SpecError
from bellows.jobs import MAX_BATCH, MAX_GPUS, MAX_STEP_SECONDS, MAX_WEIGHTS, MAX_WORK
from bellows.scaling import default_cluster, load_measurements
from bellows.sim.workloads.generating import (
    MAX_MINUTES,
    MAX_PIECES,
    WorkloadSpec,
    expected_jobs,
)
from bellows.sim.workloads.importing import import_itp, import_pollux
from bellows.sim.workloads.traces import (
    MAX_ARRIVAL_S,
    MAX_TRACE_JOBS,
    TraceError,
    TraceJob,
    fit_trace,
    read_trace,
    to_record,
)
from tests.hostile.test_parsers import hostile_text
from tests.strategies import make_job

CLUSTER = default_cluster()
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Values a field may hold in a hostile line: every JSON type, and numbers JSON forbids.
FORBIDDEN_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "9" * 400, "-" + "9" * 30]
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
FIELDS = [*to_record(TraceJob(1.0, make_job("a"), "m")), "profile.local_batches", "x"]
T = TypeVar("T")


def attempt(call: Callable[[], T]) -> T | SpecError:
    """What ``call`` returns, or the SpecError it raised (anything else fails the test)."""
    try:
        return call()
    except SpecError as err:
        return err


def base_record() -> dict[str, Any]:
    return to_record(TraceJob(12.5, make_job("a"), "m"))


def only_spec_errors(lines: list[str | bytes], tmp: Path) -> tuple[TraceJob, ...] | None:
    """read_trace on these lines (as a file): the jobs, or None after a SpecError."""
    path = tmp / "t.jsonl"
    path.write_bytes(
        b"\n".join(x if isinstance(x, bytes) else x.encode("utf-8", "surrogatepass") for x in lines)
    )
    jobs = attempt(lambda: read_trace(path))
    if isinstance(jobs, SpecError):
        assert str(jobs).startswith(f"{path}: ")
        return None
    for job in jobs:
        assert 0 <= job.arrival_s <= MAX_ARRIVAL_S
        assert 1 <= job.spec.k_max <= MAX_GPUS
        assert 1 <= job.spec.weights <= MAX_WEIGHTS
        assert 0 < job.spec.work <= MAX_WORK
    return jobs


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@FUZZ
@given(field=st.sampled_from(FIELDS), value=json_values)
def test_a_trace_line_with_any_value_in_any_field_is_a_job_or_a_spec_error(
    tmp: Path, field: str, value: object
) -> None:
    record = base_record()
    if "." in field:
        outer, inner = field.split(".")
        record[outer][inner] = value
    else:
        record[field] = value
    only_spec_errors([json.dumps(record)], tmp)


@FUZZ
@given(field=st.sampled_from(FIELDS[:10]), number=st.sampled_from(FORBIDDEN_NUMBERS))
def test_a_number_json_forbids_is_named_by_its_field(tmp: Path, field: str, number: str) -> None:
    line = json.dumps({**base_record(), field: "SLOT"}).replace('"SLOT"', number)
    path = tmp / "n.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert (caught.value.line, caught.value.field) == (1, field)
    assert str(caught.value).startswith(f"{path}: line 1: {field}=")


@FUZZ
@given(
    line=st.one_of(
        hostile_text,
        st.binary(max_size=200),
        st.builds(
            lambda text, at, junk: text[:at] + junk + text[at:],
            st.just(json.dumps(base_record())),
            st.integers(0, 400),
            st.text(max_size=3) | st.sampled_from(["NaN", "1e400", "[[[[", "\\ud800", "\x00"]),
        ),
    )
)
def test_any_bytes_as_a_trace_line_are_a_job_or_a_spec_error(tmp: Path, line: str | bytes) -> None:
    only_spec_errors([line, json.dumps({**base_record(), "name": "b"})], tmp)


@FUZZ
@given(lines=st.lists(hostile_text, max_size=5))
def test_read_trace_of_lines_in_memory_gives_only_trace_errors(lines: list[str]) -> None:
    err = attempt(lambda: read_trace(lines))
    if isinstance(err, SpecError):
        assert isinstance(err, TraceError)
        assert str(err).startswith(f"line {err.line}: ")


@FUZZ
@given(k_max=st.integers(1, MAX_GPUS), gpus=st.integers(1, 4096))
def test_fit_trace_never_leaves_a_k_max_above_the_cluster_of_an_elastic_job(
    k_max: int, gpus: int
) -> None:
    job = make_job("a", k_max=k_max, b_max=min(MAX_BATCH, k_max * 128))
    (fitted,), changed = fit_trace([TraceJob(0.0, job)], gpus)
    assert fitted.spec.k_max == min(k_max, gpus)
    assert changed == (k_max > gpus)


# --- the CSV importers -------------------------------------------------------------------------

CELLS = st.one_of(
    hostile_text,
    st.sampled_from(
        [
            "1",
            "8",
            "64",
            "0",
            "-1",
            "nan",
            "inf",
            "1e400",
            "²",
            "",
            "resnet50",
            "cifar10",
            "bert",
            '"a,b"',
            "1.5",
            "65537",
        ]
    ),
)
ITP_COLUMNS = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration"
POLLUX_COLUMNS = "name,time,application,num_replicas,batch_size"
MEASUREMENT_COLUMNS = [
    "placement,local_bsz,step_time,sync_time",
    "num_nodes,num_replicas,local_bsz,step_time,sync_time",
]


def csv_text(header: str, rows: list[list[str]]) -> str:
    return "\n".join([header, *(",".join(row) for row in rows)]) + "\n"


def rows_of(columns: int) -> st.SearchStrategy[list[list[str]]]:
    return st.lists(
        st.lists(CELLS, min_size=columns - 1, max_size=columns + 1), min_size=1, max_size=4
    )


@FUZZ
@given(rows=rows_of(8), raw=st.none() | st.binary(max_size=120))
def test_itp_import_gives_jobs_or_a_spec_error_naming_the_file(
    tmp: Path, rows: list[list[str]], raw: bytes | None
) -> None:
    path = tmp / "itp.csv"
    path.write_bytes(raw if raw is not None else csv_text(ITP_COLUMNS, rows).encode())
    jobs = attempt(lambda: import_itp(path, cluster=CLUSTER))
    if isinstance(jobs, SpecError):
        assert jobs.field.startswith("itp.csv")
        return
    assert len({j.spec.name for j in jobs}) == len(jobs)
    assert all(0 <= j.arrival_s <= MAX_ARRIVAL_S for j in jobs)


@FUZZ
@given(rows=rows_of(5), raw=st.none() | st.binary(max_size=120))
def test_pollux_import_gives_jobs_or_a_spec_error_naming_the_file(
    tmp: Path, rows: list[list[str]], raw: bytes | None
) -> None:
    path = tmp / "pollux.csv"
    path.write_bytes(raw if raw is not None else csv_text(POLLUX_COLUMNS, rows).encode())
    jobs = attempt(lambda: import_pollux(path))
    if isinstance(jobs, SpecError):
        assert jobs.field.startswith("pollux.csv")
        return
    assert len({j.spec.name for j in jobs}) == len(jobs)


@FUZZ
@given(
    header=st.sampled_from(MEASUREMENT_COLUMNS),
    rows=rows_of(5),
    raw=st.none() | st.binary(max_size=120),
)
def test_measurement_csv_gives_rows_or_a_spec_error_naming_the_file(
    tmp: Path, header: str, rows: list[list[str]], raw: bytes | None
) -> None:
    path = tmp / "m.csv"
    path.write_bytes(raw if raw is not None else csv_text(header, rows).encode())
    table = attempt(lambda: load_measurements(path))
    if isinstance(table, SpecError):
        assert table.field.startswith(str(path))
        return
    for row in table.rows:
        assert 1 <= row.nodes <= row.gpus <= MAX_GPUS
        assert 0 < row.step_time <= MAX_STEP_SECONDS


# --- the generator's bounds ----------------------------------------------------------------


@FUZZ
@given(
    minutes=st.floats() | st.integers(-5, 10**20),
    gpus=st.integers(-5, 10**9) | st.floats(),
    load=st.floats(),
    period=st.floats(),
)
def test_a_workload_spec_is_bounded_or_a_spec_error(
    minutes: float, gpus: Any, load: float, period: float
) -> None:
    spec = attempt(
        lambda: WorkloadSpec("bursty", minutes, (1, 2), gpus, load_high=load, period_min=period)
    )
    if isinstance(spec, SpecError):
        return
    assert 0 < spec.minutes <= MAX_MINUTES
    assert spec.minutes / spec.period_min <= MAX_PIECES
    assert expected_jobs(spec) <= MAX_TRACE_JOBS
