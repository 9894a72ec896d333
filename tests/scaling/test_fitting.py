"""Fitting on the real Pollux measurements: step profiles, the cluster, held-out accuracy."""

from __future__ import annotations

from pathlib import Path

import pytest

from bellows.jobs import SpecError, StepProfile
from bellows.scaling import (
    MODEL_WEIGHTS,
    FitSample,
    JobProfile,
    StepMeasurement,
    default_cluster,
    fit_cluster_profile,
    fit_job_profile,
    fit_step_profile,
    load_placements,
    predict_step_time,
    processing_seconds,
)
from bellows.scaling.accuracy import (
    SPLITS,
    TRAIN_PLACEMENTS,
    evaluate,
    fit_reference_cluster,
    load_pollux_models,
    split_by,
    split_rows,
)


@pytest.fixture(scope="module")
def models(shared_data: Path) -> list:  # type: ignore[type-arg]
    return load_pollux_models(shared_data / "pollux" / "profiles")


def test_step_profile_from_single_gpu_rows(shared_data: Path) -> None:
    rows = load_placements(shared_data / "pollux" / "profiles" / "cifar10" / "placements.csv")
    profile = fit_step_profile(rows)
    singles = [r for r in rows if r.gpus == 1]
    assert profile.local_batches == tuple(sorted({r.local_batch for r in singles}))
    first = [r.step_time for r in singles if r.local_batch == profile.local_batches[0]]
    assert profile.seconds[0] == pytest.approx(sum(first) / len(first))
    with pytest.raises(SpecError, match="1-GPU"):
        fit_step_profile([r for r in rows if r.gpus > 1])


def test_processing_time_interpolates_and_extends() -> None:
    step = StepProfile((10, 20), (1.0, 1.5))
    assert processing_seconds(step, 15) == pytest.approx(1.25)
    assert processing_seconds(step, 5) == 1.0  # below: the smallest batch's time
    assert processing_seconds(step, 40) == pytest.approx(3.0)  # above: same time per sample
    with pytest.raises(SpecError, match="local_batch"):
        processing_seconds(step, 0)


def test_default_cluster_is_the_refit(models: list) -> None:  # type: ignore[type-arg]
    fitted = fit_reference_cluster(models, overlap=True)
    embedded = default_cluster()
    assert fitted.overlap == pytest.approx(embedded.overlap, rel=2e-3)
    for link in ("intra_node", "inter_node"):
        got, want = getattr(fitted, link), getattr(embedded, link)
        assert got.latency == pytest.approx(want.latency, rel=2e-3, abs=1e-7)
        assert got.per_weight == pytest.approx(want.per_weight, rel=2e-3)


def test_cluster_fit_recovers_known_parameters() -> None:
    truth = default_cluster()
    step = StepProfile((8, 32, 128), (0.05, 0.12, 0.4))
    samples = []
    for weights in (2_000_000, 25_000_000, 110_000_000):
        job = JobProfile(weights, step)
        rows = []
        for placement in ("2", "3", "4", "11", "22", "44", "1111"):
            for m in (8, 32, 128):
                probe = StepMeasurement(len(placement), sum(map(int, placement)), m, 1.0, 0.0)
                t = predict_step_time(job, truth, probe)
                rows.append(StepMeasurement(probe.nodes, probe.gpus, m, t, 0.0, placement))
        samples.append(FitSample(weights, step, tuple(rows)))
    fitted = fit_cluster_profile(samples, overlap=True)
    assert fitted.overlap == pytest.approx(truth.overlap, rel=1e-3)
    assert fitted.inter_node.per_weight == pytest.approx(truth.inter_node.per_weight, rel=1e-3)
    additive = fit_cluster_profile(samples, overlap=False)
    assert additive.overlap == 1.0


def test_comm_weights_fitted_from_multi_gpu_rows(models: list) -> None:  # type: ignore[type-arg]
    imagenet = next(m for m in models if m.name == "imagenet")
    train, test = split_rows(imagenet.rows)
    assert {r.placement for r in train} == TRAIN_PLACEMENTS
    assert not {r.placement for r in test} & TRAIN_PLACEMENTS
    tuned = fit_job_profile(train, weights=MODEL_WEIGHTS["imagenet"], cluster=default_cluster())
    assert tuned.comm_weights is not None
    assert tuned.comm_weights != tuned.weights
    plain = fit_job_profile([r for r in train if r.gpus == 1], weights=25_557_032)
    assert plain.comm_weights is None


def test_held_out_accuracy(models: list) -> None:  # type: ignore[type-arg]
    report = evaluate(models)
    assert set(report.mape) == {"additive", "overlap", "additive+job", "overlap+job"}
    for per_model in report.mape.values():
        assert set(per_model) == set(MODEL_WEIGHTS)
    assert all(report.test_rows[name] > 100 for name in MODEL_WEIGHTS)
    # What docs/jsa.md claims: per-job calibration helps, and the default is the best variant.
    assert report.overall["overlap+job"] < report.overall["overlap"]
    assert report.best == "overlap+job"
    assert report.clusters["overlap"] == fit_reference_cluster(models, overlap=True)


def test_reviewer_splits_keep_held_out_rows_apart(models: list) -> None:  # type: ignore[type-arg]
    for model in models:
        train, test = split_by("gpus", model.rows)
        assert max(r.gpus for r in train) <= 4
        assert min(r.gpus for r in test) >= 8
        assert len(train) + len(test) == sum(1 for r in model.rows if not 4 < r.gpus < 8)
        train, test = split_by("files", model.rows)
        # placements.csv reaches at most 4 nodes, scalability.csv starts at 6
        assert all(r.placement for r in train)
        assert max(r.nodes for r in train) <= 4
        assert test
        assert all(not r.placement and r.nodes >= 6 for r in test)
        assert len(train) + len(test) == len(model.rows)
    assert set(SPLITS) == {"gpus", "files"}
    with pytest.raises(ValueError, match="unknown split"):
        split_by("nodes", models[0].rows)


def test_vectorized_step_times_equal_the_scalar_model(models: list) -> None:  # type: ignore[type-arg]
    from bellows.scaling.fitting import _step_times  # noqa: PLC0415 - the private helper

    for model in models:
        step = fit_step_profile(model.rows)
        multi = [r for r in model.rows if r.gpus > 1]
        for cluster in (default_cluster(), fit_reference_cluster(models[:2], overlap=False)):
            profile = JobProfile(weights=model.weights, step=step)
            scalar = [predict_step_time(profile, cluster, r) for r in multi]
            assert _step_times(multi, step, cluster)(model.weights) == pytest.approx(
                scalar, rel=1e-12
            )
