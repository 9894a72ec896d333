"""Statistical efficiency as the Pollux artifact's simulator charges it (issue 36, opt in).

Our simulator charges a job the fitted :class:`bellows.scaling.EfficiencyProfile` of its model
(``phi`` a smooth function of batch and progress, fitted to the samples each validation run
needed). The artifact's simulator charges instead the gradient statistics its validation runs
measured: during the ``e``-th epoch of progress (between the epochs' progress bounds, the
least over the runs) a job at global batch ``b`` gains::

    E(b, e) = (var + sqr) / (var + (b / M0) * sqr)      reference samples per sample

with ``sqr`` and ``var`` the ``grad_sqr`` and ``grad_var`` of epoch ``e``, linear in ``b``
between the measured batches (held at the ends), ``M0`` the smallest batch. That is
Pollux's ``(phi + M0) / (phi + b)`` with ``phi = M0 * var / sqr`` measured per epoch.

:class:`MeasuredEfficiency` is that truth, with the two methods the simulator charges a job
by (:meth:`samples_between`, :meth:`progress_after`), exact: ``E`` is constant within an
epoch, so the samples to a progress are piecewise linear in it. The policies keep deciding
with the fitted profile (``run(..., efficiency=..., efficiency_truth=...)``): only what the
jobs really make is the artifact's. Progress past the last epoch keeps the last epoch's ``E``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bellows.jobs import SpecError
from bellows.scaling.efficiency import ValidationRun
from bellows.scaling.validation import load_validation_runs

__all__ = ["MeasuredEfficiency", "measured_efficiency"]

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class MeasuredEfficiency:
    """One model's measured efficiency (module docstring): per-epoch progress ``bounds``
    (reference samples, from 0), and per measured batch the epochs' ``grad_sqr``/``grad_var``."""

    reference_batch: int
    batches: tuple[int, ...]
    bounds: F64  # (epochs + 1,)
    grad_sqr: F64  # (batches, epochs)
    grad_var: F64
    _by_batch: dict[float, tuple[F64, F64]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_runs(cls, runs: Sequence[ValidationRun], epochs: int) -> MeasuredEfficiency:
        """From a model's validation runs (progress in reference samples) over ``epochs``."""
        if not runs or epochs < 1 or any(len(r.progress) < epochs for r in runs):
            raise SpecError("runs", f"{len(runs)} runs", f"runs of at least {epochs} epochs")
        ordered = sorted(runs, key=lambda r: r.batch)
        ends = np.min([r.progress[:epochs] for r in ordered], axis=0)
        return cls(
            ordered[0].batch,
            tuple(r.batch for r in ordered),
            np.concatenate([[0.0], ends]),
            np.array([r.grad_sqr[:epochs] for r in ordered], dtype=np.float64),
            np.array([r.grad_var[:epochs] for r in ordered], dtype=np.float64),
        )

    def epoch_efficiency(self, batch: float) -> F64:
        """``E(batch, e)`` for every epoch ``e`` (module docstring)."""
        at = np.array(self.batches, dtype=np.float64)
        sqr = np.array([np.interp(batch, at, col) for col in self.grad_sqr.T])
        var = np.array([np.interp(batch, at, col) for col in self.grad_var.T])
        scale = float(batch) / self.reference_batch
        return np.asarray((var + sqr) / (var + scale * sqr), dtype=np.float64)

    def _cumulative(self, batch: float) -> tuple[F64, F64]:
        """Samples at ``batch`` to each epoch bound, and the last epoch's ``E`` (kept per
        batch: a run asks for a few batches thousands of times)."""
        known = self._by_batch.get(batch)
        if known is None:
            gain = self.epoch_efficiency(batch)
            steps = np.diff(self.bounds) / gain
            known = np.concatenate([[0.0], np.cumsum(steps)]), gain[-1:]
            self._by_batch[batch] = known
        return known

    def _samples_to(self, batch: float, progress: F64) -> F64:
        cum, last = self._cumulative(batch)
        inside = np.interp(progress, self.bounds, cum)
        beyond = cum[-1] + (progress - self.bounds[-1]) / last[0]
        return np.asarray(np.where(progress > self.bounds[-1], beyond, inside))

    def samples_between(
        self, batch: npt.ArrayLike, start: npt.ArrayLike, end: npt.ArrayLike
    ) -> F64:
        """Samples at constant ``batch`` (one batch) from ``start`` to ``end`` progress."""
        b = _one(batch)
        lo = np.asarray(start, dtype=np.float64)
        hi = np.asarray(end, dtype=np.float64)
        if np.any(hi < lo):
            raise SpecError("end", hi, "progress at or after start")
        return np.asarray(self._samples_to(b, hi) - self._samples_to(b, lo))

    def progress_after(
        self, batch: npt.ArrayLike, start: npt.ArrayLike, samples: npt.ArrayLike
    ) -> F64:
        """Progress after ``samples`` more samples at ``batch`` from ``start``: the inverse."""
        b = _one(batch)
        cum, last = self._cumulative(b)
        target = self._samples_to(b, np.asarray(start, dtype=np.float64)) + np.asarray(
            samples, dtype=np.float64
        )
        inside = np.interp(target, cum, self.bounds)
        beyond = self.bounds[-1] + (target - cum[-1]) * last[0]
        return np.asarray(np.where(target > cum[-1], beyond, inside))


def _one(batch: npt.ArrayLike) -> float:
    values = np.asarray(batch, dtype=np.float64)
    if values.size != 1 or not np.isfinite(values).all() or float(values.ravel()[0]) < 1:
        raise SpecError("batch", batch, "one batch size >= 1")
    return float(values.ravel()[0])


def measured_efficiency(profiles: Path, epochs: Mapping[str, int]) -> dict[str, MeasuredEfficiency]:
    """Each model of ``epochs`` (name -> the epochs a job trains) with a folder of validation
    runs under ``profiles`` (``../shared/data/pollux/profiles``)."""
    return {
        name: MeasuredEfficiency.from_runs(load_validation_runs(profiles / name), count)
        for name, count in epochs.items()
        if (profiles / name).is_dir()
    }
