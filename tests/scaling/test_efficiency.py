"""The statistical-efficiency model: its published form, its fit and the embedded profiles."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from bellows.jobs import SpecError
from bellows.scaling import (
    MODEL_EFFICIENCY,
    PROGRESS_UNIT,
    EfficiencyProfile,
    MeasurementError,
    ValidationRun,
    fit_efficiency,
    load_validation_runs,
    noise_scale,
)


def test_published_form_at_constant_noise_scale() -> None:
    # growth 0 and batch_exponent 0: E(b) = (phi + M0) / (phi + b), Pollux eq. (6)
    profile = EfficiencyProfile(reference_batch=100, noise_scale=900.0, growth=0.0)
    batches = np.array([50, 100, 1000, 9000])
    got = profile.efficiency(batches, 5e5)
    assert got.shape == (4,)
    np.testing.assert_allclose(got, (900 + 100) / (900 + batches), rtol=1e-15)
    assert got[1] == 1.0
    assert got[0] > 1.0
    assert got[3] < got[2] < 1.0
    # samples at constant efficiency: progress / E
    np.testing.assert_allclose(profile.samples(batches, 2e6), 2e6 / got, rtol=1e-12)


def test_noise_scale_grows_with_progress_and_batch() -> None:
    profile = EfficiencyProfile(128, 3000.0, growth=0.8, batch_exponent=0.2)
    progress = np.array([0.0, 0.5, 1.0, 4.0]) * PROGRESS_UNIT
    phi = profile.noise_scale_at(128, progress)
    assert phi[0] == 0.0
    assert phi[2] == pytest.approx(3000.0)
    assert np.all(np.diff(phi) > 0)
    assert profile.noise_scale_at(128 * 32, PROGRESS_UNIT) == pytest.approx(3000.0 * 32**0.2)
    # vectorised: a grid of batches x progress broadcasts
    grid = profile.efficiency(np.array([128, 1024, 4096])[:, None], progress[None, :])
    assert grid.shape == (3, 4)
    assert np.all(np.diff(grid, axis=0) < 0)  # falls with the batch
    assert np.all(np.diff(grid[1:], axis=1) > 0)  # and rises as training progresses
    # at the very start all signal: a batch b is worth M0 samples
    assert grid[2, 0] == pytest.approx(128 / 4096)


def test_samples_integrate_one_over_efficiency() -> None:
    profile = EfficiencyProfile(8, 500.0, growth=0.5, batch_exponent=0.0)
    # closed form for growth 0.5: 1/E = 1 + (b - M0) / (phi + M0), phi = a sqrt(s / U)
    b, total = 512.0, 3e6
    s = np.linspace(0, total, 200_001)
    exact = np.trapezoid(1 + (b - 8) / (500 * np.sqrt(s / PROGRESS_UNIT) + 8), s)
    assert float(profile.samples(b, total)) == pytest.approx(exact, rel=2e-3)
    assert profile.samples(8, total) == pytest.approx(total)
    assert profile.samples(b, 0.0) == 0.0


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("reference_batch", {"reference_batch": 0}),
        ("noise_scale", {"noise_scale": 0.0}),
        ("noise_scale", {"noise_scale": math.inf}),
        ("growth", {"growth": -0.1}),
        ("growth", {"growth": 9.0}),
        ("batch_exponent", {"batch_exponent": 1.0}),
        ("source", {"source": 3}),
    ],
)
def test_bad_profiles_name_the_field(field: str, kwargs: dict[str, object]) -> None:
    values: dict[str, object] = {"reference_batch": 8, "noise_scale": 10.0, "growth": 0.5}
    values.update(kwargs)
    with pytest.raises(SpecError) as err:
        EfficiencyProfile(**values)  # type: ignore[arg-type]
    assert err.value.field == field


def test_bad_arguments_name_the_argument() -> None:
    profile = MODEL_EFFICIENCY["cifar10"]
    with pytest.raises(SpecError, match="batch"):
        profile.efficiency(np.array([128, 0]), 0.0)
    with pytest.raises(SpecError, match="progress"):
        profile.efficiency(128, -1.0)
    with pytest.raises(SpecError, match="progress"):
        profile.samples(128, math.nan)


def test_noise_scale_estimator() -> None:
    got = noise_scale(np.array([2.0, 0.0]), np.array([3.0, 1.0]), 128)
    assert got[0] == 128 * 1.5
    assert got[1] == math.inf


def test_fit_recovers_a_known_profile() -> None:
    truth = EfficiencyProfile(16, 800.0, growth=0.7, batch_exponent=0.15)
    progress = tuple(np.linspace(1e5, 3e6, 12))
    runs = [
        ValidationRun(
            b,
            progress,
            tuple(float(x) for x in truth.samples(b, np.array(progress))),
            (0.0,) * 12,
            (1.0,) * 12,
            (1.0,) * 12,
        )
        for b in (16, 64, 256, 1024)
    ]
    fit = fit_efficiency(runs, source="synthetic")
    assert fit.reference_batch == 16
    assert fit.source == "synthetic"
    assert fit.noise_scale == pytest.approx(800.0, rel=1e-3)
    assert fit.growth == pytest.approx(0.7, abs=1e-3)
    assert fit.batch_exponent == pytest.approx(0.15, abs=1e-3)
    with pytest.raises(SpecError, match="runs"):
        fit_efficiency(runs[:1])


def test_embedded_profiles_equal_a_refit(shared_data: Path) -> None:
    for model, embedded in MODEL_EFFICIENCY.items():
        runs = load_validation_runs(shared_data / "pollux" / "profiles" / model)
        fit = fit_efficiency(runs)
        assert embedded.reference_batch == fit.reference_batch == runs[0].batch
        for run in runs:
            measured = np.array(run.samples)
            predicted = embedded.samples(run.batch, np.array(run.progress))
            # the embedded numbers are the refit's (rounded): same predictions to 0.1 %
            refit = fit.samples(run.batch, np.array(run.progress))
            np.testing.assert_allclose(predicted, refit, rtol=1e-3, err_msg=model)
            # and what the fit is for: the samples each run needed, to a few per cent
            error = np.abs(predicted / measured - 1)
            assert float(np.median(error)) < 0.1, (model, run.batch)


def test_loader_names_the_bad_cell(tmp_path: Path) -> None:
    (tmp_path / "validation-8.csv").write_text(
        "progress,iteration,metric,grad_sqr,grad_var\n10,10,0.5,1.0,2.0\n"
    )
    (tmp_path / "validation-16.csv").write_text(
        "progress,iteration,metric,grad_sqr,grad_var\n10,6,0.5,-1.0,2.0\n"
    )
    with pytest.raises(MeasurementError) as err:
        load_validation_runs(tmp_path)
    assert err.value.line == 2
    assert err.value.column == "grad_sqr"
    (tmp_path / "validation-16.csv").write_text(
        "progress,iteration,metric,grad_sqr,grad_var\n10,6,0.5,1.0,2.0\n"
    )
    runs = load_validation_runs(tmp_path)
    assert [r.batch for r in runs] == [8, 16]
    assert runs[1].progress == (80.0,)
    assert runs[1].samples == (96.0,)


@pytest.mark.parametrize("model", sorted(MODEL_EFFICIENCY))
def test_progress_after_inverts_samples_between_below_the_reference_batch(model: str) -> None:
    """Below ``M0`` E falls through training (1/E rises): the inverse must come down from
    its first guess. It once kept that guess, E at the interval's start for the whole
    interval: imagenet at batch 20 from 0 was credited 10x the reference samples it had
    made (162 812 for 16 281 samples, against 35 212), so a job charged piecewise (every
    rescale, every retune in place) finished up to 3x sooner than at any constant batch."""
    profile = MODEL_EFFICIENCY[model]
    m0 = profile.reference_batch
    batches = np.array([1, max(1, m0 // 10), max(1, m0 // 2), m0, 4 * m0, 64 * m0])
    for start in (0.0, 1e4, 1e6):
        for samples in (10.0, 16_281.0, 1e6):
            end = profile.progress_after(batches, start, samples)
            assert np.all(end > start)
            np.testing.assert_allclose(
                profile.samples_between(batches, start, end), samples, rtol=1e-9
            )
            # no interval makes more progress than E at its start allows, nor less than E
            # at its end: E is monotone in progress at a fixed batch
            bounds = np.sort(
                np.stack([profile.efficiency(batches, start), profile.efficiency(batches, end)]),
                axis=0,
            )
            gained = (end - start) / samples
            assert np.all(gained >= bounds[0] * (1 - 1e-9))
            assert np.all(gained <= bounds[1] * (1 + 1e-9))
    # piecewise charging adds up below M0 as above it: ten tenths make the whole
    whole = float(profile.progress_after(max(1, m0 // 10), 0.0, 1e6))
    done = 0.0
    for _ in range(10):
        done = float(profile.progress_after(max(1, m0 // 10), done, 1e5))
    assert done == pytest.approx(whole, rel=1e-4)


def test_progress_after_inverts_samples_between() -> None:
    profile = MODEL_EFFICIENCY["cifar10"]
    batches = np.array([128, 1024, 4096])
    start = np.array([0.0, 2e5, 3e6])
    samples = np.array([5e4, 1e6, 2e3])
    end = profile.progress_after(batches, start, samples)
    assert np.all(end > start)
    np.testing.assert_allclose(profile.samples_between(batches, start, end), samples, rtol=1e-9)
    # the reference batch advances one reference sample per sample (E = 1)
    assert float(profile.progress_after(128, 1e6, 777.0)) == pytest.approx(1e6 + 777.0)
    # piecewise charging adds up: two halves make the whole
    half = profile.progress_after(4096, 0.0, 1e6)
    whole = profile.progress_after(4096, 0.0, 2e6)
    # (to the quadrature's accuracy, 1e-5 where phi starts from 0)
    assert float(profile.progress_after(4096, half, 1e6)) == pytest.approx(float(whole), rel=1e-4)
    # short intervals late in training are charged accurately (not a difference of totals)
    late = profile.samples_between(4096, 3e6, 3e6 + 100.0)
    assert float(late) == pytest.approx(100.0 / float(profile.efficiency(4096, 3e6 + 50)), rel=1e-6)
    with pytest.raises(SpecError, match="end"):
        profile.samples_between(128, 2.0, 1.0)
