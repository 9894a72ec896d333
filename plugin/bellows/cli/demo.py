"""``bellows demo``: the live stack on an emulated cluster, checked against the simulator."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bellows.cli.choices import CRDS_ENV, POLICIES
from bellows.cli.data import (
    DATA_ENV,
    crd_files,
    data_folder,
    kueue_crd_files,
    no_data_folder,
    trainer_crd_files,
)
from bellows.cli.params import MAX_SEED, BoundedInt, FiniteFloat, OutputFile, output_errors

if TYPE_CHECKING:  # the live stack, the simulator and rich load when the demo runs
    from rich.console import Console, RenderableType
    from rich.table import Table

    from bellows.jobs import TypeSection
    from bellows.kube.statuses import JobStatus
    from bellows.scaling.gpu_types import TypedCluster
    from bellows.twin.demo import DemoOptions, DemoResult, Progress

MIXED = "mixed"  # Sia's mix of GPU types (bellows.twin.mixed.MIXED)

# The demo runs live, in real time: its ranges keep one run within an afternoon.
MAX_DEMO_GPUS = 1_024
MAX_DEMO_MINUTES = 1_440.0  # a day of cluster time (also the longest Δ)
MAX_SPEEDUP = 3_600.0  # an hour of cluster time per second


def _progress_table(p: Progress) -> Table:
    from rich.table import Table

    table = Table(title=f"bellows demo — cluster minute {p.minute:6.1f}", min_width=60)
    for column in ("submitted", "running", "queued", "done", "rejected", "GPUs in use"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{p.submitted}/{p.total}", str(p.running), str(p.queued), str(p.done),
        str(p.rejected), str(p.gpus_allocated),
    )  # fmt: skip
    return table


JOB_ROWS_MARGIN = 14  # terminal lines the counts, the titles and the borders take


def busiest(jobs: Sequence[JobStatus], rows: int) -> list[JobStatus]:
    """The ``rows`` busiest jobs: running ones by GPUs held, then halted, then waiting (the
    longest waiting first), then the others."""
    order = {"running": 0, "halted": 1, "waiting": 2}
    return sorted(
        jobs,
        key=lambda j: (order.get(str(j.state), 3), -j.gpus, -(j.waited_s or 0.0), j.name),
    )[: max(0, rows)]


def _jobs_table(p: Progress, height: int) -> Table:
    from rich.table import Table

    shown = busiest(p.jobs, height - JOB_ROWS_MARGIN)
    table = Table(title=f"jobs — the {len(shown)} busiest of {len(p.jobs)}", min_width=60)
    for column in ("job", "state", "GPUs", "batch", "restarts", "reason"):
        table.add_column(column, justify="right" if column in ("GPUs", "batch") else "left")
    for job in shown:
        table.add_row(
            job.name, str(job.state), str(job.gpus), "-" if job.batch is None else str(job.batch),
            str(job.restarts), job.reason,
        )  # fmt: skip
    return table


def _view(p: Progress, height: int) -> RenderableType:
    """Today's counts, and beside them the per-job table fitted to the terminal."""
    from rich.console import Group

    return Group(_progress_table(p), _jobs_table(p, height))


def _cell(value: object) -> str:
    """A summary value as the table shows it: numbers to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else f"{value}"


def _result_table(result: DemoResult) -> Table:
    """Both halves side by side, in 80 columns: the names whole (never cut), the tolerances
    ("within" the header) folded onto more lines where they are long (beside Kueue)."""
    from rich.table import Table

    table = Table(title="live run vs simulator, same trace")
    table.add_column("metric", no_wrap=True)
    table.add_column("live", justify="right", no_wrap=True)
    table.add_column("simulator", justify="right", no_wrap=True)
    table.add_column("within", overflow="fold")
    table.add_column("ok", no_wrap=True)
    for b in result.bounds:
        table.add_row(
            b.metric, _cell(b.live), _cell(b.simulated), b.tolerance.removeprefix("within "),
            "yes" if b.ok else "NO",
        )  # fmt: skip
    for key in ("mode", "jobs_total", "rescales", "offered_load"):
        table.add_row(key, _cell(result.live.get(key)), _cell(result.simulated.get(key)), "", "")
    return table


def _mixed(
    ctx: click.Context, *, gpus: int, paper: bool, kueue: bool, wrong_priors: bool,
    learn_placements: bool,
) -> tuple[TypedCluster, int]:  # fmt: skip
    """``--cluster mixed``: Sia's mix and its GPUs (``--gpus`` left out: the mix's), or a
    usage error saying what it refuses."""
    from bellows.scaling.gpu_types import sia_mix
    from bellows.twin.mixed import refusal

    mix = sia_mix()
    if ctx.get_parameter_source("gpus") is click.core.ParameterSource.DEFAULT:
        gpus = mix.total
    why = refusal(
        mix, gpus=gpus, paper=paper, kueue=kueue, wrong_priors=wrong_priors,
        learn_placements=learn_placements,
    )  # fmt: skip
    if why is not None:
        raise click.UsageError(why)
    return mix, gpus


@click.command()
@click.option("--gpus", type=BoundedInt(1, MAX_DEMO_GPUS), default=16, show_default=True,
              help="Cluster GPUs (--cluster mixed: its 64).")  # fmt: skip
@click.option("--cluster", "cluster_name", type=click.Choice([MIXED]), default=None,
              help="mixed: Sia's 64 GPUs of three types (6 x 4 T4, 2 x 8 A100, 3 x 8 RTX "
              "2080 Ti), nodes labelled nvidia.com/gpu.product; every job trains at its "
              "type's speed, with its model's sections per type (from sia/ of the data "
              f"folder, ${DATA_ENV}), and both halves decide by type. Bellows mode only: "
              "not with --paper, --kueue, --wrong-priors or --learn-placements "
              "[default: one type, nodes of the default cluster profile].")  # fmt: skip
@click.option("--minutes", type=FiniteFloat(1, MAX_DEMO_MINUTES), default=60.0,
              show_default=True,
              help="Arrival window of the bursty workload (cluster minutes).")  # fmt: skip
@click.option("--speedup", type=FiniteFloat(1, MAX_SPEEDUP), default=60.0, show_default=True,
              help="Time compression: cluster seconds per real second.")  # fmt: skip
@click.option("--seed", type=BoundedInt(0, MAX_SEED), default=7, show_default=True)
@click.option("--delta-min", type=FiniteFloat(0, MAX_DEMO_MINUTES), default=None,
              help="Minutes between rounds. [default: 2; --paper: 10]")  # fmt: skip
@click.option("--paper", is_flag=True,
              help="Run both halves in the paper's mode (one round per Δ window); "
              "default: Bellows mode.")  # fmt: skip
@click.option("--policy", type=click.Choice(POLICIES), default="elastic",
              show_default=True)  # fmt: skip
@click.option("--crds", type=click.Path(path_type=Path, file_okay=False), default=None,
              help=f"Folder of the PyTorchJob and MPIJob CRDs [default: ${CRDS_ENV}, else "
                   f"crds/ of ${DATA_ENV} or of shared/data beside the checkout, else the "
                   "pinned upstream CRDs, downloaded once into ~/.cache/bellows].")  # fmt: skip
@click.option("--json-out", type=OutputFile(), default=None,
              help="Also write both summaries and the bounds as JSON.")  # fmt: skip
@click.option("--wrong-priors", is_flag=True,
              help="Jobs train at another speed than annotated and report progress; the "
              "simulator runs the same truth and learns as the controller does, and the "
              "oracle (deciding on the true profiles) is printed beside "
              "(docs/simulator.md).")  # fmt: skip
@click.option("--no-learning", is_flag=True,
              help="The controller does not learn from the jobs' reports (with --wrong-priors: "
              "it keeps the wrong priors).")  # fmt: skip
@click.option("--learn-placements", is_flag=True,
              help="The controller also learns each class of jobs' step times from their "
              "reports (controller.progress.learnPlacements), and with --wrong-priors the "
              "simulator half does too (docs/autoscaler.md).")  # fmt: skip
@click.option("--efficiency/--no-efficiency", default=True, show_default=True,
              help="Jobs train at goodput (their model's statistical efficiency), name their "
              "model in their profile and report their gradient noise through the endpoint "
              "the controller writes into their pods; the simulator charges the same. "
              "--no-efficiency: every job progresses in plain samples, decided by "
              "throughput.")  # fmt: skip
@click.option("--kueue", is_flag=True,
              help="Run the emulated Kueue too: every job in a LocalQueue whose ClusterQueue "
              "holds the GPUs as quota, the controller cooperating (docs/kube.md).")  # fmt: skip
@click.option("--no-live", is_flag=True,
              help="No live view: the stack's logs, plain, on standard error (what it "
              "decided and why; the emulated API server's requests only with "
              "--verbose).")  # fmt: skip
@click.option("--verbose", is_flag=True,
              help="With --no-live: debug lines too, the emulated API server's access lines "
              "among them.")  # fmt: skip
@click.option("--kinds", default="pytorchjob,mpijob", show_default=True,
              callback=lambda _c, _p, v: _kinds(v),
              help="The job kinds the trace's jobs take in turn, comma-separated: pytorchjob, "
              "mpijob, trainjob (Kubeflow Trainer v2, on the emulated Trainer).")  # fmt: skip
@click.option("--placement", type=click.Choice(["nodes", "pack", "none"]), default="nodes",
              show_default=True,
              help="What the controller asks of the scheduler for each job it sizes "
              "(controller.placement): nodes (required on the nodes its node view picks, "
              "as the simulator places), pack (its pods on the fewest nodes, preferred), or "
              "nothing (kube-scheduler's default scoring spreads them). The live run "
              "reports spread_job_time_share.")  # fmt: skip
@click.option("--kubeconfig", type=OutputFile(), default=None,
              help="Write a kubeconfig for the emulated cluster here, for kubectl and "
              "bellows status while the demo runs [default: one in a temporary folder, "
              "removed at the end]; the export KUBECONFIG= line is printed first.")  # fmt: skip
@click.pass_context
def demo(
    ctx: click.Context,
    *,
    gpus: int, cluster_name: str | None, minutes: float, speedup: float, seed: int,
    delta_min: float | None,
    paper: bool, policy: str, crds: Path | None, json_out: Path | None,
    wrong_priors: bool, no_learning: bool, learn_placements: bool, efficiency: bool,
    kueue: bool, no_live: bool,
    verbose: bool, kinds: tuple[str, ...], placement: str, kubeconfig: Path | None,
) -> None:  # fmt: skip
    """Run nats-server, an emulated Kubeflow cluster, the bridge and the controller on a bursty
    workload, then the simulator on the same trace; exit 1 if they disagree beyond the paper's
    bounds (jobs completed 5 %, SJS efficiency 5 %, drop ratio 4 points)."""
    if verbose and not no_live:
        raise click.UsageError("--verbose needs --no-live: the live view shows no log lines")
    typed: TypedCluster | None = None
    sections: dict[str, tuple[TypeSection, ...]] = {}
    if cluster_name == MIXED:  # checked first: before any CRD is looked for
        typed, gpus = _mixed(
            ctx, gpus=gpus, paper=paper, kueue=kueue, wrong_priors=wrong_priors,
            learn_placements=learn_placements,
        )  # fmt: skip
        sections = _sections(typed)
    import shlex
    import tempfile

    from rich.console import Console

    from bellows.autoscaler import Policy
    from bellows.cli.simulate import fit_note
    from bellows.kube.placement import Placement
    from bellows.scaling import default_cluster
    from bellows.service.config import LoggingSettings, LogLevel
    from bellows.service.logging import configure_logging
    from bellows.twin.demo import DemoOptions, workload

    # without --kubeconfig, one in a temporary folder, removed when the demo ends
    temporary = None if kubeconfig is not None else tempfile.TemporaryDirectory(prefix="bellows-")
    if temporary is not None:
        kubeconfig = Path(temporary.name) / "kubeconfig"

    files = crd_files(crds)
    kueue_files = kueue_crd_files(files) if kueue else []
    trainer_files = trainer_crd_files(files) if "TrainJob" in kinds else []
    configure_logging(LoggingSettings(level=LogLevel.WARNING), stream=sys.stderr)
    options = DemoOptions(
        crds=files, gpus=gpus, minutes=minutes, speedup=speedup, seed=seed,
        delta_min=delta_min, policy=Policy(policy), paper=paper, wrong_priors=wrong_priors,
        learn=not no_learning, learn_placements=learn_placements and not no_learning,
        efficiency=efficiency, kueue_crds=kueue_files, kinds=kinds,
        trainer_crds=trainer_files, placement=Placement(placement), kubeconfig=kubeconfig,
        typed=typed, type_sections=sections,
    )  # fmt: skip
    # the count both halves clamp, and the jobs the live view counts from its first frame
    total = len(fit_note(workload(options, default_cluster()), gpus))
    console = Console()
    # before the live view: another terminal can then watch the twin with kubectl (the
    # file is written as soon as the emulated cluster listens)
    print(f"export KUBECONFIG={shlex.quote(str(kubeconfig))}", flush=True)
    try:
        result = _run(options, console, no_live=no_live, verbose=verbose, total=total)
    finally:
        if temporary is not None:
            temporary.cleanup()
    _report(result, console, placement=placement, wrong_priors=wrong_priors,
            no_learning=no_learning, json_out=json_out)  # fmt: skip


def _sections(typed: TypedCluster) -> dict[str, tuple[TypeSection, ...]]:
    """Each model's sections on ``typed``'s types, fitted to Sia's measurements in the data
    folder (as ``bellows simulate --cluster sia-mix``), or a usage error without them."""
    from bellows.sim.workloads.gpu_types import sia_sections

    data = data_folder()
    if data is None or not (data / "sia" / "profiles").is_dir():
        where = no_data_folder(f"${DATA_ENV}") if data is None else f"{data} has no sia/profiles/"
        raise click.UsageError(
            f"--cluster {MIXED} prices every job on each type from Sia's measurements "
            f"(sia/profiles/ of the data folder): {where}"
        )
    return sia_sections(data, typed)


# JAX's line on a machine without TPUs ("Unable to initialize backend 'tpu'"), at info
QUIET_LOGGERS = ("jax._src.xla_bridge",)


def _run(
    options: DemoOptions, console: Console, *, no_live: bool, verbose: bool = False,
    total: int = 0,
) -> DemoResult:  # fmt: skip
    """The demo's run, with the live view on ``console`` or plain logs (``no_live``: for a
    person to read, debug lines too with ``verbose``); ``total``: the trace's jobs."""
    import asyncio

    from rich.live import Live

    from bellows.service.config import LogFormat, LoggingSettings, LogLevel
    from bellows.service.logging import configure_logging
    from bellows.twin.demo import Progress, run_demo

    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    if no_live:  # plain logs on standard error, no live view
        level = LogLevel.DEBUG if verbose else LogLevel.INFO
        configure_logging(LoggingSettings(format=LogFormat.CONSOLE, level=level), stream=sys.stderr)
        result = asyncio.run(run_demo(options))
    else:
        first = Progress(total=total)  # "submitted 0/N" from the first frame, not 0/0
        with Live(_view(first, console.height), console=console, refresh_per_second=4) as live:
            result = asyncio.run(
                run_demo(options, on_progress=lambda p: live.update(_view(p, console.height)))
            )
    return result


def _report(
    result: DemoResult, console: Console, *, placement: str, wrong_priors: bool,
    no_learning: bool, json_out: Path | None,
) -> None:  # fmt: skip
    """The final table and lines; exit 1 when the halves disagree beyond the bounds."""
    console.print(_result_table(result))
    for line in result.mismatches:
        console.print(f"  {line}")
    console.print(f"{result.jobs} jobs, {result.wall_s:.0f} s wall")
    console.print(
        f"placement {placement}: {result.live.get('spread_job_time_share', 0.0):.1%} of the "
        "job-time on more nodes than the jobs' GPUs need (spread_job_time_share)"
    )
    if wrong_priors:
        how = "kept the wrong priors" if no_learning else "learned online"
        console.print(
            f"wrong priors, the controller {how}: average JCT "
            f"{result.live.get('avg_jct_min')} min live, "
            f"{result.simulated.get('avg_jct_min')} min simulated ({how} too), "
            f"{result.simulated.get('oracle_avg_jct_min')} min deciding on the true profiles"
        )
    if result.live.get("efficiency_charged"):
        console.print(
            f"at goodput: {result.live.get('jobs_decided_by_goodput', 0)} of {result.jobs} jobs "
            "decided by goodput live (jobs_decided_by_goodput)"
        )
    if json_out is not None:
        payload = {
            "live": result.live,
            "simulated": result.simulated,
            "bounds": [b.__dict__ for b in result.bounds],
            "ok": result.ok,
        }
        with output_errors(json_out):
            json_out.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    if not result.ok:
        console.print("[red]live run and simulator disagree beyond the bounds[/red]")
        sys.exit(1)


_KIND_NAMES = {"pytorchjob": "PyTorchJob", "mpijob": "MPIJob", "trainjob": "TrainJob"}


def _kinds(text: str) -> tuple[str, ...]:
    """``--kinds``: comma-separated kind names, each known, none twice."""
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in _KIND_NAMES]
    if not names or unknown or len(set(names)) != len(names):
        raise click.BadParameter(
            f"{text!r}: give one or more of {', '.join(_KIND_NAMES)}, comma-separated, each once",
            param_hint="--kinds",
        )
    return tuple(_KIND_NAMES[n] for n in names)
