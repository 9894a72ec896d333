"""``bellows simulate``: run a trace through the autoscaler core in the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import click

from bellows.autoscaler import AutoscalerConfig, Policy
from bellows.jobs import SpecError
from bellows.scaling import ClusterProfile, default_cluster, load_cluster_profile
from bellows.sim import SimResult, run
from bellows.sim.metrics import write_jobs_csv
from bellows.sim.plots import plot_run
from bellows.sim.workloads.traces import read_trace

__all__ = ["describe_run", "simulate"]


def _cluster(path: Path | None) -> ClusterProfile:
    return default_cluster() if path is None else load_cluster_profile(path)


def describe_run(result: SimResult) -> str:
    """The line every run prints: offered load, speed, where the time went."""
    s = result.summary()
    st = result.stats
    share = (st.core_s / st.wall_s) if st.wall_s > 0 else 0.0
    return (
        f"offered load {s['offered_load']:.2f} | {s['jobs_completed']}/{s['jobs_total']} "
        f"completed, {s['jobs_dropped']} dropped, avg JCT {s['avg_jct_min']} min, "
        f"SJS {s['sjs_efficiency']} | {st.events} events, {st.rounds} rounds in "
        f"{st.wall_s:.2f} s ({st.events_per_s:,.0f} events/s), optimizer/core share "
        f"{share:.0%}, arrivals (TSF rows) {st.arrive_s / max(st.wall_s, 1e-9):.0%}"
    )


@click.command("simulate")
@click.argument("trace", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--gpus", type=click.IntRange(min=1), required=True, help="Cluster size.")
@click.option("--policy", type=click.Choice([p.value for p in Policy]), default="elastic")
@click.option("--queue/--no-queue", default=False, help="Keep jobs that do not fit (else drop).")
@click.option("--delta-min", type=click.FloatRange(min=0), default=10.0, show_default=True)
@click.option("--early-share", type=click.FloatRange(min=0, max=1, min_open=True))
@click.option("--restart-cost-s", type=click.FloatRange(min=0), default=0.0)
@click.option("--hysteresis", type=click.FloatRange(min=0), default=0.0)
@click.option("--backfill/--no-backfill", default=False)
@click.option("--horizon-min", type=click.FloatRange(min=0, min_open=True),
              help="Count jobs completed up to here (default: the whole run).")  # fmt: skip
@click.option("--cluster", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default="sim-out",
              show_default=True)  # fmt: skip
@click.option("--plots/--no-plots", default=True)
def simulate(
    *,
    trace: Path,
    gpus: int,
    policy: str,
    queue: bool,
    delta_min: float,
    early_share: float | None,
    restart_cost_s: float,
    hysteresis: float,
    backfill: bool,
    horizon_min: float | None,
    cluster: Path | None,
    out: Path,
    plots: bool,
) -> None:
    """Simulate TRACE; write summary.json, jobs.csv and plots into OUT."""
    try:
        jobs = read_trace(trace)
        config = AutoscalerConfig(
            policy=Policy(policy), queue=queue, delta_s=delta_min * 60.0,
            early_share=early_share, restart_cost_s=restart_cost_s, hysteresis=hysteresis,
            backfill=backfill,
        )  # fmt: skip
    except SpecError as error:
        raise click.ClickException(f"{trace}: {error}") from error
    horizon = None if horizon_min is None else horizon_min * 60.0
    result = run(jobs, gpus=gpus, config=config, cluster=_cluster(cluster), horizon_s=horizon)
    out.mkdir(parents=True, exist_ok=True)
    summary = result.summary()
    summary["policy"] = policy
    summary["queue"] = queue
    summary["delta_min"] = delta_min
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    write_jobs_csv(result.jobs, out / "jobs.csv")
    if plots:
        plot_run(result, out, label=f"{trace.stem}: {policy}{' + queue' if queue else ''}")
    click.echo(f"{out}: {describe_run(result)}")
