"""The measured step times of the Pollux artifact's traces (bellows.sim.measured_steps) and
``bellows simulate --measured``, the calibrated simulator of issue 36 as a command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bellows.autoscaler import AutoscalerConfig
from bellows.cli.data import DATA_ENV
from bellows.cli.main import main
from bellows.jobs import SpecError
from bellows.scaling import MODEL_EFFICIENCY, default_cluster
from bellows.sim import run
from bellows.sim.measured import measured_efficiency
from bellows.sim.measured_steps import MeasuredPlacements, MeasuredSteps
from bellows.sim.pollux import POLLUX_INTERVAL_S
from bellows.sim.workloads.importing import POLLUX_EPOCHS, import_pollux
from bellows.sim.workloads.traces import fit_trace, write_trace
from tests.strategies import make_job


def test_a_measured_placement_is_linear_in_the_batch_and_any_rotation_is_one(
    shared_data: Path,
) -> None:
    """yolov3 on ``4`` at 8 a GPU is the row of placements.csv; ``(1, 3)`` and ``(3, 1)``
    are the measured ``13``; between two measured batches, the straight line."""
    measured = MeasuredPlacements(shared_data / "pollux" / "profiles" / "yolov3")
    assert measured.step((4,), 8) == pytest.approx((0.5009251087903976, 0.11896183347702027))
    assert measured.step((3, 1), 8) == measured.step((1, 3), 8)
    low, high = measured.step((4,), 4), measured.step((4,), 8)
    middle = measured.step((4,), 6)
    rows = {row[0]: row for row in measured.exact["4"]}
    if 6.0 not in rows:  # not measured: interpolated
        assert middle[0] == pytest.approx((low[0] + high[0]) / 2)
    spread = measured.step((1,) * 16, 8)  # 16 nodes: from scalability.csv
    assert 0.5 < spread[0] < 2.0


def test_accumulation_passes_cost_their_compute_not_another_sync(shared_data: Path) -> None:
    """yolov3's 64 on 4 GPUs is 16 a GPU: two passes of 8, the second without its sync; on
    one GPU above its smallest validation batch, two passes at least."""
    steps = MeasuredSteps(shared_data / "pollux" / "profiles")
    spec = make_job("y")
    step, sync = MeasuredPlacements(shared_data / "pollux" / "profiles" / "yolov3").step((4,), 8)
    assert steps("yolov3", spec, ((0, 4),), 64) == pytest.approx(step + (step - sync))
    one, one_sync = steps._models["yolov3"].step((1,), 8)
    assert steps("yolov3", spec, ((0, 1),), 16) == pytest.approx(one + (one - one_sync))
    assert MeasuredSteps.local_limit("yolov3") == 8


def _workload(shared_data: Path, tmp_path: Path, first: int) -> Path:
    source = shared_data / "pollux" / "workloads" / "workload-1.csv"
    lines = source.read_text().splitlines()[: first + 1]
    cut = tmp_path / "w.csv"
    cut.write_text("\n".join(lines) + "\n")
    trace = tmp_path / "w.jsonl"
    write_trace(import_pollux(cut, work="validation", batches="accumulate"), trace)
    return trace


def test_simulate_measured_is_the_calibrated_run(shared_data: Path, tmp_path: Path) -> None:
    """``bellows simulate --measured --policy pollux --charge-start`` gives the run that
    ``run`` gives with the measured truths (benchmarks/fidelity.py's pollux-measured), and
    says so in summary.json."""
    trace = _workload(shared_data, tmp_path, 24)
    out = tmp_path / "out"
    runner = CliRunner(env={DATA_ENV: str(shared_data)})
    result = runner.invoke(main, [
        "simulate", str(trace), "--gpus", "64", "--policy", "pollux", "--measured",
        "--charge-start", "--restart-cost-s", "30", "--no-plots", "--out", str(out),
    ], catch_exceptions=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["measured"] is True
    profiles = shared_data / "pollux" / "profiles"
    jobs = fit_trace(import_pollux(tmp_path / "w.csv", work="validation",
                                   batches="accumulate"), 64)[0]  # fmt: skip
    direct = run(
        jobs, gpus=64, config=AutoscalerConfig(restart_s=30.0, delta_s=POLLUX_INTERVAL_S),
        cluster=default_cluster(), efficiency=MODEL_EFFICIENCY, nodes=True, pollux=True,
        charge_start=True, efficiency_truth=measured_efficiency(profiles, POLLUX_EPOCHS),
        step_seconds=MeasuredSteps(profiles),
    )  # fmt: skip
    assert summary["avg_jct_min"] == pytest.approx(direct.summary()["avg_jct_min"])
    plain = tmp_path / "plain"
    result = runner.invoke(main, [
        "simulate", str(trace), "--gpus", "64", "--policy", "pollux", "--charge-start",
        "--restart-cost-s", "30", "--no-plots", "--out", str(plain),
    ], catch_exceptions=False)  # fmt: skip
    assert "measured" not in json.loads((plain / "summary.json").read_text())


def test_simulate_measured_refuses_what_it_cannot_do(shared_data: Path, tmp_path: Path) -> None:
    trace = _workload(shared_data, tmp_path, 3)
    fewest = CliRunner(env={DATA_ENV: str(shared_data)}).invoke(main, [
        "simulate", str(trace), "--gpus", "8", "--measured", "--placement", "fewest",
        "--no-plots", "--out", str(tmp_path / "a"),
    ])  # fmt: skip
    assert fewest.exit_code == 2
    assert "--measured charges each placement its measured step time" in fewest.output
    empty = tmp_path / "empty"
    (empty / "pollux" / "profiles").mkdir(parents=True)
    (empty / "itp").mkdir()
    none = CliRunner(env={DATA_ENV: str(empty)}).invoke(main, [
        "simulate", str(trace), "--gpus", "8", "--measured", "--no-plots",
        "--out", str(tmp_path / "b"),
    ])  # fmt: skip
    assert none.exit_code == 1
    assert "no measured model in" in none.output


def test_decide_measured_is_the_core_deciding_with_the_charged_step_times(
    shared_data: Path, tmp_path: Path
) -> None:
    """``simulate --measured --decide-measured`` is ``run(decide_measured=True)``: Bellows
    mode's core decides with the step times the jobs are charged (each count packed on the
    fewest nodes), and the run differs from the core deciding with the JSA; refused without
    ``--measured``, for a reference, and in ``run`` without ``step_seconds``."""
    trace = _workload(shared_data, tmp_path, 40)
    runner = CliRunner(env={DATA_ENV: str(shared_data)})
    base = ["simulate", str(trace), "--gpus", "64", "--measured", "--charge-start",
            "--restart-cost-s", "30", "--no-plots"]  # fmt: skip
    told = runner.invoke(main, [*base, "--decide-measured", "--out", str(tmp_path / "t")],
                         catch_exceptions=False)  # fmt: skip
    assert told.exit_code == 0, told.output
    summary = json.loads((tmp_path / "t" / "summary.json").read_text())
    assert summary["decide_measured"] is True
    profiles = shared_data / "pollux" / "profiles"
    jobs = fit_trace(import_pollux(tmp_path / "w.csv", work="validation",
                                   batches="accumulate"), 64)[0]  # fmt: skip
    kwargs = {
        "gpus": 64, "config": AutoscalerConfig(restart_s=30.0), "cluster": default_cluster(),
        "efficiency": MODEL_EFFICIENCY, "nodes": True, "charge_start": True,
        "efficiency_truth": measured_efficiency(profiles, POLLUX_EPOCHS),
        "step_seconds": MeasuredSteps(profiles),
    }  # fmt: skip
    direct = run(jobs, decide_measured=True, **kwargs)  # type: ignore[arg-type]
    assert summary["avg_jct_min"] == pytest.approx(direct.summary()["avg_jct_min"])
    jsa = run(jobs, **kwargs)  # type: ignore[arg-type]
    assert [j.segments for j in jsa.jobs] != [j.segments for j in direct.jobs]
    alone = runner.invoke(main, [*base[:4], "--decide-measured", "--no-plots",
                                 "--out", str(tmp_path / "a")])  # fmt: skip
    assert alone.exit_code == 2
    assert "add --measured" in alone.output
    pollux = runner.invoke(main, [*base, "--decide-measured", "--policy", "pollux",
                                  "--out", str(tmp_path / "p")])  # fmt: skip
    assert pollux.exit_code == 2
    assert "--decide-measured is for the core" in pollux.output
    with pytest.raises(SpecError, match="decide_measured"):
        run(jobs, gpus=64, config=AutoscalerConfig(), cluster=default_cluster(), nodes=True,
            decide_measured=True)  # fmt: skip
