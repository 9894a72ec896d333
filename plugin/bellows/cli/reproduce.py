"""``bellows reproduce``: run the paper's Section IV grid and the policies beyond it, and write
the comparison report."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import click
from rich.progress import Progress

from bellows.cli.params import MAX_SEED, BoundedInt, OutputDir, OutputFile, output_errors
from bellows.scaling import default_cluster
from bellows.sim.comparing import PolicyRun
from bellows.sim.report import NOTES, write_report
from bellows.sim.reproduce import (
    BEYOND_SEED,
    EXPERIMENTS,
    Beyond,
    Experiment,
    Outcome,
    beyond_files,
    beyond_scenarios,
    quick,
    run_beyond,
    run_experiment,
)

__all__ = ["default_data", "reproduce"]

DATA_ENV = "BELLOWS_SHARED_DATA"
BEYOND = "beyond"
MAX_WORKERS = 64


def default_data() -> Path:
    """``$BELLOWS_SHARED_DATA``, else ``shared/data`` beside this checkout."""
    override = os.environ.get(DATA_ENV)
    if override:
        return Path(override)
    for base in (Path.cwd(), Path(__file__).resolve()):
        for parent in (base, *base.parents):
            candidate = parent.parent / "shared" / "data"
            if (candidate / "itp").is_dir():
                return candidate
    return Path("../shared/data")


def _run_grid(experiments: list[Experiment], progress: Progress) -> list[Outcome]:
    cluster = default_cluster()
    outcomes: list[Outcome] = []
    task = progress.add_task("simulating", total=len(experiments))
    for experiment in experiments:
        progress.update(task, description=f"{experiment.key}: {experiment.title}")
        outcome = run_experiment(experiment, cluster=cluster)
        outcomes.append(outcome)
        progress.advance(task)
        el, ba = outcome.summaries
        progress.console.print(
            f"{experiment.key}: offered load {el['offered_load']:.2f}; jobs "
            f"{el['jobs_completed']} vs {ba['jobs_completed']}; JCT "
            f"{el['avg_jct_min']} vs {ba['avg_jct_min']} min; "
            f"{outcome.elastic.stats.events + outcome.baseline.stats.events} events in "
            f"{outcome.elastic.stats.wall_s + outcome.baseline.stats.wall_s:.1f} s"
        )
    return outcomes


def _check_data(data: Path, *, is_quick: bool) -> None:
    """Fail before any run when a real trace of *Beyond the paper* is missing."""
    missing = [p for p in beyond_files(data, is_quick=is_quick) if not p.is_file()]
    if missing:
        raise click.ClickException(
            f"{missing[0]}: not found; the real traces are read from --data "
            f"(default ${DATA_ENV}, else shared/data beside the checkout), or leave out "
            f"'{BEYOND}' with --only"
        )


def _run_beyond(
    data: Path, *, is_quick: bool, seed: int, workers: int, progress: Progress
) -> Beyond:
    scenarios = beyond_scenarios(data, is_quick=is_quick, seed=seed)
    task = progress.add_task(f"{BEYOND}: three policies", total=3 * len(scenarios))

    def done(run: PolicyRun) -> None:
        progress.advance(task)
        s = run.summary
        progress.console.print(
            f"{BEYOND} {run.scenario} {run.policy}: avg JCT {s['avg_jct_min']} min, p99 "
            f"{s['p99_jct_min']}, idle beside waiting {s['idle_while_waiting_share']:.1%}, "
            f"{s['rescales_per_job']:.2f} rescales/job in {run.wall_s:.1f} s"
        )

    return run_beyond(scenarios, workers=workers, on_done=done)


@click.command("reproduce")
@click.option("--quick", "is_quick", is_flag=True, help="A smaller grid (tests, a first look).")
@click.option("--seed", type=BoundedInt(0, MAX_SEED), default=None,
              help="Override every experiment's seed (and that of the generated trace "
                   "beyond the paper).")  # fmt: skip
@click.option("--out", type=OutputFile(), default="docs/reproduction.md", show_default=True)
@click.option("--figures", type=OutputDir(), default="docs/figures", show_default=True)
@click.option("--only", multiple=True,
              type=click.Choice([e.key for e in EXPERIMENTS] + [BEYOND]),
              help=f"Run only these experiment keys (e.g. fig8a; '{BEYOND}': the policies "
                   "beyond the paper).")  # fmt: skip
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=None,
              help=f"Folder of the real traces (default: ${DATA_ENV}, else shared/data "
                   "beside the checkout).")  # fmt: skip
@click.option("--workers", type=BoundedInt(1, MAX_WORKERS), default=1, show_default=True,
              help=f"Runs of '{BEYOND}' at once, in separate processes.")  # fmt: skip
def reproduce(
    *,
    is_quick: bool,
    seed: int | None,
    out: Path,
    figures: Path,
    only: tuple[str, ...],
    data: Path | None,
    workers: int,
) -> None:
    """Run elastic vs baseline on every experiment of the paper, then paper mode, the
    event-driven baseline and Bellows mode side by side on generated and real traces;
    write OUT with figures."""
    experiments = [e for e in EXPERIMENTS if not only or e.key in only]
    if is_quick:
        experiments = [quick(e) for e in experiments]
    if seed is not None:
        experiments = [dataclasses.replace(e, seed=seed) for e in experiments]
    folder = default_data() if data is None else data
    with_beyond = not only or BEYOND in only
    if with_beyond:
        _check_data(folder, is_quick=is_quick)
    with Progress() as progress:
        outcomes = _run_grid(experiments, progress)
        beyond = None
        if with_beyond:
            beyond = _run_beyond(
                folder,
                is_quick=is_quick,
                seed=BEYOND_SEED if seed is None else seed,
                workers=workers,
                progress=progress,
            )
    command = "bellows reproduce" + (" --quick" if is_quick else "")
    command += "" if seed is None else f" --seed {seed}"
    command += "".join(f" --only {key}" for key in only)
    command += "" if workers == 1 else f" --workers {workers}"  # the same numbers, sooner
    with output_errors(out):
        write_report(outcomes, out, figures=figures, command=command, notes=NOTES, beyond=beyond)
    click.echo(f"{out}: {len(outcomes)} experiments" + (", beyond the paper" if beyond else ""))
