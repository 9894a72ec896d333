"""Pictures of simulated runs: jobs completed over time, GPUs in use and jobs waiting,
batch sizes, and the distribution of job completion times.

Written with matplotlib's Agg backend (files only, no display). Curves of several runs share
one axis so that policies can be read side by side, as in the paper's Figs. 5-9. Use over
time is averaged per minute: drawn event by event, a cluster that changes hands at every
arrival and completion is a sawtooth no one can read.

For people to read (issue 38): a run's titles say what it charged (:func:`charges`:
statistical efficiency, placement, the round objective), so that two runs' plots can be
told apart; log axes carry plain-number ticks at 1, 2, 5 (or 1, 3, or 1) times the powers of
ten, the densest of these whose labels do not overlap (:func:`readable_log_ticks`); and a
straggler that runs on long after every other job is cut off the usage plot's time axis and
named in a note (:func:`clip_minute`). Each ``*_figure`` returns the figure its ``plot_*``
writes.
"""

from __future__ import annotations

import itertools
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
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from bellows.sim.engine import SimResult
from bellows.sim.metrics import JobRecord

__all__ = [
    "batches_figure",
    "charges",
    "clip_minute",
    "completed_figure",
    "jct_cdf_figure",
    "plot_batches",
    "plot_completed",
    "plot_jct_cdf",
    "plot_run",
    "plot_usage",
    "readable_log_ticks",
    "usage_figure",
    "usage_per_minute",
]

_GRID_POINTS = 1500
# Fixed margins (figure fractions) in place of ``tight_layout``, which lays every tick label
# out twice: a third of the drawing time of a run's plots (issue 11). They fit the labels
# these figures carry at their sizes.
_MARGINS = {"left": 0.12, "right": 0.97, "bottom": 0.12, "top": 0.92}


_DPI = 110
_TOP_TWO_LINES = 0.87  # the top margin under a title of two lines
# What a tick label takes, in font sizes: a digit's width, a line's height, and the gap kept
# between two labels (matplotlib's DejaVu Sans digits are 0.64 em wide)
_DIGIT_EM, _LINE_EM, _GAP_EM = 0.64, 1.2, 0.8
_SUBS: tuple[tuple[float, ...], ...] = ((1.0, 2.0, 5.0), (1.0, 3.0), (1.0,))


def charges(summary: Mapping[str, Any]) -> str:
    """What a run charged, in words for its plots' titles: statistical efficiency, the
    placement and the round objective (a reference decides by its own policy: none)."""
    charged = summary.get("efficiency_charged_jobs")
    parts = [
        "efficiency not charged" if charged is None
        else f"efficiency charged ({charged} jobs)",
        "fewest nodes" if summary.get("spread_job_time_share") is None
        else f"on nodes ({summary['spread_job_time_share']:.1%} spread)",
    ]  # fmt: skip
    if summary.get("objective") and summary.get("mode") in ("bellows", "paper"):
        parts.append(f"objective {summary['objective']}")
    return ", ".join(parts)


def _titled(label: str, summary: Mapping[str, Any]) -> str:
    return f"{label}\n{charges(summary)}"


def _write(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


def _finish(fig: Figure, ax: Axes, *, ylabel: str, title: str) -> Figure:
    """Label, title and grid the axis over time in minutes, and add a legend if anything is
    labelled."""
    ax.set_xlabel("time (min)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    top = _TOP_TWO_LINES if "\n" in (title or fig.axes[0].get_title()) else _MARGINS["top"]
    fig.subplots_adjust(**(_MARGINS | {"top": top}))
    return fig


def readable_log_ticks(ax: Axes, which: str) -> list[float]:
    """Plain-number major ticks on ``ax``'s log ``which`` axis ("x" or "y") at 1, 2 and 5
    times the powers of ten, or 1 and 3, or 1: the densest whose labels keep apart at the
    axis's drawn length (no labelled minor ticks). Returns the ticks in view. Call it once
    the data and the figure's margins are set."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    low, high = sorted(ax.get_xlim() if which == "x" else ax.get_ylim())
    fig = ax.get_figure()
    assert isinstance(fig, Figure)
    box = ax.get_position()
    width, height = fig.get_size_inches()
    inches = box.width * width if which == "x" else box.height * height
    per_decade = inches * _DPI / max(math.log10(high / low), 1e-9)  # pixels
    em = float(axis.get_ticklabels()[0].get_fontsize() if axis.get_ticklabels() else 10.0)
    em *= _DPI / 72.0
    ticks: list[float] = []
    for subs in _SUBS:
        ticks = [
            m * 10.0**e
            for e in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
            for m in subs
            if low <= m * 10.0**e <= high
        ]
        if all(_apart(a, b, which, em, per_decade) for a, b in itertools.pairwise(ticks)):
            break
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(_plain))
    axis.set_minor_formatter(NullFormatter())
    return ticks


def _apart(a: float, b: float, which: str, em: float, per_decade: float) -> bool:
    """Whether the labels of neighbouring ticks ``a`` < ``b`` leave a gap between them."""
    gap = math.log10(b / a) * per_decade
    # side by side: half of each label's width; one above the other: a line's height
    side = (len(_plain(a)) + len(_plain(b))) / 2 * _DIGIT_EM
    need = (side if which == "x" else _LINE_EM) * em
    return gap >= need + _GAP_EM * em


def completed_figure(curves: Mapping[str, Sequence[Sequence[float]]], *, title: str) -> Figure:
    """Jobs completed over time, one line per run (``label -> [[minute, count], ...]``)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for label, curve in curves.items():
        points = np.asarray(curve, dtype=float)
        ax.step(points[:, 0], points[:, 1], where="post", label=label)
    return _finish(fig, ax, ylabel="jobs completed", title=title)


def plot_completed(
    curves: Mapping[str, Sequence[Sequence[float]]], path: Path, *, title: str
) -> Path:
    """:func:`completed_figure`, written to ``path``."""
    return _write(completed_figure(curves, title=title), path)


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


STRAGGLER_STRETCH = 1.5
"""A usage plot's time axis is cut where jobs past this many times the 99th percentile of
the jobs' ends would stretch it (:func:`clip_minute`)."""


def _end_s(job: JobRecord) -> float:
    """When a job left: its finish, its last segment's end (unfinished), or its arrival."""
    if job.finish_s is not None:
        return float(job.finish_s)
    return float(max([job.arrival_s, *(s.end_s for s in job.segments)]))


def clip_minute(results: Mapping[str, SimResult]) -> tuple[float | None, dict[str, int]]:
    """Where to cut the shared time axis of ``results`` so that a few stragglers do not
    stretch it, and how many jobs of each run end past the cut; ``(None, {})`` when no job
    ends past :data:`STRAGGLER_STRETCH` times the 99th percentile of every run's job ends.
    The cut is a little past the last end short of that."""
    ends = {label: np.array([_end_s(j) for j in r.jobs]) for label, r in results.items()}
    every = np.concatenate([e for e in ends.values() if e.size] or [np.zeros(0)])
    if every.size == 0:
        return None, {}
    bound = STRAGGLER_STRETCH * float(np.percentile(every, 99))
    if float(every.max()) <= bound:
        return None, {}
    kept = every[every <= bound]
    cut = float(kept.max()) * 1.02 / 60.0 if kept.size else bound / 60.0
    past = {label: int((e > cut * 60.0).sum()) for label, e in ends.items()}
    return cut, {label: n for label, n in past.items() if n}


def usage_figure(results: Mapping[str, SimResult], *, title: str) -> Figure:
    """GPUs in use (with the capacity) and jobs waiting over time, averaged per minute (or
    per a few minutes on long runs), one line per run until its end, on two panels that
    share the time axis; cut short of a straggler (:func:`clip_minute`, named in a note)."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.0, 5.6), sharex=True)
    until = max((_last_s(r) for r in results.values()), default=0.0)
    cut, past = clip_minute(results)
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
    note = ""
    if cut is not None:
        top.set_xlim(0.0, cut)
        last = {label: _last_s(results[label]) / 60.0 for label in past}
        note = "\n(cut at minute {:,.0f}; {})".format(cut, "; ".join(
            f"{label}: {n} job{'s' if n > 1 else ''} on to minute {last[label]:,.0f}"
            for label, n in past.items()
        ))  # fmt: skip
    per = "per minute" if width == 1 else f"per {width:g} min"
    top.set_ylabel(f"GPUs in use (mean {per})")
    top.set_title(title)
    top.grid(alpha=0.3)
    top.legend(fontsize="small")
    _finish(fig, bottom, ylabel=f"jobs waiting (mean {per})", title="")
    if note:  # under the time axis, where it covers no curve
        bottom.set_xlabel("time (min)" + note)
        fig.subplots_adjust(bottom=_MARGINS["bottom"] + 0.04)
    return fig


def plot_usage(results: Mapping[str, SimResult], path: Path, *, title: str) -> Path:
    """:func:`usage_figure`, written to ``path``."""
    return _write(usage_figure(results, title=title), path)


def jct_cdf_figure(results: Mapping[str, SimResult], *, title: str) -> Figure:
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
            label=f"{label}: mean {mean:.1f} min, p99 {p99:.0f} min",
        )  # fmt: skip
        spread = max(spread, float(jcts[-1]) / max(float(jcts[0]), 1e-3))
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("job completion time (min)")
    ax.set_ylabel("share of jobs")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small", loc="lower right")
    top = _TOP_TWO_LINES if "\n" in title else _MARGINS["top"]
    fig.subplots_adjust(**(_MARGINS | {"top": top}))
    if spread > 20:
        ax.set_xscale("log")
        readable_log_ticks(ax, "x")
    return fig


def plot_jct_cdf(results: Mapping[str, SimResult], path: Path, *, title: str) -> Path:
    """:func:`jct_cdf_figure`, written to ``path``."""
    return _write(jct_cdf_figure(results, title=title), path)


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


def batches_figure(result: SimResult, *, title: str) -> Figure:
    """Mean global batch of the running jobs of each category over time."""
    minutes, means = mean_batch_by_category(result)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for cat, values in means.items():
        ax.plot(minutes, values, label=f"category {cat}" if cat else "jobs")
    ax.set_yscale("log")
    # no minor ticks: each is an artist to lay out and draw
    ax.yaxis.set_minor_locator(NullLocator())
    _finish(fig, ax, ylabel="mean global batch (samples)", title=title)
    if any(np.isfinite(v).any() for v in means.values()):
        # plain numbers (100, 200, 500) rather than 10^k: mathtext's parser costs ~0.5 s
        readable_log_ticks(ax, "y")
    return fig


def plot_batches(result: SimResult, path: Path, *, title: str) -> Path:
    """:func:`batches_figure`, written to ``path``."""
    return _write(batches_figure(result, title=title), path)


def _plain(value: float, _position: int | None = None) -> str:
    """A tick label as a plain number: 10, 100, 1000, 0.1."""
    return f"{value:g}"


def run_drawings(
    result: SimResult, out: Path, *, label: str, summary: Mapping[str, Any] | None = None
) -> list[Callable[[], Path]]:
    """The three plots of one run, each as a call that draws it into ``out`` (which must
    exist; ``summary``: the run's, if already made, or at least its keys that
    :data:`bellows.sim.plotting.SENT_KEYS` names): ``completed.png``, ``gpus.png``,
    ``batches.png``, each titled with ``label`` and what the run charged
    (:func:`charges`)."""
    s = summary if summary is not None else result.summary()
    curve, title = s["completed_over_time"], _titled(label, s)
    return [
        lambda: plot_completed({label: curve}, out / "completed.png", title=title),
        lambda: plot_usage({label: result}, out / "gpus.png", title=title),
        lambda: plot_batches(result, out / "batches.png", title=title),
    ]


def plot_run(
    result: SimResult, out: Path, *, label: str, summary: Mapping[str, Any] | None = None
) -> list[Path]:
    """The three plots of one run, into ``out`` (``summary``: the run's, if already made)."""
    out.mkdir(parents=True, exist_ok=True)
    return [draw() for draw in run_drawings(result, out, label=label, summary=summary)]
