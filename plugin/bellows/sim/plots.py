"""Pictures of simulated runs: jobs completed over time, GPUs in use, batch sizes.

Written with matplotlib's Agg backend (files only, no display). Curves of several runs share
one axis so that elastic and baseline can be read side by side, as in the paper's Figs. 5-9.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from bellows.sim.engine import SimResult

__all__ = ["plot_batches", "plot_completed", "plot_gpus_in_use", "plot_run"]

_GRID_POINTS = 1500


def _save(fig: Figure, ax: Axes, path: Path, *, ylabel: str, title: str) -> Path:
    """Label, title and grid the axis over time in minutes, add a legend if anything is
    labelled, and write the figure to ``path``."""
    ax.set_xlabel("time (min)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_completed(
    curves: Mapping[str, Sequence[Sequence[float]]], path: Path, *, title: str
) -> Path:
    """Jobs completed over time, one line per run (``label -> [[minute, count], ...]``)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for label, curve in curves.items():
        points = np.asarray(curve, dtype=float)
        ax.step(points[:, 0], points[:, 1], where="post", label=label)
    return _save(fig, ax, path, ylabel="jobs completed", title=title)


def plot_gpus_in_use(results: Mapping[str, SimResult], path: Path, *, title: str) -> Path:
    """GPUs held by running jobs over time, one line per run, with the capacity."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for label, result in results.items():
        times = [t / 60.0 for t, _ in result.gpus_in_use]
        ax.step(times, [g for _, g in result.gpus_in_use], where="post", label=label)
    first = next(iter(results.values()), None)
    if first is not None:
        caps = list(first.capacity)
        end = max(t for t, _ in first.gpus_in_use)
        ax.step(
            [t / 60.0 for t, _ in caps] + [end / 60.0],
            [g for _, g in caps] + [caps[-1][1]],
            where="post", color="black", linestyle=":", label="capacity",
        )  # fmt: skip
    return _save(fig, ax, path, ylabel="GPUs in use", title=title)


def mean_batch_by_category(result: SimResult) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(minutes, {category: mean global batch of its running jobs at each minute})``."""
    end = max((s.end_s for j in result.jobs for s in j.segments), default=0.0)
    step = max(60.0, math.ceil(end / 60.0 / _GRID_POINTS) * 60.0)
    grid = np.arange(0.0, end + step, step)
    sums: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(grid.size))
    counts: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(grid.size))
    for job in result.jobs:
        for seg in job.segments:
            lo, hi = np.searchsorted(grid, [seg.start_s, seg.end_s], side="left")
            sums[job.category][lo:hi] += seg.batch
            counts[job.category][lo:hi] += 1
    means = {
        cat: np.where(counts[cat] > 0, sums[cat] / np.maximum(counts[cat], 1), np.nan)
        for cat in sorted(sums)
    }
    return grid / 60.0, means


def plot_batches(result: SimResult, path: Path, *, title: str) -> Path:
    """Mean global batch of the running jobs of each category over time."""
    minutes, means = mean_batch_by_category(result)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for cat, values in means.items():
        ax.plot(minutes, values, label=f"category {cat}" if cat else "jobs")
    ax.set_yscale("log")
    return _save(fig, ax, path, ylabel="mean global batch (samples)", title=title)


def plot_run(result: SimResult, out: Path, *, label: str) -> list[Path]:
    """The three plots of one run, into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    summary = result.summary()
    return [
        plot_completed({label: summary["completed_over_time"]}, out / "completed.png", title=label),
        plot_gpus_in_use({label: result}, out / "gpus.png", title=label),
        plot_batches(result, out / "batches.png", title=label),
    ]
