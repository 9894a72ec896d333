"""The online efficiency fit: gradient noise reports in, an EfficiencyProfile out."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bellows.scaling import MODEL_EFFICIENCY, EfficiencyProfile
from bellows.scaling.noise import (
    MAX_NOISE_CHANGE,
    MIN_NOISE_POINTS,
    NOISE_KEPT,
    SEGMENTS_KEPT,
    NoiseLog,
    NoisePoint,
    efficiency_moved,
    refit_efficiency,
)


def _train(
    truth: EfficiencyProfile,
    plan: list[tuple[int, float]],
    *,
    reports: int,
    spread: float = 0.0,
    seed: int = 0,
) -> NoiseLog:
    """A job trained at each ``(batch, samples)`` of ``plan`` in turn, reporting ``reports``
    evenly spaced points per segment whose noise scale is the truth's there (times a
    log-normal error of ``spread``)."""
    rng = np.random.default_rng(seed)
    log = NoiseLog()
    seen, progress = 0.0, 0.0
    for batch, samples in plan:
        for i in range(1, reports + 1):
            at = seen + samples * i / reports
            step = at - log.samples
            progress = float(truth.progress_after(batch, progress, step))
            log.trained(batch, at)
            phi = float(truth.noise_scale_at(batch, progress)) * math.exp(spread * rng.normal())
            assert log.add(NoisePoint(batch, at, 1e-3, phi * 1e-3)) is None
        seen += samples
    return log


@pytest.mark.parametrize("model", ["cifar10", "imagenet", "yolov3"])
def test_fit_recovers_a_models_efficiency_from_its_reports(model: str) -> None:
    truth = MODEL_EFFICIENCY[model]
    m0 = truth.reference_batch
    work = 5e6
    plan = [(m0, work / 4), (4 * m0, work / 4), (16 * m0, work / 2)]  # rescaled twice
    log = _train(truth, plan, reports=20, spread=0.2)
    fit = refit_efficiency(log, m0)
    assert fit is not None
    batches = np.array([m0, 2 * m0, 4 * m0, 16 * m0])  # where it trained, and between
    for s, upto in ((0.3e6, 3), (1e6, 4), (4e6, 4)):  # early on, only the batches it ran at
        b = batches[:upto]
        assert np.allclose(fit.efficiency(b, s), truth.efficiency(b, s), rtol=0.1)
    # the progress it counts: within 5 % of the truth's
    assert log.progress(fit) == pytest.approx(log.progress(truth), rel=0.05)


def test_a_short_run_at_one_batch_leans_on_the_prior_growth() -> None:
    truth = MODEL_EFFICIENCY["cifar10"]
    log = _train(truth, [(512, 2e5)], reports=4)
    fit = refit_efficiency(log, 128)
    assert fit is not None
    assert 0.0 <= fit.growth <= 2.0
    assert 0.0 <= fit.batch_exponent < 1.0
    # where the job ran, the fitted noise scale is what it reported
    assert float(fit.noise_scale_at(512, log.progress(fit))) == pytest.approx(
        float(truth.noise_scale_at(512, log.progress(truth))), rel=0.1
    )
    assert log.progress(fit) == pytest.approx(log.progress(truth), rel=0.05)


def test_no_profile_until_enough_points() -> None:
    log = _train(MODEL_EFFICIENCY["ncf"], [(256, 1e5)], reports=MIN_NOISE_POINTS - 1)
    assert refit_efficiency(log, 256) is None
    log.trained(256, 2e5)
    assert log.add(NoisePoint(256, 2e5, 1.0, log.points[-1].noise_scale)) is None
    assert refit_efficiency(log, 256) is not None


def test_progress_is_samples_without_efficiency_and_at_the_reference_batch() -> None:
    log = NoiseLog()
    log.trained(64, 1000.0)
    log.trained(64, 900.0)  # a report of the past teaches nothing
    assert log.progress(None) == 1000.0
    assert log.segments == [(64, 1000.0)]
    profile = EfficiencyProfile(64, 100.0, 0.5)
    assert log.progress(profile) == pytest.approx(1000.0)  # E(M0) = 1
    log.trained(256, 3000.0)
    done = log.progress(profile)
    assert 1000.0 < done < 3000.0  # a larger batch: fewer reference samples per sample
    assert float(profile.samples_between(256, 1000.0, done)) == pytest.approx(2000.0, rel=2e-3)
    assert log.progress(profile, 500.0) == pytest.approx(500.0)


@pytest.mark.parametrize("model", sorted(MODEL_EFFICIENCY))
def test_progress_integrates_as_the_profile_inverts(model: str) -> None:
    """The log's Runge-Kutta progress against :meth:`EfficiencyProfile.progress_after`."""
    profile = MODEL_EFFICIENCY[model]
    m0 = profile.reference_batch
    log = NoiseLog()
    for i, batch in enumerate((m0, 8 * m0, 2 * m0, 64 * m0)):
        log.trained(batch, 1e6 * 10**i)
    expected = 0.0
    for batch, count in log.segments:
        expected = float(profile.progress_after(batch, expected, count))
    assert log.progress(profile) == pytest.approx(expected, rel=2e-3)


def test_points_and_segments_are_bounded() -> None:
    log = NoiseLog()
    for i in range(1, 3 * max(NOISE_KEPT, SEGMENTS_KEPT)):
        log.trained(32 if i % 2 else 64, 100.0 * i)
        assert log.add(NoisePoint(32, 100.0 * i, 1.0, 50.0)) is None
    assert len(log.points) == NOISE_KEPT
    assert len(log.segments) == SEGMENTS_KEPT
    assert sum(n for _, n in log.segments) == pytest.approx(log.samples)


@pytest.mark.parametrize(
    ("grad_var", "reason"),
    [
        (1e-9, "outside"),  # a noise scale of 1e-9 samples
        (1e13, "outside"),
        (50.0 * MAX_NOISE_CHANGE * 1.01, "moved"),
        (50.0 / MAX_NOISE_CHANGE / 1.01, "moved"),
    ],
)
def test_implausible_points_are_refused_with_a_reason(grad_var: float, reason: str) -> None:
    log = NoiseLog()
    assert log.add(NoisePoint(32, 100.0, 1.0, 50.0)) is None
    refused = log.add(NoisePoint(32, 200.0, 1.0, grad_var))
    assert refused is not None
    assert reason in refused
    assert len(log) == 1


def test_a_move_worth_a_revision() -> None:
    a = EfficiencyProfile(32, 100.0, 0.5, 0.1)
    assert efficiency_moved(None, a, tolerance=0.05)
    assert not efficiency_moved(None, None, tolerance=0.05)
    assert not efficiency_moved(a, EfficiencyProfile(32, 103.0, 0.52, 0.12), tolerance=0.05)
    assert efficiency_moved(a, EfficiencyProfile(32, 110.0, 0.5, 0.1), tolerance=0.05)
    assert efficiency_moved(a, EfficiencyProfile(32, 100.0, 0.6, 0.1), tolerance=0.05)
