"""``bellows simulate``: run a trace through the autoscaler core in the simulator.

The simulator, its plots and the optimizer are imported when the command runs, not when
``bellows simulate --help`` builds the options (see :mod:`bellows.cli.choices`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bellows.cli.choices import POLICIES, REFERENCES
from bellows.cli.params import (
    MAX_DELTA_MIN,
    MAX_HORIZON_MIN,
    MAX_HYSTERESIS,
    BoundedInt,
    ClusterFile,
    FiniteFloat,
    OutputDir,
    output_errors,
)
from bellows.jobs import MAX_GPUS, MAX_MIN_RUNTIME_S, MAX_RESTART_S, SpecError

if TYPE_CHECKING:
    from bellows.scaling import ClusterProfile
    from bellows.sim import SimResult
    from bellows.sim.workloads.traces import TraceJob

__all__ = ["describe_run", "fit_note", "simulate"]

MIXES = ("sia-mix",)  # built-in clusters of several GPU types (bellows.scaling.gpu_types)


class _ClusterOrMix(click.ParamType[Any]):
    """A cluster profile JSON file, or the name of a built-in mixed cluster."""

    name = "FILE|sia-mix"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value in MIXES:
            return value
        return ClusterFile().convert(value, param, ctx)


def _cluster(profile: ClusterProfile | None) -> ClusterProfile:
    from bellows.scaling import default_cluster  # lazy, see the docstring

    return default_cluster() if profile is None else profile


def _typed(
    cluster: ClusterProfile | str | None,
    jobs: tuple[TraceJob, ...],
    gpus: int,
    *,
    one_pool: bool,
    refused: bool,
    policy: str,
    truth: dict[str, Any],
) -> tuple[dict[str, Any], tuple[TraceJob, ...]]:
    """``run``'s cluster arguments and ``truth`` (:func:`_measured_truth`'s), and the jobs
    with their sections on a mixed cluster (``truth`` given: each type's measured step times
    as the truth, Sia's measurements, in place of the T4's)."""
    if not isinstance(cluster, str):
        if one_pool or policy == "gavel":
            what = "--one-pool" if one_pool else "--policy gavel"
            raise click.UsageError(f"{what} needs --cluster sia-mix (several GPU types)")
        return {"cluster": _cluster(cluster), **truth}, jobs
    if policy == "tiresias":
        raise click.UsageError(f"--policy tiresias runs on one GPU type, not --cluster {cluster}")
    if one_pool and policy in ("pollux", "gavel"):
        raise click.UsageError(
            f"--one-pool is Bellows mode's type-blind comparison: --policy {policy} has its "
            "own view of the types; drop --one-pool"
        )
    from bellows.cli.data import data_folder, no_data_folder
    from bellows.scaling.gpu_types import sia_mix
    from bellows.sim.workloads.gpu_types import sia_sections, with_sections

    mix = sia_mix()
    if gpus != mix.total:
        raise click.UsageError(f"--gpus {gpus}: --cluster {cluster} has {mix.total} GPUs")
    if refused:
        raise click.UsageError(f"--cluster {cluster} takes no --wrong-priors, --decide-measured")
    data = data_folder()
    if data is None:
        raise click.UsageError(no_data_folder("$BELLOWS_DATA"))
    typed = with_sections(jobs, sia_sections(data, mix))
    out: dict[str, Any] = {"cluster": mix.types[0].cluster, "typed": mix, "blind": one_pool}
    if truth:
        out["efficiency_truth"] = truth["efficiency_truth"]
        from bellows.sim.measured_steps import TypedMeasuredSteps

        out["type_steps"] = TypedMeasuredSteps.of_data(data)
    return out, typed


def fit_note(trace: tuple[TraceJob, ...], gpus: int, *, source: str = "") -> tuple[TraceJob, ...]:
    """``trace`` with every ``k_max`` clamped to ``gpus`` (as the live controller does), and
    one warning line on standard error saying how many jobs that changed."""
    from bellows.sim.workloads.traces import fit_trace

    fitted, clamped = fit_trace(trace, gpus, source=source)
    if clamped:
        click.echo(
            f"warning: {clamped} of {len(trace)} jobs ask for more GPUs (k_max) than the "
            f"cluster's {gpus}; each is given at most {gpus}",
            err=True,
        )
    return fitted


def describe_run(result: SimResult, summary: Mapping[str, Any] | None = None) -> str:
    """The line every run prints: offered load, speed, where the time went (``summary``:
    the run's, if already made)."""
    s = summary if summary is not None else result.summary()
    st = result.stats
    share = (st.core_s / st.wall_s) if st.wall_s > 0 else 0.0
    load = "n/a" if s["offered_load"] is None else f"{s['offered_load']:.2f}"
    spread = s.get("spread_job_time_share")  # placed on nodes: job-time on more than needed
    on_nodes = "" if spread is None else f", job-time on more nodes {spread:.1%}"
    return (
        f"{s['mode']} mode | offered load {load} | {s['jobs_completed']}/{s['jobs_total']} "
        f"completed, {s['jobs_dropped']} dropped, avg JCT {_min(s['avg_jct_min'])} "
        f"(p99 {_min(s['p99_jct_min'])}), idle beside waiting "
        f"{s['idle_while_waiting_share']:.1%}, {s['rescales_per_job']:.2f} rescales/job, "
        f"SJS efficiency {_num(s['sjs_efficiency'], '.3f')}{on_nodes} | "
        f"{st.events} events, {st.rounds} rounds in "
        f"{st.wall_s:.2f} s ({st.events_per_s:,.0f} events/s), optimizer/core share "
        f"{share:.0%}, arrivals (TSF rows) {st.arrive_s / max(st.wall_s, 1e-9):.0%}"
    )


def _num(value: float | None, form: str) -> str:
    """``value`` in ``form``, ``n/a`` when there is none (no job finished)."""
    return "n/a" if value is None else format(value, form)


def _min(value: float | None) -> str:
    """Minutes with their unit, to a tenth: ``22.3 min``."""
    return _num(value, ".1f") + ("" if value is None else " min")


def _refuse_for_reference(policy: str, given: Mapping[str, object]) -> str | None:
    """The reference ``--policy pollux`` or ``tiresias`` names, if any; it takes only the
    options it models (``given``: the others, ``None`` where not given). Its settings (the
    elastic core's, on nodes, every minute by default) are a GRID's for the same policy:
    :func:`bellows.sim.grids.settings_config` and :func:`~bellows.sim.grids.simulator_switches`."""
    if policy not in REFERENCES:
        return None
    extra = [name for name, value in given.items() if value is not None]
    if extra:
        raise click.UsageError(
            f"--policy {policy} does not take {', '.join(extra)}: the {policy.title()} "
            "reference has a queue, rounds every --delta-min, per-node placement and "
            "--restart-cost-s, --charge-start, --efficiency and --cluster; nothing else"
        )
    return policy


def _refuse_unused(
    *, no_learning: bool, wrong_priors: bool, paper: bool, objective: str | None
) -> None:
    """Options that would change nothing documented, refused: --no-learning without wrong
    priors to keep; an objective paper mode does not take (it maximises the sum of speedups)."""
    if no_learning and not wrong_priors:
        raise click.UsageError("--no-learning needs --wrong-priors")
    if paper and objective not in (None, "speedup"):
        raise click.UsageError(
            f"--objective {objective} is for Bellows mode: --paper always maximises the sum "
            "of speedups (docs/autoscaler.md); drop --objective or --paper"
        )


def _measured_truth(
    placement: str | None, measured: bool, *, decide: bool, policy: str
) -> dict[str, Any]:
    """``run``'s keywords for ``--measured``: the measured step times and efficiency of the
    models in the data folder's ``pollux/profiles`` (none without it); with
    ``--decide-measured`` the core decides with those step times too."""
    if decide and not measured:
        raise click.UsageError("--decide-measured decides with the step times --measured "
                               "charges: add --measured")  # fmt: skip
    if decide and policy in REFERENCES:
        raise click.UsageError(f"--decide-measured is for the core: --policy {policy} "
                               "decides with its own rows; drop one of the two")  # fmt: skip
    if not measured:
        return {}
    from bellows.cli.data import data_folder, no_data_folder
    from bellows.sim.measured import measured_efficiency
    from bellows.sim.measured_steps import MeasuredSteps
    from bellows.sim.workloads.importing import POLLUX_EPOCHS

    if placement == "fewest":
        raise click.UsageError("--measured charges each placement its measured step time: "
                               "it places jobs on nodes, drop --placement fewest")  # fmt: skip
    data = data_folder()
    if data is None:
        raise click.ClickException(no_data_folder("$BELLOWS_DATA"))
    profiles = data / "pollux" / "profiles"
    try:
        truth = measured_efficiency(profiles, POLLUX_EPOCHS)
    except (OSError, SpecError) as error:
        raise click.ClickException(f"cannot read the measurements in {profiles}: {error}") from None
    if not truth:
        raise click.ClickException(f"no measured model in {profiles} (pollux/profiles/<model>)")
    return {"efficiency_truth": truth, "step_seconds": MeasuredSteps(profiles)} | (
        {"decide_measured": True} if decide else {}
    )


@click.command("simulate")
@click.argument("trace", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--gpus", type=BoundedInt(1, MAX_GPUS), required=True, help="Cluster size.")
@click.option(
    "--policy",
    type=click.Choice([*POLICIES, *REFERENCES]),
    default="elastic",
    show_default=True,
    help="elastic: the best batch per GPU count; baseline: the owner's batch; pollux: the "
    "Pollux reference (our reimplementation of Pollux's published policy, OSDI'21, to "
    "compare with: every --delta-min, default 1, per-node placement; docs/simulator.md); "
    "tiresias: the Tiresias reference (rigid at the trace's GPUs and batch, two-queue "
    "least-attained-service, as the Pollux artifact runs it; same settings); on --cluster "
    "sia-mix pollux is type-blind, as Sia's paper compares it. gavel (--cluster sia-mix "
    "only): a Gavel-like reference, every job rigid at its trace's GPUs and batch, each "
    "given its GPU type by the sum of throughputs normalised by its best type.",
)
@click.option(
    "--paper",
    is_flag=True,
    help="The paper's autoscaler: rounds only, every 10 min, no queue, no restart "
    "cost, no backfill (each can still be set). Default: Bellows mode.",
)
@click.option(
    "--queue/--no-queue",
    default=None,
    help="Keep jobs that do not fit, else drop them. [default: queue; --paper: drop]",
)
@click.option(
    "--delta-min",
    type=FiniteFloat(0, MAX_DELTA_MIN),
    help="Minutes between rounds. [default: 2; --paper: 10]",
)
@click.option(
    "--early-share",
    type=FiniteFloat(0, 1),
    help="The paper's hybrid trigger: a round starts before Δ has passed once this share of "
    "the running jobs has finished since the last round (0 < share <= 1; 0: off). "
    "[default: off]",
)
@click.option(
    "--restart-cost-s",
    type=FiniteFloat(0, MAX_RESTART_S),
    help="Seconds of progress a halt costs a job without its own figure, charged "
    "by the simulator and priced by the optimizer. [default: 60; --paper: 0]",
)
@click.option(
    "--min-runtime-s",
    type=FiniteFloat(0, MAX_MIN_RUNTIME_S),
    help="Seconds after a start or resume during which no round shrinks a job without its "
    "own min_runtime_s to give its GPUs to another (a capacity loss still does). [default: 0]",
)
@click.option(
    "--hysteresis",
    type=FiniteFloat(0, MAX_HYSTERESIS),
    help="A move must gain max(1, this) times its restart. [default: 1; --paper: 0]",
)
@click.option(
    "--backfill/--no-backfill",
    default=None,
    help="Start later jobs past a head that does not fit. [default: on; --paper: off]",
)
@click.option(
    "--node-counts/--any-counts",
    default=None,
    help="Choose only GPU counts that tile nodes (divisors of a node, then whole nodes), "
    "or any count (issue 29, opt in). [default: any]",
)
@click.option(
    "--remaining-exponent",
    type=FiniteFloat(0, 1),
    help="The power of the remaining objective's weights (0: the sum of speedups, 1: shortest "
    "remaining first; docs/autoscaler.md). [default: 0.3]",
)
@click.option(
    "--restart-growth",
    type=FiniteFloat(0, 100),
    help="Each rescale a job has made adds this many restart costs to the price of its next "
    "move (issue 29). [default: 0.25; paper mode 0]",
)
@click.option(
    "--objective",
    type=click.Choice(["slack", "speedup", "fair", "remaining"]),
    help="What a Bellows-mode round maximises: speedups weighted by remaining time "
    "(remaining); those weights while the cluster has slack, the sum of speedups near a "
    "backlog (slack); the sum of speedups (the paper's; paper mode's always, it takes no "
    "other); or Pollux's p = -1 fairness (sum of -1/speedup) (docs/autoscaler.md, issues 29 "
    "and 36). [default: remaining]",
)
@click.option(
    "--placement",
    type=click.Choice(["nodes", "fewest"]),
    help="nodes: place jobs on the cluster's nodes and charge each its placement's step "
    "time (issue 29, opt in); fewest: every job on the fewest nodes (the paper's model). "
    "[default: fewest; --policy pollux: nodes, the only one it takes]",
)
@click.option("--horizon-min", type=FiniteFloat(0, MAX_HORIZON_MIN, open_min=True),
              help="Count jobs completed up to here (default: the whole run).")  # fmt: skip
@click.option("--cluster", type=_ClusterOrMix(),
              help="Cluster profile JSON (default: Pollux T4), or sia-mix: Sia's 64 GPUs of "
              "three types (6 x 4 T4, 2 x 8 A100, 3 x 8 RTX 2080 Ti), each job at its model's "
              "speed per type (the JSA fitted to sia/profiles of $BELLOWS_DATA, or "
              "../shared/data; --measured: the measurements); Bellows mode gives each job a "
              "type and a count (issue 39).")  # fmt: skip
@click.option("--one-pool", is_flag=True,
              help="With --cluster sia-mix: type-blind, jobs go where GPUs are free, as on one "
              "pool (the comparison for the typed rounds).")  # fmt: skip
@click.option("--out", type=OutputDir(), default="sim-out", show_default=True)
@click.option("--plots/--no-plots", default=True)
@click.option("--wrong-priors", is_flag=True,
              help="Jobs run at another speed than their profiles say (job i in arrival order: "
              "Allreduce 2.5x slower, compute 40 % faster, or both 50 % slower, by i % 3, as "
              "bellows demo --wrong-priors), report progress every 60 s and the core learns "
              "online (docs/simulator.md).")  # fmt: skip
@click.option("--efficiency/--no-efficiency", default=False,
              help="Charge statistical efficiency (issue 29) to every policy's jobs of a model "
              "with validation data (Pollux imports; generated categories by their model): "
              "they progress in reference samples, and Bellows mode decides by goodput "
              "(docs/simulator.md). [default: off, the paper's premise]")  # fmt: skip
@click.option("--charge-start", is_flag=True,
              help="A job's first start costs its restart cost too, as in the Pollux "
              "artifact's simulator (issue 36). [default: a first start is free]")  # fmt: skip
@click.option("--no-learning", is_flag=True,
              help="With --wrong-priors: the core keeps the wrong priors.")  # fmt: skip
@click.option("--measured", is_flag=True,
              help="Charge each job its model's measurements as the Pollux artifact's "
              "simulator does: step times per placement and statistical efficiency per "
              "epoch (pollux/profiles of $BELLOWS_DATA, or ../shared/data); implies "
              "--efficiency and --placement nodes. With a Pollux workload imported with "
              "--work validation --batches accumulate and --charge-start, the calibrated "
              "simulator of issue 36 (docs/simulator.md). On --cluster sia-mix: each type's "
              "step times as Sia measured them (sia/profiles).")  # fmt: skip
@click.option("--decide-measured", is_flag=True,
              help="With --measured: the core decides with the measured step times too, each "
              "GPU count packed on the fewest nodes, as the Pollux reference does. [default: "
              "it decides with the JSA, as the live controller does]")  # fmt: skip
def simulate(
    *,
    trace: Path,
    gpus: int,
    policy: str,
    paper: bool,
    queue: bool | None,
    delta_min: float | None,
    early_share: float | None,
    restart_cost_s: float | None,
    min_runtime_s: float | None,
    hysteresis: float | None,
    backfill: bool | None,
    node_counts: bool | None,
    objective: str | None,
    restart_growth: float | None,
    remaining_exponent: float | None,
    placement: str | None,
    horizon_min: float | None,
    cluster: ClusterProfile | str | None,
    one_pool: bool,
    out: Path,
    plots: bool,
    wrong_priors: bool,
    no_learning: bool,
    efficiency: bool,
    charge_start: bool,
    measured: bool,
    decide_measured: bool,
) -> None:
    """Simulate TRACE; write summary.json, jobs.csv and plots into OUT.

    \b
    Each run ends with one line; its shares are:
      idle beside waiting   GPU-time left idle while some job waited for GPUs, over the
                            cluster's GPU-time (capacity x time)
      optimizer/core share  the share of the run's wall time spent inside the autoscaler
                            core: the optimizer and the decisions it takes
      arrivals (TSF rows)   the share spent tabulating arriving jobs' speedups (the JSA)
      on more nodes         with --placement nodes: the share of the job-time whose GPUs
                            sat on more nodes than the job needs
    """
    _refuse_unused(no_learning=no_learning, wrong_priors=wrong_priors, paper=paper,
                   objective=objective)  # fmt: skip
    reference = _refuse_for_reference(
        policy,
        {"--paper": paper or None, "--early-share": early_share, "--hysteresis": hysteresis,
         "--backfill/--no-backfill": backfill, "--min-runtime-s": min_runtime_s,
         "--node-counts/--any-counts": node_counts, "--no-queue": queue is False or None,
         "--placement fewest": placement == "fewest" or None,
         "--wrong-priors": wrong_priors or None},
    )  # fmt: skip
    from bellows.cli.progress import steps
    from bellows.scaling import MODEL_EFFICIENCY
    from bellows.sim import run
    from bellows.sim.grids import run_summary, settings_config, simulator_switches
    from bellows.sim.metrics import write_jobs_csv
    from bellows.sim.plotting import PlotError, Plotter
    from bellows.sim.workloads.traces import read_trace

    # started first: it imports matplotlib on the other core while the run goes on
    plotter = Plotter() if plots else None
    try:
        with steps(f"reading {trace.name}") as show:
            try:
                jobs = read_trace(trace)
                given = {
                    "mode": "paper" if paper else "bellows", "policy": policy, "queue": queue,
                    "delta_min": delta_min, "early_share": early_share,
                    "restart_cost_s": restart_cost_s, "hysteresis": hysteresis,
                    "backfill": backfill, "min_runtime_s": min_runtime_s,
                    "node_counts": node_counts, "objective": objective,
                    "restart_growth": restart_growth, "remaining_exponent": remaining_exponent,
                }  # fmt: skip
                # the same settings, built the same way, as a sweep's cells (bellows sweep):
                # a reference's (--policy pollux, tiresias) included
                config = settings_config({k: v for k, v in given.items() if v is not None})
                jobs = fit_note(jobs, gpus, source=str(trace))
            except SpecError as error:
                raise click.ClickException(str(error)) from None
            horizon = None if horizon_min is None else horizon_min * 60.0
            what = f"simulating {len(jobs):,} jobs on {gpus:,} GPUs"
            show(what)
            learning = None
            if wrong_priors:
                from bellows.sim import learning as online

                learning = online.Learning(online.wrong_priors(jobs), learn=not no_learning)
            truth = _measured_truth(placement, measured, decide=decide_measured, policy=policy)
            typed, jobs = _typed(
                cluster, jobs, gpus, one_pool=one_pool, truth=truth,
                refused=decide_measured or learning is not None, policy=policy,
            )  # fmt: skip
            result = run(
                jobs, gpus=gpus, config=config, horizon_s=horizon, **typed,
                learning=learning, charge_start=charge_start,
                **simulator_switches(policy, nodes=placement == "nodes" or measured),
                efficiency=MODEL_EFFICIENCY if efficiency or measured else None,
                progress=lambda at, events: show(
                    f"{what}: {at / 60:,.0f} min simulated, {events:,} events"
                ),
            )  # fmt: skip
            # with --measured the jobs were charged the measured truth: the summary says so
            summary = (
                run_summary(result.summary(), config, policy)
                | ({"measured": True} if measured else {})
                | ({"decide_measured": True} if decide_measured else {})
            )
            with output_errors(out):
                out.mkdir(parents=True, exist_ok=True)
                if plotter is not None:
                    label = (
                        f"{trace.stem}: {reference.title()} reference" if reference else
                        f"{trace.stem}: {config.mode} {policy}"
                        + (" + queue" if config.queue else "")
                    )  # fmt: skip
                    plotter.send(result, out, label=label, summary=summary)
                text = json.dumps(summary, indent=1) + "\n"
                (out / "summary.json").write_text(text, encoding="utf-8")
                write_jobs_csv(result.jobs, out / "jobs.csv")
            if plotter is not None:
                show("drawing plots")
                plotter.wait()
                plotter = None
    except PlotError as error:
        raise click.ClickException(str(error)) from None
    finally:
        if plotter is not None:
            plotter.cancel()
    click.echo(f"{out}: {describe_run(result, summary)}")
