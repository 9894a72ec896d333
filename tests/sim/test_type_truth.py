"""Each GPU type's measured step times as the simulator's truth (issue 39 item 3): Sia's
measurements read per type, charged on a typed cluster, and asked for from the command line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bellows.autoscaler import AutoscalerConfig
from bellows.cli.main import main
from bellows.jobs import SpecError
from bellows.scaling import MODEL_EFFICIENCY, default_cluster
from bellows.scaling.gpu_types import SIA_TYPES, sia_mix
from bellows.sim.engine import run
from bellows.sim.measured_steps import TypedMeasuredSteps
from bellows.sim.workloads.gpu_types import sia_sections, with_sections
from bellows.sim.workloads.importing import import_pollux
from bellows.sim.workloads.models import model
from bellows.sim.workloads.traces import fit_trace


def _truth(data: Path) -> TypedMeasuredSteps:
    return TypedMeasuredSteps.of_data(data)


def _row(data: Path, suffix: str, shape: str) -> tuple[int, float]:
    """The first measured (per-GPU batch, step time) of cifar10's ``shape`` on a type."""
    path = data / "sia" / "profiles" / "cifar10" / f"placements-{suffix}.csv"
    with path.open(newline="") as handle:
        row = next(r for r in csv.DictReader(handle) if r["placement"] == shape)
    return int(row["local_bsz"]), float(row["step_time"])


def test_a_measured_placement_is_its_measured_step_on_each_type(shared_data: Path) -> None:
    truth, spec = _truth(shared_data), model("cifar10")
    for gpu_type, suffix in SIA_TYPES.items():
        local, seconds = _row(shared_data, suffix, "2")  # two GPUs of one node
        got = truth("cifar10", gpu_type, spec, ((0, 2),), 2 * local)
        assert got == pytest.approx(seconds, rel=1e-9)
    four = {t: truth("cifar10", t, spec, ((0, 4),), 512) for t in SIA_TYPES}
    assert four["a100"] is not None
    assert four["t4"] is not None
    assert four["a100"] < four["t4"] / 2  # an A100 runs cifar10 several times a T4's speed
    assert truth("cifar10", "h100", spec, ((0, 1),), 64) is None  # a type Sia did not measure
    assert truth("gpt", "t4", spec, ((0, 1),), 64) is None  # nor a model


def _trace(data: Path, jobs: int) -> tuple:  # type: ignore[type-arg]
    mix = sia_mix()
    trace = import_pollux(data / "pollux" / "workloads" / "workload-6.csv")
    return with_sections(fit_trace(trace[:jobs], 16)[0], sia_sections(data, mix))


def test_a_typed_run_charges_each_type_its_measurements(shared_data: Path) -> None:
    mix, trace = sia_mix(), _trace(shared_data, 30)
    common = {"gpus": 64, "config": AutoscalerConfig(restart_s=30.0, delta_s=60.0),
              "cluster": mix.types[0].cluster, "efficiency": MODEL_EFFICIENCY, "nodes": True,
              "typed": mix}  # fmt: skip
    jsa = run(trace, **common)  # type: ignore[arg-type]
    measured = run(trace, type_steps=_truth(shared_data), **common)  # type: ignore[arg-type]
    assert measured.summary()["jobs_completed"] == 30
    jct = {j.name: j.finish_s for j in jsa.jobs}
    assert any(j.finish_s != jct[j.name] for j in measured.jobs)  # the truth is not the JSA
    with pytest.raises(SpecError) as err:
        run(trace, gpus=64, config=common["config"], cluster=default_cluster(), nodes=True,
            type_steps=_truth(shared_data))  # fmt: skip
    assert err.value.field == "type_steps"


def test_simulate_measured_on_sia_mix(shared_data: Path, tmp_path: Path) -> None:
    trace = tmp_path / "w.jsonl"
    runner = CliRunner(env={"BELLOWS_DATA": str(shared_data)})
    csv_path = shared_data / "pollux" / "workloads" / "workload-6.csv"
    imported = runner.invoke(main, ["workload", "import", "pollux", str(csv_path),
                                    "--out", str(trace)])  # fmt: skip
    assert imported.exit_code == 0, imported.output
    trace.write_text("\n".join(trace.read_text().splitlines()[:20]) + "\n")
    out = {}
    for flag in ("", "--measured"):
        where = tmp_path / f"out{flag}"
        args = ["simulate", str(trace), "--gpus", "64", "--cluster", "sia-mix", "--efficiency",
                "--placement", "nodes", "--no-plots", "--out", str(where)]  # fmt: skip
        result = runner.invoke(main, [*args, *([flag] if flag else [])])
        assert result.exit_code == 0, result.output
        out[flag] = json.loads((where / "summary.json").read_text())
    assert out["--measured"]["measured"] is True
    assert out["--measured"]["avg_jct_min"] != out[""]["avg_jct_min"]
