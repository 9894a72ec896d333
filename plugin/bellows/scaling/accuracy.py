"""How well the JSA predicts real step times: fit on a few configurations, test on the rest.

Protocol (``python benchmarks/jsa_accuracy.py`` prints the result), leave one model out: for
each of the six Pollux models in turn,

* the cluster model is fitted to every row of the *other five* models (they stand in for the
  cluster's Allreduce benchmark over several buffer sizes and GPU counts);
* the model's own *training* rows are its single-GPU rows plus the placements in
  :data:`TRAIN_PLACEMENTS` (2 and 4 GPUs on one node, 2+2 and 2+2+2 over two and three
  nodes: what a short profiling run on up to three nodes measures);
* every other multi-GPU row of the model (the remaining placements of ``placements.csv`` and
  all of ``scalability.csv``, 6-16 nodes) is held out and predicted.

So no prediction has seen its own measurement, nor anything else of its own model beyond the
training rows. The error is the mean absolute percentage error over the held-out rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bellows.scaling.fitting import (
    FitSample,
    fit_cluster_profile,
    fit_job_profile,
    fit_step_profile,
    predict_step_time,
)
from bellows.scaling.measurements import StepMeasurement, load_placements, load_scalability
from bellows.scaling.profiles import ClusterProfile, JobProfile
from bellows.scaling.reference import DEFAULT_CLUSTER_SOURCE, MODEL_WEIGHTS

__all__ = [
    "TRAIN_PLACEMENTS",
    "VARIANTS",
    "AccuracyReport",
    "MeasuredModel",
    "evaluate",
    "fit_reference_cluster",
    "load_pollux_models",
    "split_rows",
]

TRAIN_PLACEMENTS = frozenset({"1", "2", "4", "22", "222"})

VARIANTS: Mapping[str, str] = {
    "additive": "paper: T = t_proc(b/k) + t_ar(w, k), node-aware ring Allreduce",
    "overlap": "T = (t_proc^g + t_ar^g)^(1/g), same Allreduce, fitted overlap g",
    "additive+job": "additive, Allreduce size fitted to the job's training rows (commWeights)",
    "overlap+job": "overlap, Allreduce size fitted to the job's training rows (commWeights)",
}


@dataclass(frozen=True)
class MeasuredModel:
    """All measured rows of one Pollux model and its parameter count."""

    name: str
    weights: int
    rows: tuple[StepMeasurement, ...]


def load_pollux_models(profiles: Path) -> list[MeasuredModel]:
    """The six models under ``profiles`` (``shared/data/pollux/profiles``), both CSV files."""
    out = []
    for name, weights in sorted(MODEL_WEIGHTS.items()):
        rows = load_placements(profiles / name / "placements.csv")
        rows += load_scalability(profiles / name / "scalability.csv")
        out.append(MeasuredModel(name, weights, tuple(rows)))
    return out


def split_rows(
    rows: Sequence[StepMeasurement], placements: frozenset[str] = TRAIN_PLACEMENTS
) -> tuple[list[StepMeasurement], list[StepMeasurement]]:
    """Training rows (1 GPU and ``placements``) and held-out multi-GPU rows."""
    train = [r for r in rows if r.gpus == 1 or r.placement in placements]
    test = [r for r in rows if r.gpus > 1 and r.placement not in placements]
    return train, test


def _samples(models: Sequence[MeasuredModel]) -> list[FitSample]:
    return [FitSample(m.weights, fit_step_profile(m.rows), m.rows) for m in models]


def fit_reference_cluster(models: Sequence[MeasuredModel], *, overlap: bool) -> ClusterProfile:
    """The cluster model fitted to every row of ``models`` (what ships as the default)."""
    return fit_cluster_profile(_samples(models), overlap=overlap, source=DEFAULT_CLUSTER_SOURCE)


@dataclass(frozen=True)
class AccuracyReport:
    """Held-out MAPE (fraction) per variant and model, reference clusters, row counts."""

    mape: Mapping[str, Mapping[str, float]]
    overall: Mapping[str, float]
    clusters: Mapping[str, ClusterProfile]
    train_rows: Mapping[str, int]
    test_rows: Mapping[str, int]

    @property
    def best(self) -> str:
        """The variant with the lowest mean of per-model errors."""
        return min(self.overall, key=lambda name: self.overall[name])


def _mape(profile: JobProfile, cluster: ClusterProfile, rows: Sequence[StepMeasurement]) -> float:
    predicted = np.array([predict_step_time(profile, cluster, r) for r in rows])
    measured = np.array([r.step_time for r in rows])
    return float(np.mean(np.abs(predicted - measured) / measured))


def evaluate(
    models: Sequence[MeasuredModel], *, placements: frozenset[str] = TRAIN_PLACEMENTS
) -> AccuracyReport:
    """Leave-one-model-out held-out error of every variant (see the module docstring).

    ``placements`` are the multi-GPU configurations each model is profiled on.
    """
    mape: dict[str, dict[str, float]] = {name: {} for name in VARIANTS}
    train_rows, test_rows = {}, {}
    for target in models:
        others = [m for m in models if m.name != target.name]
        train, test = split_rows(target.rows, placements)
        train_rows[target.name], test_rows[target.name] = len(train), len(test)
        plain = JobProfile(target.weights, fit_step_profile(train), target.name)
        for kind in ("additive", "overlap"):
            cluster = fit_cluster_profile(_samples(others), overlap=kind == "overlap")
            tuned = fit_job_profile(train, weights=target.weights, cluster=cluster)
            mape[kind][target.name] = _mape(plain, cluster, test)
            mape[f"{kind}+job"][target.name] = _mape(tuned, cluster, test)
    overall = {name: float(np.mean(list(per.values()))) for name, per in mape.items()}
    clusters = {
        "additive": fit_reference_cluster(models, overlap=False),
        "overlap": fit_reference_cluster(models, overlap=True),
    }
    return AccuracyReport(mape, overall, clusters, train_rows, test_rows)
