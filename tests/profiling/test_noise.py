"""The gradient noise ``bellows profile`` measures (bellows.profiling.noise): the estimator
against draws of a known gradient and covariance, its refusals, and the command's
efficiency section on this CPU with a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bellows.cli.main import main
from bellows.jobs import SpecError
from bellows.profiling.noise import GradientNoise, efficiency_prior, gradient_noise
from bellows.scaling import parse_job_profile
from bellows.scaling.noise import EXPONENT_PRIOR, GROWTH_PRIOR
from bellows.scaling.priors import PRIOR_NOISE_RANGE
from tests.profiling.test_commands import models

__all__ = ["models"]  # the tiny models' fixture


def _draws(rng: np.random.Generator, batch: int, n: int) -> list[float]:
    """``|g|^2`` of ``n`` mini-batch means of per-sample gradients ``G + N(0, 0.5^2 I)``."""
    truth = np.linspace(0.1, 1.0, 50)  # |G|^2 = sum of squares; tr(Sigma) = 50 * 0.25
    per_sample = truth + 0.5 * rng.standard_normal((n, batch, truth.size))
    return [float(np.sum(g.mean(axis=0) ** 2)) for g in per_sample]


def test_the_estimator_recovers_a_known_gradient_and_covariance() -> None:
    rng = np.random.default_rng(7)
    noise = gradient_noise(_draws(rng, 4, 4000), _draws(rng, 64, 4000), 4, 64)
    truth_sqr = float(np.sum(np.linspace(0.1, 1.0, 50) ** 2))
    assert noise.grad_sqr == pytest.approx(truth_sqr, rel=0.05)
    assert noise.grad_var == pytest.approx(50 * 0.25, rel=0.05)
    assert noise.noise_scale == pytest.approx(50 * 0.25 / truth_sqr, rel=0.1)
    assert noise.draws == 4000


@pytest.mark.parametrize(
    ("small", "large", "b_small", "b_large", "field"),
    [
        ([1.0, 1.0], [0.5, 0.5], 8, 8, "batches"),
        ([1.0], [0.5, 0.5], 4, 8, "gradients at the small batch"),
        ([1.0, float("nan")], [0.5, 0.5], 4, 8, "gradients at the small batch"),
        ([1.0, 1.0], [0.5, -0.5], 4, 8, "gradients at the large batch"),
        ([0.5, 0.5], [1.0, 1.0], 4, 8, "gradient noise"),  # larger batch, noisier: no estimate
    ],
)
def test_draws_that_cannot_say_the_noise_are_refused_by_name(
    small: list[float], large: list[float], b_small: int, b_large: int, field: str
) -> None:
    with pytest.raises(SpecError) as err:
        gradient_noise(small, large, b_small, b_large)
    assert err.value.field == field


def test_the_prior_states_the_measured_noise_within_the_bounds() -> None:
    prior = efficiency_prior(GradientNoise(2.0, 3000.0, 8), 16, "test")
    assert (prior.reference_batch, prior.noise_scale) == (16, 1500.0)
    assert (prior.growth, prior.batch_exponent) == (GROWTH_PRIOR[0], EXPONENT_PRIOR[0])
    assert "1500 samples from 8 gradients" in prior.source
    low, high = PRIOR_NOISE_RANGE
    assert efficiency_prior(GradientNoise(1.0, 1e20, 8), 16, "").noise_scale == high
    assert efficiency_prior(GradientNoise(1.0, 1e-9, 8), 16, "").noise_scale == low


def _profile(models: Path, output: Path, *extra: str) -> tuple[int, str]:
    args = [
        "profile", "--model", f"{models}:mlp", "--input-shape", "8", "--classes", "4",
        "--batches", "2,32", "--iterations", "2", "--warmup", "0", "--threads", "1",
        "--device", "cpu", "-o", str(output), *extra,
    ]  # fmt: skip
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.output


def test_profile_writes_the_efficiency_section_its_gradients_say(
    models: Path, tmp_path: Path
) -> None:
    # the draws are random (inputs, labels, initial weights): 64 of them left |G|^2 <= 0, so
    # no section, in 5 of 40 seeds; the test's draws are seeded, so it says the same each run
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    output = tmp_path / "profile.json"
    code, text = _profile(models, output, "--noise-draws", "64")
    assert code == 0, text
    document = json.loads(output.read_text())
    profile = parse_job_profile(document)
    assert profile.efficiency is not None
    assert profile.efficiency.reference_batch == 2
    low, high = PRIOR_NOISE_RANGE
    assert low < profile.efficiency.noise_scale < high
    assert "gradient noise scale" in text
    assert "64 gradients at each of two batches" in profile.efficiency.source
    # without draws, no section
    code, text = _profile(models, output, "--noise-draws", "0")
    assert code == 0, text
    assert "efficiency" not in json.loads(output.read_text())
