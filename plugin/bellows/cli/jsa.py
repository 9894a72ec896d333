"""``bellows jsa``: fit a job profile from measured rows and predict step times with it."""

from __future__ import annotations

import csv
from pathlib import Path

import click

from bellows.cli.params import BoundedInt, ClusterFile, JobProfileFile, OutputFile, output_errors
from bellows.jobs import MAX_WEIGHTS, SpecError
from bellows.scaling import (
    ClusterProfile,
    JobProfile,
    default_cluster,
    fit_job_profile,
    load_measurements,
    predict_step_time,
    save_job_profile,
)

__all__ = ["jsa"]

_CLUSTER_HELP = "Cluster profile JSON (default: the fitted Pollux T4 cluster, see docs/jsa.md)."


def _cluster(profile: ClusterProfile | None) -> ClusterProfile:
    return default_cluster() if profile is None else profile


@click.group("jsa")
def jsa() -> None:
    """Job Scalability Analyzer: fit job profiles, predict iteration times."""


@jsa.command("fit")
@click.argument("train", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--weights", type=BoundedInt(1, MAX_WEIGHTS), required=True, help="Model parameters.")
@click.option("--out", type=OutputFile(), required=True)
@click.option("--cluster", type=ClusterFile(), help=_CLUSTER_HELP)
@click.option("--source", default=None, help="Provenance text stored in the profile.")
def fit(
    train: Path, weights: int, out: Path, cluster: ClusterProfile | None, source: str | None
) -> None:
    """Fit PROFILE.json from TRAIN.csv (placement,local_bsz,step_time,sync_time rows).

    Single-GPU rows give t_proc(m); multi-GPU rows, if any, fit commWeights.
    """
    try:
        table = load_measurements(train, layout="placements")
        profile = fit_job_profile(
            table.rows,
            weights=weights,
            cluster=_cluster(cluster),
            source=source if source is not None else f"bellows jsa fit {train.name}",
        )
    except SpecError as error:
        raise click.ClickException(str(error)) from None
    with output_errors(out):
        save_job_profile(out, profile)
    comm = "" if profile.comm_weights is None else f", commWeights {profile.comm_weights}"
    click.echo(
        f"{out}: {len(profile.step.local_batches)} step points from "
        f"{sum(r.gpus == 1 for r in table.rows)} single-GPU rows{comm}"
    )


@jsa.command("predict")
@click.argument("profile", type=JobProfileFile())
@click.argument("rows", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=OutputFile(), required=True)
@click.option("--cluster", type=ClusterFile(), help=_CLUSTER_HELP)
def predict(profile: JobProfile, rows: Path, out: Path, cluster: ClusterProfile | None) -> None:
    """Write PRED.csv: each row of ROWS.csv plus its predicted_step_time.

    ROWS.csv is in the placements.csv or the scalability.csv layout (the header decides).
    Prints the mean absolute percentage error against the rows' measured step_time.
    """
    try:
        table = load_measurements(rows)
    except SpecError as error:
        raise click.ClickException(str(error)) from None
    model = _cluster(cluster)
    predicted = [predict_step_time(profile, model, row) for row in table.rows]
    with output_errors(out), out.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow([*table.header, "predicted_step_time"])
        for cells, seconds in zip(table.cells, predicted, strict=True):
            writer.writerow([*cells, f"{seconds:.6g}"])
    if table.rows:
        pairs = zip(predicted, table.rows, strict=True)
        errors = [abs(p - r.step_time) / r.step_time for p, r in pairs]
        click.echo(
            f"{out}: {len(predicted)} rows ({table.layout} layout), "
            f"MAPE {100 * sum(errors) / len(errors):.1f} %"
        )
    else:
        click.echo(f"{out}: 0 rows")
