"""Item 9 of the hostile-input issue, as tests: every command refuses a bad flag or file with
one clean ``Error:`` line (exit 2 for a usage error, 1 for bad data), never a traceback, and
what it refuses leaves nothing half-written."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from bellows.cli.main import main
from bellows.cli.params import check_output_dir, output_errors
from bellows.jobs import MAX_GPUS, MAX_WEIGHTS
from bellows.sim.workloads.traces import MAX_LINE_BYTES, TraceJob, read_trace, to_record
from bellows.sim.workloads.traces import write_trace as write_jobs
from tests.strategies import make_job

ITP_HEADER = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration"
ITP_ROW = "a,100,10,resnet50,200,64,2,600"
POLLUX_HEADER = "name,time,application,num_replicas,batch_size"
POLLUX_ROW = "a,107,cifar10,2,256"
PLACEMENTS_HEADER = "placement,local_bsz,step_time,sync_time"
CLUSTER_PROFILE = {
    "apiVersion": "bellows.io/v1alpha1",
    "kind": "ClusterProfile",
    "allreduce": {
        "intraNode": {"latency": 0.001, "secondsPerWeight": 1e-9},
        "interNode": {"latency": 0.002, "secondsPerWeight": 5e-9},
    },
}


def run(args: Sequence[str]) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def refused(args: Sequence[object], *, code: int, says: Sequence[str] = ()) -> str:
    """Run a command that must fail cleanly: ``code``, an ``Error:`` line, no traceback."""
    result = run([str(a) for a in args])
    text = result.output
    assert result.exit_code == code, text
    # click exits through SystemExit; anything else escaped the command
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in text
    assert "Error: " in text
    for fragment in says:
        assert fragment in text, text
    return text


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small valid trace (12 jobs of the test factory, k_max 8)."""
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    write_jobs([TraceJob(60.0 * i, make_job(f"j{i}"), "m") for i in range(12)], path)
    return path


def lines_with(trace: Path, tmp_path: Path, text: str, *, at: int = 2) -> Path:
    """``trace`` with line ``at`` replaced by ``text``."""
    lines = trace.read_text().splitlines()
    lines[at - 1] = text
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    return bad


def record(**changes: object) -> dict[str, object]:
    out = to_record(TraceJob(5.0, make_job("x"), "m"))
    out.update(changes)
    return out


# --- NaN and Infinity arrivals, huge k_max and weights: refused by validate and simulate ---


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('"arrival_s":NaN', "arrival_s='NaN'"),
        ('"arrival_s":Infinity', "arrival_s='Infinity'"),
        ('"arrival_s":-Infinity', "arrival_s='-Infinity'"),
        ('"arrival_s":1e400', "arrival_s='1e400'"),
        ('"arrival_s":1e300', "arrival_s=1e+300"),
        ('"weights":1e400', "weights='1e400'"),
        ('"weights":' + "9" * 400, "weights='" + "9" * 30),
        ('"k_max":1e7', "k_max=10000000.0"),
        ('"k_max":10000000', "k_max=10000000"),
        ('"weights":1e300', "weights=1e+300"),
    ],
)
def test_a_trace_line_with_a_number_beyond_its_bounds_is_refused_with_line_and_field(
    trace: Path, tmp_path: Path, raw: str, field: str
) -> None:
    text = json.dumps(record(), separators=(",", ":"))
    key = raw.split(":", maxsplit=1)[0]
    start = text.index(key)
    end = text.index(",", start)
    bad = lines_with(trace, tmp_path, text[:start] + raw + text[end:], at=3)
    for command in (["workload", "validate", bad], ["simulate", bad, "--gpus", 8]):
        refused(
            [*command, "--out", tmp_path / "o"] if command[0] == "simulate" else command,
            code=1,
            says=[f"{bad}: line 3: {field}"],
        )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'{"name": "\xff\xfe"}\n', "in UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000 + b"\n", "bytes"),
        (b"[" * 5_000 + b"]" * 5_000 + b"\n", "nested at most 3 deep"),
        (b'{"a": {"b": {"c": {"d": 1}}}}\n', "nested at most 3 deep"),
        (b"x" * (MAX_LINE_BYTES + 10) + b"\n", f"at most {MAX_LINE_BYTES} bytes"),
        (b"\x00\x01\x02\n", "valid JSON"),
        (b"\n", "valid JSON"),
    ],
)
def test_hostile_trace_files_are_refused_by_validate(
    tmp_path: Path, content: bytes, says: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    refused(["workload", "validate", bad], code=1, says=[f"{bad}: line 1: ", says])


def test_validate_accepts_a_good_trace_and_a_directory_is_a_usage_error(
    trace: Path, tmp_path: Path
) -> None:
    result = run(["workload", "validate", trace])
    assert result.exit_code == 0, result.output
    assert "12 jobs, valid" in result.output
    refused(["workload", "validate", tmp_path], code=2, says=["is a directory"])
    refused(["workload", "validate", tmp_path / "none.jsonl"], code=2, says=["does not exist"])


# --- k_max above the cluster: simulate clamps it, with one warning line -----------------------


def test_simulate_clamps_k_max_to_the_cluster_with_one_warning_line(tmp_path: Path) -> None:
    jobs = [
        TraceJob(30.0 * i, make_job(f"big{i}", k_max=MAX_GPUS, b_max=MAX_GPUS * 128), "m")
        for i in range(40)
    ]
    jobs += [TraceJob(30.0 * i + 1, make_job(f"small{i}", k_max=2), "m") for i in range(5)]
    path = tmp_path / "wide.jsonl"
    write_jobs(jobs, path)
    started = time.monotonic()
    result = run(["simulate", path, "--gpus", 8, "--queue", "--no-plots", "--out", tmp_path / "o"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning")]
    assert warnings == [
        "warning: 40 of 45 jobs ask for more GPUs (k_max) than the cluster's 8; "
        "each is given at most 8"
    ]
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["jobs_total"] == 45
    # tables sized by a k_max of 65 536 for 40 jobs would take minutes and gigabytes
    assert time.monotonic() - started < 120


def test_simulate_refuses_a_job_no_batch_of_which_fits_the_cluster(tmp_path: Path) -> None:
    # b_min 600 needs 5 GPUs of m_max 128: on 4 GPUs no batch fits once k_max is clamped
    job = make_job("wide", b_min=600, b_max=4096, k_max=32, batch_size=600)
    path = tmp_path / "t.jsonl"
    write_jobs([TraceJob(0.0, job, "m")], path)
    refused(
        ["simulate", path, "--gpus", 4, "--out", tmp_path / "o"],
        code=1,
        says=[f"{path}: line 1: k_max=32 is invalid"],
    )


# --- every float and int flag: finite, bounded, ASCII ---------------------------------------

HOSTILE_FLOATS = ["nan", "NaN", "inf", "-inf", "1e400", "1_0", "١٢", "0x10", "", " ", "1e"]
HOSTILE_INTS = ["²", "١٢", "1_000", "1e3", "-1", "9" * 5000, "nan", "", "0x10", "+3"]


def _simulate(trace: Path, out: Path, *flags: object) -> list[object]:
    return ["simulate", trace, "--gpus", 8, "--out", out, *flags]


FLOAT_FLAGS = [
    (["--horizon-min"], "--horizon-min"),
    (["--delta-min"], "--delta-min"),
    (["--early-share"], "--early-share"),
    (["--restart-cost-s"], "--restart-cost-s"),
    (["--hysteresis"], "--hysteresis"),
]


@pytest.mark.parametrize("value", HOSTILE_FLOATS)
@pytest.mark.parametrize("flag", [f for _, f in FLOAT_FLAGS])
def test_simulate_float_flags_refuse_non_finite_and_non_ascii(
    trace: Path, tmp_path: Path, flag: str, value: str
) -> None:
    refused(
        _simulate(trace, tmp_path / "o", flag, value),
        code=2,
        says=[f"Invalid value for '{flag}'", "is invalid: expected"],
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("flag", "value", "valid"),
    [
        ("--horizon-min", "0", "0<x<=1e+07"),
        ("--horizon-min", "1e8", "1e+07"),
        ("--delta-min", "-1", "[0, 10080]"),
        ("--early-share", "-0.1", "[0, 1]"),
        ("--early-share", "1.5", "[0, 1]"),
        ("--restart-cost-s", "1e6", "[0, 86400]"),
        ("--hysteresis", "1e9", "[0, 1000]"),
    ],
)
def test_simulate_float_flags_have_documented_ranges(
    trace: Path, tmp_path: Path, flag: str, value: str, valid: str
) -> None:
    text = refused(_simulate(trace, tmp_path / "o", flag, value), code=2)
    help_text = run(["simulate", "--help"]).output
    assert valid in text or valid in help_text


@pytest.mark.parametrize("value", [*HOSTILE_INTS, "0", str(MAX_GPUS + 1)])
def test_simulate_gpus_is_an_ascii_integer_in_range(
    trace: Path, tmp_path: Path, value: str
) -> None:
    refused(
        ["simulate", trace, "--gpus", value, "--out", tmp_path / "o"],
        code=2,
        says=["Invalid value for '--gpus'", f"[1, {MAX_GPUS}]"],
    )


GENERATE = ["workload", "generate", "--pattern", "bursty", "--minutes", "30", "--gpus", "8"]


@pytest.mark.parametrize(
    ("flag", "values"),
    [
        ("--minutes", [*HOSTILE_FLOATS, "0", "1e12", "1e7"]),
        ("--period-min", [*HOSTILE_FLOATS, "0", "-5"]),
        ("--load-high", [*HOSTILE_FLOATS, "0", "1e6"]),
        ("--seed", HOSTILE_INTS),
        ("--gpus", [*HOSTILE_INTS, "0", "70000"]),
        ("--categories", ["1,٣", "5", "0", "", "1,2,3,4,1", "nan", "1;2", "²"]),
    ],
)
def test_workload_generate_flags_are_bounded(tmp_path: Path, flag: str, values: list[str]) -> None:
    for value in values:
        args = [*GENERATE, "--seed", "1", "--out", tmp_path / "t.jsonl"]
        where = args.index(flag) + 1 if flag in args else None
        if where is None:
            args += [flag, value]
        else:
            args[where] = value
        refused(args, code=2, says=[f"Invalid value for '{flag}'"])
    assert not (tmp_path / "t.jsonl").exists()


def test_workload_generate_refuses_a_workload_of_too_many_jobs_before_drawing_any(
    tmp_path: Path,
) -> None:
    out = tmp_path / "t.jsonl"
    started = time.monotonic()
    base = ["workload", "generate", "--pattern", "high", "--seed", "1", "--out", out]
    refused(
        [*base, "--minutes", "500000", "--gpus", "60000"],
        code=1,
        says=["at most 1000000 jobs", "expect"],
    )
    refused(
        [*base, "--minutes", "500000", "--gpus", "8", "--load-high", "900"],
        code=1,
        says=["at most 1000000 jobs"],
    )
    refused(
        [
            "workload",
            "generate",
            "--pattern",
            "bursty",
            "--minutes",
            "500000",
            "--gpus",
            "8",
            "--period-min",
            "0.001",
            "--seed",
            "1",
            "--out",
            out,
        ],
        code=1,
        says=["period_min=0.001"],
    )
    assert time.monotonic() - started < 30
    assert not out.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["demo", "--gpus", "nan"],
        ["demo", "--gpus", "100000"],
        ["demo", "--minutes", "inf"],
        ["demo", "--minutes", "1e9"],
        ["demo", "--speedup", "nan"],
        ["demo", "--speedup", "0"],
        ["demo", "--seed", "²"],
        ["demo", "--delta-min", "-inf"],
        ["reproduce", "--seed", "nan"],
        ["reproduce", "--seed", "-1"],
        ["reproduce", "--only", "fig99"],
        ["calibrate", "--overlap", "nan"],
        ["calibrate", "--overlap", "0.5"],
        ["calibrate", "--iterations", "²"],
        ["calibrate", "--warmup", "-1"],
        ["calibrate", "--sizes", "1e4,nan"],
        ["calibrate", "--sizes", "1e400"],
        ["calibrate", "--sizes", "1e12"],
        ["calibrate", "--sizes", "1.5"],
        ["calibrate", "--processes", "1"],
        ["calibrate", "--processes", "2,inf"],
        ["calibrate", "--gpus-per-node", "0"],
        ["profile", "--model", "m:f", "--input-shape", "3", "--batches", "8,nan"],
        ["profile", "--model", "m:f", "--input-shape", "3", "--batches", "8," + "9" * 5000],
        ["profile", "--model", "m:f", "--input-shape", "3", "--batches", ",".join(["8"] * 300)],
        ["profile", "--model", "m:f", "--input-shape", "3", "--batches", "8", "--iterations", "0"],
        ["profile", "--model", "m:f", "--input-shape", "3", "--batches", "8", "--classes", "1"],
        ["profile", "--model", "m:f", "--input-shape", "3", "--batches", "8", "--vocab", "1e9"],
        ["profile", "--model", "m:f", "--input-shape", "3", "--batches", "8", "--threads", "0"],
        [
            "profile",
            "--model",
            "m:f",
            "--input-shape",
            "3",
            "--batches",
            "8",
            "--configmap",
            "Bad_Name\n",
        ],
    ],
)
def test_every_numeric_flag_of_the_other_commands_is_checked_before_any_work(
    args: list[str],
) -> None:
    # refused while parsing: nothing starts (no nats-server, no torch import, no simulation)
    refused(args, code=2, says=["Invalid value for"])


# --- --cluster and other JSON files: missing, not JSON, not UTF-8, deeply nested -------------

BAD_JSON_FILES = {
    "missing": None,
    "not-json": b"{not json",
    "not-utf8": b'{"apiVersion": "\xff"}',
    "deep": b"[" * 50_000 + b"]" * 50_000,
    "nested": json.dumps({"a": {"b": {"c": {"d": {"e": 1}}}}}).encode(),
    "nan": json.dumps({**CLUSTER_PROFILE, "overlap": float("nan")}).encode(),
    "huge": b'{"source": "' + b"x" * (2 << 20) + b'"}',
    "huge-number": json.dumps(CLUSTER_PROFILE).replace("0.001", "1e400").encode(),
    "list": b"[1, 2]",
    "unknown-key": json.dumps({**CLUSTER_PROFILE, "surprise": 1}).encode(),
}


def _json_file(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.json"
    content = BAD_JSON_FILES[kind]
    if content is not None:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize("kind", sorted(BAD_JSON_FILES))
def test_a_bad_cluster_file_is_a_usage_error_for_every_command(
    trace: Path, tmp_path: Path, kind: str, shared_data: Path
) -> None:
    bad = _json_file(tmp_path, kind)
    itp = shared_data / "itp/195job.csv"
    placements = shared_data / "pollux/profiles/bert/placements.csv"
    commands: list[list[object]] = [
        ["simulate", trace, "--gpus", 8, "--out", tmp_path / "o", "--cluster", bad],
        [*GENERATE, "--seed", 1, "--out", tmp_path / "t.jsonl", "--cluster", bad],
        ["workload", "import", "itp", itp, "--out", tmp_path / "i.jsonl", "--cluster", bad],
        [
            "jsa",
            "fit",
            placements,
            "--weights",
            1000,
            "--out",
            tmp_path / "p.json",
            "--cluster",
            bad,
        ],
    ]
    for args in commands:
        refused(args, code=2, says=["Invalid value for '--cluster'", str(bad)])
    assert list(tmp_path.glob("o")) == list(tmp_path.glob("*.jsonl")) == []


@pytest.mark.parametrize("kind", sorted(BAD_JSON_FILES))
def test_a_bad_job_profile_is_a_usage_error_for_jsa_predict(
    tmp_path: Path, kind: str, shared_data: Path
) -> None:
    bad = _json_file(tmp_path, kind)
    rows = shared_data / "pollux/profiles/bert/scalability.csv"
    refused(
        ["jsa", "predict", bad, rows, "--out", tmp_path / "p.csv"],
        code=2,
        says=["Invalid value for 'PROFILE'", str(bad)],
    )


@pytest.mark.parametrize("kind", ["not-json", "not-utf8", "deep", "nan", "list", "huge"])
def test_events_publish_refuses_a_bad_spec_file_before_connecting(
    tmp_path: Path, kind: str
) -> None:
    bad = _json_file(tmp_path, kind)
    args = [
        "events",
        "publish",
        "--type",
        "job.arrived",
        "--kind",
        "PyTorchJob",
        "--namespace",
        "default",
        "--name",
        "a",
        "--uid",
        "u1",
        "--spec-file",
        bad,
    ]
    refused(args, code=2, says=["Invalid value for '--spec-file'"])


def test_profile_model_kwargs_refuse_nan_and_deep_json() -> None:
    base = ["profile", "--model", "json:loads", "--input-shape", "3", "--batches", "8"]
    for kwargs in ('{"a": NaN}', "[" * 10_000 + "]" * 10_000, '{"a": 1e400}', "{"):
        refused(
            [*base, "--model-kwargs", kwargs], code=2, says=["Invalid value for '--model-kwargs'"]
        )


@pytest.mark.parametrize(
    "shape", ["²,3", "0", "3,-1", "1e3", "9" * 500, "65536,65536", "1,1,1,1,1,1,1,1,1"]
)
def test_profile_input_shape_is_parsed_with_bounds(shape: str) -> None:
    pytest.importorskip("torch")
    refused(
        ["profile", "--model", "json:loads", "--input-shape", shape, "--batches", "8"],
        code=2,
        says=["--input-shape="],
    )


# --- unwritable outputs: refused before any work, nothing left behind -----------------------


@pytest.fixture
def blocked(tmp_path: Path) -> Path:
    """A regular file: any path below it cannot be created (as root, too)."""
    path = tmp_path / "a-file"
    path.write_text("x")
    return path


def test_unwritable_outputs_are_usage_errors_before_any_work(
    trace: Path, tmp_path: Path, blocked: Path, shared_data: Path
) -> None:
    itp = shared_data / "itp/195job.csv"
    placements = shared_data / "pollux/profiles/bert/placements.csv"
    profile = tmp_path / "profile.json"
    fitted = run(["jsa", "fit", placements, "--weights", 102_682_418, "--out", profile])
    assert fitted.exit_code == 0, fitted.output
    below = blocked / "sub" / "deeper"
    commands: list[tuple[list[object], str]] = [
        (["simulate", trace, "--gpus", 8, "--out", below], "--out"),
        (["simulate", trace, "--gpus", 8, "--out", blocked], "--out"),
        ([*GENERATE, "--seed", 1, "--out", below], "--out"),
        ([*GENERATE, "--seed", 1, "--out", tmp_path], "--out"),
        (["workload", "import", "itp", itp, "--out", below], "--out"),
        (["jsa", "fit", placements, "--weights", 1000, "--out", below], "--out"),
        (["jsa", "predict", profile, placements, "--out", below], "--out"),
        (["reproduce", "--quick", "--only", "fig5a", "--out", below], "--out"),
        (
            [
                "reproduce",
                "--quick",
                "--only",
                "fig5a",
                "--out",
                tmp_path / "r.md",
                "--figures",
                below,
            ],
            "--figures",
        ),
        (["demo", "--json-out", below], "--json-out"),
        (
            [
                "profile",
                "--model",
                "json:loads",
                "--input-shape",
                "3",
                "--batches",
                "8",
                "-o",
                below,
            ],
            "--output",
        ),
        (["calibrate", "-o", below], "--output"),
        (["calibrate", "--measurements", below], "--measurements"),
    ]
    before = sorted(tmp_path.rglob("*"))
    for args, flag in commands:
        refused(args, code=2, says=["Invalid value for ", f"{flag}'", "expected a"])
    assert sorted(tmp_path.rglob("*")) == before  # nothing created, not even a folder


def test_an_output_folder_is_probed_and_removed_again(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c"
    assert check_output_dir(target) == target
    assert not (tmp_path / "a").exists()  # the probe leaves nothing behind


def test_a_write_that_fails_after_the_check_is_one_clean_error(tmp_path: Path) -> None:
    # the output was fine when checked; then its folder became a file, or the write failed
    (tmp_path / "gone").write_text("x")
    with (
        pytest.raises(click.ClickException, match="cannot be written"),
        output_errors(tmp_path / "gone" / "t.jsonl"),
    ):
        pytest.fail("the folder cannot be created, so the body never runs")
    out = tmp_path / "o.jsonl"
    out.mkdir()
    with pytest.raises(click.ClickException) as caught, output_errors(out):
        out.write_text("x")  # IsADirectoryError, an OSError like a full disk
    assert caught.value.message.startswith(f"{out}: cannot be written")


# --- jsa fit --weights, measurement CSVs ------------------------------------------------------


@pytest.mark.parametrize("value", ["1e300", "9" * 301, str(MAX_WEIGHTS + 1), "0", "²", "nan"])
def test_jsa_fit_weights_are_bounded(tmp_path: Path, shared_data: Path, value: str) -> None:
    placements = shared_data / "pollux/profiles/bert/placements.csv"
    refused(
        ["jsa", "fit", placements, "--weights", value, "--out", tmp_path / "p.json"],
        code=2,
        says=["Invalid value for '--weights'", f"[1, {MAX_WEIGHTS}]"],
    )
    assert not (tmp_path / "p.json").exists()


def test_jsa_fit_at_the_weights_bound_writes_a_profile_that_reads_back(
    tmp_path: Path, shared_data: Path
) -> None:
    placements = shared_data / "pollux/profiles/bert/placements.csv"
    out = tmp_path / "p.json"
    result = run(["jsa", "fit", placements, "--weights", MAX_WEIGHTS, "--out", out])
    assert result.exit_code == 0, result.output
    rows = shared_data / "pollux/profiles/bert/scalability.csv"
    predicted = run(["jsa", "predict", out, rows, "--out", tmp_path / "pred.csv"])
    assert predicted.exit_code == 0, predicted.output


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("1,abc,0.5,0.0", "local_bsz"),
        ("1,²,0.5,0.0", "local_bsz"),
        ("1," + "9" * 5000 + ",0.5,0.0", "local_bsz"),
        ("1,8,nan,0.0", "step_time"),
        ("1,8,inf,0.0", "step_time"),
        ("1,8,1e400,0.0", "step_time"),
        ("1,8,0.5,-inf", "sync_time"),
        ("1,8,0.5,1_0", "sync_time"),
        ("²,8,0.5,0.0", "placement"),
        ("0,8,0.5,0.0", "placement"),
        ("1" * 2000 + ",8,0.5,0.0", "placement"),
    ],
)
def test_a_bad_measurement_cell_names_file_line_and_column(
    tmp_path: Path, row: str, column: str
) -> None:
    csv_file = tmp_path / "m.csv"
    csv_file.write_text(f"{PLACEMENTS_HEADER}\n1,8,0.5,0.0\n{row}\n")
    refused(
        ["jsa", "fit", csv_file, "--weights", 1000, "--out", tmp_path / "p.json"],
        code=1,
        says=[f"{csv_file}:3: {column}="],
    )


@pytest.mark.parametrize("content", [b"placement\xff,local_bsz\n", b"a,b\n" + b"x" * 200_000])
def test_a_measurement_file_that_is_not_utf8_csv_is_one_error(
    tmp_path: Path, content: bytes
) -> None:
    csv_file = tmp_path / "m.csv"
    csv_file.write_bytes(content)
    refused(
        ["jsa", "fit", csv_file, "--weights", 1000, "--out", tmp_path / "p.json"],
        code=1,
        says=[str(csv_file)],
    )


# --- ITP and Pollux imports -------------------------------------------------------------------

ITP_BAD_CELLS = {
    "submission_time": ["abc", "nan", "inf", "-1", "1e400", "١٢"],
    "batch_size": ["abc", "nan", "inf", "0", "2.5", "²", "9" * 5000],
    "num_gpu": ["abc", "inf", "0", "70000", "²", "1e3"],
    "duration": ["abc", "nan", "inf", "0", "1e300", "-5"],
    "model_name": ["alexnet", ""],
}


@pytest.mark.parametrize(
    ("column", "value"), [(c, v) for c, values in ITP_BAD_CELLS.items() for v in values]
)
def test_itp_import_refuses_a_bad_cell_with_file_line_and_column(
    tmp_path: Path, column: str, value: str
) -> None:
    cells = dict(zip(ITP_HEADER.split(","), ITP_ROW.split(","), strict=True))
    cells.update(job_id="b", **{column: value})
    source = tmp_path / "c.csv"
    source.write_text(f"{ITP_HEADER}\n{ITP_ROW}\n{','.join(cells.values())}\n")
    out = tmp_path / "t.jsonl"
    refused(
        ["workload", "import", "itp", source, "--out", out], code=1, says=[f"c.csv:3.{column}="]
    )
    assert not out.exists()


POLLUX_BAD_CELLS = {
    "time": ["abc", "nan", "inf", "-1", "1e400", "1e9"],
    "num_replicas": ["abc", "inf", "0", "70000", "²"],
    "batch_size": ["nan", "0", "9" * 30],
    "application": ["alexnet", ""],
}


@pytest.mark.parametrize(
    ("column", "value"), [(c, v) for c, values in POLLUX_BAD_CELLS.items() for v in values]
)
def test_pollux_import_refuses_a_bad_cell_with_file_line_and_column(
    tmp_path: Path, column: str, value: str
) -> None:
    cells = dict(zip(POLLUX_HEADER.split(","), POLLUX_ROW.split(","), strict=True))
    cells.update(name="b", **{column: value})
    source = tmp_path / "w.csv"
    source.write_text(f"{POLLUX_HEADER}\n{POLLUX_ROW}\n{','.join(cells.values())}\n")
    refused(
        ["workload", "import", "pollux", source, "--out", tmp_path / "t.jsonl"],
        code=1,
        says=[f"w.csv:3.{column}="],
    )


@pytest.mark.parametrize(
    ("kind", "header", "row", "says"),
    [
        ("itp", ITP_HEADER, ITP_ROW, "c.csv:3.job_id='a' is invalid: expected a name not used"),
        ("pollux", POLLUX_HEADER, POLLUX_ROW, "c.csv:3.name='a' is invalid: expected a name not"),
    ],
)
def test_imports_refuse_duplicate_names(
    tmp_path: Path, kind: str, header: str, row: str, says: str
) -> None:
    source = tmp_path / "c.csv"
    source.write_text(f"{header}\n{row}\n{row}\n")
    refused(
        ["workload", "import", kind, source, "--out", tmp_path / "t.jsonl"], code=1, says=[says]
    )


@pytest.mark.parametrize(
    "content",
    [
        b"job_id,submission_time\n",  # columns missing
        b"",  # no header at all
        ITP_HEADER.encode() + b"\n\xff\xfe,1,2\n",  # not UTF-8
        ITP_HEADER.encode() + b'\n"' + b"x" * 200_000 + b'",1\n',  # a cell past csv's limit
        ITP_HEADER.encode() + b"\na,1,10,resnet50\n",  # a short row
    ],
)
def test_imports_refuse_a_broken_csv_with_one_error(tmp_path: Path, content: bytes) -> None:
    source = tmp_path / "c.csv"
    source.write_bytes(content)
    refused(
        ["workload", "import", "itp", source, "--out", tmp_path / "t.jsonl"], code=1, says=["c.csv"]
    )


def test_a_good_import_still_round_trips(tmp_path: Path) -> None:
    source = tmp_path / "c.csv"
    source.write_text(f"{ITP_HEADER}\n{ITP_ROW}\nb,160,10,bert,300,32,64,1200\n")
    out = tmp_path / "t.jsonl"
    result = run(["workload", "import", "itp", source, "--out", out])
    assert result.exit_code == 0, result.output
    jobs = read_trace(out)
    assert [j.arrival_s for j in jobs] == [0.0, 60.0]
    assert jobs[1].spec.k_max == 64


# --- real processes: what reaches a user's terminal -------------------------------------------


def _process(
    args: Sequence[object], *, module: bool, cwd: Path
) -> subprocess.CompletedProcess[str]:
    if module:
        command = [sys.executable, "-m", "bellows.cli.main", *map(str, args)]
    else:
        command = [str(Path(sys.executable).with_name("bellows")), *map(str, args)]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


@pytest.mark.parametrize("module", [True, False], ids=["python -m", "entry point"])
def test_real_processes_print_one_error_and_no_traceback(
    trace: Path, tmp_path: Path, module: bool
) -> None:
    nan = lines_with(trace, tmp_path, json.dumps(record(arrival_s=0)))
    nan.write_text(nan.read_text().replace('"arrival_s": 0', '"arrival_s": NaN'))
    deep = tmp_path / "deep.json"
    deep.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    probes: list[tuple[list[object], int, str]] = [
        (["workload", "validate", nan], 1, "arrival_s='NaN'"),
        (["simulate", trace, "--gpus", 8, "--horizon-min", "nan"], 2, "--horizon-min"),
        (["simulate", trace, "--gpus", 8, "--cluster", deep], 2, "nested at most"),
        (["jsa", "fit", trace, "--weights", "1e300", "--out", tmp_path / "p.json"], 2, "[1, "),
        (
            [
                "workload",
                "generate",
                "--pattern",
                "high",
                "--minutes",
                "1e12",
                "--gpus",
                8,
                "--seed",
                1,
                "--out",
                tmp_path / "g.jsonl",
            ],
            2,
            "--minutes",
        ),
    ]
    for args, code, says in probes:
        done = _process(args, module=module, cwd=tmp_path)
        assert done.returncode == code, done.stderr
        assert "Traceback" not in done.stderr + done.stdout
        assert says in done.stderr
        assert done.stderr.rstrip().splitlines()[-1].startswith("Error: ")


def test_a_cluster_profile_at_its_bounds_runs_and_past_them_is_refused(
    trace: Path, tmp_path: Path, shared_data: Path
) -> None:
    slowest = {"latency": 1e3, "secondsPerWeight": 1e-3}
    cluster = tmp_path / "slow.json"
    cluster.write_text(
        json.dumps(
            {
                **CLUSTER_PROFILE,
                "overlap": 16,
                "allreduce": {"intraNode": slowest, "interNode": slowest},
            }
        )
    )
    placements = shared_data / "pollux/profiles/bert/placements.csv"
    profile = tmp_path / "p.json"
    for args in (
        [
            "jsa",
            "fit",
            placements,
            "--weights",
            MAX_WEIGHTS,
            "--out",
            profile,
            "--cluster",
            cluster,
        ],
        ["jsa", "predict", profile, placements, "--out", tmp_path / "p.csv", "--cluster", cluster],
        [
            "simulate",
            trace,
            "--gpus",
            64,
            "--no-plots",
            "--out",
            tmp_path / "o",
            "--cluster",
            cluster,
        ],
    ):
        result = run(args)
        assert result.exit_code == 0, result.output
    cluster.write_text(cluster.read_text().replace("1000.0", "1e300"))
    refused(
        ["jsa", "predict", profile, placements, "--out", tmp_path / "p.csv", "--cluster", cluster],
        code=2,
        says=["latency=1e+300 is invalid"],
    )
