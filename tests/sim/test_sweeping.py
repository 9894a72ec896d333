"""``bellows sweep``: a folder per cell, ``sweep.csv``, resuming by the cell's hash, failed
cells recorded while the sweep goes on, and the same numbers in this process, on a pool and on
a local Ray instance started by the test."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bellows.cli.main import main
from bellows.sim.grids import PARAM_COLUMNS, Grid, read_grid
from bellows.sim.running import (
    ATTEMPTS,
    Finished,
    InProcess,
    LocalPool,
    RayCluster,
    Task,
    collect,
)
from bellows.sim.sweeping import CACHED, FAILED, OK, cell_folder, make_plan, sweep

GRID: dict[str, Any] = {
    "traces": [
        {"generate": {"pattern": "bursty", "minutes": 30, "categories": [1, 2], "period_min": 10}}
    ],
    "gpus": 6,
    "seeds": [1, 2],
    "policies": {"bellows": {}, "paper": {"mode": "paper", "queue": True}},
}
FILES = ("summary.json", "jobs.csv")
SUMMARY_KEYS = ("jobs_total", "avg_jct_min", "p99_jct_min", "utilization", "rescales_per_job")


def small_grid(tmp_path: Path, **changes: Any) -> Grid:
    return read_grid({**GRID, **changes}, base=tmp_path)


def results(out: Path, grid: Grid) -> dict[str, tuple[bytes, ...]]:
    """Each cell's ``summary.json`` and ``jobs.csv``, byte for byte."""
    return {
        cell.name: tuple((cell_folder(out, cell) / name).read_bytes() for name in FILES)
        for cell in grid.cells
    }


class Recording:
    """A runner that runs in this process and remembers which tasks it was given."""

    description = "in this process (recorded)"

    def __init__(self) -> None:
        self.keys: list[str] = []

    def run(self, tasks: Sequence[Task], shared: Mapping[str, object]) -> Iterator[Finished]:
        self.keys.extend(t.key for t in tasks)
        return InProcess().run(tasks, shared)


class Sabotaged(Recording):
    """Runs in this process, but the task ``broken`` raises each time it is tried."""

    def __init__(self, broken: str) -> None:
        super().__init__()
        self.broken = broken
        self.tries = 0

    def _boom(self, *_: object) -> None:
        self.tries += 1
        raise RuntimeError(f"disk on fire ({self.tries})")

    def run(self, tasks: Sequence[Task], shared: Mapping[str, object]) -> Iterator[Finished]:
        swapped = [replace(t, function=self._boom) if t.key == self.broken else t for t in tasks]
        return super().run(swapped, shared)


def _rows(out: Path) -> list[dict[str, str]]:
    with (out / "sweep.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def in_process(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Grid]:
    """The small grid swept once in this process (shared by the tests that only read it)."""
    base = tmp_path_factory.mktemp("sweep")
    grid = small_grid(base)
    sweep(grid, base / "out", runner=InProcess())
    return base / "out", grid


def test_a_cell_per_folder_and_a_row_per_cell(in_process: tuple[Path, Grid]) -> None:
    out, grid = in_process
    assert len(grid.cells) == 4
    rows = _rows(out)
    assert [r["cell"] for r in rows] == [c.name for c in grid.cells]
    for row in rows:
        assert row["status"] == OK
        assert set(PARAM_COLUMNS) <= set(row)
        summary = json.loads((out / "cells" / row["cell"] / "summary.json").read_text())
        for key in SUMMARY_KEYS:
            assert row[key] == str(summary[key])
        assert float(row["wall_s"]) > 0
    assert {r["mode"] for r in rows} == {"bellows", "paper"}
    assert {r["seed"] for r in rows} == {"1", "2"}


def _small_trace(folder: Path, *, seed: int) -> Path:
    """The small grid's trace for ``seed``, as ``bellows workload generate`` writes it."""
    trace = folder / "trace.jsonl"
    generated = CliRunner().invoke(main, [
        "workload", "generate", "--pattern", "bursty", "--minutes", "30", "--categories", "1,2",
        "--period-min", "10", "--gpus", "6", "--seed", str(seed), "--out", str(trace),
    ])  # fmt: skip
    assert generated.exit_code == 0, generated.output
    return trace


def test_a_cell_is_what_simulate_writes_for_its_trace(
    in_process: tuple[Path, Grid], tmp_path: Path
) -> None:
    out, grid = in_process
    cell = next(c for c in grid.cells if c.policy == "paper" and c.seed == 2)
    trace = _small_trace(tmp_path, seed=2)
    runner = CliRunner()
    simulated = runner.invoke(main, [
        "simulate", str(trace), "--gpus", "6", "--paper", "--queue", "--no-plots",
        "--out", str(tmp_path / "sim"),
    ])  # fmt: skip
    assert simulated.exit_code == 0, simulated.output
    for name in ("summary.json", "jobs.csv"):
        assert (cell_folder(out, cell) / name).read_bytes() == (
            tmp_path / "sim" / name
        ).read_bytes()


REFERENCE_POLICIES: dict[str, dict[str, Any]] = {
    "pollux": {"policy": "pollux"},  # simulate's defaults: every minute, on nodes
    "tiresias": {"policy": "tiresias", "delta_min": 2, "restart_cost_s": 30, "efficiency": True},
}
REFERENCE_FLAGS = {
    "pollux": ["--policy", "pollux"],
    "tiresias": ["--policy", "tiresias", "--delta-min", "2", "--restart-cost-s", "30",
                 "--efficiency"],
}  # fmt: skip


def test_a_reference_cell_is_what_simulate_policy_writes(tmp_path: Path) -> None:
    """``policy: pollux|tiresias`` in a GRID runs as ``simulate --policy pollux|tiresias``:
    the same defaults, the same summary.json and jobs.csv, byte for byte."""
    grid = small_grid(tmp_path, seeds=2, policies=REFERENCE_POLICIES)
    out = tmp_path / "out"
    reports = sweep(grid, out, runner=InProcess())
    assert [r.status for r in reports] == [OK, OK]
    trace = _small_trace(tmp_path, seed=2)
    runner = CliRunner()
    rows = {r["policy"]: r for r in _rows(out)}
    for cell in grid.cells:
        sim = tmp_path / f"sim-{cell.policy}"
        simulated = runner.invoke(main, [
            "simulate", str(trace), "--gpus", "6", *REFERENCE_FLAGS[cell.policy], "--no-plots",
            "--out", str(sim),
        ])  # fmt: skip
        assert simulated.exit_code == 0, simulated.output
        summary = json.loads((sim / "summary.json").read_text())
        assert summary["policy"] == summary["mode"] == cell.policy
        for name in FILES:
            assert (cell_folder(out, cell) / name).read_bytes() == (sim / name).read_bytes()
        assert rows[cell.policy]["batch_policy"] == rows[cell.policy]["mode"] == cell.policy
    assert rows["pollux"]["delta_min"] == "1.0"  # simulate --policy pollux's default


def test_a_reference_and_a_setting_it_does_not_take_is_refused(tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "traces:\n  - generate: {pattern: bursty, minutes: 30}\ngpus: 6\n"
        "policies:\n  ref: {policy: pollux, mode: paper}\n"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["sweep", str(grid), "--out", str(out)])
    assert result.exit_code == 1
    assert "policies.ref.mode='paper' is invalid: expected 'bellows' with policy pollux (the " in (
        result.output
    )
    assert "places jobs on nodes; it takes delta_min, restart_cost_s and efficiency" in (
        result.output.replace("\n", " ")
    )
    assert not (out / "cells").exists()


def test_a_rerun_skips_the_cells_whose_hash_matches(tmp_path: Path) -> None:
    grid = small_grid(tmp_path)
    out = tmp_path / "out"
    sweep(grid, out, runner=InProcess())
    before = results(out, grid)
    again = Recording()
    reports = sweep(grid, out, runner=again)
    assert again.keys == []
    assert {r.status for r in reports} == {CACHED}
    assert results(out, grid) == before
    assert [r["status"] for r in _rows(out)] == [CACHED] * 4
    assert all(float(r["wall_s"]) > 0 for r in _rows(out))  # kept from the run that made them


def test_changed_parameters_run_again_and_new_cells_run_alone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sweep(small_grid(tmp_path), out, runner=InProcess())
    # the same names, another Δ for the paper policy: its cells' hash changes
    policies = {"bellows": {}, "paper": {"mode": "paper", "queue": True, "delta_min": 5}}
    changed = small_grid(tmp_path, policies=policies)
    recorded = Recording()
    reports = sweep(changed, out, runner=recorded)
    assert sorted(recorded.keys) == sorted(c.name for c in changed.cells if c.policy == "paper")
    assert {r.cell.policy: r.status for r in reports if r.status == OK} == {"paper": OK}
    paper = next(r for r in _rows(out) if r["policy"] == "paper")
    assert paper["delta_min"] == "5.0"
    # one more seed: only its cells run
    more = small_grid(tmp_path, policies=policies, seeds=[1, 2, 3])
    recorded = Recording()
    sweep(more, out, runner=recorded)
    assert sorted(recorded.keys) == sorted(c.name for c in more.cells if c.seed == 3)


def test_a_cell_cut_short_runs_again(tmp_path: Path) -> None:
    grid = small_grid(tmp_path)
    out = tmp_path / "out"
    sweep(grid, out, runner=InProcess())
    first, second = grid.cells[:2]
    (cell_folder(out, first) / "cell.json").unlink()  # killed before its last rename
    (cell_folder(out, second) / "cell.json").write_text('{"hash": "0"')  # torn by hand
    plan = make_plan(grid, out)
    assert [c.name for c in plan.todo] == [first.name, second.name]


def test_a_failed_cell_is_retried_once_then_recorded_and_the_sweep_goes_on(
    tmp_path: Path,
) -> None:
    grid = small_grid(tmp_path)
    out = tmp_path / "out"
    broken = grid.cells[1].name
    runner = Sabotaged(broken)
    reports = sweep(grid, out, runner=runner)
    assert runner.tries == ATTEMPTS == 2
    status = {r.cell.name: r.status for r in reports}
    assert status.pop(broken) == FAILED
    assert set(status.values()) == {OK}
    row = next(r for r in _rows(out) if r["cell"] == broken)
    assert row["status"] == FAILED
    assert row["error"] == "RuntimeError: disk on fire (2)"
    assert (out / "cells" / broken / "error.txt").read_text().startswith("RuntimeError")
    assert not (out / "cells" / broken / "summary.json").exists()
    recorded = Recording()
    reports = sweep(grid, out, runner=recorded)  # the next run retries it alone
    assert recorded.keys == [broken]
    assert {r.status for r in reports} == {OK, CACHED}
    assert not (out / "cells" / broken / "error.txt").exists()


def test_a_pool_gives_the_numbers_of_this_process(
    in_process: tuple[Path, Grid], tmp_path: Path
) -> None:
    here, grid = in_process
    there = tmp_path / "pool"
    reports = sweep(grid, there, runner=LocalPool(2))
    assert {r.status for r in reports} == {OK}
    assert results(there, grid) == results(here, grid)


def test_a_pool_retries_a_failing_task_or_a_dead_worker_and_reports_them() -> None:
    tasks = [
        Task("bad", math.sqrt, (-1.0,)),
        Task("dies", os._exit, (3,)),  # its worker process ends: the pool breaks
        *(Task(f"good{i}", math.sqrt, (float(i * i),)) for i in range(3)),
    ]
    finished = {f.key: f for f in LocalPool(2).run(tasks, {})}
    assert finished["bad"].error == "ValueError: math domain error"
    assert finished["dies"].error == "its worker process died"
    assert {k: f.value for k, f in finished.items() if f.ok} == {f"good{i}": i for i in range(3)}
    with pytest.raises(RuntimeError, match="1 run\\(s\\) failed twice: bad: ValueError"):
        collect(InProcess(), [t for t in tasks if t.key != "dies"], {})  # not in pytest's own


def test_the_command_sweeps_resumes_and_plots(tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "traces:\n"
        "  - generate: {pattern: bursty, minutes: 30, categories: [1, 2], period_min: 10}\n"
        "gpus: [4, 6]\n"
        "policies:\n  bellows: {}\n  paper: {mode: paper, queue: true}\n"
    )
    out = tmp_path / "out"
    command = ["sweep", str(grid), "--out", str(out), "--workers", "1", "--plot"]
    first = CliRunner().invoke(main, command)
    assert first.exit_code == 0, first.output
    assert "4 cells: 4 run" in first.output
    assert (out / "plots" / "sweep-gpus.png").stat().st_size > 1000
    again = CliRunner().invoke(main, command[:-1])
    assert again.exit_code == 0, again.output
    assert "4 cells: 0 run (0.0 s of simulation), 4 kept, 0 failed" in again.output
    bad_x = CliRunner().invoke(main, [*command, "--x", "colour"])
    assert bad_x.exit_code == 1
    assert "--x='colour' is invalid: expected one of load_high, gpus" in bad_x.output
    bad_ray = CliRunner().invoke(main, [*command, "--ray", "http://head"])
    assert bad_ray.exit_code == 2
    assert "auto, local, HOST:PORT or ray://HOST:PORT" in bad_ray.output


needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="Ray is not installed: pip install -e '.[ray]' (CI installs it)",
)


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[None]:
    """A local Ray instance on two CPUs, for this module's Ray tests (its start is slow)."""
    import ray  # noqa: PLC0415 - only where Ray is installed

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="warning")
    yield
    ray.shutdown()


@needs_ray
@pytest.mark.slow
@pytest.mark.usefixtures("ray_instance")
def test_ray_gives_the_numbers_of_this_process_and_reports_a_failing_task(
    in_process: tuple[Path, Grid], tmp_path: Path
) -> None:
    here, grid = in_process
    runner = RayCluster("auto")  # already connected: the test's instance is kept
    reports = sweep(grid, tmp_path / "ray", runner=runner)
    assert {r.status for r in reports} == {OK}
    assert results(tmp_path / "ray", grid) == results(here, grid)
    tasks = [
        Task("bad", math.sqrt, (-1.0,)),
        *(Task(f"good{i}", math.sqrt, (float(i * i),)) for i in range(4)),
    ]
    finished = {f.key: f for f in runner.run(tasks, {})}
    assert finished["bad"].error == "ValueError: math domain error"
    good = {k: f.value for k, f in finished.items() if f.ok}
    assert good == {f"good{i}": float(i) for i in range(4)}
