"""``bellows sweep``: run every cell of a GRID of simulations, on local cores or on Ray, and
draw the standard comparisons.

The simulator, Ray and matplotlib are imported when the command runs (Ray only for
``--ray``, matplotlib only for ``--plot``), not when ``bellows sweep --help`` builds the
options.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from bellows.cli.params import OutputDir, output_errors
from bellows.cli.runners import make_runner_or_fail, runner_options
from bellows.inputs import SpecError

if TYPE_CHECKING:
    from bellows.sim.grids import Grid
    from bellows.sim.running import Runner
    from bellows.sim.sweeping import CellReport

__all__ = ["sweep_cmd"]


def _grid(path: Path) -> Grid:
    """GRID read as a configuration file is (bounded, no aliases), checked, crossed."""
    from bellows.service.config_fields import ConfigError
    from bellows.service.config_files import read_config_file
    from bellows.sim.grids import read_grid

    try:
        document = read_config_file(path)
    except ConfigError as err:
        raise click.ClickException(f"{path}: expected {err.valid}") from None
    try:
        return read_grid(document, base=path.parent)
    except SpecError as err:
        raise click.ClickException(f"{path}: {err}") from None


def _plots(out: Path, x: str | None) -> None:
    from bellows.sim.sweep_plots import plot_sweep  # matplotlib: only here
    from bellows.sim.sweeping import read_sweep_csv

    try:
        paths = plot_sweep(read_sweep_csv(out / "sweep.csv"), out / "plots", x=x)
    except SpecError as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"{out / 'plots'}: {len(paths)} figure(s): " + ", ".join(p.name for p in paths))


def _summary_line(out: Path, reports: list[CellReport]) -> tuple[str, int]:
    """The closing line and the number of failed cells."""
    from bellows.sim.sweeping import CACHED, FAILED, OK

    ran = [r for r in reports if r.status == OK]
    kept = sum(r.status == CACHED for r in reports)
    failed = sum(r.status == FAILED for r in reports)
    seconds = sum(r.wall_s or 0.0 for r in ran)
    return (
        f"{out / 'sweep.csv'}: {len(reports)} cells: {len(ran)} run ({seconds:.1f} s of "
        f"simulation), {kept} kept, {failed} failed",
        failed,
    )


@click.command("sweep")
@click.argument("grid", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=OutputDir(), required=True,
              help="Results: sweep.csv and cells/CELL/, kept between runs.")  # fmt: skip
@runner_options(
    workers_help="Cells at once, in separate processes. [default: the cores this process "
    "may use; with --ray local: the CPUs of the machine]",
)
@click.option("--plot", is_flag=True,
              help="Then draw avg and p99 JCT, utilization and rescales per job against the "
                   "swept parameter, one line per policy, into OUT/plots.")  # fmt: skip
@click.option("--x", "x_param", default=None, metavar="PARAMETER",
              help="The parameter on the plots' x axis (a parameter column of sweep.csv, "
                   "e.g. gpus, load_high, delta_min). [default: the first swept]")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="List the cells and which would run; run none.")
def sweep_cmd(
    *,
    grid: Path,
    out: Path,
    workers: int | None,
    ray_address: str | None,
    plot: bool,
    x_param: str | None,
    dry_run: bool,
) -> None:
    """Run every cell of GRID (YAML: traces x sizes x seeds x policies x settings; see
    docs/simulator.md, Sweeps) and write OUT/sweep.csv with a folder per cell. Cells whose
    results are already in OUT for the same parameters and code are skipped."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from bellows.sim.running import InProcess, RayUnreachableError
    from bellows.sim.sweeping import FAILED, make_plan, sweep

    cells = _grid(grid)
    plan = make_plan(cells, out)
    click.echo(
        f"{grid}: {len(cells.cells)} cells, {len(plan.todo)} to run, {len(plan.cached)} "
        f"with results kept in {out}"
    )
    if dry_run:
        todo = {cell.name for cell in plan.todo}
        for cell in cells.cells:
            click.echo(f"  {'run ' if cell.name in todo else 'kept'}  {cell.name}")
        return
    runner: Runner = InProcess()  # nothing to run: no pool to start, no Ray to join
    if plan.todo:
        runner = make_runner_or_fail(workers, ray_address, default=None)
        click.echo(f"running {len(plan.todo)} cells {runner.description}")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns) as progress, output_errors(out / "sweep.csv"):
        task = progress.add_task("cells", total=len(cells.cells))
        failures = 0

        def done(report: CellReport) -> None:
            nonlocal failures
            progress.advance(task)
            if report.status == FAILED:
                failures += 1
                progress.console.print(f"[red]failed[/red] {report.cell.name}: {report.error}")
                progress.update(task, description=f"cells ({failures} failed)")

        try:
            reports = sweep(cells, out, runner=runner, plan=plan, on_cell=done)
        except SpecError as err:
            raise click.ClickException(f"{grid}: {err}") from None
        except RayUnreachableError as err:
            raise click.ClickException(str(err)) from None
    line, failed = _summary_line(out, reports)
    click.echo(line)
    if plot:
        _plots(out, x_param)
    if failed:
        raise click.ClickException(
            f"{failed} of {len(reports)} cells failed twice; their errors are in sweep.csv "
            "and in their folders' error.txt (run the same command again to retry them)"
        )
