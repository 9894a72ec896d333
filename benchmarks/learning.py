"""Online learning at cluster scale: true profiles, wrong priors kept, wrong priors learned.

    python benchmarks/learning.py [--seeds 1 2 3] [--workers 2] [--quick]
                                  [--gpus 400 --minutes 480 --period-min 120]
                                  [--report-s 60] [--restart-s 60]

The scenario of ``benchmarks/policies.py``: the paper's 400-GPU bursty workload (categories
1-4, random baseline batches, as ``bellows workload generate --pattern bursty --period-min 120
--minutes 480 --categories 1,2,3,4 --gpus 400 --seed S``), Bellows mode with a queue. Every
job really runs at another speed than its profile says — the pattern of ``bellows demo
--wrong-priors`` (:data:`bellows.sim.learning.WRONG_PRIORS`: job ``i`` in arrival order has an
Allreduce 2.5x slower, computes 40 % faster, or is 50 % slower in both, by ``i % 3``) — and
each seed is run three ways (``bellows.sim.run``):

* ``oracle``: the core is told the true profiles (the decisions an oracle would make);
* ``kept``: the core is told the wrong priors and keeps them (``Learning(learn=False)``);
* ``learned``: the core is told the wrong priors and learns online from a progress report of
  every stepping job every ``--report-s`` simulated seconds (``Learning(learn=True)``), the
  live controller's refit and revision rule (:mod:`bellows.sim.learning`).

Prints a Markdown table per seed and the median over seeds: avg and p99 JCT, rescales per job,
reports and revisions; then, per seed, what learning gained over keeping the wrong priors
(avg and p99 JCT) and the share of the gap to the oracle it closed. ``--quick``: seed 1 only,
120 minutes (period 60). Runs are independent and go ``--workers`` at a time in separate
processes.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from bellows.autoscaler import DEFAULT_RESTART_S
from bellows.scaling import default_cluster
from bellows.sim import run
from bellows.sim.comparing import Scenario, bursty, policies
from bellows.sim.learning import DEFAULT_REPORT_S, Learning, true_spec, wrong_priors
from bellows.sim.running import Finished, Task, collect, make_runner

VARIANTS = ("oracle", "kept", "learned")
COLUMNS = (
    ("avg_jct_min", "avg JCT (min)", "{:.2f}"),
    ("p99_jct_min", "p99 JCT (min)", "{:.2f}"),
    ("rescales_per_job", "rescales/job", "{:.3f}"),
    ("reports", "reports", "{:.0f}"),
    ("revisions", "revisions", "{:.0f}"),
)


def run_variant(
    scenario: Scenario, variant: str, report_s: float, restart_s: float
) -> dict[str, Any]:
    """One run: the scenario's summary (less its curve) with reports, revisions, wall time."""
    cluster = default_cluster()
    trace, gpus, horizon = scenario.build(cluster)
    truth = wrong_priors(trace)
    learning = None
    if variant == "oracle":
        trace = tuple(
            dataclasses.replace(j, spec=true_spec(j.spec, truth[j.spec.name])) for j in trace
        )
    else:
        learning = Learning(truth, report_s=report_s, learn=variant == "learned")
    started = time.perf_counter()
    result = run(
        trace, gpus=gpus, config=policies(restart_s)["bellows"], cluster=cluster,
        horizon_s=horizon, learning=learning,
    )  # fmt: skip
    summary = result.summary()
    summary.pop("completed_over_time")
    summary["reports"] = result.stats.reports
    summary["revisions"] = result.stats.revisions
    summary["wall_s"] = time.perf_counter() - started
    return summary


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _cell(value: object, fmt: str) -> str:
    return "n/a" if not isinstance(value, int | float) else fmt.format(value)


def _gain(kept: object, learned: object) -> str:
    if not isinstance(kept, int | float) or not isinstance(learned, int | float) or not kept:
        return "n/a"
    return f"{(kept - learned) / kept:+.1%}"


def _closed(oracle: object, kept: object, learned: object) -> str:
    """The share of the gap between keeping the wrong priors and the oracle that learning
    closed (100 %: as good as the oracle; negative: worse than keeping the priors)."""
    number = int | float
    if not (isinstance(oracle, number) and isinstance(kept, number)
            and isinstance(learned, number)):  # fmt: skip
        return "n/a"
    return (
        "n/a (no gap)"
        if abs(kept - oracle) < 1e-9
        else f"{(kept - learned) / (kept - oracle):+.0%}"
    )


def print_tables(by_seed: Mapping[int, Mapping[str, Mapping[str, Any]]]) -> None:
    """The runs side by side, the medians over seeds, then what learning gained."""
    header = ["variant", "seed", *(title for _, title, _ in COLUMNS), "wall (s)"]
    rows = []
    for variant in VARIANTS:
        for seed, runs in by_seed.items():
            s = runs[variant]
            cells = [_cell(s.get(key), fmt) for key, _, fmt in COLUMNS]
            rows.append([variant, str(seed), *cells, f"{s['wall_s']:.1f}"])
        medians = []
        for key, _, fmt in COLUMNS:
            values = [runs[variant].get(key) for runs in by_seed.values()]
            numbers = [float(v) for v in values if isinstance(v, int | float)]
            medians.append(_cell(statistics.median(numbers), fmt) if numbers else "n/a")
        rows.append([variant, "median", *medians, ""])
    print(_markdown(header, rows))
    print()
    gains = []
    for seed, runs in by_seed.items():
        o, k, v = (runs[name] for name in VARIANTS)
        gains.append([
            str(seed),
            _gain(k["avg_jct_min"], v["avg_jct_min"]),
            _gain(k["p99_jct_min"], v["p99_jct_min"]),
            _closed(o["avg_jct_min"], k["avg_jct_min"], v["avg_jct_min"]),
            _closed(o["p99_jct_min"], k["p99_jct_min"], v["p99_jct_min"]),
        ])  # fmt: skip
    print(_markdown(["seed", "avg JCT gained by learning", "p99 JCT gained by learning",
                     "avg JCT gap to oracle closed", "p99 JCT gap to oracle closed"],
                    gains))  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: 1 2 3")
    parser.add_argument("--workers", type=int, default=2, help="runs at once (processes)")
    parser.add_argument("--gpus", type=int, default=400)
    parser.add_argument("--minutes", type=float, default=None, help="default: 480")
    parser.add_argument("--period-min", type=float, default=None, help="default: 120")
    parser.add_argument("--report-s", type=float, default=DEFAULT_REPORT_S,
                        help="simulated seconds between two reports of a stepping job")  # fmt: skip
    parser.add_argument("--restart-s", type=float, default=DEFAULT_RESTART_S,
                        help="restart cost charged per halt")  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help="seed 1, 120 minutes, period 60 (unless given)")  # fmt: skip
    args = parser.parse_args(argv)
    seeds = args.seeds or ([1] if args.quick else [1, 2, 3])
    minutes = args.minutes or (120.0 if args.quick else 480.0)
    period = args.period_min or (60.0 if args.quick else 120.0)
    if args.workers < 1 or len(set(seeds)) != len(seeds):
        parser.error("--workers must be >= 1 and --seeds distinct")
    started = time.perf_counter()
    given = sys.argv[1:] if argv is None else list(argv)
    print("$ python " + shlex.join(["benchmarks/learning.py", *given]))
    scenarios = {s: bursty(s, gpus=args.gpus, minutes=minutes, period_min=period) for s in seeds}
    print(
        f"{len(seeds) * len(VARIANTS)} runs, {args.workers} at a time; Bellows mode with a "
        f"queue, restart cost {args.restart_s:g} s per halt; wrong priors as bellows demo "
        f"--wrong-priors; a report every {args.report_s:g} s of a stepping job",
        flush=True,
    )
    cost = {"oracle": 1.0, "kept": 1.5, "learned": 10.0}  # the refits dominate
    tasks = [
        Task(f"{seed}/{variant}", run_variant, (scenario, variant, args.report_s, args.restart_s),
             cost=cost[variant])
        for seed, scenario in scenarios.items()
        for variant in VARIANTS
    ]  # fmt: skip

    def done(finished: Finished) -> None:
        if finished.ok:
            print(f"  seed {finished.key:<12} {finished.value['wall_s']:7.1f} s", flush=True)

    values = collect(make_runner(args.workers), tasks, {}, on_done=done)
    by_seed = {seed: {v: values[f"{seed}/{v}"] for v in VARIANTS} for seed in seeds}
    first = next(iter(scenarios.values()))
    print(f"\n== {first.title.rsplit(', seed', 1)[0]}, queue on, wrong priors\n")
    print_tables(by_seed)
    wall = time.perf_counter() - started
    cpu = sum(s["wall_s"] for runs in by_seed.values() for s in runs.values())
    print(f"\nwall time {wall:.0f} s ({cpu:.0f} s of simulation over {args.workers} workers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
