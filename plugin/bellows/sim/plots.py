"""Pictures of simulated runs: jobs completed over time, GPUs in use and jobs waiting,
batch sizes, and the distribution of job completion times.

Written with matplotlib's Agg backend (files only, no display). Curves of several runs share
one axis so that policies can be read side by side, as in the paper's Figs. 5-9. Use over
time is averaged per minute: drawn event by event, a cluster that changes hands at every
arrival and completion is a sawtooth no one can read.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullLocator

from bellows.sim.engine import SimResult

__all__ = [
    "plot_batches",
    "plot_completed",
    "plot_jct_cdf",
    "plot_run",
    "plot_usage",
    "usage_per_minute",
]

_GRID_POINTS = 1500
# Fixed margins (figure fractions) in place of ``tight_layout``, which lays every tick label
# out twice: a third of the drawing time of a run's plots (issue 11). They fit the labels
# these figures carry at their sizes.
_MARGINS = {"left": 0.12, "right": 0.97, "bottom": 0.12, "top": 0.92}


def _save(fig: Figure, ax: Axes, path: Path, *, ylabel: str, title: str) -> Path:
    """Label, title and grid the axis over time in minutes, add a legend if anything is
    labelled, and write the figure to ``path``."""
    ax.set_xlabel("time (min)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.subplots_adjust(**_MARGINS)
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


def _step_means(times: np.ndarray, changes: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Time-average over each bin ``[edges[i], edges[i+1])`` of the step function that is 0
    before ``times[0]`` and moves by ``changes[j]`` at ``times[j]``."""
    if times.size == 0:
        return np.zeros(edges.size - 1)
    at, where = np.unique(times, return_inverse=True)
    moves = np.zeros(at.size)
    np.add.at(moves, where, changes)
    level = np.cumsum(moves)  # the value from at[j] to at[j+1]
    # the integral is piecewise linear between change times, so interpolation is exact
    integral = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(at))])
    area = np.interp(edges, at, integral) + np.maximum(edges - at[-1], 0.0) * level[-1]
    means: np.ndarray = np.diff(area) / np.diff(edges)
    return means


def _last_s(result: SimResult) -> float:
    """The last arrival or segment end of a run."""
    ends = (max([j.arrival_s, *(s.end_s for s in j.segments)]) for j in result.jobs)
    return max(ends, default=0.0)


def usage_per_minute(result: SimResult, *, until_s: float | None = None) -> dict[str, np.ndarray]:
    """GPUs held, jobs waiting and capacity, each averaged over bins of whole minutes from 0
    to the run's end (or ``until_s``, so that several runs share one grid): one minute, or
    wider so that a long replay keeps at most ``_GRID_POINTS`` bins.

    Returns ``minute`` (each bin's start), ``width`` (its minutes, a 1-element array),
    ``gpus``, ``waiting`` and ``capacity``. A job waits from its arrival to its first start
    and between a halt by a capacity drop and its restart; a dropped job is not counted.
    """
    held: list[tuple[float, int]] = []
    waits: list[tuple[float, int]] = []
    for job in result.jobs:
        last = job.arrival_s
        for seg in job.segments:
            if seg.start_s > last:
                waits += [(last, 1), (seg.start_s, -1)]
            held += [(seg.start_s, seg.gpus), (seg.end_s, -seg.gpus)]
            last = seg.end_s
        if job.finish_s is None and not job.rejected:
            waits.append((last, 1))
    end = max(_last_s(result), until_s or 0.0)
    width = max(1, math.ceil(end / 60.0 / _GRID_POINTS))
    edges = np.arange(0.0, end / 60.0 + width, width) * 60.0
    if edges.size < 2:
        edges = np.array([0.0, 60.0 * width])
    caps = list(result.capacity)
    cap_changes = [(t, g - (caps[i - 1][1] if i else 0)) for i, (t, g) in enumerate(caps)]

    def means(points: list[tuple[float, int]]) -> np.ndarray:
        arr = np.asarray(points, dtype=float).reshape(-1, 2)
        return _step_means(arr[:, 0], arr[:, 1], edges)

    return {
        "minute": edges[:-1] / 60.0,
        "width": np.array([float(width)]),
        "gpus": means(held),
        "waiting": means(waits),
        "capacity": means(cap_changes),
    }


def plot_usage(results: Mapping[str, SimResult], path: Path, *, title: str) -> Path:
    """GPUs in use (with the capacity) and jobs waiting over time, averaged per minute (or
    per a few minutes on long runs), one line per run until its end, on two panels that
    share the time axis."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.0, 5.6), sharex=True)
    until = max((_last_s(r) for r in results.values()), default=0.0)
    width = 1.0
    series: dict[str, np.ndarray] = {}
    for label, result in results.items():
        series = usage_per_minute(result, until_s=until)
        width = float(series["width"][0])
        shown = series["minute"] < _last_s(result) / 60.0
        top.plot(series["minute"][shown], series["gpus"][shown], label=label, linewidth=1.2)
        # the same colors in the same order as above, without a second legend
        bottom.plot(series["minute"][shown], series["waiting"][shown], linewidth=1.2)
    if series:
        top.plot(
            series["minute"], series["capacity"], color="black", linestyle=":",
            label="capacity",
        )  # fmt: skip
    per = "per minute" if width == 1 else f"per {width:g} min"
    top.set_ylabel(f"GPUs in use (mean {per})")
    top.set_title(title)
    top.grid(alpha=0.3)
    top.legend(fontsize="small")
    return _save(fig, bottom, path, ylabel=f"jobs waiting (mean {per})", title="")


def plot_jct_cdf(results: Mapping[str, SimResult], path: Path, *, title: str) -> Path:
    """Share of the jobs completed within each JCT, one line per run; the legend gives
    the mean and the 99th percentile. Dropped or unfinished jobs keep a curve below 1."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    spread = 1.0
    for label, result in results.items():
        jcts = np.sort([j.jct_s / 60.0 for j in result.jobs if j.jct_s is not None])
        if jcts.size == 0:
            continue
        share = np.arange(1, jcts.size + 1) / max(len(result.jobs), 1)
        mean, p99 = float(jcts.mean()), float(np.percentile(jcts, 99))
        ax.step(
            np.concatenate([[jcts[0]], jcts]), np.concatenate([[0.0], share]), where="post",
            label=f"{label}: mean {mean:.1f}, p99 {p99:.0f} min",
        )  # fmt: skip
        spread = max(spread, float(jcts[-1]) / max(float(jcts[0]), 1e-3))
    if spread > 20:
        ax.set_xscale("log")
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("job completion time (min)")
    ax.set_ylabel("share of jobs")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small", loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def mean_batch_by_category(result: SimResult) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(minutes, {category: mean global batch of its running jobs at each minute})``."""
    end = max((s.end_s for j in result.jobs for s in j.segments), default=0.0)
    step = max(60.0, math.ceil(end / 60.0 / _GRID_POINTS) * 60.0)
    grid = np.arange(0.0, end + step, step)
    segments: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for job in result.jobs:
        if job.segments:  # a category none of whose jobs ran has no curve
            segments[job.category] += [(s.start_s, s.end_s, s.batch) for s in job.segments]
    means = {}
    for cat in sorted(segments):
        starts, ends, batches = np.array(segments[cat], dtype=float).reshape(-1, 3).T
        # each segment adds its batch (and 1) to the grid points in [start, end): as steps
        # up at its first point and down past its last, summed (whole numbers: exact)
        lo = np.searchsorted(grid, starts, side="left")
        hi = np.searchsorted(grid, ends, side="left")
        sums = np.zeros(grid.size + 1)
        counts = np.zeros(grid.size + 1)
        np.add.at(sums, lo, batches)
        np.add.at(sums, hi, -batches)
        np.add.at(counts, lo, 1.0)
        np.add.at(counts, hi, -1.0)
        total, count = np.cumsum(sums)[:-1], np.cumsum(counts)[:-1]
        means[cat] = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return grid / 60.0, means


def plot_batches(result: SimResult, path: Path, *, title: str) -> Path:
    """Mean global batch of the running jobs of each category over time."""
    minutes, means = mean_batch_by_category(result)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for cat, values in means.items():
        ax.plot(minutes, values, label=f"category {cat}" if cat else "jobs")
    ax.set_yscale("log")
    # plain numbers (100, 1000) rather than 10^k: mathtext's parser costs ~0.5 s to start
    # and no minor ticks: each is an artist to lay out and draw
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.yaxis.set_minor_locator(NullLocator())
    return _save(fig, ax, path, ylabel="mean global batch (samples)", title=title)


def _plain(value: float, _position: int | None = None) -> str:
    """A tick label as a plain number: 10, 100, 1000, 0.1."""
    return f"{value:g}"


def run_drawings(
    result: SimResult, out: Path, *, label: str, summary: Mapping[str, Any] | None = None
) -> list[Callable[[], Path]]:
    """The three plots of one run, each as a call that draws it into ``out`` (which must
    exist; ``summary``: the run's, if already made): ``completed.png``, ``gpus.png``,
    ``batches.png``."""
    curve = (summary if summary is not None else result.summary())["completed_over_time"]
    return [
        lambda: plot_completed({label: curve}, out / "completed.png", title=label),
        lambda: plot_usage({label: result}, out / "gpus.png", title=label),
        lambda: plot_batches(result, out / "batches.png", title=label),
    ]


def plot_run(
    result: SimResult, out: Path, *, label: str, summary: Mapping[str, Any] | None = None
) -> list[Path]:
    """The three plots of one run, into ``out`` (``summary``: the run's, if already made)."""
    out.mkdir(parents=True, exist_ok=True)
    return [draw() for draw in run_drawings(result, out, label=label, summary=summary)]
