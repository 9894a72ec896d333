"""``bellows reproduce``: run the paper's Section IV grid and write the comparison report."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
from rich.progress import Progress

from bellows.scaling import default_cluster
from bellows.sim.report import NOTES, write_report
from bellows.sim.reproduce import EXPERIMENTS, Outcome, quick, run_experiment

__all__ = ["reproduce"]


@click.command("reproduce")
@click.option("--quick", "is_quick", is_flag=True, help="A smaller grid (tests, a first look).")
@click.option("--seed", type=int, default=None, help="Override every experiment's seed.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              default="docs/reproduction.md", show_default=True)  # fmt: skip
@click.option("--figures", type=click.Path(file_okay=False, path_type=Path),
              default="docs/figures", show_default=True)  # fmt: skip
@click.option("--only", multiple=True, help="Run only these experiment keys (e.g. fig8a).")
def reproduce(
    *, is_quick: bool, seed: int | None, out: Path, figures: Path, only: tuple[str, ...]
) -> None:
    """Run elastic vs baseline on every experiment of the paper; write OUT with figures."""
    experiments = [e for e in EXPERIMENTS if not only or e.key in only]
    if not experiments:
        raise click.BadParameter(f"{only}: known keys are {[e.key for e in EXPERIMENTS]}")
    if is_quick:
        experiments = [quick(e) for e in experiments]
    if seed is not None:
        experiments = [dataclasses.replace(e, seed=seed) for e in experiments]
    cluster = default_cluster()
    outcomes: list[Outcome] = []
    with Progress() as progress:
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
    out.parent.mkdir(parents=True, exist_ok=True)
    command = "bellows reproduce" + (" --quick" if is_quick else "")
    write_report(outcomes, out, figures=figures, command=command, notes=NOTES)
    click.echo(f"{out}: {len(outcomes)} experiments")
