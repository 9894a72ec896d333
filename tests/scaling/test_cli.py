"""``bellows jsa fit`` and ``bellows jsa predict`` on the real Pollux measurements."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner

from bellows.cli.main import main
from bellows.scaling import MODEL_EFFICIENCY, JobProfile, load_job_profile, save_job_profile
from bellows.sim.workloads.models import MODELS


def train_csv(shared_data: Path, tmp_path: Path) -> Path:
    source = shared_data / "pollux" / "profiles" / "imagenet" / "placements.csv"
    lines = source.read_text().splitlines()
    keep = [lines[0]] + [line for line in lines[1:] if line.split(",")[0] in {"1", "2", "22"}]
    path = tmp_path / "train.csv"
    path.write_text("\n".join(keep) + "\n")
    return path


def test_fit_then_predict(shared_data: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    profile = tmp_path / "profile.json"
    result = runner.invoke(
        main,
        [
            "jsa",
            "fit",
            str(train_csv(shared_data, tmp_path)),
            "--weights",
            "25557032",
            "--out",
            str(profile),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "commWeights" in result.output
    fitted = load_job_profile(profile)
    assert fitted.weights == 25557032
    assert fitted.comm_weights is not None
    assert len(fitted.step.local_batches) == 8

    base = shared_data / "pollux" / "profiles" / "imagenet"
    for name, layout in (("scalability.csv", "scalability"), ("placements.csv", "placements")):
        out = tmp_path / f"pred-{name}"
        result = runner.invoke(
            main, ["jsa", "predict", str(profile), str(base / name), "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
        assert f"({layout} layout)" in result.output
        with (base / name).open() as handle:
            original = list(csv.reader(handle))
        with out.open() as handle:
            predicted = list(csv.reader(handle))
        assert predicted[0] == [*original[0], "predicted_step_time"]
        assert [row[:-1] for row in predicted[1:]] == original[1:]
        errors = [
            abs(float(r[-1]) / float(o[-2]) - 1)
            for r, o in zip(predicted[1:], original[1:], strict=True)
        ]
        assert sum(errors) / len(errors) < 0.5  # a real prediction, not noise
        for r, o in zip(predicted[1:], original[1:], strict=True):
            if layout == "placements" and o[0] == "1":  # one GPU: the profiled time itself
                assert float(r[-1]) == pytest.approx(float(o[2]), rel=1e-5)


def test_bad_csv_is_reported(shared_data: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("placement,local_bsz,step_time,sync_time\n1,32,0.1,0.0\n1,32,slow,0.0\n")
    runner = CliRunner()
    result = runner.invoke(
        main, ["jsa", "fit", str(bad), "--weights", "10", "--out", str(tmp_path / "p.json")]
    )
    assert result.exit_code == 1
    assert f"{bad}:3: step_time='slow' is invalid" in result.output
    profile = tmp_path / "p.json"
    runner.invoke(
        main,
        [
            "jsa",
            "fit",
            str(train_csv(shared_data, tmp_path)),
            "--weights",
            "10",
            "--out",
            str(profile),
        ],
    )
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("nodes,gpus\n1,1\n")
    result = runner.invoke(
        main, ["jsa", "predict", str(profile), str(wrong), "--out", str(tmp_path / "o.csv")]
    )
    assert result.exit_code == 1
    assert "wrong.csv:1: (header)" in result.output
    no_single = tmp_path / "multi.csv"
    no_single.write_text("placement,local_bsz,step_time,sync_time\n22,32,0.1,0.0\n")
    result = runner.invoke(
        main, ["jsa", "fit", str(no_single), "--weights", "10", "--out", str(tmp_path / "q.json")]
    )
    assert result.exit_code == 1
    assert "1-GPU" in result.output


def test_predict_shows_throughput_efficiency_and_goodput(shared_data: Path, tmp_path: Path) -> None:
    profile = tmp_path / "cifar10.json"
    model = MODELS["cifar10"]
    save_job_profile(profile, JobProfile(weights=model.weights, step=model.step))
    rows = shared_data / "pollux" / "profiles" / "cifar10" / "placements.csv"
    runner = CliRunner()
    plain = tmp_path / "plain.csv"
    result = runner.invoke(main, ["jsa", "predict", str(profile), str(rows), "--out", str(plain)])
    assert result.exit_code == 0, result.output
    for option in (["--efficiency", "cifar10"], ["--validation", str(rows.parent)]):
        out = tmp_path / "good.csv"
        args = ["jsa", "predict", str(profile), str(rows), "--out", str(out), "--progress", "1e6"]
        result = runner.invoke(main, [*args, *option])
        assert result.exit_code == 0, result.output
        with out.open() as handle:
            got = list(csv.reader(handle))
        with plain.open() as handle:
            before = list(csv.reader(handle))
        assert got[0] == [*before[0], "predicted_throughput", "efficiency", "goodput"]
        assert [row[:-3] for row in got] == before  # the step times are unchanged
        for row in got[1:]:
            gpus, local = sum(int(d) for d in row[0]), int(row[1])
            rate, gain, good = (float(x) for x in row[-3:])
            assert rate == pytest.approx(gpus * local / float(row[-4]), rel=1e-5)
            expected = float(MODEL_EFFICIENCY["cifar10"].efficiency(gpus * local, 1e6))
            assert gain == pytest.approx(expected, rel=2e-2)
            assert good == pytest.approx(rate * gain, rel=1e-4)
    both = ["--efficiency", "ncf", "--validation", str(rows.parent)]
    result = runner.invoke(
        main, ["jsa", "predict", str(profile), str(rows), "--out", str(out), *both]
    )
    assert result.exit_code != 0
    assert "not both" in result.output


def test_fit_carries_the_packed_placements_and_the_spread_ones_beyond(
    shared_data: Path, tmp_path: Path
) -> None:
    """``--placements``: the rows packed on the fewest nodes ("2": 2 GPUs, one node; "22": 4
    GPUs over two nodes is not packed on nodes of 4) become the profile's placements;
    ``--scalability`` adds the spread rows beyond them; alone it is refused."""
    runner = CliRunner()
    profile = tmp_path / "profile.json"
    train = str(train_csv(shared_data, tmp_path))
    spread = str(shared_data / "pollux" / "profiles" / "imagenet" / "scalability.csv")
    args = ["jsa", "fit", train, "--weights", "25557032", "--out", str(profile)]
    result = runner.invoke(main, [*args, "--placements", "--scalability", spread])
    assert result.exit_code == 0, result.output
    placed = load_job_profile(profile).placements
    keys = {(p.nodes, p.gpus) for p in placed}
    assert {(1, 1), (1, 2)} <= keys
    assert (2, 4) not in keys
    assert all(p.gpus > 2 for p in placed if p.nodes > 1)
    assert (16, 64) in keys
    refused = runner.invoke(main, [*args, "--scalability", spread])
    assert refused.exit_code != 0
    assert "--scalability goes with --placements" in refused.output
