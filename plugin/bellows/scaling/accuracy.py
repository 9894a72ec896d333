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

Two stricter splits a reviewer would try (:data:`SPLITS`, :func:`evaluate_split`): the same
per-model rule is applied to *every* model, and the cluster model is fitted to the other five
models' training rows only, so no row on the held-out side of the split is seen by any fit:

* ``gpus``: train on rows with at most 4 GPUs, predict the rows with 8 or more;
* ``files``: train on ``placements.csv`` (1-4 nodes), predict ``scalability.csv`` (6-16 nodes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bellows.jobs import TypeSection
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
    "SPLITS",
    "TRAIN_PLACEMENTS",
    "VARIANTS",
    "AccuracyReport",
    "MeasuredModel",
    "evaluate",
    "evaluate_split",
    "fit_reference_cluster",
    "fit_type_cluster",
    "fit_type_sections",
    "load_pollux_models",
    "load_sia_models",
    "split_by",
    "split_rows",
    "type_mape",
]

TRAIN_PLACEMENTS = frozenset({"1", "2", "4", "22", "222"})

Split = Callable[[Sequence[StepMeasurement]], tuple[list[StepMeasurement], list[StepMeasurement]]]

SPLITS: Mapping[str, str] = {
    "gpus": "fit on rows with <= 4 GPUs, predict rows with >= 8 GPUs",
    "files": "fit on placements.csv (1-4 nodes), predict scalability.csv (6-16 nodes)",
}

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


def split_by(
    name: str, rows: Sequence[StepMeasurement]
) -> tuple[list[StepMeasurement], list[StepMeasurement]]:
    """Training and held-out rows of one of the :data:`SPLITS`.

    ``files`` tells the two CSV files apart by the ``placement`` column, which only
    ``placements.csv`` rows carry.
    """
    if name == "gpus":
        return [r for r in rows if r.gpus <= 4], [r for r in rows if r.gpus >= 8]
    if name == "files":
        return [r for r in rows if r.placement], [r for r in rows if not r.placement]
    raise ValueError(f"unknown split {name!r}; one of {', '.join(SPLITS)}")


def _samples(models: Sequence[MeasuredModel], split: Split | None = None) -> list[FitSample]:
    out = []
    for m in models:
        rows = tuple(m.rows if split is None else split(m.rows)[0])
        out.append(FitSample(m.weights, fit_step_profile(rows), rows))
    return out


def fit_reference_cluster(models: Sequence[MeasuredModel], *, overlap: bool) -> ClusterProfile:
    """The cluster model fitted to every row of ``models`` (what ships as the default)."""
    return fit_cluster_profile(_samples(models), overlap=overlap, source=DEFAULT_CLUSTER_SOURCE)


@dataclass(frozen=True)
class AccuracyReport:
    """Held-out MAPE (fraction) per variant and model, reference clusters, row counts.

    ``clusters`` is empty in the reports of :func:`evaluate_split`.
    """

    mape: Mapping[str, Mapping[str, float]]
    overall: Mapping[str, float]
    clusters: Mapping[str, ClusterProfile]
    train_rows: Mapping[str, int]
    test_rows: Mapping[str, int]

    @property
    def best(self) -> str:
        """The variant with the lowest mean of per-model errors."""
        return min(self.overall, key=lambda name: self.overall[name])

    def worst(self, variant: str) -> tuple[str, float]:
        """The model with the highest error under ``variant``, and that error."""
        per = self.mape[variant]
        name = max(per, key=lambda model: per[model])
        return name, per[name]


def _mape(profile: JobProfile, cluster: ClusterProfile, rows: Sequence[StepMeasurement]) -> float:
    predicted = np.array([predict_step_time(profile, cluster, r) for r in rows])
    measured = np.array([r.step_time for r in rows])
    return float(np.mean(np.abs(predicted - measured) / measured))


def _held_out(
    models: Sequence[MeasuredModel], split: Split, *, strict: bool
) -> tuple[dict[str, dict[str, float]], dict[str, int], dict[str, int]]:
    """Per-variant, per-model MAPE; ``strict`` fits the cluster to others' training rows only."""
    mape: dict[str, dict[str, float]] = {name: {} for name in VARIANTS}
    train_rows, test_rows = {}, {}
    for target in models:
        others = _samples([m for m in models if m.name != target.name], split if strict else None)
        train, test = split(target.rows)
        train_rows[target.name], test_rows[target.name] = len(train), len(test)
        plain = JobProfile(target.weights, fit_step_profile(train), target.name)
        for kind in ("additive", "overlap"):
            cluster = fit_cluster_profile(others, overlap=kind == "overlap")
            tuned = fit_job_profile(train, weights=target.weights, cluster=cluster)
            mape[kind][target.name] = _mape(plain, cluster, test)
            mape[f"{kind}+job"][target.name] = _mape(tuned, cluster, test)
    return mape, train_rows, test_rows


def _overall(mape: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    return {name: float(np.mean(list(per.values()))) for name, per in mape.items()}


def evaluate(
    models: Sequence[MeasuredModel], *, placements: frozenset[str] = TRAIN_PLACEMENTS
) -> AccuracyReport:
    """Leave-one-model-out held-out error of every variant (see the module docstring).

    ``placements`` are the multi-GPU configurations each model is profiled on.
    """
    mape, train_rows, test_rows = _held_out(
        models, lambda rows: split_rows(rows, placements), strict=False
    )
    clusters = {
        "additive": fit_reference_cluster(models, overlap=False),
        "overlap": fit_reference_cluster(models, overlap=True),
    }
    return AccuracyReport(mape, _overall(mape), clusters, train_rows, test_rows)


def evaluate_split(models: Sequence[MeasuredModel], split: str) -> AccuracyReport:
    """Held-out error of every variant on one of the :data:`SPLITS` (no reference clusters).

    Every model is split by the same rule; each target's cluster model is fitted to the other
    models' training rows, its ``commWeights`` to its own training rows.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; one of {', '.join(SPLITS)}")
    mape, train_rows, test_rows = _held_out(models, lambda rows: split_by(split, rows), strict=True)
    return AccuracyReport(mape, _overall(mape), {}, train_rows, test_rows)


def load_sia_models(profiles: Path, suffix: str) -> list[MeasuredModel]:
    """The six models measured on one GPU type in Sia's data (``shared/data/sia/profiles``;
    ``placements-<suffix>.csv`` and ``scalability-<suffix>.csv``)."""
    out = []
    for name, weights in sorted(MODEL_WEIGHTS.items()):
        rows = load_placements(profiles / name / f"placements-{suffix}.csv")
        rows += load_scalability(profiles / name / f"scalability-{suffix}.csv")
        out.append(MeasuredModel(name, weights, tuple(rows)))
    return out


def fit_type_cluster(
    models: Sequence[MeasuredModel], *, gpus_per_node: int, source: str = ""
) -> ClusterProfile:
    """One GPU type's Allreduce and overlap model, fitted to every multi-GPU row of ``models``
    measured on it (what :func:`bellows.scaling.gpu_types.sia_mix` embeds)."""
    return fit_cluster_profile(
        _samples(models), overlap=True, gpus_per_node=gpus_per_node, source=source
    )


def fit_type_sections(
    models: Sequence[MeasuredModel], cluster: ClusterProfile, gpu_type: str
) -> dict[str, TypeSection]:
    """Each model's section on ``gpu_type``: its one-GPU step times there, the Allreduce
    weights that best explain its multi-GPU rows under ``cluster``, and its largest measured
    per-GPU batch as the type's memory limit."""
    out = {}
    for m in models:
        fitted = fit_job_profile(m.rows, weights=m.weights, cluster=cluster)
        out[m.name] = TypeSection(gpu_type, fitted.step, fitted.effective_weights,
                                  fitted.step.local_batches[-1])  # fmt: skip
    return out


def type_mape(
    models: Sequence[MeasuredModel], cluster: ClusterProfile, sections: Mapping[str, TypeSection]
) -> dict[str, float]:
    """Per model, the JSA's mean absolute percentage error over its multi-GPU rows on a type
    with its section there (:func:`fit_type_sections`; in sample: how well one Allreduce
    model per type carries the type's measurements)."""
    out = {}
    for m in models:
        section = sections[m.name]
        profile = JobProfile(weights=section.weights, step=section.profile)
        out[m.name] = _mape(profile, cluster, [r for r in m.rows if r.gpus > 1])
    return out
