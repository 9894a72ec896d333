"""Step times as the Pollux artifact's simulator charges them (issue 36, opt in).

Our simulator charges a job on nodes the JSA's step time of its placement (one node or
several). The artifact's simulator charges instead what was measured: a model's
``placements.csv`` (``placement,local_bsz,step_time,sync_time``: the GPUs per node as a
digit string, the per-GPU batch, the seconds of one step and of its synchronisation) and
``scalability.csv`` (the same for placements over more nodes, by node and GPU count). Read,
not copied, from its ``simulator/applications.py`` and described in docs/simulator.md:

* **A measured placement** (its GPUs per node, as the lexicographically smallest rotation of
  their order) is linear in the per-GPU batch between the measured ones (held at the ends).
* **Another placement** is interpolated linearly in (nodes, GPUs, per-GPU batch) over the
  means of the measured placements of each (nodes, GPUs, batch) and ``scalability.csv``;
  nodes beyond 16 count as 16.
* **Gradient accumulation.** A per-GPU share beyond the model's largest per-GPU batch (its
  memory limit; yolov3's held to 8 by the artifact, :data:`~bellows.sim.workloads.importing.
  POLLUX_LOCAL_LIMIT`) runs in passes of at most that limit: each extra pass costs its
  compute (the step less the sync), not another sync. A job on one GPU above its model's
  smallest validation batch takes two passes at least, as the artifact has it.

:class:`MeasuredSteps` is that truth for :func:`bellows.sim.run`'s ``step_seconds`` (and the
Pollux reference's rows); ``bellows simulate --measured`` charges it. Pure but for reading
the files once per model. SciPy's ``LinearNDInterpolator`` does the interpolation.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from scipy.interpolate import LinearNDInterpolator

from bellows.jobs import JobSpec, SpecError
from bellows.scaling.gpu_types import SIA_TYPES
from bellows.scaling.validation import load_validation_runs
from bellows.sim.workloads.importing import POLLUX_LOCAL_LIMIT
from bellows.sim.workloads.models import model as model_profile

__all__ = ["MeasuredPlacements", "MeasuredSteps", "TypedMeasuredSteps", "accumulated"]

_COLUMNS = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
MAX_NODES = 16  # the artifact interpolates no further: more nodes count as 16


class MeasuredPlacements:
    """One model's measured step times (module docstring), from its profile folder
    (``suffix``: of one GPU type, ``placements-<suffix>.csv`` as Sia's files are named)."""

    def __init__(self, folder: Path, suffix: str = "") -> None:
        self.folder = folder
        tail = f"-{suffix}" if suffix else ""
        names = (f"placements{tail}.csv", f"scalability{tail}.csv")
        try:
            with (folder / names[0]).open(newline="") as handle:
                rows = list(csv.DictReader(handle))
            with (folder / names[1]).open(newline="") as handle:
                spread = list(csv.DictReader(handle))
        except OSError as error:
            raise SpecError("profile", str(folder), f"{names[0]} and {names[1]} "
                            f"({error.strerror})") from None  # fmt: skip
        self.exact: dict[str, list[tuple[float, float, float]]] = {}
        grouped: dict[tuple[int, int, float], list[tuple[float, float]]] = {}
        for row in rows:
            shape, local = row["placement"], float(row["local_bsz"])
            times = (float(row["step_time"]), float(row["sync_time"]))
            self.exact.setdefault(shape, []).append((local, *times))
            key = (len(shape), sum(map(int, shape)), local)
            grouped.setdefault(key, []).append(times)
        points = [(*key, *np.mean(times, axis=0)) for key, times in grouped.items()]
        points += [tuple(float(row[c]) for c in _COLUMNS) for row in spread]
        grid = np.array(points, dtype=np.float64)
        self._spread = LinearNDInterpolator(grid[:, :3], grid[:, 3:])
        self._seen: dict[tuple[tuple[int, ...], float], tuple[float, float]] = {}

    def step(self, counts: Sequence[int], local: float) -> tuple[float, float]:
        """Seconds of one step and of its sync, ``counts`` GPUs per node at ``local`` a GPU."""
        key = (tuple(counts), float(local))
        known = self._seen.get(key)
        if known is None:
            known = self._seen[key] = self._step(key[0], key[1])
        return known

    def _step(self, counts: tuple[int, ...], local: float) -> tuple[float, float]:
        parts = tuple(g for g in counts if g)
        if not parts:
            raise SpecError("placement", counts, "GPUs on one node at least")
        shape = "".join(map(str, min(parts[i:] + parts[:i] for i in range(len(parts)))))
        if shape in self.exact:
            rows = sorted(self.exact[shape])
            at = [r[0] for r in rows]
            step = float(np.interp(local, at, [r[1] for r in rows]))
            return step, float(np.interp(local, at, [r[2] for r in rows]))
        step, sync = self._spread([min(len(parts), MAX_NODES), sum(parts), local])[0]
        return float(step), float(sync)  # NaN outside what was measured, as the artifact's


class MeasuredSteps:
    """The measured truth of step times, :func:`bellows.sim.run`'s ``step_seconds``: ``(model,
    spec, placement, batch)`` to the seconds one step of global ``batch`` takes on
    ``placement`` (``(node, GPUs)`` pairs), accumulation included (module docstring). The
    model names a folder under ``profiles`` (``../shared/data/pollux/profiles``)."""

    def __init__(self, profiles: Path) -> None:
        self.profiles = profiles
        self._models: dict[str, MeasuredPlacements] = {}
        self._smallest: dict[str, int] = {}

    def __call__(
        self, model: str, spec: JobSpec, placement: Sequence[tuple[int, int]], batch: int
    ) -> float:
        measured = self._models.get(model)
        if measured is None:
            folder = self.profiles / model
            measured = self._models[model] = MeasuredPlacements(folder)
            self._smallest[model] = min(run.batch for run in load_validation_runs(folder))
        return accumulated(measured, placement, batch, self.local_limit(model),
                           self._smallest[model])  # fmt: skip

    @staticmethod
    def local_limit(model: str) -> int:
        """The largest per-GPU batch a pass takes: the measured one, or the artifact's."""
        return POLLUX_LOCAL_LIMIT.get(model, model_profile(model).m_max)


def accumulated(
    measured: MeasuredPlacements,
    placement: Sequence[tuple[int, int]],
    batch: int,
    limit: int,
    smallest: int,
) -> float:
    """Seconds of one step of global ``batch`` on ``placement`` where a pass takes at most
    ``limit`` a GPU (module docstring: gradient accumulation; ``smallest``, the model's
    smallest validation batch, above which one GPU takes two passes)."""
    counts = tuple(gpus for _, gpus in placement)
    gpus = sum(counts)
    local = math.ceil(batch / gpus - 1e-8)
    passes = math.ceil(local / limit - 1e-8)
    if gpus == 1 and batch > smallest:
        passes = max(2, passes)
    step, sync = measured.step(counts, math.ceil(local / passes - 1e-8))
    return step + (passes - 1) * (step - sync)


class TypedMeasuredSteps:
    """The measured truth on a cluster of several GPU types (issue 39): ``(model, gpu_type,
    spec, placement, batch)`` to the seconds of one step on ``placement`` of that type, from
    Sia's measurements of the type (``<sia>/<model>/placements-<suffix>.csv``, ``suffixes``
    by type name; :data:`bellows.scaling.gpu_types.SIA_TYPES`). A pass takes at most the
    per-GPU batch ``spec`` (the job's section on the type) holds, the type's measured memory
    limit; the smallest validation batch is the model's (``validation``, Pollux's folders).
    ``None`` for a model or type not measured: the job then runs at its JSA there."""

    def __init__(self, sia: Path, validation: Path, suffixes: Mapping[str, str]) -> None:
        self.sia, self.validation, self.suffixes = sia, validation, dict(suffixes)
        self._models: dict[tuple[str, str], MeasuredPlacements | None] = {}
        self._smallest: dict[str, int] = {}

    @classmethod
    def of_data(cls, data: Path) -> TypedMeasuredSteps:
        """Sia's measurements in the data folder ``data`` (``sia/profiles``, the validation
        runs in ``pollux/profiles``), by Bellows' names of its types."""
        return cls(data / "sia" / "profiles", data / "pollux" / "profiles", SIA_TYPES)

    def __call__(
        self, model: str, gpu_type: str, spec: JobSpec, placement: Sequence[tuple[int, int]],
        batch: int,
    ) -> float | None:  # fmt: skip
        key = (model, gpu_type)
        if key not in self._models:
            suffix = self.suffixes.get(gpu_type, "")
            folder = self.sia / model
            found = bool(suffix) and (folder / f"placements-{suffix}.csv").is_file()
            self._models[key] = MeasuredPlacements(folder, suffix) if found else None
        measured = self._models[key]
        if measured is None:
            return None
        if model not in self._smallest:
            runs = load_validation_runs(self.validation / model)
            self._smallest[model] = min(run.batch for run in runs)
        return accumulated(measured, placement, batch, spec.m_max, self._smallest[model])
