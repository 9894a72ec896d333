"""Measurement CSVs: the real Pollux files load; bad cells name file, line, column, value."""

from __future__ import annotations

from pathlib import Path

import pytest

from bellows.jobs import SpecError
from bellows.scaling import (
    MeasurementError,
    StepMeasurement,
    load_measurements,
    load_placements,
    load_scalability,
)


def test_real_placements_and_scalability(shared_data: Path) -> None:
    base = shared_data / "pollux" / "profiles" / "imagenet"
    rows = load_placements(base / "placements.csv")
    assert len(rows) == sum(1 for _ in (base / "placements.csv").open()) - 1
    two_by_two = [r for r in rows if r.placement == "22"]
    assert two_by_two
    assert all(r.nodes == 2 and r.gpus == 4 for r in two_by_two)
    assert rows[0].line == 2
    spread = load_scalability(base / "scalability.csv")
    assert {(r.nodes, r.gpus) for r in spread} >= {(6, 6), (16, 64)}
    assert all(r.placement == "" for r in spread)


def test_layout_detected_by_header(shared_data: Path) -> None:
    base = shared_data / "pollux" / "profiles" / "ncf"
    assert load_measurements(base / "placements.csv").layout == "placements"
    table = load_measurements(base / "scalability.csv")
    assert table.layout == "scalability"
    assert table.header == ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
    assert len(table.cells) == len(table.rows)


HEADER = "placement,local_bsz,step_time,sync_time\n"


@pytest.mark.parametrize(
    ("body", "line", "column", "value"),
    [
        ("1,32,0.1,0.0\n2,abc,0.1,0.0\n", 3, "local_bsz", "abc"),
        ("1,0,0.1,0.0\n", 2, "local_bsz", "0"),
        ("1,32,-0.1,0.0\n", 2, "step_time", "-0.1"),
        ("1,32,nan,0.0\n", 2, "step_time", "nan"),
        ("1,32,0.1,x\n", 2, "sync_time", "x"),
        ("20,32,0.1,0.0\n", 2, "placement", "20"),
        ("a,32,0.1,0.0\n", 2, "placement", "a"),
        ("1,32,0.1\n", 2, "(row)", "1,32,0.1"),
    ],
)
def test_bad_cell(tmp_path: Path, body: str, line: int, column: str, value: str) -> None:
    path = tmp_path / "rows.csv"
    path.write_text(HEADER + body)
    with pytest.raises(MeasurementError) as info:
        load_placements(path)
    error = info.value
    assert (error.path, error.line, error.column, error.value) == (str(path), line, column, value)
    assert str(error).startswith(f"{path}:{line}: {column}=")


def test_bad_header_and_wrong_layout(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("gpus,batch,time\n1,2,3\n")
    with pytest.raises(MeasurementError, match=r"rows\.csv:1: \(header\)"):
        load_measurements(path)
    path.write_text("num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,1,8,0.1,0.0\n")
    with pytest.raises(MeasurementError) as info:
        load_measurements(path)
    assert (info.value.line, info.value.column) == (2, "num_replicas")
    with pytest.raises(MeasurementError, match="placement,local_bsz"):
        load_placements(path)  # a scalability file where placements are required
    with pytest.raises(MeasurementError, match="readable"):
        load_measurements(tmp_path / "missing.csv")


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text(HEADER + "1,32,0.1,0.0\n\n22,32,0.3,0.1\n")
    rows = load_placements(path)
    assert [r.line for r in rows] == [2, 4]
    assert rows[1] == StepMeasurement(2, 4, 32, 0.3, 0.1, "22")


def test_measurement_validation() -> None:
    with pytest.raises(SpecError, match="gpus"):
        StepMeasurement(nodes=3, gpus=2, local_batch=1, step_time=0.1, sync_time=0.0)
    with pytest.raises(SpecError, match="placement"):
        StepMeasurement(2, 4, 8, 0.1, 0.0, placement="12")


def test_columns_in_another_order_read_the_same(tmp_path: Path) -> None:
    """Sia's per-type files put ``placement`` last; the columns are read by name."""
    usual, moved = tmp_path / "usual.csv", tmp_path / "moved.csv"
    usual.write_text("placement,local_bsz,step_time,sync_time\n22,8,0.25,0.05\n1,4,0.1,0\n")
    moved.write_text("local_bsz,step_time,sync_time,placement\n8,0.25,0.05,22\n4,0.1,0,1\n")
    strip = [(r.nodes, r.gpus, r.local_batch, r.step_time, r.sync_time) for r in
             load_placements(usual)]  # fmt: skip
    assert [(r.nodes, r.gpus, r.local_batch, r.step_time, r.sync_time)
            for r in load_placements(moved)] == strip  # fmt: skip
    moved.write_text("local_bsz,step_time,placement\n8,0.25,22\n")
    with pytest.raises(MeasurementError, match="in any order"):
        load_placements(moved)
    moved.write_text("local_bsz,step_time,sync_time,placement\nx,0.25,0.05,22\n")
    with pytest.raises(MeasurementError) as info:
        load_placements(moved)
    assert (info.value.line, info.value.column, info.value.value) == (2, "local_bsz", "x")
