"""The online JSA: refitting a job's profile from its progress reports."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bellows.jobs import SpecError, StepProfile
from bellows.scaling import JobProfile, default_cluster
from bellows.scaling.online import (
    FIT_BOUND,
    WINDOW,
    ProgressLog,
    ProgressReport,
    refit_log,
    refit_profile,
)
from bellows.scaling.timing import local_batch, processing_seconds

CLUSTER = default_cluster()
# ResNet-50-like: 25.6 M parameters, t_proc measured at four per-GPU batches
PRIOR = JobProfile(
    weights=25_557_032,
    step=StepProfile((16, 32, 64, 128), (0.05, 0.08, 0.14, 0.27)),
    source="annotation",
)
SEEN = [(1, 64), (4, 256), (8, 256), (8, 1024), (12, 768)]  # a handful of configurations
UNSEEN = [(2, 64), (6, 384), (16, 512), (16, 2048), (24, 1536)]


def _true_step(compute: float, comm: float, gpus: int, batch: int) -> float:
    """Step time of the job as it really runs: its compute and Allreduce scaled."""
    t_proc = compute * processing_seconds(PRIOR.step, local_batch(gpus, batch))
    t_ar = CLUSTER.allreduce_seconds(round(comm * PRIOR.effective_weights), gpus)
    return CLUSTER.combine(t_proc, t_ar)


def _predicted(profile: JobProfile, gpus: int, batch: int) -> float:
    t_proc = processing_seconds(profile.step, local_batch(gpus, batch))
    return CLUSTER.combine(t_proc, CLUSTER.allreduce_seconds(profile.effective_weights, gpus))


def _reports(compute: float, comm: float, seed: int) -> ProgressLog:
    rng = np.random.default_rng(seed)
    log = ProgressLog()
    samples = 0.0
    for _ in range(3):  # three reports per configuration, 2 % noise each
        for gpus, batch in SEEN:
            samples += 100 * batch
            noisy = _true_step(compute, comm, gpus, batch) * (1 + 0.02 * rng.standard_normal())
            assert log.add(ProgressReport(gpus, batch, noisy, samples)) is None
    return log


@pytest.mark.parametrize(
    ("compute", "comm"),
    [(1.0, 1.4), (0.8, 1.0), (0.8, 1.4), (1.3, 0.6)],
    ids=["allreduce-40%-slower", "compute-25%-faster", "both", "slower-compute-faster-net"],
)
def test_wrong_prior_learned_within_5_percent(compute: float, comm: float) -> None:
    fit = refit_log(PRIOR, CLUSTER, _reports(compute, comm, seed=3))
    assert fit.configurations == len(SEEN)
    assert fit.reports == 3 * len(SEEN)
    prior_error, fit_error = [], []
    for gpus, batch in SEEN + UNSEEN:
        truth = _true_step(compute, comm, gpus, batch)
        prior_error.append(abs(_predicted(PRIOR, gpus, batch) / truth - 1))
        fit_error.append(abs(_predicted(fit.profile, gpus, batch) / truth - 1))
    assert max(prior_error) > 0.10  # the prior really is wrong somewhere
    assert max(fit_error) <= 0.05, fit_error  # ... and the fit is right everywhere
    assert fit.compute == pytest.approx(compute, rel=0.05)


def test_nothing_observed_keeps_the_prior() -> None:
    fit = refit_log(PRIOR, CLUSTER, ProgressLog())
    assert fit.profile is PRIOR
    assert (fit.compute, fit.communication, fit.reports) == (1.0, 1.0, 0)


def test_one_configuration_matches_it_and_stays_near_the_prior() -> None:
    truth = 1.5 * _predicted(PRIOR, 8, 512)
    fit = refit_profile(PRIOR, CLUSTER, {(8, 512): truth})
    assert _predicted(fit.profile, 8, 512) == pytest.approx(truth, rel=0.02)
    # the prior splits the change between the two factors rather than inventing one
    assert 1.0 < fit.compute < 1.6
    assert 1.0 < fit.communication < 2.5
    assert fit.profile.weights == PRIOR.weights


def test_factors_are_bounded() -> None:
    fit = refit_profile(PRIOR, CLUSTER, {(1, 64): 1e4 * _predicted(PRIOR, 1, 64)})
    assert fit.compute <= FIT_BOUND * (1 + 1e-9)


@pytest.mark.parametrize(
    "bad",
    [
        {"step_seconds": 0.0},
        {"step_seconds": math.nan},
        {"step_seconds": math.inf},
        {"step_seconds": -1.0},
        {"samples": math.nan},
        {"samples": -5.0},
        {"gpus": 0},
        {"batch": 0},
        {"gpus": True},
    ],
)
def test_bad_reports_rejected(bad: dict[str, object]) -> None:
    fields: dict[str, object] = {"gpus": 4, "batch": 256, "step_seconds": 0.2, "samples": 10.0}
    fields.update(bad)
    with pytest.raises(SpecError):
        ProgressReport(**fields)  # type: ignore[arg-type]


def test_samples_going_backwards_rejected_and_logs_independent() -> None:
    mine, other = ProgressLog(), ProgressLog()
    assert mine.add(ProgressReport(4, 256, 0.2, 1000.0)) is None
    reason = mine.add(ProgressReport(4, 256, 0.9, 500.0))
    assert reason is not None
    assert "backwards" in reason
    assert mine.medians() == {(4, 256): 0.2}  # the rejected report left no trace
    assert (mine.samples, mine.reports) == (1000.0, 1)
    before = refit_log(PRIOR, CLUSTER, mine)
    for i in range(WINDOW + 5):  # another job's reports, many and very different
        other.add(ProgressReport(4, 256, 5.0, float(i)))
    assert refit_log(PRIOR, CLUSTER, mine) == before
    assert len(other.by_config[(4, 256)]) == WINDOW  # bounded per configuration
