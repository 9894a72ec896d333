"""The autoscaler core's memory under churn: 20 000 sequential jobs, each arriving, running,
revised once and finishing, a few at a time, in a fresh process (issue 35, item 9).

    python benchmarks/churn_memory.py [--jobs 20000] [--at 1000,5000,10000,20000]
                                      [--wave 4] [--capacity 16] [--goodput] [--before DIR]

The jobs are the paper's four categories in turn (``bellows.sim.workloads.categories``),
each at its own batch; a wave of ``--wave`` jobs arrives, the core steps (a fill starts
them), each is revised as the live controller's progress loop revises a job (a refitted
spec: its own template, so its own row), the core steps again, then the wave finishes and
the core steps once more. ``--goodput`` also charges every job an efficiency profile, so
that its rows are goodput rows. After each count of ``--at`` the child prints, after a
garbage collection: ``tracemalloc``'s current and peak bytes (the peak since the count
before), and the resident set (``VmRSS``). Memory held for finished jobs shows as a
current figure that grows with the count; a core that forgets them stays flat: its figure
after 20 000 jobs is about its figure after 1 000.

``--before DIR`` runs the same feed on a second source tree (``DIR/plugin`` first on the
path, e.g. ``git archive <commit> plugin | tar -x -C DIR``), each in its own process, and
prints both side by side.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.scaling import EfficiencyProfile, default_cluster
from bellows.sim.workloads.categories import CATEGORIES

MIB = 1024.0 * 1024.0
PLUGIN = Path(__file__).resolve().parents[1] / "plugin"


def _rss_mib() -> float:
    """The resident set of this process now (``VmRSS``), in MiB."""
    with open(f"/proc/{os.getpid()}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def churn(jobs: int, at: Sequence[int], wave: int, capacity: int, goodput: bool) -> None:
    """The child: feed ``jobs`` jobs through a fresh core, print a JSON line at each count
    of ``at``."""
    cluster = default_cluster()
    auto = Autoscaler(AutoscalerConfig(delta_s=0.0), capacity=capacity, cluster=cluster)
    kinds = list(CATEGORIES.values())
    checkpoints = sorted(set(at))
    tracemalloc.start()
    t, fed = 0.0, 0
    while fed < jobs:
        names = []
        for _ in range(min(wave, jobs - fed)):
            kind = kinds[fed % len(kinds)]
            spec = kind.job(f"job-{fed:06d}", batch_size=kind.b_min, work=1e5)
            if goodput:
                auto.charge(spec.name, EfficiencyProfile(spec.batch_size, 1000.0, 0.5))
            auto.arrive(spec, now=t)
            names.append(spec.name)
            fed += 1
        auto.step(t)
        t += 1.0
        for name in names:  # an online refit: a spec of its own (not a template's row)
            spec = auto.job(name)
            refit = dataclasses.replace(spec, weights=spec.weights + fed, restart_s=30.0)
            auto.revise(refit, now=t, done=10.0 * fed % 1e4)
        auto.step(t)
        t += 1.0
        for name in names:
            auto.finish(name, now=t)
        auto.step(t)
        t += 1.0
        if checkpoints and fed >= checkpoints[0]:
            checkpoints.pop(0)
            gc.collect()
            current, peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            figures = {"jobs": fed, "current": current / MIB, "peak": peak / MIB}
            print(json.dumps({**figures, "rss": _rss_mib()}), flush=True)


def _run(tree: Path, args: argparse.Namespace) -> list[dict[str, float]]:
    """Run the child on source tree ``tree`` (its ``plugin/`` first on the path)."""
    argv = [sys.executable, __file__, "--child", "--jobs", str(args.jobs), "--at", args.at,
            "--wave", str(args.wave), "--capacity", str(args.capacity)]  # fmt: skip
    if args.goodput:
        argv.append("--goodput")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--at", default="1000,5000,10000,20000")
    parser.add_argument("--wave", type=int, default=4, help="jobs arriving together")
    parser.add_argument("--capacity", type=int, default=16, help="GPUs")
    parser.add_argument("--goodput", action="store_true", help="charge every job a profile")
    parser.add_argument("--before", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    at = [int(n) for n in args.at.split(",")]
    if args.child:
        churn(args.jobs, at, args.wave, args.capacity, args.goodput)
        return
    trees = {"after": PLUGIN, **({"before": args.before / "plugin"} if args.before else {})}
    runs = {label: _run(tree, args) for label, tree in trees.items()}
    print(f"{args.jobs} sequential jobs, {args.wave} at a time, {args.capacity} GPUs"
          f"{', goodput rows' if args.goodput else ''}: MiB after each count "
          "(tracemalloc current / peak since the count before / VmRSS)")  # fmt: skip
    head = "".join(f" | {label:>6}: current    peak     RSS" for label in runs)
    print(f"{'jobs':>7}{head}")
    for i, n in enumerate(at):
        cells = "".join(
            f" | {r[i]['current']:15.2f} {r[i]['peak']:7.2f} {r[i]['rss']:7.1f}"
            for r in runs.values()
        )
        print(f"{n:>7}{cells}")
    for label, rows in runs.items():
        first, last = rows[0], rows[-1]
        grown = last["current"] - first["current"]
        per = grown * 1024.0 * 1000.0 / max(1, last["jobs"] - first["jobs"])
        print(
            f"{label}: {grown:+.2f} MiB traced ({per:+.1f} KiB per 1000 jobs) and "
            f"{last['rss'] - first['rss']:+.1f} MiB resident from {first['jobs']} to "
            f"{last['jobs']} jobs"
        )


if __name__ == "__main__":
    main()
