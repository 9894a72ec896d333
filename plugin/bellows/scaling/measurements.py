"""Measured iteration times read from CSV: the Pollux ``placements.csv``/``scalability.csv``.

Two layouts (header line decides which):

* ``placement,local_bsz,step_time,sync_time`` — ``placement`` is one digit per node, each the
  GPUs used on that node (``"22"`` = two nodes with two GPUs each);
* ``num_nodes,num_replicas,local_bsz,step_time,sync_time`` — GPUs spread over many nodes.

Both become :class:`StepMeasurement` rows. Every cell goes through :mod:`bellows.inputs`
with the bounds of :mod:`bellows.jobs` (GPUs and nodes at most ``MAX_GPUS``, per-GPU batches
at most ``MAX_LOCAL_BATCH``, times at most ``MAX_STEP_SECONDS``); a file holds at most
:data:`MAX_ROWS` rows. A bad cell raises :class:`MeasurementError` naming the file, the
line, the column and the value.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from bellows.inputs import brief, check_float, check_int, parse_float, parse_int
from bellows.jobs import MAX_GPUS, MAX_LOCAL_BATCH, MAX_STEP_SECONDS, SpecError

__all__ = [
    "MAX_ROWS",
    "PLACEMENTS_HEADER",
    "SCALABILITY_HEADER",
    "MeasurementError",
    "MeasurementTable",
    "StepMeasurement",
    "load_measurements",
    "load_placements",
    "load_scalability",
]

PLACEMENTS_HEADER = ("placement", "local_bsz", "step_time", "sync_time")
SCALABILITY_HEADER = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
Layout = Literal["placements", "scalability"]
MAX_ROWS: Final = 1_000_000  # Pollux's files have a few hundred
_MAX_NODES: Final = 1024  # digits of one placement
_PLACEMENT = re.compile(rf"[1-9]{{1,{_MAX_NODES}}}")
_PLACEMENT_VALID = f"digits 1-9, one per node, at most {_MAX_NODES} (e.g. 22)"


class MeasurementError(SpecError):
    """A cell of a measurement CSV is invalid; names file, line, column and value."""

    def __init__(self, path: str | Path, line: int, column: str, value: object, valid: str) -> None:
        self.path = str(path)
        self.line = line
        self.column = column
        super().__init__(f"{path}:{line}: {column}", value, valid)


@dataclass(frozen=True)
class StepMeasurement:
    """One measured configuration: ``gpus`` GPUs on ``nodes`` nodes, per-GPU ``local_batch``.

    ``step_time`` is the whole iteration (seconds), ``sync_time`` the part spent waiting for
    gradient synchronisation. ``placement`` is the GPUs per node when the file says so.
    """

    nodes: int
    gpus: int
    local_batch: int
    step_time: float
    sync_time: float
    placement: str = ""
    line: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        check_int("nodes", self.nodes, minimum=1, maximum=MAX_GPUS)
        check_int("gpus", self.gpus, minimum=1, maximum=MAX_GPUS)
        check_int("local_batch", self.local_batch, minimum=1, maximum=MAX_LOCAL_BATCH)
        if self.gpus < self.nodes:
            raise SpecError("gpus", self.gpus, f">= nodes ({self.nodes})")
        seconds = MAX_STEP_SECONDS
        check_float("step_time", self.step_time, minimum=0.0, maximum=seconds, open_min=True)
        check_float("sync_time", self.sync_time, minimum=0.0, maximum=seconds)
        if self.placement and (
            not isinstance(self.placement, str)
            or not _PLACEMENT.fullmatch(self.placement)
            or len(self.placement) != self.nodes
            or sum(map(int, self.placement)) != self.gpus
        ):
            raise SpecError("placement", self.placement, f"{self.nodes} digits summing to gpus")


@dataclass(frozen=True)
class MeasurementTable:
    """A whole CSV file: its layout, header, raw cells (for echoing) and typed rows."""

    path: str
    layout: Layout
    header: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]
    rows: tuple[StepMeasurement, ...]


def _int_cell(path: str | Path, line: int, column: str, text: str, maximum: int) -> int:
    try:
        return parse_int(column, text, minimum=1, maximum=maximum)
    except SpecError as err:
        raise MeasurementError(path, line, column, text, err.valid) from None


def _float_cell(path: str | Path, line: int, column: str, text: str, *, positive: bool) -> float:
    try:
        return parse_float(column, text, minimum=0.0, maximum=MAX_STEP_SECONDS, open_min=positive)
    except SpecError as err:
        raise MeasurementError(path, line, column, text, err.valid) from None


def _placement_row(path: str | Path, line: int, cells: Sequence[str]) -> StepMeasurement:
    placement = cells[0].strip()
    if not _PLACEMENT.fullmatch(placement):
        raise MeasurementError(path, line, "placement", cells[0], _PLACEMENT_VALID)
    return StepMeasurement(
        nodes=len(placement),
        gpus=sum(int(d) for d in placement),
        local_batch=_int_cell(path, line, "local_bsz", cells[1], MAX_LOCAL_BATCH),
        step_time=_float_cell(path, line, "step_time", cells[2], positive=True),
        sync_time=_float_cell(path, line, "sync_time", cells[3], positive=False),
        placement=placement,
        line=line,
    )


def _scalability_row(path: str | Path, line: int, cells: Sequence[str]) -> StepMeasurement:
    nodes = _int_cell(path, line, "num_nodes", cells[0], MAX_GPUS)
    gpus = _int_cell(path, line, "num_replicas", cells[1], MAX_GPUS)
    if gpus < nodes:
        raise MeasurementError(path, line, "num_replicas", cells[1], f">= num_nodes ({nodes})")
    return StepMeasurement(
        nodes=nodes,
        gpus=gpus,
        local_batch=_int_cell(path, line, "local_bsz", cells[2], MAX_LOCAL_BATCH),
        step_time=_float_cell(path, line, "step_time", cells[3], positive=True),
        sync_time=_float_cell(path, line, "sync_time", cells[4], positive=False),
        line=line,
    )


def load_measurements(path: str | Path, *, layout: Layout | None = None) -> MeasurementTable:
    """Read a measurement CSV; the header picks the layout unless ``layout`` insists on one."""
    lines: list[list[str]] = []
    try:
        with Path(path).open(newline="", encoding="utf-8") as handle:
            for record in csv.reader(handle):
                if len(lines) > MAX_ROWS:
                    raise MeasurementError(
                        path, len(lines) + 1, "(file)", f"more than {MAX_ROWS} rows",
                        f"a CSV file of at most {MAX_ROWS} rows",
                    )  # fmt: skip
                lines.append(record)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise MeasurementError(path, 0, "(file)", reason, "a readable CSV file") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise MeasurementError(path, 0, "(file)", brief(exc), "a UTF-8 CSV file") from None
    if not lines:
        raise MeasurementError(path, 1, "(header)", "", "a header line")
    header = tuple(cell.strip() for cell in lines[0])
    layouts: dict[Layout, tuple[str, ...]] = {
        "placements": PLACEMENTS_HEADER,
        "scalability": SCALABILITY_HEADER,
    }
    wanted = [layout] if layout is not None else list(layouts)
    # the columns in any order (Sia's per-type files put placement last)
    found = next((name for name in wanted if sorted(layouts[name]) == sorted(header)), None)
    if found is None:
        valid = " or ".join(",".join(layouts[name]) for name in wanted)
        raise MeasurementError(path, 1, "(header)", ",".join(header), valid + ", in any order")
    order = [header.index(column) for column in layouts[found]]
    rows_of = _placement_row if found == "placements" else _scalability_row

    def parse(path: str | Path, line: int, raw: Sequence[str]) -> StepMeasurement:
        return rows_of(path, line, [raw[i] for i in order])

    cells: list[tuple[str, ...]] = []
    rows: list[StepMeasurement] = []
    for number, raw in enumerate(lines[1:], start=2):
        if not raw or all(not cell.strip() for cell in raw):
            continue  # blank lines carry no measurement
        if len(raw) != len(header):
            raise MeasurementError(
                path, number, "(row)", ",".join(raw), f"{len(header)} cells ({','.join(header)})"
            )
        cells.append(tuple(raw))
        rows.append(parse(path, number, raw))
    return MeasurementTable(str(path), found, header, tuple(cells), tuple(rows))


def load_placements(path: str | Path) -> list[StepMeasurement]:
    """Rows of a ``placements.csv`` (``placement,local_bsz,step_time,sync_time``)."""
    return list(load_measurements(path, layout="placements").rows)


def load_scalability(path: str | Path) -> list[StepMeasurement]:
    """Rows of a ``scalability.csv`` (``num_nodes,num_replicas,local_bsz,step_time,sync_time``)."""
    return list(load_measurements(path, layout="scalability").rows)
