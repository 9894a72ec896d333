"""``bellows workload``: generate the paper's workloads, import real traces, check a trace.

The generators and NumPy are imported when a sub-command runs, not at ``--help`` (see
:mod:`bellows.cli.choices`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bellows.cli.choices import (
    BASELINE_BATCHES,
    CATEGORY_COUNT,
    DEFAULT_LOAD_HIGH,
    MAX_LOAD_HIGH,
    MAX_WORKLOAD_MINUTES,
    PATTERNS,
)
from bellows.cli.params import (
    MAX_SEED,
    BoundedInt,
    ClusterFile,
    FiniteFloat,
    IntList,
    OutputFile,
    output_errors,
)
from bellows.jobs import MAX_GPUS, SpecError

if TYPE_CHECKING:
    from bellows.scaling import ClusterProfile
    from bellows.sim.workloads.traces import TraceJob

__all__ = ["workload"]

_CLUSTER_HELP = "Cluster profile JSON (default: the fitted Pollux T4 cluster)."


def _cluster(profile: ClusterProfile | None) -> ClusterProfile:
    from bellows.scaling import default_cluster  # lazy, see the docstring

    return default_cluster() if profile is None else profile


@click.group("workload")
def workload() -> None:
    """Job arrival traces (JSON Lines): generate, import, validate."""


@workload.command("generate")
@click.option("--pattern", type=click.Choice(PATTERNS), required=True)
@click.option("--minutes", type=FiniteFloat(0, MAX_WORKLOAD_MINUTES, open_min=True), required=True,
              help="Arrival window (a workload of at most 1,000,000 jobs).")  # fmt: skip
@click.option(
    "--categories", type=IntList(1, CATEGORY_COUNT, max_items=CATEGORY_COUNT),
    default="1,2,3,4", show_default=True, help="e.g. 1 or 1,2,3,4",
)  # fmt: skip
@click.option("--gpus", type=BoundedInt(1, MAX_GPUS), required=True, help="Cluster size.")
@click.option("--seed", type=BoundedInt(0, MAX_SEED), required=True)
@click.option(
    "--baseline-batch", type=click.Choice(BASELINE_BATCHES), default="random",
    show_default=True, help="Batch the fixed-batch baseline runs each job with.",
)  # fmt: skip
@click.option(
    "--period-min", type=FiniteFloat(0, MAX_WORKLOAD_MINUTES, open_min=True), default=60.0
)
@click.option(
    "--load-high", type=FiniteFloat(0, MAX_LOAD_HIGH, open_min=True), default=DEFAULT_LOAD_HIGH,
    show_default=True, help="Offered load of the high rate (low = 1/4 of it).",
)  # fmt: skip
@click.option("--cluster", type=ClusterFile(), help=_CLUSTER_HELP)
@click.option("--out", type=OutputFile(), required=True)
def generate_cmd(
    *,
    pattern: str,
    minutes: float,
    categories: list[int],
    gpus: int,
    seed: int,
    baseline_batch: str,
    period_min: float,
    load_high: float,
    cluster: ClusterProfile | None,
    out: Path,
) -> None:
    """Poisson arrivals of the paper's job categories, written as JSON Lines to OUT."""
    import numpy as np  # lazy, see the docstring

    from bellows.sim.workloads.generating import (
        BatchChoice,
        Pattern,
        WorkloadSpec,
        arrival_rates,
        generate,
        literal_load_high,
    )
    from bellows.sim.workloads.traces import write_trace

    try:
        spec = WorkloadSpec(
            Pattern(pattern), minutes, tuple(categories), gpus,
            baseline_batch=BatchChoice(baseline_batch), period_min=period_min,
            load_high=load_high,
        )  # fmt: skip
        jobs = generate(spec, np.random.default_rng(seed), cluster=_cluster(cluster))
    except SpecError as error:
        raise click.ClickException(str(error)) from None
    with output_errors(out):
        write_trace(jobs, out)
    high, low = arrival_rates(spec)
    click.echo(
        f"{out}: {len(jobs)} jobs over {minutes:g} min; high {high * 3600:.1f}/h, "
        f"low {low * 3600:.1f}/h; offered load at high {load_high:g} "
        f"(paper's literal k_max*lambda: {literal_load_high(spec):.2f}); "
        f"realised {_offered(jobs, gpus, minutes * 60.0, cluster):.2f}"
    )


def _offered(
    jobs: tuple[TraceJob, ...], gpus: int, span_s: float, cluster: ClusterProfile | None
) -> float:
    from bellows.scaling import single_gpu_throughput

    profile = _cluster(cluster)
    asked = sum(j.spec.work / single_gpu_throughput(j.spec, profile) for j in jobs)
    return asked / (gpus * span_s)


@workload.command("import")
@click.argument("kind", type=click.Choice(["itp", "pollux"]))
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--cluster", type=ClusterFile(), help=_CLUSTER_HELP)
@click.option("--out", type=OutputFile(), required=True)
@click.option(
    "--work",
    type=click.Choice(["epochs", "validation"]),
    default="epochs",
    show_default=True,
    help="Pollux only: each job's work as epochs x dataset size, or as the Pollux artifact's "
    "simulator counts it, from its validation curves (issue 36; docs/simulator.md).",
)
@click.option(
    "--batches",
    type=click.Choice(["measured", "accumulate"]),
    default="measured",
    show_default=True,
    help="Pollux only: batches within the measured per-GPU limits, or the Pollux artifact's "
    "(up to the largest validation batch by gradient accumulation; issue 36).",
)
def import_cmd(
    *,
    kind: str,
    source: Path,
    cluster: ClusterProfile | None,
    out: Path,
    work: str,
    batches: str,
) -> None:
    """Convert a real trace (ITP cluster CSV or Pollux workload CSV) to JSON Lines.

    The mapping of models to measured profiles and of durations to work is documented in
    docs/simulator.md.
    """
    from bellows.sim.workloads.importing import (
        gpus_for_load,
        import_itp,
        import_pollux,
    )
    from bellows.sim.workloads.traces import write_trace

    profile = _cluster(cluster)
    try:
        if kind == "itp" and (work, batches) != ("epochs", "measured"):
            raise click.UsageError("--work and --batches are for Pollux workloads only")
        jobs = (
            import_itp(source, cluster=profile) if kind == "itp"
            else import_pollux(source, work=work, batches=batches)
        )  # fmt: skip
    except SpecError as error:
        raise click.ClickException(str(error)) from None
    with output_errors(out):
        write_trace(jobs, out)
    click.echo(
        f"{out}: {len(jobs)} jobs; a cluster of "
        f"{gpus_for_load(jobs, load=1.0, cluster=profile)} GPUs sees offered load 1"
    )


@workload.command("validate")
@click.argument("trace", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def validate_cmd(trace: Path) -> None:
    """Check TRACE against the schema and the job rules; report the first bad line."""
    from bellows.sim.workloads.traces import read_trace

    try:
        jobs = read_trace(trace)
    except SpecError as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"{trace}: {len(jobs)} jobs, valid")


@workload.command("schema")
def schema_cmd() -> None:
    """Print the JSON Schema of one trace line."""
    from bellows.sim.workloads.traces import schema

    click.echo(json.dumps(schema(), indent=2))
