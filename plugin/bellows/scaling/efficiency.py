"""Statistical efficiency: how many samples a batch size costs, from the gradient noise scale.

Larger batches need more samples to reach the same model quality (McCandlish et al., "An
Empirical Model of Large-Batch Training", 2018). With the gradient noise scale
``phi = tr(Sigma) / |G|^2`` (samples), a batch of ``b`` samples makes the progress of
``E(b) * b`` samples at a reference batch ``M0``, where (Pollux, OSDI'21, eq. 6)::

    E(b) = (phi + M0) / (phi + b)            E(M0) = 1, E falls as b grows past phi

and ``phi`` grows as training progresses, so big batches cost most early on. Progress is
counted in **reference samples**: samples at ``M0``, or efficiency-weighted samples at any
batch (``d progress = E(b, progress) * d samples``).

:class:`EfficiencyProfile` is the fitted model of one job, frozen and validated::

    phi(b, s) = noise_scale * (s / PROGRESS_UNIT) ** growth * (b / M0) ** batch_exponent

with ``s`` the progress in reference samples. ``growth`` models the rise of the noise scale
through training; ``batch_exponent`` the rise of the noise scale a run *measures* with its
batch (the runs in the Pollux validation files measure a larger ``phi`` at a larger batch at
equal progress: 0.09-0.55 fitted; 0 is the textbook form, where ``phi`` belongs to the model
alone). Every method is pure and vectorised: batches and progress broadcast as NumPy arrays.

:func:`noise_scale` is the published estimator from the two statistics training reports
(``grad_sqr = |G|^2`` and ``grad_var``, the gradient variance at the reference batch, as
Pollux/AdaptDL measure them): ``phi = M0 * grad_var / grad_sqr``. :func:`fit_efficiency`
fits a profile to validation runs (samples each batch needed to reach each progress).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bellows.inputs import check_float, check_int
from bellows.jobs import MAX_BATCH, MAX_WORK, SpecError
from bellows.scaling.fitting import levenberg_marquardt

__all__ = [
    "MAX_GROWTH",
    "PROGRESS_UNIT",
    "EfficiencyProfile",
    "ValidationRun",
    "fit_efficiency",
    "noise_scale",
]

F64 = npt.NDArray[np.float64]

PROGRESS_UNIT = 1e6
"""Reference samples at which :attr:`EfficiencyProfile.noise_scale` is stated."""

MAX_GROWTH = 4.0
"""Largest ``growth`` accepted (``phi`` rising as the fourth power of progress)."""

MAX_NOISE_SCALE = 1e15
"""Largest noise scale accepted, in samples (far above any batch: E = 1 to rounding)."""

_QUADRATURE = 256  # midpoint nodes per integral of 1/E (error far below the fit's)
_NODES = (np.arange(_QUADRATURE, dtype=np.float64) + 0.5) / _QUADRATURE
_NODES.setflags(write=False)


@dataclass(frozen=True)
class EfficiencyProfile:
    """A job's statistical efficiency relative to ``reference_batch`` (``M0``).

    * ``noise_scale``: ``phi`` (samples) at ``PROGRESS_UNIT`` reference samples of progress,
      measured at ``M0``;
    * ``growth``: ``phi`` grows as ``progress ** growth`` (``0 <= growth <= MAX_GROWTH``);
    * ``batch_exponent``: ``phi`` measured at batch ``b`` is ``(b / M0) ** batch_exponent``
      times that at ``M0`` (``0 <= batch_exponent < 1``, so ``E`` keeps falling with ``b``);
    * ``source``: where the numbers came from.
    """

    reference_batch: int
    noise_scale: float
    growth: float
    batch_exponent: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        check_int("reference_batch", self.reference_batch, minimum=1, maximum=MAX_BATCH)
        phi = check_float(
            "noise_scale", self.noise_scale, minimum=0.0, maximum=MAX_NOISE_SCALE, open_min=True
        )
        object.__setattr__(self, "noise_scale", phi)
        growth = check_float("growth", self.growth, minimum=0.0, maximum=MAX_GROWTH)
        object.__setattr__(self, "growth", growth)
        exponent = check_float("batch_exponent", self.batch_exponent, minimum=0.0, maximum=0.99)
        object.__setattr__(self, "batch_exponent", exponent)
        if not isinstance(self.source, str):
            raise SpecError("source", self.source, "a string")

    def rebased(self, reference_batch: int) -> EfficiencyProfile:
        """The same noise scale ``phi(b, s)`` stated relative to another reference batch
        ``M0'`` (a job's own ``batch_size``, whose samples its work counts): ``noise_scale``
        becomes ``phi`` at ``M0'``, ``noise_scale * (M0' / M0) ** batch_exponent``, and
        ``E(b) = (phi + M0') / (phi + b)``, 1 at ``M0'``. Progress stays counted in reference
        samples, now at ``M0'``. ``self`` when ``M0'`` is already the reference."""
        check_int("reference_batch", reference_batch, minimum=1, maximum=MAX_BATCH)
        if reference_batch == self.reference_batch:
            return self
        ratio = reference_batch / self.reference_batch
        phi = min(self.noise_scale * ratio**self.batch_exponent, MAX_NOISE_SCALE)
        source = f"{self.source} (rebased from batch {self.reference_batch})".strip()
        return EfficiencyProfile(reference_batch, phi, self.growth, self.batch_exponent, source)

    def noise_scale_at(self, batch: npt.ArrayLike, progress: npt.ArrayLike) -> F64:
        """``phi`` (samples) a run at ``batch`` measures after ``progress`` reference samples."""
        return self._phi(_batches(batch), _progress(progress))

    def efficiency(self, batch: npt.ArrayLike, progress: npt.ArrayLike) -> F64:
        """``E(b)`` at ``progress`` reference samples: reference samples per sample at ``b``.

        1 at ``M0``; above 1 below ``M0`` (a smaller batch gains, as the published form says);
        ``batch`` and ``progress`` broadcast against each other.
        """
        return self._efficiency(_batches(batch), _progress(progress))

    def at_progress(self, progress: F64) -> F64:
        """``phi`` at ``M0`` after ``progress`` (checked) reference samples: the factor of
        :meth:`noise_scale_at` that does not depend on the batch."""
        return np.asarray(self.noise_scale * (progress / PROGRESS_UNIT) ** self.growth)

    def batch_factor(self, batch: F64) -> F64:
        """The factor of :meth:`noise_scale_at` that depends on the (checked) batch alone."""
        if self.batch_exponent:
            return np.asarray((batch / self.reference_batch) ** self.batch_exponent)
        return np.ones_like(batch)

    def _phi(self, b: F64, s: F64) -> F64:
        """:meth:`noise_scale_at` of checked arrays (the loops below check once)."""
        return np.asarray(self.at_progress(s) * self.batch_factor(b), dtype=np.float64)

    def _efficiency(self, b: F64, s: F64) -> F64:
        """:meth:`efficiency` of checked arrays."""
        phi = self._phi(b, s)
        return np.asarray((phi + self.reference_batch) / (phi + b), dtype=np.float64)

    def samples(self, batch: npt.ArrayLike, progress: npt.ArrayLike) -> F64:
        """Samples a run at constant ``batch`` needs to reach ``progress`` reference samples
        from the start: ``integral_0^progress ds / E(b, s)``."""
        return self.samples_between(batch, 0.0, progress)

    def samples_between(
        self, batch: npt.ArrayLike, start: npt.ArrayLike, end: npt.ArrayLike
    ) -> F64:
        """Samples at constant ``batch`` that take progress from ``start`` to ``end``
        (reference samples, ``end >= start``): ``integral_start^end ds / E(b, s)``.

        Midpoint rule in ``t = sqrt((s - start) / (end - start))``, which puts the nodes
        where ``phi`` rises fastest when ``start`` is 0 (for ``growth < 1``)."""
        b, lo, hi = np.broadcast_arrays(_batches(batch), _progress(start), _progress(end))
        if np.any(hi < lo):
            raise SpecError("end", _shown(hi), "progress at or after start")
        return self._samples_between(b, lo, hi)

    def _samples_between(self, b: F64, lo: F64, hi: F64) -> F64:
        """:meth:`samples_between` of checked arrays of one shape."""
        span = hi - lo
        t = _NODES
        at = lo[..., None] + span[..., None] * t * t
        inverse = 1.0 / self._efficiency(b[..., None], at)
        return np.asarray(span * (2.0 * t * inverse).mean(axis=-1), dtype=np.float64)

    def progress_after(
        self, batch: npt.ArrayLike, start: npt.ArrayLike, samples: npt.ArrayLike
    ) -> F64:
        """Progress (reference samples) after ``samples`` more samples at constant ``batch``
        from ``start``: the inverse of :meth:`samples_between` (what a simulator charges a
        job for an interval at one batch), to 1e-12 relative.

        Newton's method on ``samples_between(b, start, end) = samples``, whose slope in ``end``
        is ``1/E(b, end)``, from ``start + samples * E(b, start)``. ``E`` moves one way through
        training for a given batch: it falls toward 1 below ``M0`` (``1/E`` rises: the guess is
        above the answer, the function convex, every iterate stays above it) and rises toward
        1 above ``M0`` (the guess below, the function concave, every iterate below): Newton
        converges monotonically from either side. (It once only stepped up, as if ``E`` fell
        at every batch: below ``M0`` it kept the guess, ``E`` at the interval's start for the
        whole interval, up to ``M0 / b`` times the progress where ``phi`` starts from 0.)"""
        b, lo, n = np.broadcast_arrays(_batches(batch), _progress(start), _progress(samples))
        end = np.minimum(lo + n * self._efficiency(b, lo), MAX_WORK)
        for _ in range(60):  # every iterate in [lo, MAX_WORK]: checked once, above
            missing = n - self._samples_between(b, lo, end)
            step = missing * self._efficiency(b, end)
            end = np.clip(end + step, lo, MAX_WORK)
            if np.all(np.abs(step) <= 1e-12 * np.maximum(end, 1.0)):
                break
        return np.asarray(end, dtype=np.float64)


def noise_scale(grad_sqr: npt.ArrayLike, grad_var: npt.ArrayLike, reference_batch: int) -> F64:
    """The gradient noise scale ``M0 * grad_var / grad_sqr`` (samples; ``inf`` where
    ``grad_sqr`` is 0): ``grad_sqr`` the squared norm of the mean gradient, ``grad_var`` the
    gradient variance at the reference batch ``M0`` (Pollux's ``PGNS``)."""
    check_int("reference_batch", reference_batch, minimum=1, maximum=MAX_BATCH)
    sqr = np.asarray(grad_sqr, dtype=np.float64)
    var = np.asarray(grad_var, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(sqr > 0, reference_batch * var / np.where(sqr > 0, sqr, 1.0), np.inf)
    return np.asarray(out, dtype=np.float64)


def _batches(batch: npt.ArrayLike) -> F64:
    return _within(batch, 1.0, MAX_BATCH, "batch", f"batch sizes in [1, {MAX_BATCH}]")


def _progress(progress: npt.ArrayLike) -> F64:
    return _within(progress, 0.0, MAX_WORK, "progress", f"reference samples in [0, {MAX_WORK:g}]")


def _within(values: npt.ArrayLike, low: float, high: float, field: str, expected: str) -> F64:
    """``values`` as float64, each finite and in ``[low, high]`` (one comparison per bound
    for a number: most calls are one batch at one progress)."""
    out = np.asarray(values, dtype=np.float64)
    if out.ndim == 0:
        one = float(out)
        ok = math.isfinite(one) and low <= one <= high
    else:
        ok = out.size == 0 or bool(
            np.all(np.isfinite(out)) and out.min() >= low and out.max() <= high
        )
    if not ok:
        raise SpecError(field, _shown(out), expected)
    return out


def _shown(values: F64) -> object:
    return values.item() if values.size == 1 else f"an array of {values.size} values"


@dataclass(frozen=True)
class ValidationRun:
    """One training run at a constant global ``batch``: at each row, the ``progress`` made
    (reference samples), the ``samples`` it took, the validation ``metric`` there and the
    gradient statistics measured (``grad_sqr``, ``grad_var``)."""

    batch: int
    progress: tuple[float, ...]
    samples: tuple[float, ...]
    metric: tuple[float, ...]
    grad_sqr: tuple[float, ...]
    grad_var: tuple[float, ...]

    def __post_init__(self) -> None:
        check_int("batch", self.batch, minimum=1, maximum=MAX_BATCH)
        size = len(self.progress)
        if size < 1:
            raise SpecError("progress", self.progress, "at least one row")
        for name in ("samples", "metric", "grad_sqr", "grad_var"):
            column = getattr(self, name)
            if len(column) != size:
                raise SpecError(name, f"{len(column)} rows", f"{size} rows, one per progress")
        for i, (s, n) in enumerate(zip(self.progress, self.samples, strict=True)):
            check_float(f"progress[{i}]", s, minimum=0.0, maximum=MAX_WORK, open_min=True)
            check_float(f"samples[{i}]", n, minimum=0.0, maximum=MAX_WORK, open_min=True)


def fit_efficiency(
    runs: Sequence[ValidationRun],
    *,
    reference_batch: int | None = None,
    until: float | None = None,
    source: str = "",
) -> EfficiencyProfile:
    """Fit an :class:`EfficiencyProfile` to runs at several batch sizes.

    Least squares on the log of the samples each run needed to reach each of its rows'
    progress (:meth:`EfficiencyProfile.samples` against ``samples``), over the rows at or
    below ``until`` reference samples (all when ``None``; at least the first row of each run).
    ``reference_batch`` defaults to the smallest batch; its run only fixes the scale (it is
    ``E = 1`` by definition). Needs a run at a batch other than the reference.
    """
    if not runs:
        raise SpecError("runs", "no runs", "validation runs at two batch sizes or more")
    m0 = min(run.batch for run in runs) if reference_batch is None else reference_batch
    check_int("reference_batch", m0, minimum=1, maximum=MAX_BATCH)
    rows: list[tuple[F64, F64, F64]] = []
    for run in runs:
        if run.batch == m0:
            continue
        s = np.array(run.progress)
        keep = np.ones_like(s, dtype=bool) if until is None else s <= until
        keep[0] = True
        batch = np.full(int(keep.sum()), float(run.batch))
        rows.append((batch, s[keep], np.array(run.samples)[keep]))
    if not rows:
        raise SpecError("runs", f"batches {sorted({r.batch for r in runs})}", f"a batch != {m0}")
    b = np.concatenate([r[0] for r in rows])
    s = np.concatenate([r[1] for r in rows])
    log_measured = np.log(np.concatenate([r[2] for r in rows]))

    def model(theta: F64) -> EfficiencyProfile:
        return EfficiencyProfile(
            m0,
            float(np.exp(np.clip(theta[0], -30.0, math.log(MAX_NOISE_SCALE)))),
            float(np.clip(theta[1], 0.0, MAX_GROWTH)),
            float(np.clip(theta[2], 0.0, 0.99)),
            source,
        )

    def residual(theta: F64) -> F64:
        return np.asarray(np.log(model(theta).samples(b, s)) - log_measured, dtype=np.float64)

    theta = levenberg_marquardt(residual, np.array([math.log(1000.0), 1.0, 0.2]))
    return model(theta)
