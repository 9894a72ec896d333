"""How low the average JCT can go on the 400-GPU bursty scenario with efficiency charged.

    python benchmarks/bursty_bounds.py [--seeds 1 2 3] [--workers 2] [--gpus 400]

Issue 29 asks Bellows mode for at most 0.33x paper mode's average JCT there, efficiency
charged to every policy and jobs on nodes (as ``benchmarks/policies.py --pollux``). For each
seed this runs paper mode, the Pollux reference and Bellows mode, then schedules Bellows
mode's own jobs again (each with the GPU-seconds it used, :mod:`bellows.sim.bounds`):

* ``alone``: Bellows mode on ten times the GPUs (no job waits for another);
* ``fluid SRPT``: one pooled machine, perfect scaling, least work left first, free
  preemption (no schedule of that work does better on average);
* ``elastic SRPT``: the same, each job held to its ``k_max`` (the most an elastic
  scheduler could hope for: every GPU-second still as useful as at the count it ran at);
* ``rigid SRPT``: each job at its average GPU count, preemptive least-work-first packing at
  every event, every preemption charged the restart cost.

and prints each beside the target (0.33x paper mode's) with the GPU-time used over the
GPU-time the cluster had in the arrival window (the load the charge leaves).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from bellows.autoscaler import DEFAULT_RESTART_S
from bellows.scaling import MODEL_EFFICIENCY, ClusterProfile, default_cluster
from bellows.scaling.tables import tsf_tables
from bellows.sim.bounds import demands, elastic_srpt, fluid_srpt, rigid_srpt
from bellows.sim.comparing import POLLUX, bursty, policies, run_policy
from bellows.sim.engine import run
from bellows.sim.workloads.traces import TraceJob

TARGET = 0.33
SCALING = (2, 4, 8)  # GPU counts whose worth per GPU is printed
ALONE = 10  # times the GPUs for "alone"


def _minutes(values: Sequence[float]) -> float:
    return statistics.fmean(values) / 60.0


def parallel_efficiency(trace: Sequence[TraceJob], cluster: ClusterProfile, k: int) -> float | None:
    """The median over elastic jobs that may use ``k`` GPUs of their goodput per GPU at ``k``
    over that at their smallest count (the JSA's goodput tables, efficiency at half the
    work): what a GPU beyond the smallest count is worth. ``None`` when no job may use ``k``."""
    jobs = [job for job in trace if job.spec.elastic and job.spec.k_max >= k]
    if not jobs:
        return None
    tables = tsf_tables(
        [job.spec for job in jobs], cluster, fixed_batch=False,
        efficiency=[MODEL_EFFICIENCY.get(job.model) for job in jobs],
        progress=[job.spec.work / 2 for job in jobs],
    )  # fmt: skip
    ratios = []
    for best in tables.goodput:
        least = int(np.flatnonzero(best > 0)[0])
        if least < k:
            ratios.append((best[k] / k) / (best[least] / least))
    return statistics.median(ratios) if ratios else None


def measure(seed: int, gpus: int) -> dict[str, float]:
    """One seed's average JCT (minutes) under every policy and yardstick, and the load."""
    scenario = bursty(seed, gpus=gpus).charged().placed()
    out = {
        name: run_policy(scenario, policy).summary["avg_jct_min"]
        for name, policy in (("paper mode", "paper"), ("Pollux reference", POLLUX))
    }
    bellows = run_policy(scenario, "bellows", keep_result=True)
    assert bellows.result is not None
    out["Bellows mode"] = bellows.summary["avg_jct_min"]
    cluster = default_cluster()
    trace, _, horizon = scenario.build(cluster)
    config = policies()["bellows"]
    alone = run(trace, gpus=gpus * ALONE, config=config, cluster=cluster, horizon_s=horizon,
                efficiency=MODEL_EFFICIENCY, nodes=True)  # fmt: skip
    out[f"alone ({ALONE}x the GPUs)"] = alone.summary()["avg_jct_min"]
    most = {t.spec.name: t.spec.k_max if t.spec.elastic else t.spec.gpus for t in trace}
    jobs = demands(bellows.result.jobs, most)
    out["fluid SRPT (bound)"] = _minutes(fluid_srpt(jobs, gpus))
    out["elastic SRPT, linear to k_max"] = _minutes(elastic_srpt(jobs, gpus))
    out["rigid SRPT"] = _minutes(rigid_srpt(jobs, gpus, DEFAULT_RESTART_S)[0])
    assert horizon is not None
    out["load"] = sum(j.gpu_s for j in jobs) / (gpus * horizon)
    for k in SCALING:
        worth = parallel_efficiency(trace, cluster, k)
        out[f"worth {k}"] = math.nan if worth is None else worth
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--gpus", type=int, default=400)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    if args.workers < 1 or args.gpus < 1:
        parser.error("--workers and --gpus must be >= 1")
    gpus = [args.gpus] * len(args.seeds)
    if args.workers == 1:
        results = list(map(measure, args.seeds, gpus))
    else:
        with ProcessPoolExecutor(args.workers) as pool:
            results = list(pool.map(measure, args.seeds, gpus))
    names = [n for n in results[0] if n != "load" and not n.startswith("worth")]
    head = (
        "| avg JCT, min | " + " | ".join(f"seed {s}" for s in args.seeds) + " | median | / paper |"
    )
    print(f"{args.gpus} GPUs, 480 min bursty, queue, E(b) charged, on nodes")
    print(head)
    print("|---|" + "---:|" * (len(args.seeds) + 2))
    paper = statistics.median(r["paper mode"] for r in results)
    for name in names:
        values = [r[name] for r in results]
        med = statistics.median(values)
        cells = " | ".join(f"{v:.1f}" for v in values)
        print(f"| {name} | {cells} | {med:.1f} | {med / paper:.3f} |")
    print(f"| target: {TARGET}x paper mode | | | | {TARGET * paper:.1f} | {TARGET:.3f} |")
    loads = ", ".join(f"{r['load']:.2f}" for r in results)
    print(f"\nGPU-time Bellows mode used / GPU-time in the arrival window: {loads}")
    for k in SCALING:
        worth = ", ".join(f"{r[f'worth {k}']:.2f}" for r in results)
        print(f"goodput per GPU on {k} GPUs / on the smallest count, median job: {worth}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
