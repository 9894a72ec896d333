"""``bellows reproduce``: run the paper's Section IV grid and the policies beyond it, and write
the comparison report."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bellows.cli.choices import EXPERIMENT_KEYS
from bellows.cli.data import DATA_ENV, data_folder, given_data_folder
from bellows.cli.params import MAX_SEED, BoundedInt, OutputDir, OutputFile, output_errors
from bellows.cli.runners import make_runner_or_fail, runner_options

if TYPE_CHECKING:  # the simulator, rich and matplotlib load when the command runs
    from bellows.sim.comparing import PolicyRun, Scenario
    from bellows.sim.reproduce import Beyond, Experiment, Outcome
    from bellows.sim.running import Runner

__all__ = ["reproduce"]

BEYOND = "beyond"


def _run(
    experiments: list[Experiment],
    scenarios: list[Scenario],
    *,
    runner: Runner,
    figures: Path,
    drawn: dict[str, list[Path]],
) -> tuple[list[Outcome], Beyond]:
    """Every run on ``runner`` at once, a progress bar for the paper's part and one for
    the policies beyond it, and a line for each as it finishes.

    Each experiment's figures, and each detailed scenario's, are drawn into ``figures`` as
    soon as its runs are in (recorded in ``drawn`` for the report): while the last, longest
    runs go on, not after them all."""
    from rich.progress import Progress

    from bellows.scaling import default_cluster
    from bellows.sim.comparing import POLICIES, detailed
    from bellows.sim.reproduce import run_reproduction
    from bellows.sim.running import RayUnreachableError, TaskFailedError

    shown = {s.key: s for s in detailed(scenarios)}
    finished: dict[str, dict[str, PolicyRun]] = {}

    with Progress() as progress:
        grid = progress.add_task("paper's experiments", total=len(experiments),
                                 visible=bool(experiments))  # fmt: skip
        beyond = progress.add_task(f"{BEYOND}: three policies", total=3 * len(scenarios),
                                   visible=bool(scenarios))  # fmt: skip

        def outcome_done(outcome: Outcome) -> None:
            progress.advance(grid)
            el, ba = outcome.summaries
            progress.console.print(
                f"{outcome.experiment.key}: offered load {el['offered_load']:.2f}; jobs "
                f"{el['jobs_completed']} vs {ba['jobs_completed']}; JCT "
                f"{el['avg_jct_min']} vs {ba['avg_jct_min']} min; "
                f"{outcome.elastic.stats.events + outcome.baseline.stats.events} events in "
                f"{outcome.elastic.stats.wall_s + outcome.baseline.stats.wall_s:.1f} s"
            )
            from bellows.sim.report import write_figures  # matplotlib: once results come

            drawn.update(write_figures([outcome], figures))

        def run_done(run: PolicyRun) -> None:
            progress.advance(beyond)
            s = run.summary
            progress.console.print(
                f"{BEYOND} {run.scenario} {run.policy}: avg JCT {_minutes(s['avg_jct_min'])}, "
                f"p99 {_minutes(s['p99_jct_min'])}, idle beside waiting "
                f"{s['idle_while_waiting_share']:.1%}, "
                f"{s['rescales_per_job']:.2f} rescales/job in {run.wall_s:.1f} s"
            )
            runs = finished.setdefault(run.scenario, {})
            runs[run.policy] = run
            if run.scenario in shown and len(runs) == len(POLICIES):
                from bellows.sim.report import scenario_figures, scenario_key

                scenario = shown[run.scenario]
                drawn[scenario_key(scenario)] = scenario_figures(scenario, runs, figures)

        try:
            return run_reproduction(
                experiments, scenarios, runner=runner, cluster=default_cluster(),
                on_outcome=outcome_done, on_run=run_done,
            )  # fmt: skip
        except (TaskFailedError, RayUnreachableError) as err:
            raise click.ClickException(str(err)) from None


def _minutes(value: float | None) -> str:
    """A time in minutes with its unit, to a tenth (``n/a``: no job finished)."""
    return "n/a" if value is None else f"{value:.1f} min"


def _missing(data: Path | None, *, is_quick: bool) -> Path | None:
    """The first real trace of *Beyond the paper* not under ``data``, if any."""
    from bellows.sim.reproduce import beyond_files

    if data is None:
        return Path("shared", "data")  # no folder at all: name the one looked for
    return next((p for p in beyond_files(data, is_quick=is_quick) if not p.is_file()), None)


def _where(missing: Path) -> str:
    return (
        f"{missing}: not found; *Beyond the paper* replays the real ITP and Pollux traces: "
        f"give their folder (the one holding itp/ and pollux/) with --data or ${DATA_ENV}"
    )


def _skipped_note(missing: Path) -> str:
    return f"\n## Beyond the paper\n\nNot run: {_where(missing)}, and run this command again.\n"


@click.command("reproduce")
@click.option("--quick", "is_quick", is_flag=True, help="A smaller grid (tests, a first look).")
@click.option("--seed", type=BoundedInt(0, MAX_SEED), default=None,
              help="Override every experiment's seed (and that of the generated trace "
                   "beyond the paper).")  # fmt: skip
@click.option("--out", type=OutputFile(), default="docs/reproduction.md", show_default=True)
@click.option("--figures", type=OutputDir(), default="docs/figures", show_default=True)
@click.option("--only", multiple=True,
              type=click.Choice([*EXPERIMENT_KEYS, BEYOND]),
              help=f"Run only these experiment keys (e.g. fig8a; '{BEYOND}': the policies "
                   "beyond the paper).")  # fmt: skip
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=None,
              help=f"Folder of the real traces, holding itp/ and pollux/ [default: "
                   f"${DATA_ENV}, else shared/data beside the checkout; without them "
                   f"'{BEYOND}' is skipped].")  # fmt: skip
@runner_options(
    workers_help="Runs at once, in separate processes (the same numbers, sooner). "
    "[default: 1; with --ray local: the CPUs of the machine]",
)
def reproduce(
    *,
    is_quick: bool,
    seed: int | None,
    out: Path,
    figures: Path,
    only: tuple[str, ...],
    data: Path | None,
    workers: int | None,
    ray_address: str | None,
) -> None:
    """Run elastic vs baseline on every experiment of the paper, then paper mode, the
    event-driven baseline and Bellows mode side by side on generated and real traces;
    write OUT with figures."""
    from bellows.sim.reproduce import BEYOND_SEED, EXPERIMENTS, beyond_scenarios, quick

    experiments = [e for e in EXPERIMENTS if not only or e.key in only]
    if is_quick:
        experiments = [quick(e) for e in experiments]
    if seed is not None:
        experiments = [dataclasses.replace(e, seed=seed) for e in experiments]
    folder = data or data_folder()  # $BELLOWS_DATA, else shared/data beside the checkout
    with_beyond = not only or BEYOND in only
    missing = _missing(folder, is_quick=is_quick) if with_beyond else None
    if missing is not None:
        # Asked for (by --only, --data or the environment): say what is missing and stop
        # before any run. Not asked for: the paper's part needs no data; run it without.
        if BEYOND in only or data is not None or given_data_folder() is not None:
            raise click.ClickException(_where(missing))
        click.echo(f"skipping '{BEYOND}': {_where(missing)}", err=True)
        with_beyond = False
    scenarios = []
    if with_beyond and folder is not None:
        beyond_seed = BEYOND_SEED if seed is None else seed
        scenarios = beyond_scenarios(folder, is_quick=is_quick, seed=beyond_seed)
    runner = make_runner_or_fail(workers, ray_address, default=1)
    drawn: dict[str, list[Path]] = {}
    outcomes, runs = _run(experiments, scenarios, runner=runner, figures=figures, drawn=drawn)
    beyond = runs if scenarios else None
    command = "bellows reproduce" + (" --quick" if is_quick else "")
    command += "" if seed is None else f" --seed {seed}"
    command += "".join(f" --only {key}" for key in only)
    command += "" if workers in (None, 1) else f" --workers {workers}"  # same numbers, sooner
    from bellows.sim.report import NOTES, write_report  # matplotlib: only once there is a report

    with output_errors(out):
        write_report(
            outcomes, out, figures=figures, command=command, notes=NOTES, beyond=beyond,
            drawn=drawn,
        )  # fmt: skip
        if missing is not None:  # the report says why its last part is not there
            with out.open("a", encoding="utf-8") as report:
                report.write(_skipped_note(missing))
    click.echo(f"{out}: {len(outcomes)} experiments" + (", beyond the paper" if beyond else ""))
