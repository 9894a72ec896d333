"""Bellows mode on a cluster of several GPU types (issue 39 items 2-3): the typed rounds in the
simulator, their type-blind comparison, the type-blind Pollux and Gavel-like references, and
what a typed run refuses."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bellows.autoscaler import AutoscalerConfig, Mode
from bellows.autoscaler.typed import TypedAutoscaler
from bellows.cli.main import main
from bellows.jobs import JobSpec, SpecError, StepProfile, TypeSection
from bellows.scaling import MODEL_EFFICIENCY, default_cluster
from bellows.scaling.gpu_types import GpuType, TypedCluster, sia_mix
from bellows.sim.engine import CapacityChange, run
from bellows.sim.workloads.gpu_types import sia_sections, with_sections
from bellows.sim.workloads.importing import import_pollux
from bellows.sim.workloads.traces import TraceJob, fit_trace

CONFIG = AutoscalerConfig(restart_s=30.0, delta_s=60.0)


def _pollux(shared_data: Path, jobs: int) -> tuple[TraceJob, ...]:
    trace = import_pollux(shared_data / "pollux" / "workloads" / "workload-6.csv")
    return fit_trace(trace[:jobs], 16)[0]  # no job wider than a type holds


def _jct(result: object) -> dict[str, float]:
    return {j.name: j.finish_s - j.arrival_s for j in result.jobs}  # type: ignore[attr-defined]


def test_one_type_runs_as_the_one_type_core(shared_data: Path) -> None:
    """A typed cluster of one type decides as the core on that cluster: the same JCTs."""
    trace = _pollux(shared_data, 40)
    one = TypedCluster((GpuType("t4", 16, default_cluster()),))
    plain = run(trace, gpus=64, config=CONFIG, cluster=default_cluster(),
                efficiency=MODEL_EFFICIENCY, nodes=True)  # fmt: skip
    typed = run(trace, gpus=64, config=CONFIG, cluster=default_cluster(),
                efficiency=MODEL_EFFICIENCY, nodes=True, typed=one)  # fmt: skip
    assert _jct(typed) == pytest.approx(_jct(plain), rel=1e-9)
    assert typed.summary()["type_moves"] == 0
    assert set(typed.summary()["gpu_hours_by_type"]) == {"t4"}


def _two_types() -> TypedCluster:
    return TypedCluster((GpuType("slow", 1, default_cluster()),
                         GpuType("fast", 1, default_cluster())))  # fmt: skip


def _job(name: str, work: float, fast: float) -> JobSpec:
    step = StepProfile((8, 64), (0.1, 0.5))
    quick = StepProfile((8, 64), (0.1 / fast, 0.5 / fast))
    return JobSpec(name, 8, 256, 8, 4, 64, 1_000_000, work, step,
                   types=(TypeSection("slow", step, 1_000_000, 64),
                          TypeSection("fast", quick, 1_000_000, 64)))  # fmt: skip


def test_a_job_runs_on_the_type_where_it_is_fastest() -> None:
    cluster = _two_types()
    trace = (TraceJob(0.0, _job("a", 2e6, fast=5.0), "m"),)
    result = run(trace, gpus=8, config=CONFIG, cluster=default_cluster(), nodes=True,
                 typed=cluster)  # fmt: skip
    hours = result.summary()["gpu_hours_by_type"]
    assert hours["fast"] > 0
    assert hours["slow"] == 0
    blind = run(trace, gpus=8, config=CONFIG, cluster=default_cluster(), nodes=True,
                typed=cluster, blind=True)  # fmt: skip
    assert blind.summary()["gpu_hours_by_type"]["slow"] > 0  # the most free GPUs: the first
    assert _jct(result)["a"] < _jct(blind)["a"] / 3


def test_the_typed_rounds_move_a_job_when_the_fast_type_frees(shared_data: Path) -> None:
    """Two jobs that both run best on the one fast type: the second starts on the slow one,
    and moves when the first finishes, the move priced as a restart (it pays: 5x)."""
    cluster = _two_types()
    trace = (TraceJob(0.0, _job("a", 1e6, fast=5.0), "m"),
             TraceJob(1.0, _job("b", 2e7, fast=5.0), "m"))  # fmt: skip
    result = run(trace, gpus=8, config=CONFIG, cluster=default_cluster(), nodes=True,
                 typed=cluster)  # fmt: skip
    b = next(j for j in result.jobs if j.name == "b")
    kinds = [s.gpu_type for s in b.segments]
    assert kinds[0] == "slow"
    assert kinds[-1] == "fast"
    assert result.summary()["type_moves"] >= 1
    assert b.preemptions >= 1


def test_sia_mix_runs_the_pollux_workload_typed_and_blind(shared_data: Path) -> None:
    mix = sia_mix()
    trace = with_sections(_pollux(shared_data, 60), sia_sections(shared_data, mix))
    assert all(job.spec.type_names == mix.names for job in trace)
    out = {}
    for blind in (False, True):
        result = run(trace, gpus=64, config=CONFIG, cluster=mix.types[0].cluster,
                     efficiency=MODEL_EFFICIENCY, nodes=True, typed=mix, blind=blind)  # fmt: skip
        summary = result.summary()
        assert summary["jobs_completed"] == 60
        span_h = max(j.finish_s for j in result.jobs) / 3600.0
        for gpu in mix.types:  # no type ever held more GPUs than it has
            assert summary["gpu_hours_by_type"][gpu.name] <= gpu.gpus * span_h + 1e-6
        out[blind] = summary
    assert out[True]["type_moves"] == 0
    assert out[False]["avg_jct_min"] < out[True]["avg_jct_min"]


def test_what_a_typed_run_refuses() -> None:
    cluster = _two_types()
    trace = (TraceJob(0.0, _job("a", 1e6, fast=2.0), "m"),)
    for kwargs, field in (
        ({"gpus": 9}, "gpus"),
        ({"tiresias": True}, "typed"),
        ({"gavel": True, "blind": True}, "gavel"),
        ({"config": dataclasses.replace(CONFIG, mode=Mode.PAPER)}, "mode"),
    ):
        args = {"gpus": 8, "config": CONFIG, "nodes": True} | kwargs
        with pytest.raises(SpecError) as err:
            run(trace, cluster=default_cluster(), typed=cluster, **args)  # type: ignore[arg-type]
        assert err.value.field == field
    auto = TypedAutoscaler(CONFIG, cluster=cluster)
    with pytest.raises(SpecError):
        auto.set_capacity(4, 0.0)
    elsewhere = dataclasses.replace(_job("b", 1e6, 2.0), types=(
        TypeSection("h100", StepProfile((8,), (0.1,)), 1, 64),))  # fmt: skip
    assert auto.arrive(elsewhere, 0.0)  # no type holds it: refused by name, not a crash
    rejected = auto.step(0.0)
    assert [type(d).__name__ for d in rejected] == ["Reject"]
    assert "no GPU type of the cluster (slow, fast)" in rejected[0].reason
    assert auto.next_round_at() is None


def _imported(shared_data: Path, tmp_path: Path, jobs: int) -> tuple[CliRunner, Path]:
    """A runner with the data folder, and workload-6's first ``jobs`` imported as a trace."""
    trace = tmp_path / "w.jsonl"
    runner = CliRunner(env={"BELLOWS_DATA": str(shared_data)})
    csv = shared_data / "pollux" / "workloads" / "workload-6.csv"
    result = runner.invoke(main, ["workload", "import", "pollux", str(csv), "--out", str(trace)])
    assert result.exit_code == 0, result.output
    trace.write_text("\n".join(trace.read_text().splitlines()[:jobs]) + "\n")
    return runner, trace


def test_simulate_on_sia_mix_from_the_command_line(shared_data: Path, tmp_path: Path) -> None:
    runner, trace = _imported(shared_data, tmp_path, 40)
    summaries = {}
    for flag in ("", "--one-pool"):
        out = tmp_path / f"out{flag}"
        args = [
            "simulate",
            str(trace),
            "--gpus",
            "64",
            "--cluster",
            "sia-mix",
            "--efficiency",
            "--placement",
            "nodes",
            "--no-plots",
            "--out",
            str(out),
            *([flag] if flag else []),
        ]
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
        summaries[flag] = json.loads((out / "summary.json").read_text())
    assert set(summaries[""]["gpu_hours_by_type"]) == {"t4", "a100", "rtx2080ti"}
    assert summaries[""]["avg_jct_min"] < summaries["--one-pool"]["avg_jct_min"]
    bad = runner.invoke(main, ["simulate", str(trace), "--gpus", "32", "--cluster", "sia-mix",
                               "--no-plots", "--out", str(tmp_path / "x")])  # fmt: skip
    assert bad.exit_code == 2
    assert "has 64 GPUs" in bad.output
    bad = runner.invoke(main, ["simulate", str(trace), "--gpus", "64", "--one-pool",
                               "--no-plots", "--out", str(tmp_path / "x")])  # fmt: skip
    assert bad.exit_code == 2
    assert "--one-pool needs --cluster sia-mix" in bad.output


def test_the_benchmark_prints_every_policy_and_the_targets(shared_data: Path) -> None:
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_types.py"
    result = subprocess.run(
        [sys.executable, str(script), "--workloads", "3", "--workers", "2",
         "--data", str(shared_data)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    out = result.stdout
    for policy in ("typed", "one pool", "pollux", "gavel"):
        assert f"| workload-3 | {policy} |" in out, out + result.stderr
        if policy != "typed":
            assert f"typed / {policy} avg JCT: median" in out


def test_the_type_blind_pollux_reference_runs_each_job_on_its_primary_type(
    shared_data: Path,
) -> None:
    """``pollux=True`` on sia-mix: Pollux over 16 virtual nodes of 4 GPUs; each job runs on
    the type it holds most of, the rest held idle; no type ever runs more than it has, and
    the typed rounds beat it."""
    mix = sia_mix()
    trace = with_sections(_pollux(shared_data, 60), sia_sections(shared_data, mix))
    common = {"gpus": 64, "config": CONFIG, "cluster": mix.types[0].cluster,
              "efficiency": MODEL_EFFICIENCY, "nodes": True, "typed": mix}  # fmt: skip
    pollux = run(trace, pollux=True, **common)  # type: ignore[arg-type]
    summary = pollux.summary()
    assert summary["mode"] == "pollux"
    assert summary["jobs_completed"] == 60
    span_h = max(j.finish_s for j in pollux.jobs) / 3600.0
    for gpu in mix.types:
        assert summary["gpu_hours_by_type"][gpu.name] <= gpu.gpus * span_h + 1e-6
    for job in pollux.jobs:
        for seg in job.segments:
            assert seg.gpu_type in mix.names
            assert 0 <= seg.idle_gpus < seg.gpus
    held = sum(s.gpus * (s.end_s - s.start_s) for j in pollux.jobs for s in j.segments) / 3600
    ran = sum(summary["gpu_hours_by_type"].values())
    assert ran + summary.get("idle_gpu_hours", 0.0) == pytest.approx(held)
    typed = run(trace, **common)  # type: ignore[arg-type]
    assert typed.summary()["avg_jct_min"] < summary["avg_jct_min"]


def test_the_gavel_reference_keeps_every_job_rigid(shared_data: Path) -> None:
    mix = sia_mix()
    trace = with_sections(_pollux(shared_data, 40), sia_sections(shared_data, mix))
    result = run(trace, gpus=64, config=CONFIG, cluster=mix.types[0].cluster,
                 efficiency=MODEL_EFFICIENCY, nodes=True, typed=mix, gavel=True)  # fmt: skip
    assert result.summary()["mode"] == "gavel"
    asked = {job.spec.name: job.spec for job in trace}
    for job in result.jobs:
        spec = asked[job.name]
        for seg in job.segments:  # its trace's GPUs (at most 24: a type's most) and batch
            assert seg.gpus == min(spec.gpus, 24)
        assert job.rescales == 0
    with pytest.raises(SpecError) as err:
        run(trace, gpus=64, config=CONFIG, cluster=default_cluster(), nodes=True, gavel=True)
    assert err.value.field == "gavel"


def test_the_references_on_sia_mix_from_the_command_line(shared_data: Path, tmp_path: Path) -> None:
    runner, trace = _imported(shared_data, tmp_path, 30)
    base = ["simulate", str(trace), "--gpus", "64", "--efficiency", "--no-plots"]
    for policy in ("pollux", "gavel"):
        out = tmp_path / policy
        args = [*base, "--cluster", "sia-mix", "--policy", policy, "--out", str(out)]
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
        summary = json.loads((out / "summary.json").read_text())
        assert summary["policy"] == policy
        assert set(summary["gpu_hours_by_type"]) == set(sia_mix().names)
    for extra, words in (
        (["--policy", "gavel"], "--policy gavel needs --cluster sia-mix"),
        (["--cluster", "sia-mix", "--policy", "pollux", "--one-pool"], "drop --one-pool"),
        (["--cluster", "sia-mix", "--policy", "tiresias"], "runs on one GPU type"),
        (["--cluster", "sia-mix", "--policy", "gavel", "--objective", "fair"], "'speedup'"),
    ):
        bad = runner.invoke(main, [*base, *extra, "--out", str(tmp_path / "x")])
        assert bad.exit_code != 0
        assert words in bad.output, bad.output


def test_a_type_that_loses_its_gpus_sends_its_jobs_to_another() -> None:
    """The fast type's node is lost mid-run: its core halts the job, and the typed rounds
    move it to the slow type, where it finishes; no type ever holds more than it has."""
    cluster = _two_types()
    trace = (TraceJob(0.0, _job("a", 2e6, fast=5.0), "m"),)
    drop = CapacityChange(200.0, 0, "fast")
    result = run(trace, gpus=8, config=CONFIG, cluster=default_cluster(), nodes=True,
                 typed=cluster, capacity_changes=(drop,))  # fmt: skip
    (job,) = result.jobs
    assert job.finish_s is not None
    assert job.segments[0].gpu_type == "fast"
    assert job.segments[-1].gpu_type == "slow"
    assert all(s.end_s <= 200.0 for s in job.segments if s.gpu_type == "fast")


def test_a_typed_capacity_change_names_its_type() -> None:
    trace = (TraceJob(0.0, _job("a", 1e6, fast=2.0), "m"),)
    with pytest.raises(SpecError) as err:
        run(trace, gpus=8, config=CONFIG, cluster=default_cluster(), nodes=True,
            typed=_two_types(), capacity_changes=(CapacityChange(10.0, 0),))  # fmt: skip
    assert err.value.field == "capacity_changes[0].gpu_type"
    with pytest.raises(SpecError) as err:
        run(trace, gpus=8, config=CONFIG, cluster=default_cluster(), nodes=True,
            capacity_changes=(CapacityChange(10.0, 4, "fast"),))  # fmt: skip
    assert err.value.field == "capacity_changes"
