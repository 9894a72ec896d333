"""Running a sweep: each cell of a GRID on a runner, its results in a folder of its own,
and ``sweep.csv`` over them all.

The output folder::

    sweep.csv                   one row per cell: parameters, summary keys, wall time, status
    cells/<cell>/summary.json   as ``bellows simulate`` writes it
    cells/<cell>/jobs.csv       as ``bellows simulate`` writes it
    cells/<cell>/cell.json      the cell's parameters, identity, hash and wall time, written last
    cells/<cell>/error.txt      only for a cell that failed twice

Resuming: a cell whose ``cell.json`` holds the hash of its identity
(:func:`bellows.sim.cells.cell_hash`) beside its ``summary.json`` and ``jobs.csv`` is not
run again (status ``cached``). Every file is written to a temporary name and renamed, and
``cell.json`` last, so a sweep killed at any point leaves each cell either complete or run
again next time: it loses only the cells in flight. Failed cells run again on the next run.

The results are written here, in the caller's process, from what the workers return: a Ray
worker need not share this disk.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bellows.inputs import DATA_ERRORS, SpecError, parse_json
from bellows.sim.cells import (
    CellOutput,
    build_trace,
    cell_hash,
    cell_identity,
    code_version,
    run_cell,
    trace_key,
)
from bellows.sim.grids import PARAM_COLUMNS, Cell, Grid
from bellows.sim.running import Runner, Task
from bellows.sim.workloads.traces import TraceJob

__all__ = [
    "CACHED",
    "FAILED",
    "OK",
    "CellReport",
    "Plan",
    "cell_folder",
    "make_plan",
    "read_sweep_csv",
    "sweep",
    "write_sweep_csv",
]

OK: Final = "ok"
FAILED: Final = "failed"
CACHED: Final = "cached"
_SKIPPED_KEYS: Final = {"policy"}  # a summary key sweep.csv shows as batch_policy
_MAX_SWEEP_CSV_BYTES: Final = 1 << 30


@dataclass(frozen=True)
class CellReport:
    """How a cell ended: ``ok`` (run now), ``cached`` (results kept) or ``failed``;
    ``wall_s`` is the seconds its simulation took (when it ran, for a cached one)."""

    cell: Cell
    status: str
    summary: Mapping[str, Any] | None = None
    error: str | None = None
    wall_s: float | None = None


@dataclass(frozen=True)
class Plan:
    """The cells to run and those whose results hold, with every cell's hash."""

    todo: tuple[Cell, ...]
    cached: tuple[CellReport, ...]
    hashes: Mapping[str, str]


def cell_folder(out: Path, cell: Cell) -> Path:
    return out / "cells" / cell.name


def _read_json(path: Path) -> Any:
    return parse_json(str(path), path.read_bytes())


def _kept(cell: Cell, folder: Path, digest: str) -> CellReport | None:
    """The cell's cached report when its results are complete and carry ``digest``."""
    try:
        kept = _read_json(folder / "cell.json")
        if not isinstance(kept, dict) or kept.get("hash") != digest:
            return None
        if not (folder / "jobs.csv").is_file():
            return None
        summary = _read_json(folder / "summary.json")
    except (OSError, SpecError):
        return None  # missing, half-written by an older version, unreadable: run again
    if not isinstance(summary, dict):
        return None
    wall = kept.get("wall_s")
    wall_s = float(wall) if isinstance(wall, int | float) else None
    return CellReport(cell, CACHED, summary, wall_s=wall_s)


def make_plan(grid: Grid, out: Path) -> Plan:
    """Which cells of ``grid`` run and which are kept from an earlier run into ``out``."""
    todo: list[Cell] = []
    cached: list[CellReport] = []
    hashes: dict[str, str] = {}
    for cell in grid.cells:
        digest = hashes[cell.name] = cell_hash(cell)
        report = _kept(cell, cell_folder(out, cell), digest)
        if report is None:
            todo.append(cell)
        else:
            cached.append(report)
    return Plan(tuple(todo), tuple(cached), hashes)


def _write(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8", newline="")  # jobs.csv ends lines in \r\n
    os.replace(temporary, path)


def _record(
    out: Path, cell: Cell, digest: str, output: CellOutput | None, error: str
) -> CellReport:
    folder = cell_folder(out, cell)
    folder.mkdir(parents=True, exist_ok=True)
    if output is None:
        for name in ("cell.json", "summary.json", "jobs.csv"):
            (folder / name).unlink(missing_ok=True)  # results of other parameters: stale
        _write(folder / "error.txt", error + "\n")
        return CellReport(cell, FAILED, error=error)
    _write(folder / "jobs.csv", output.jobs_csv)
    _write(folder / "summary.json", json.dumps(output.summary, indent=1) + "\n")
    (folder / "error.txt").unlink(missing_ok=True)
    wall_s = round(output.wall_s, 3)
    record = {
        "hash": digest, "cell": cell.params(), "identity": cell_identity(cell), "wall_s": wall_s,
    }  # fmt: skip
    _write(folder / "cell.json", json.dumps(record, indent=1) + "\n")
    return CellReport(cell, OK, output.summary, wall_s=wall_s)


def _cost(cell: Cell, trace: Sequence[TraceJob]) -> float:
    """A rough size: jobs, times more rounds (Δ = 0 runs a round at every event)."""
    delta = cell.config().delta_s
    return len(trace) * (4.0 if delta == 0 else 1.0 + 120.0 / delta)


def sweep(
    grid: Grid,
    out: Path,
    *,
    runner: Runner,
    plan: Plan | None = None,
    on_cell: Callable[[CellReport], None] = lambda _: None,
) -> list[CellReport]:
    """Run the cells of ``grid`` that have no valid results in ``out`` on ``runner``, write
    each as it finishes, then ``sweep.csv``; returns every cell's report in GRID order.

    Every trace is built here, once, before any cell runs (a bad trace file stops the sweep
    with its error), and handed to the runner as a shared object. ``on_cell`` is called for
    each cached cell first, then for each cell as it finishes.
    """
    plan = make_plan(grid, out) if plan is None else plan
    for report in plan.cached:
        on_cell(report)
    code = code_version()
    shared: dict[str, object] = {}
    tasks: list[Task] = []
    for cell in plan.todo:
        key = trace_key(cell)
        if key not in shared:
            try:
                shared[key] = build_trace(cell)
            except SpecError as err:
                raise SpecError(f"traces.{cell.trace.name}", err.value, err.valid) from None
        trace: Any = shared[key]
        tasks.append(Task(cell.name, run_cell, (cell, code), (key,), cost=_cost(cell, trace)))
    cells = {cell.name: cell for cell in plan.todo}
    reports = {r.cell.name: r for r in plan.cached}
    for finished in runner.run(tasks, shared):
        cell = cells[finished.key]
        output = finished.value if finished.ok else None
        report = _record(out, cell, plan.hashes[cell.name], output, finished.error or "")
        reports[cell.name] = report
        on_cell(report)
    ordered = [reports[cell.name] for cell in grid.cells]
    write_sweep_csv(ordered, out / "sweep.csv")
    return ordered


# ---------------------------------------------------------------- sweep.csv
def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(_text(v) for v in value)
    return str(value)


def _summary_keys(reports: Iterable[CellReport]) -> list[str]:
    """Every scalar summary key, in the order first seen; lists (``completed_over_time``)
    stay in ``summary.json``, and keys that are parameter columns are not repeated."""
    keys: dict[str, None] = {}
    for report in reports:
        for key, value in (report.summary or {}).items():
            if isinstance(value, list | dict) or key in PARAM_COLUMNS or key in _SKIPPED_KEYS:
                continue
            keys.setdefault(key, None)
    return list(keys)


def write_sweep_csv(reports: Sequence[CellReport], path: Path) -> None:
    """One row per cell: ``cell``, ``status``, the parameters (:data:`PARAM_COLUMNS`),
    every scalar summary key, ``wall_s`` and ``error``."""
    summary_keys = _summary_keys(reports)
    handle = io.StringIO()
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(["cell", "status", *PARAM_COLUMNS, *summary_keys, "wall_s", "error"])
    for report in reports:
        params = report.cell.params()
        summary = report.summary or {}
        writer.writerow([
            report.cell.name, report.status, *(_text(params[k]) for k in PARAM_COLUMNS),
            *(_text(summary.get(k)) for k in summary_keys), _text(report.wall_s),
            report.error or "",
        ])  # fmt: skip
    _write(path, handle.getvalue())


def read_sweep_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a ``sweep.csv``; :class:`SpecError` names a file that is not one."""
    try:
        size = path.stat().st_size
        if size > _MAX_SWEEP_CSV_BYTES:
            raise SpecError(str(path), f"{size} bytes", f"at most {_MAX_SWEEP_CSV_BYTES} bytes")
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = {"cell", "status", "policy"} - set(reader.fieldnames or ())
            if missing:
                raise SpecError(f"{path}: header", sorted(missing), "the columns of sweep.csv")
            return [dict(row) for row in reader]
    except OSError as err:
        why = err.strerror or type(err).__name__
        raise SpecError(str(path), why, "a readable sweep.csv") from None
    except DATA_ERRORS as err:
        if isinstance(err, SpecError):
            raise
        raise SpecError(str(path), str(err)[:80], "a sweep.csv written by bellows sweep") from None
