"""The documented accuracy benchmark runs and prints the tables docs/jsa.md quotes."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_jsa_accuracy_benchmark(
    shared_data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = REPO / "benchmarks" / "jsa_accuracy.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--data", str(shared_data), "--no-timing"])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "| overlap+job |" in out
    # Both reviewer splits, every model, with the verdict on the 8 % target.
    assert "split `gpus`: fit on rows with <= 4 GPUs, predict rows with >= 8 GPUs" in out
    assert "split `files`: fit on placements.csv" in out
    assert out.count("target <= 8 % on every model") == 2
    assert "Lowest mean error: overlap+job" in out
    assert "embedded default_cluster()" in out


def test_jsa_accuracy_per_gpu_type(
    shared_data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = REPO / "benchmarks" / "jsa_accuracy.py"
    argv = [str(script), "--data", str(shared_data), "--types"]
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert out.count("same (1e-3)") == 3  # sia_mix embeds each type's fit
    for model in ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"):
        assert f"| {model} | " in out
