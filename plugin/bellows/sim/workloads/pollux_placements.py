"""A Pollux model's measured placements as a job profile carries them (issue 36).

The artifact's profile folders (``../shared/data/pollux/profiles/<model>/``) hold step times
measured on several GPUs: ``placements.csv`` (``placement,local_bsz,step_time,sync_time``,
the GPUs per node as a digit string, up to 16 GPUs on nodes of 4) and ``scalability.csv``
(``num_nodes,num_replicas,...``: larger placements spread over 6 to 16 nodes).
:func:`pollux_placements` reads them into :class:`bellows.jobs.MeasuredPlacement` rows, one
per (nodes, GPUs), as a profile document's ``placements`` carries them: from
``placements.csv`` the placements packed on the fewest nodes of ``per_node`` GPUs (those the
core runs a job on; the others' means would blur them), and every row of ``scalability.csv``,
which the core interpolates packed placements beyond 16 GPUs between
(:mod:`bellows.scaling.placement_steps`). Several measurements of one batch are averaged.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from bellows.jobs import MeasuredPlacement, SpecError

__all__ = ["packed_shape", "pollux_placements"]


def packed_shape(gpus: int, per_node: int) -> str:
    """The artifact's name of ``gpus`` GPUs packed on the fewest nodes of ``per_node``: the
    GPUs per node as digits, in their lexicographically smallest rotation (``"14"``: 5 GPUs)."""
    full, rest = divmod(gpus, per_node)
    parts = ([rest] if rest else []) + [per_node] * full
    return "".join(map(str, parts))


def _rows(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as handle:
            return list(csv.DictReader(handle))
    except OSError as error:
        raise SpecError("placements", str(path), f"a readable CSV ({error.strerror})") from None


def _grouped(
    rows: Iterable[tuple[int, int, int, float, float]],
) -> tuple[MeasuredPlacement, ...]:
    points: dict[tuple[int, int], dict[int, list[tuple[float, float]]]] = {}
    for nodes, gpus, local, step, sync in rows:
        points.setdefault((nodes, gpus), {}).setdefault(local, []).append((step, sync))
    out = []
    for (nodes, gpus), by_local in sorted(points.items()):
        batches = sorted(by_local)
        means = [np.mean(by_local[m], axis=0) for m in batches]
        out.append(MeasuredPlacement(
            nodes, gpus, tuple(batches), tuple(float(m[0]) for m in means),
            tuple(min(float(m[1]), float(m[0])) for m in means),
        ))  # fmt: skip
    return tuple(out)


def pollux_placements(folder: Path, per_node: int = 4) -> tuple[MeasuredPlacement, ...]:
    """The measured placements of the model in ``folder`` (module docstring)."""
    wanted = {packed_shape(g, per_node) for g in range(1, 4 * per_node + 1)}
    rows: list[tuple[int, int, int, float, float]] = []
    for row in _rows(folder / "placements.csv"):
        shape = row["placement"]
        if shape in wanted:
            counts = [int(c) for c in shape]
            rows.append((len(counts), sum(counts), round(float(row["local_bsz"])),
                         float(row["step_time"]), float(row["sync_time"])))  # fmt: skip
    for row in _rows(folder / "scalability.csv"):
        if int(row["num_replicas"]) <= 4 * per_node:
            continue
        rows.append((int(row["num_nodes"]), int(row["num_replicas"]),
                     round(float(row["local_bsz"])), float(row["step_time"]),
                     float(row["sync_time"])))  # fmt: skip
    if not rows:
        raise SpecError("placements", str(folder), "measured rows in placements.csv")
    return _grouped(rows)
