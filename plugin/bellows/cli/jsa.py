"""``bellows jsa``: fit a job profile from measured rows and predict step times with it.

:mod:`bellows.scaling` (NumPy) is imported when a sub-command runs, not at ``--help``.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bellows.cli.params import (
    BoundedInt,
    ClusterFile,
    JobProfileFile,
    OutputFile,
    kube_options,
    output_errors,
)
from bellows.jobs import MAX_WEIGHTS, SpecError

if TYPE_CHECKING:
    from bellows.scaling import ClusterProfile, EfficiencyProfile, JobProfile

__all__ = ["jsa"]

_CLUSTER_HELP = "Cluster profile JSON (default: the fitted Pollux T4 cluster, see docs/jsa.md)."


def _cluster(profile: ClusterProfile | None) -> ClusterProfile:
    from bellows.scaling import default_cluster  # lazy, see the docstring

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
@click.option(
    "--placements",
    "carry",
    is_flag=True,
    help="Carry the measured rows packed on the fewest nodes as the profile's placements: "
    "the controller then decides the job's placements by them (docs/jsa.md).",
)
@click.option(
    "--scalability",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --placements: a num_nodes,num_replicas,local_bsz,step_time,sync_time CSV of "
    "larger, spread placements, carried beyond the largest packed count.",
)
def fit(
    *,
    train: Path,
    weights: int,
    out: Path,
    cluster: ClusterProfile | None,
    source: str | None,
    carry: bool,
    scalability: Path | None,
) -> None:
    """Fit PROFILE.json from TRAIN.csv (placement,local_bsz,step_time,sync_time rows).

    Single-GPU rows give t_proc(m); multi-GPU rows, if any, fit commWeights.
    """
    from dataclasses import replace

    from bellows.scaling import fit_job_profile, load_measurements, save_job_profile
    from bellows.scaling.placement_steps import measured_placements

    if scalability is not None and not carry:
        raise click.UsageError("--scalability goes with --placements")
    the_cluster = _cluster(cluster)
    try:
        table = load_measurements(train, layout="placements")
        profile = fit_job_profile(
            table.rows,
            weights=weights,
            cluster=the_cluster,
            source=source if source is not None else f"bellows jsa fit {train.name}",
        )
        if carry:
            spread = () if scalability is None else load_measurements(
                scalability, layout="scalability"
            ).rows  # fmt: skip
            placements = measured_placements(table.rows, the_cluster.gpus_per_node, spread)
            profile = replace(profile, placements=placements)
    except SpecError as error:
        raise click.ClickException(str(error)) from None
    with output_errors(out):
        save_job_profile(out, profile)
    comm = "" if profile.comm_weights is None else f", commWeights {profile.comm_weights}"
    carried = f", {len(profile.placements)} placements" if carry else ""
    click.echo(
        f"{out}: {len(profile.step.local_batches)} step points from "
        f"{sum(r.gpus == 1 for r in table.rows)} single-GPU rows{comm}{carried}"
    )


def _efficiency(model: str | None, validation: Path | None) -> EfficiencyProfile | None:
    from bellows.scaling import MODEL_EFFICIENCY, fit_efficiency, load_validation_runs

    if model is not None and validation is not None:
        raise click.UsageError("give --efficiency or --validation, not both")
    if model is not None:
        return MODEL_EFFICIENCY[model]
    if validation is None:
        return None
    try:
        return fit_efficiency(load_validation_runs(validation), source=str(validation))
    except (SpecError, OSError) as error:
        raise click.ClickException(f"--validation {validation}: {error}") from None


_MODELS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")  # MODEL_EFFICIENCY


@jsa.command("predict")
@click.argument("profile", type=JobProfileFile())
@click.argument("rows", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=OutputFile(), required=True)
@click.option("--cluster", type=ClusterFile(), help=_CLUSTER_HELP)
@click.option(
    "--efficiency",
    "efficiency_model",
    type=click.Choice(_MODELS),
    default=None,
    help="Charge statistical efficiency with this Pollux model's embedded fit (docs/jsa.md).",
)
@click.option(
    "--validation",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Fit the efficiency to this folder's validation-<batch>.csv runs instead.",
)
@click.option(
    "--progress",
    type=click.FloatRange(0.0, 1e15),
    default=0.0,
    show_default=True,
    help="Training progress (reference samples) at which the efficiency is taken.",
)
def predict(
    profile: JobProfile,
    rows: Path,
    *,
    out: Path,
    cluster: ClusterProfile | None,
    efficiency_model: str | None,
    validation: Path | None,
    progress: float,
) -> None:
    """Write PRED.csv: each row of ROWS.csv plus its predicted_step_time.

    ROWS.csv is in the placements.csv or the scalability.csv layout (the header decides).
    Prints the mean absolute percentage error against the rows' measured step_time. With
    --efficiency or --validation, each row also gets its global batch's predicted
    throughput (samples/s), efficiency E(b) at --progress and goodput (reference samples/s).
    """
    from bellows.scaling import load_measurements, predict_step_time

    efficiency = _efficiency(efficiency_model, validation)
    try:
        table = load_measurements(rows)
    except SpecError as error:
        raise click.ClickException(str(error)) from None
    model = _cluster(cluster)
    predicted = [predict_step_time(profile, model, row) for row in table.rows]
    extra = ["predicted_throughput", "efficiency", "goodput"] if efficiency else []
    with output_errors(out), out.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow([*table.header, "predicted_step_time", *extra])
        for cells, seconds, row in zip(table.cells, predicted, table.rows, strict=True):
            more: list[str] = []
            if efficiency is not None:
                batch = row.gpus * row.local_batch
                rate = batch / seconds
                gain = float(efficiency.efficiency(batch, progress))
                more = [f"{rate:.6g}", f"{gain:.6g}", f"{rate * gain:.6g}"]
            writer.writerow([*cells, f"{seconds:.6g}", *more])
    if table.rows:
        pairs = zip(predicted, table.rows, strict=True)
        errors = [abs(p - r.step_time) / r.step_time for p, r in pairs]
        click.echo(
            f"{out}: {len(predicted)} rows ({table.layout} layout), "
            f"MAPE {100 * sum(errors) / len(errors):.1f} %"
        )
    else:
        click.echo(f"{out}: 0 rows")


@jsa.command("current")
@click.argument("job")
@kube_options
def current(job: str, kubeconfig: Path | None, context: str | None) -> None:
    """Print JOB's current fit: the profile the controller refitted to its progress reports.

    JOB is <kind>/<namespace>/<name> (pytorchjob/team-a/resnet50). The controller keeps the
    fit in the job's bellows.io/fit annotation (JobProfile JSON, which bellows.io/profile
    accepts as it is); this reads it from the cluster.
    """
    import asyncio  # lazy, see the docstring
    import json

    from bellows.kube import KubeApi
    from bellows.kube.kubeconfig import KubeconfigError
    from bellows.scaling import job_profile_to_json
    from bellows.service.config import KubernetesSettings
    from bellows.service.progress_loop import read_fit
    from bellows.service.runner import kube_api_client

    async def read() -> JobProfile | None:
        settings = KubernetesSettings(kubeconfig=kubeconfig, context=context)
        client = kube_api_client(settings)
        try:
            return await read_fit(KubeApi(client), job)
        finally:
            client.close()

    try:
        profile = asyncio.run(read())
    except (SpecError, KubeconfigError) as error:
        raise click.ClickException(str(error)) from None
    if profile is None:
        raise click.ClickException(
            f"{job} has no fit yet: the controller writes bellows.io/fit once the job's "
            "progress reports move it off its prior (controller.learnProgress)"
        )
    click.echo(f"{job}: {profile.source}")
    click.echo(json.dumps(job_profile_to_json(profile), indent=2))
