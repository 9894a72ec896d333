"""Reading validation runs: ``validation-<batch>.csv`` files, one training run per batch size.

The Pollux/AdaptDL artifact's layout (``../shared/data/README.md``):
``progress,iteration,metric,grad_sqr,grad_var``, one row per epoch of progress, where
``progress`` counts steps at the smallest batch of the set (efficiency-weighted) and
``iteration`` the steps the file's own batch took. :func:`load_validation_runs` turns them
into :class:`bellows.scaling.efficiency.ValidationRun` with progress in reference samples
(``progress * M0``) and samples ``iteration * batch``. A bad cell raises
:class:`bellows.scaling.MeasurementError` naming the file, line and column.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

from bellows.scaling.efficiency import ValidationRun
from bellows.scaling.measurements import MeasurementError

__all__ = ["COLUMNS", "load_validation_runs"]

COLUMNS = ("progress", "iteration", "metric", "grad_sqr", "grad_var")
_NAME = re.compile(r"validation-([1-9][0-9]{0,9})\.csv")
_MAX_ROWS = 100_000


def load_validation_runs(folder: str | Path) -> list[ValidationRun]:
    """Every ``validation-<batch>.csv`` in ``folder``, sorted by batch (the first is ``M0``)."""
    found = sorted(
        (int(m.group(1)), path)
        for path in Path(folder).iterdir()
        if (m := _NAME.fullmatch(path.name)) is not None
    )
    if not found:
        raise MeasurementError(folder, 0, "file", "no validation-<batch>.csv", "one or more")
    m0 = found[0][0]
    return [_run(path, batch, m0) for batch, path in found]


def _run(path: Path, batch: int, m0: int) -> ValidationRun:
    columns: dict[str, list[float]] = {name: [] for name in COLUMNS}
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, [])
        if tuple(header) != COLUMNS:
            raise MeasurementError(path, 1, "header", ",".join(header), ",".join(COLUMNS))
        for line, cells in enumerate(reader, start=2):
            if line > _MAX_ROWS:
                raise MeasurementError(path, line, "rows", line, f"at most {_MAX_ROWS}")
            if len(cells) != len(COLUMNS):
                raise MeasurementError(path, line, "row", cells, f"{len(COLUMNS)} cells")
            for name, text in zip(COLUMNS, cells, strict=True):
                try:
                    value = float(text)
                except ValueError:
                    value = math.nan
                if not math.isfinite(value) or (name != "metric" and value < 0):
                    raise MeasurementError(path, line, name, text, "a finite number >= 0")
                columns[name].append(value)
    return ValidationRun(
        batch=batch,
        progress=tuple(p * m0 for p in columns["progress"]),
        samples=tuple(i * batch for i in columns["iteration"]),
        metric=tuple(columns["metric"]),
        grad_sqr=tuple(columns["grad_sqr"]),
        grad_var=tuple(columns["grad_var"]),
    )
