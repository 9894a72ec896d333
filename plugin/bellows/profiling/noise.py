"""The gradient noise a profiling run measures: ``gradSqr``/``gradVar`` and the noise scale.

The squared norm of a mini-batch gradient at batch ``B`` is, in expectation,
``|G|^2 + tr(Sigma) / B`` (``G`` the true gradient, ``Sigma`` the per-sample gradient
covariance). Measured at two batches ``b_small < b_large`` (the mean of several draws each),
the two unknowns follow (McCandlish et al., "An Empirical Model of Large-Batch Training",
2018, appendix A)::

    |G|^2     = (b_large |G_large|^2 - b_small |G_small|^2) / (b_large - b_small)
    tr(Sigma) = (|G_small|^2 - |G_large|^2) / (1 / b_small - 1 / b_large)

and the noise scale ``phi = tr(Sigma) / |G|^2`` (samples). :func:`gradient_noise` does the
arithmetic; :func:`efficiency_prior` states the result as the profile's efficiency section
(:mod:`bellows.scaling.priors`). Pure: the caller (``bellows profile``) draws the gradients.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bellows.jobs import SpecError
from bellows.scaling.efficiency import EfficiencyProfile
from bellows.scaling.noise import EXPONENT_PRIOR, GROWTH_PRIOR
from bellows.scaling.priors import PRIOR_NOISE_RANGE

__all__ = ["GradientNoise", "efficiency_prior", "gradient_noise"]


@dataclass(frozen=True)
class GradientNoise:
    """``grad_sqr = |G|^2`` and ``grad_var = tr(Sigma)`` from a profiling run's gradients."""

    grad_sqr: float
    grad_var: float
    draws: int  # gradients drawn at each of the two batches

    @property
    def noise_scale(self) -> float:
        """``phi = tr(Sigma) / |G|^2``, samples."""
        return self.grad_var / self.grad_sqr


def gradient_noise(
    small: Sequence[float], large: Sequence[float], b_small: int, b_large: int
) -> GradientNoise:
    """The estimate from squared gradient norms drawn at ``b_small`` and ``b_large``.

    :class:`SpecError` when the draws cannot say it: fewer than 2 at either batch, a value not
    finite or negative, or estimates that are not both positive (too few draws for the
    model's noise; draw more with ``--noise-draws``).
    """
    if not 1 <= b_small < b_large:
        raise SpecError("batches", (b_small, b_large), "two per-GPU batches, 1 <= small < large")
    for name, draws in (("small", small), ("large", large)):
        if len(draws) < 2:
            raise SpecError(f"gradients at the {name} batch", len(draws), "at least 2 draws")
        if not all(math.isfinite(d) and d >= 0 for d in draws):
            raise SpecError(f"gradients at the {name} batch", list(draws), "finite norms >= 0")
    g_small, g_large = statistics.fmean(small), statistics.fmean(large)
    grad_sqr = (b_large * g_large - b_small * g_small) / (b_large - b_small)
    grad_var = (g_small - g_large) / (1 / b_small - 1 / b_large)
    if not (grad_sqr > 0 and grad_var > 0):
        raise SpecError(
            "gradient noise",
            f"|G|^2={grad_sqr:.3g}, tr(Sigma)={grad_var:.3g}",
            "both > 0 (the draws were too few to tell the noise from the signal)",
        )
    return GradientNoise(grad_sqr, grad_var, min(len(small), len(large)))


def efficiency_prior(noise: GradientNoise, reference_batch: int, what: str) -> EfficiencyProfile:
    """The profile's efficiency section from ``noise`` measured at ``reference_batch``: the
    measured noise scale (clipped into :data:`PRIOR_NOISE_RANGE`) with the growth and batch
    exponent of the six fitted models' medians. A profiling run makes no training progress
    worth the name, so its noise scale stands for the one at 10^6 reference samples; the
    job's reports correct all three numbers (docs/jsa.md)."""
    low, high = PRIOR_NOISE_RANGE
    phi = min(max(noise.noise_scale, low), high)
    source = (
        f"bellows profile: noise scale {noise.noise_scale:.4g} samples from {noise.draws} "
        f"gradients at each of two batches ({what}); growth and batch exponent: the fitted "
        "models' medians"
    )
    return EfficiencyProfile(reference_batch, phi, GROWTH_PRIOR[0], EXPONENT_PRIOR[0], source)
