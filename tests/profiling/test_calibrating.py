"""Fitting the ring-Allreduce model to measured times (pure NumPy, no processes)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bellows.jobs import SpecError
from bellows.profiling import AllreduceSample, cluster_profile, fit_link
from bellows.scaling import LinkCost


def ring(latency: float, per_weight: float, k: int, w: int) -> float:
    return latency * (k - 1) + per_weight * w * 2 * (k - 1) / k


GRID = [(k, w) for k in (2, 3, 4, 8) for w in (10_000, 1_000_000, 25_000_000)]


@given(st.floats(1e-6, 1e-2), st.floats(1e-11, 1e-8))
def test_exact_ring_times_give_back_their_coefficients(latency: float, per_weight: float) -> None:
    samples = [AllreduceSample(k, w, ring(latency, per_weight, k, w)) for k, w in GRID]
    fit = fit_link(samples)
    assert fit.link.latency == pytest.approx(latency, rel=1e-6)
    assert fit.link.per_weight == pytest.approx(per_weight, rel=1e-6)
    assert fit.median_relative_error < 1e-9


def test_noisy_times_fit_within_their_noise() -> None:
    noise = [1.05, 0.95, 1.02, 0.98] * 3
    samples = [
        AllreduceSample(k, w, ring(2e-4, 1e-9, k, w) * n)
        for (k, w), n in zip(GRID, noise, strict=True)
    ]
    fit = fit_link(samples)
    assert fit.link.latency == pytest.approx(2e-4, rel=0.1)
    assert fit.link.per_weight == pytest.approx(1e-9, rel=0.1)
    assert fit.max_relative_error < 0.1


def test_coefficients_stay_non_negative() -> None:
    # Times that fall with the process count would need a negative latency.
    samples = [
        AllreduceSample(2, 1000, 0.010),
        AllreduceSample(8, 1000, 0.001),
        AllreduceSample(4, 10**7, 0.05),
    ]
    fit = fit_link(samples)
    assert fit.link.latency >= 0
    assert fit.link.per_weight >= 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"processes": 1, "weights": 10, "seconds": 1.0}, "processes"),
        ({"processes": 2, "weights": 0, "seconds": 1.0}, "weights"),
        ({"processes": 2, "weights": 10, "seconds": 0.0}, "seconds"),
        ({"processes": 2, "weights": 10, "seconds": float("nan")}, "seconds"),
    ],
)
def test_bad_samples_are_named(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(SpecError, match=field):
        AllreduceSample(**kwargs)  # type: ignore[arg-type]


def test_one_sample_is_not_enough() -> None:
    with pytest.raises(SpecError, match="at least two"):
        fit_link([AllreduceSample(2, 10, 1.0)])


def test_inter_node_link_is_copied_unless_given() -> None:
    fit = fit_link([AllreduceSample(k, w, ring(1e-4, 1e-9, k, w)) for k, w in GRID])
    copied = cluster_profile(fit, inter=None, gpus_per_node=8, source="s")
    assert copied.inter_node == copied.intra_node == fit.link
    assert copied.gpus_per_node == 8
    assert copied.overlap == 1.0
    given_link = LinkCost(5e-4, 4e-9)
    measured = cluster_profile(fit, inter=given_link, gpus_per_node=4, overlap=1.5)
    assert measured.inter_node == given_link
    assert measured.overlap == 1.5
    # The JSA prices a 16-GPU job on the inter-node link.
    assert measured.allreduce_seconds(10**6, 16) == pytest.approx(ring(5e-4, 4e-9, 16, 10**6))
