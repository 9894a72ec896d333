"""The standard comparisons of a sweep, drawn from its ``sweep.csv``: avg and p99 JCT,
utilization and rescales per job against the swept parameter, one line per policy.

The swept parameter (the x axis) is the one asked for, else the first parameter that takes
more than one value within some policy, in the order of :data:`X_CHOICES`. Seeds are
averaged (the bars span their lowest to highest value). Any other parameter that still varies
once the policy and x are known (a second swept list) gets a figure per value. A policy that
does not vary with x (the event-driven baseline's Δ = 0 against a swept Δ) is drawn as a
dashed level across the axis. Failed cells are left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from bellows.inputs import SpecError, parse_float
from bellows.sim.sweeping import FAILED

__all__ = ["METRICS", "X_CHOICES", "plot_sweep", "swept_columns"]

METRICS: Final = (
    ("avg_jct_min", "avg JCT (min)"),
    ("p99_jct_min", "p99 JCT (min)"),
    ("utilization", "utilization"),
    ("rescales_per_job", "rescales per job"),
)

X_CHOICES: Final = (
    "load_high", "gpus", "delta_min", "restart_cost_s", "hysteresis", "early_share", "minutes",
    "period_min", "horizon_min", "first", "queue", "backfill", "mode", "batch_policy",
    "baseline_batch", "pattern", "categories", "cluster", "trace",
)  # fmt: skip
"""Parameters a sweep can be drawn against, in the order one is picked by default."""

_NOT_GROUPS: Final = {"cell", "status", "policy", "seed", "source", "path", "error"}
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_.+=-]")

Row = Mapping[str, str]


def _number(text: str) -> float | None:
    try:
        return parse_float("value", text)
    except SpecError:
        return None


def _values_by_policy(rows: Sequence[Row], column: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for row in rows:
        out.setdefault(row["policy"], set()).add(row.get(column, ""))
    return out


def swept_columns(rows: Sequence[Row]) -> list[str]:
    """The parameters of :data:`X_CHOICES` that take several values within one policy."""
    return [
        c for c in X_CHOICES
        if any(len(v) > 1 for v in _values_by_policy(rows, c).values())
    ]  # fmt: skip


def _groups(rows: Sequence[Row], x: str) -> list[str]:
    """Parameters still varying once the policy and ``x`` are fixed (a figure per value)."""
    out = []
    for column in X_CHOICES:
        if column == x or column in _NOT_GROUPS:
            continue
        seen: dict[tuple[str, str], set[str]] = {}
        for row in rows:
            seen.setdefault((row["policy"], row.get(x, "")), set()).add(row.get(column, ""))
        if any(len(v) > 1 for v in seen.values()):
            out.append(column)
    return out


def _positions(values: Sequence[str]) -> tuple[dict[str, float], list[str] | None]:
    """x positions of each value: itself when every value is a number, else its rank in
    the order first seen (with the values as tick labels)."""
    distinct = list(dict.fromkeys(values))
    numbers = {v: _number(v) for v in distinct}
    if all(n is not None for n in numbers.values()):
        return {v: float(n) for v, n in numbers.items() if n is not None}, None
    return {v: float(i) for i, v in enumerate(distinct)}, distinct


def _figure(rows: Sequence[Row], x: str, path: Path, *, title: str) -> Path:
    fig, axes = plt.subplots(2, 2, figsize=(10.0, 7.0))
    where, labels = _positions([r.get(x, "") for r in rows])
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    for ax, (metric, label) in zip(axes.flat, METRICS, strict=True):
        for index, policy in enumerate(policies):
            color = f"C{index % 10}"
            points: dict[float, list[float]] = {}
            for row in rows:
                value = _number(row.get(metric, ""))
                if row["policy"] == policy and value is not None:
                    points.setdefault(where[row.get(x, "")], []).append(value)
            if not points:
                continue
            xs = sorted(points)
            means = [sum(points[p]) / len(points[p]) for p in xs]
            if len(xs) == 1 and len(where) > 1:
                ax.axhline(means[0], color=color, linestyle="--", linewidth=1.2,
                           label=f"{policy} (one {x})")  # fmt: skip
                continue
            low = [m - min(points[p]) for m, p in zip(means, xs, strict=True)]
            high = [max(points[p]) - m for m, p in zip(means, xs, strict=True)]
            ax.errorbar(xs, means, yerr=[low, high], color=color, marker="o", capsize=3,
                        linewidth=1.4, label=policy)  # fmt: skip
        if labels is not None:
            ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize="small")
        ax.set_xlabel(x)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    handles, names = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, names, loc="upper right", fontsize="small")
    fig.suptitle(title)
    fig.tight_layout(rect=(0.0, 0.0, 0.85, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_sweep(rows: Sequence[Row], out: Path, *, x: str | None = None) -> list[Path]:
    """Draw the comparisons of ``rows`` (``sweep.csv``) into ``out``; returns the files.

    :class:`SpecError` when ``x`` is not a parameter of the sweep or no cell succeeded.
    """
    good = [r for r in rows if r.get("status") != FAILED]
    if not good:
        raise SpecError("sweep.csv", f"{len(rows)} cells", "at least one cell that did not fail")
    swept = swept_columns(good)
    if x is None:
        x = swept[0] if swept else "trace"
    elif x not in X_CHOICES or x not in good[0]:
        raise SpecError("--x", x, f"one of {', '.join(X_CHOICES)}")
    out.mkdir(parents=True, exist_ok=True)
    groups = _groups(good, x)
    keyed: dict[tuple[str, ...], list[Row]] = {}
    for row in good:
        keyed.setdefault(tuple(row.get(g, "") for g in groups), []).append(row)
    paths = []
    seeds = len({r.get("seed", "") for r in good})
    note = f"mean over {seeds} seeds (bars: lowest to highest)" if seeds > 1 else "one seed"
    for values, members in keyed.items():
        pairs = [f"{g}={v}" for g, v in zip(groups, values, strict=True)]
        name = "-".join(["sweep", x, *pairs]) if pairs else f"sweep-{x}"
        title = f"against {x}" + (f" ({', '.join(pairs)})" if pairs else "") + f"; {note}"
        path = out / f"{_UNSAFE.sub('_', name)[:180]}.png"
        paths.append(_figure(members, x, path, title=title))
    return paths
