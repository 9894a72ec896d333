"""Policies side by side: paper mode, the event-driven fixed-batch baseline, Bellows mode.

    python benchmarks/policies.py [--seeds 1 2 3] [--workers 2] [--skip-real] [--data DIR]
                                  [--gpus 400 --minutes 480 --period-min 120] [--restart-s 60]
                                  [--min-runtime-s 0] [--charged]
                                  [--objective slack|speedup|fair|remaining] [--restart-growth 0]
                                  [--remaining-exponent 0.25] [--early-share 0]
                                  [--pollux [--workloads N ...] [--pollux-retune restart]]

The scenario of issue 10: the paper's 400-GPU bursty workload (categories 1-4, random baseline
batches, as ``bellows workload generate --pattern bursty --period-min 120 --minutes 480
--categories 1,2,3,4 --gpus 400 --seed S --baseline-batch random``), with a queue, for every
seed; each policy is charged the same restart cost per halt. Prints per seed and the median
over seeds side by side: avg and p99 JCT, avg wait, GPU-time idle while jobs wait, utilization,
rescales per job, pure swaps, jobs dropped, and the most GPUs held beyond the cluster at any
instant as rebuilt from the run's ``jobs.csv`` alone (what users see). Then the targets:

* avg JCT <= 0.33 x paper mode and <= 0.6 x the event-driven baseline (median over seeds);
* GPU-time idle while some job waits <= 2 % of capacity x time; rescales <= 0.5 per job;
* p99 JCT not worse than paper mode (median over seeds);
* zero pure swaps, no job dropped, GPUs never over-committed (every run).

With ``--real`` (the default; ``--skip-real`` skips it) it also runs the ITP cluster04 replay
(sized for offered load 1, as ``benchmarks/sim_speed.py``) and the eight Pollux workloads
(on 64 GPUs, :data:`bellows.sim.comparing.POLLUX_GPUS`), and reports avg JCT, p99 JCT,
makespan and utilization of the three policies (their runs count for the every-run checks).
The real traces are read from ``--data`` (default ``$BELLOWS_DATA``, else ``shared/data``
beside the checkout).

With ``--charged`` it also runs the bursty seeds and the Pollux workloads with statistical
efficiency charged by the simulator to every policy (issue 29: a job of a model with validation
data progresses in reference samples, ``EfficiencyProfile.progress_after``), printed as the
real traces are, beside the uncharged runs; the targets stay those of the uncharged runs.

With ``--pollux`` it runs instead the comparison of issue 29 with the Pollux reference
(:mod:`bellows.sim.pollux`, our reimplementation of Pollux's published policy): the eight Pollux
workloads (64 GPUs, 16 nodes of 4) and the bursty seeds, statistical efficiency charged and jobs
placed on nodes for every policy (paper mode, the baseline, Bellows mode, Pollux), and prints
avg and p99 JCT, restarts per job, the job-time spread over more nodes than needed and the
GPU-time idle beside waiting jobs, with each policy's avg JCT over Pollux's; then issue 29's
targets against Pollux (medians over workloads and over seeds). ``--pollux-retune restart``
holds the reference to Bellows mode's job constraints, where a batch change is a restart
(``PolluxPolicy(retune=False)``); the default changes batches in place, as AdaptDL does.

Runs are independent and go ``--workers`` at a time in separate processes. Exit status 1 when a
target is missed.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bellows.autoscaler import DEFAULT_OBJECTIVE, DEFAULT_RESTART_S, Objective
from bellows.cli.data import DATA_ENV, data_folder, no_data_folder
from bellows.sim.comparing import (
    COLUMNS,
    POLICIES,
    POLLUX,
    POLLUX_GPUS,
    PolicyRun,
    Scenario,
    Source,
    bursty,
    check_targets,
    imported,
    median_row,
    row,
    run_many,
)

REAL_COLUMNS = ("avg_jct_min", "p99_jct_min", "makespan_min", "utilization")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], *, left: int = 1) -> str:
    """A plain-text table: the first ``left`` columns flush left, numbers flush right."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return " | ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(header), "-+-".join("-" * w for w in widths), *map(line, rows)])


def _cells(values: dict[str, object]) -> list[str]:
    return [c.cell(values) for c in COLUMNS]


def print_seeds(by_seed: dict[int, dict[str, PolicyRun]]) -> None:
    """Per seed, then the median over seeds, every policy side by side."""
    header = ["policy", "seed", *(c.header for c in COLUMNS), "wall (s)"]
    rows: list[list[str]] = []
    for policy in POLICIES:
        for seed, runs in by_seed.items():
            r = runs[policy]
            rows.append([policy, str(seed), *_cells(row(r)), f"{r.wall_s:.1f}"])
        median = median_row([runs[policy] for runs in by_seed.values()])
        rows.append([policy, "median", *_cells(median), ""])
    print(_table(header, rows, left=2))
    print()
    ratio_rows = []
    for seed, runs in by_seed.items():
        bellows = runs["bellows"].summary
        cells = [str(seed)]
        for other, key in (("paper", "avg_jct_min"), ("baseline", "avg_jct_min"),
                           ("paper", "p99_jct_min")):  # fmt: skip
            mine, theirs = bellows.get(key), runs[other].summary.get(key)
            cells.append("n/a" if not mine or not theirs else f"{mine / theirs:.3f}")
        ratio_rows.append(cells)
    print(_table(["seed", "avg JCT Bellows/paper", "avg JCT Bellows/baseline",
                  "p99 JCT Bellows/paper"], ratio_rows))  # fmt: skip


def print_real(runs: Sequence[PolicyRun], scenarios: Sequence[Scenario]) -> None:
    """The real traces: avg and p99 JCT, makespan, utilization per policy."""
    by_key = {(r.scenario, r.policy): r for r in runs}
    columns = [c for c in COLUMNS if c.key in REAL_COLUMNS]
    checks = ("avg_queue_min", "jobs_dropped", "unfinished", "over_commit")
    extra = [c for c in COLUMNS if c.key in checks]
    header = ["trace", "GPUs", "policy", *(c.header for c in columns + extra),
              "avg JCT, Bellows / this"]  # fmt: skip
    rows = []
    for s in scenarios:
        mine = by_key[(s.key, "bellows")].summary.get("avg_jct_min")
        for policy in POLICIES:
            r = by_key[(s.key, policy)]
            theirs = r.summary.get("avg_jct_min")
            ratio = "" if policy == "bellows" or not mine or not theirs else f"{mine / theirs:.3f}"
            rows.append([s.title.split(" (")[0], str(r.gpus), policy,
                         *(c.cell(row(r)) for c in columns + extra), ratio])  # fmt: skip
    print(_table(header, rows, left=3))


def real_scenarios(data: Path) -> list[Scenario]:
    out = [imported(Source.ITP, data / "itp" / "cluster04.csv")]
    for i in range(1, 9):
        path = data / "pollux" / "workloads" / f"workload-{i}.csv"
        out.append(imported(Source.POLLUX, path, gpus=POLLUX_GPUS))
    return out


def charged_scenarios(scenarios: Sequence[Scenario]) -> list[Scenario]:
    """The generated and Pollux scenarios with efficiency charged (ITP models have no
    validation data: charging would change nothing there)."""
    return [s.charged() for s in scenarios if s.source is not Source.ITP]


WITH_POLLUX = (*POLICIES, POLLUX)


def _restarts(r: PolicyRun) -> float:
    """Restarts per job: rescales and resumes after a suspension (each pays a restart)."""
    s = r.summary
    jobs = max(int(s["jobs_total"]), 1)
    return (float(s["rescales_per_job"]) * jobs + int(s.get("preemptions", 0))) / jobs


def _pollux_cells(r: PolicyRun, pollux: PolicyRun) -> list[str]:
    s, theirs = r.summary, pollux.summary.get("avg_jct_min")
    ratio = _ratio_text(s.get("avg_jct_min"), theirs)
    spread = s.get("spread_job_time_share")
    return [
        "n/a" if s.get("avg_jct_min") is None else f"{s['avg_jct_min']:.1f}",
        "n/a" if s.get("p99_jct_min") is None else f"{s['p99_jct_min']:.1f}",
        ratio,
        f"{_restarts(r):.2f}",
        "n/a" if spread is None else f"{spread * 100:.1f} %",
        f"{s['idle_while_waiting_share'] * 100:.1f} %",
        str(row(r)["unfinished"]),
        str(r.over_commit),
    ]


def _ratio_text(mine: object, theirs: object) -> str:
    if not isinstance(mine, int | float) or not isinstance(theirs, int | float) or theirs <= 0:
        return "n/a"
    return f"{mine / theirs:.3f}"


POLLUX_HEADER = ["avg JCT (min)", "p99 JCT (min)", "avg JCT / Pollux", "restarts/job",
                 "spread", "idle beside waiting", "unfinished", "over-commit"]  # fmt: skip


def print_pollux(runs: Sequence[PolicyRun], scenarios: Sequence[Scenario]) -> None:
    by_key = {(r.scenario, r.policy): r for r in runs}
    rows = []
    for s in scenarios:
        pollux = by_key[(s.key, POLLUX)]
        for policy in WITH_POLLUX:
            r = by_key[(s.key, policy)]
            label = s.path.stem if s.path is not None else f"bursty seed {s.seed}"
            rows.append([label, policy, *_pollux_cells(r, pollux)])
    print(_table(["trace", "policy", *POLLUX_HEADER], rows, left=2))


def pollux_targets(
    workloads: Sequence[Scenario], seeds: Sequence[Scenario], runs: Sequence[PolicyRun]
) -> list[tuple[str, str, str, bool]]:
    """Issue 29's targets against the Pollux reference: ``(name, measured, limit, met)``."""
    by_key = {(r.scenario, r.policy): r for r in runs}

    def ratios(scenarios: Sequence[Scenario], key: str, other: str) -> list[float]:
        out = []
        for s in scenarios:
            mine = by_key[(s.key, "bellows")].summary.get(key)
            theirs = by_key[(s.key, other)].summary.get(key)
            ok = isinstance(mine, int | float) and isinstance(theirs, int | float) and theirs > 0
            out.append(float(mine) / float(theirs) if ok else float("inf"))  # type: ignore[arg-type]
        return out

    out = []
    if workloads:
        jct = ratios(workloads, "avg_jct_min", POLLUX)
        med, worst = statistics.median(jct), max(jct)
        out.append(("avg JCT Bellows / Pollux, median workload", f"{med:.3f}", "<= 0.95",
                    med <= 0.95))  # fmt: skip
        out.append(("avg JCT Bellows / Pollux, worst workload", f"{worst:.3f}", "<= 1.05",
                    worst <= 1.05))  # fmt: skip
        restarts = [_restarts(by_key[(s.key, "bellows")])
                    / max(_restarts(by_key[(s.key, POLLUX)]), 1e-9) for s in workloads]  # fmt: skip
        worst = max(restarts)
        out.append(("restarts/job Bellows / Pollux, worst workload", f"{worst:.2f}",
                    "<= 1.5", worst <= 1.5))  # fmt: skip
    if seeds:
        for other, limit in (("paper", 0.33), ("baseline", 0.55)):
            med = statistics.median(ratios(seeds, "avg_jct_min", other))
            out.append((f"bursty avg JCT Bellows / {other}, median seed", f"{med:.3f}",
                        f"<= {limit}", med <= limit))  # fmt: skip
        med = statistics.median(ratios(seeds, "avg_jct_min", POLLUX))
        out.append(("bursty avg JCT Bellows / Pollux, median seed", f"{med:.3f}", "(shown)",
                    True))  # fmt: skip
    spread = [by_key[(s.key, "bellows")].summary.get("spread_job_time_share") or 0.0
              for s in [*workloads, *seeds]]  # fmt: skip
    worst = max(spread, default=0.0)
    out.append(("Bellows job-time spread over more nodes than needed, worst trace",
                f"{worst:.1%}", "<= 5 %", worst <= 0.05))  # fmt: skip
    over = max((r.over_commit for r in runs), default=0)
    out.append(("GPUs over-committed (jobs.csv), every run", f"most {over}", "0", over == 0))
    return out


def pollux_main(args: argparse.Namespace) -> int:
    """``--pollux``: every policy beside the Pollux reference (the module docstring)."""
    started = time.perf_counter()
    seeds = [bursty(s, gpus=args.gpus, minutes=args.minutes, period_min=args.period_min)
             .charged().placed() for s in args.seeds]  # fmt: skip
    workloads = []
    if args.real:
        for i in args.workloads:
            path = args.data / "pollux" / "workloads" / f"workload-{i}.csv"
            workloads.append(imported(Source.POLLUX, path, gpus=POLLUX_GPUS).charged().placed())
    scenarios = [*workloads, *seeds]
    tasks = [(s, p) for s in scenarios for p in WITH_POLLUX]
    print(f"{len(tasks)} runs, {args.workers} at a time; efficiency charged and jobs placed on "
          f"nodes for every policy; restart cost {args.restart_s:g} s per halt charged to "
          "every policy; Pollux = our reimplementation of Pollux's policy (60 s rounds, "
          f"batch changes {args.pollux_retune})", flush=True)  # fmt: skip

    def done(r: PolicyRun) -> None:
        print(f"  {r.scenario:<36} {r.policy:<8} {r.wall_s:7.1f} s", flush=True)

    runs = run_many(tasks, workers=args.workers, restart_s=args.restart_s, on_done=done,
                    min_runtime_s=args.min_runtime_s, objective=Objective(args.objective),
                    restart_growth=args.restart_growth,
                    remaining_exponent=args.remaining_exponent, early_share=args.early_share,
                    pollux_retune=args.pollux_retune == "in-place")  # fmt: skip
    if workloads:
        print("\n== the eight Pollux workloads, 64 GPUs (16 nodes of 4), E(b) charged, on nodes")
        print_pollux(runs, workloads)
    if seeds:
        print(f"\n== {seeds[0].title.rsplit(', seed', 1)[0]}, queue, E(b) charged, on nodes")
        print_pollux(runs, seeds)
        by_key = {(r.scenario, r.policy): r for r in runs}
        medians = []
        for policy in WITH_POLLUX:
            ratios = [_ratio_text(by_key[(s.key, policy)].summary.get("avg_jct_min"),
                                  by_key[(s.key, POLLUX)].summary.get("avg_jct_min"))
                      for s in seeds]  # fmt: skip
            known = sorted(float(x) for x in ratios if x != "n/a")
            medians.append([policy, f"{statistics.median(known):.3f}" if known else "n/a"])
        print("\nmedian over seeds of avg JCT / Pollux's")
        print(_table(["policy", "avg JCT / Pollux"], medians))
    targets = pollux_targets(workloads, seeds, runs)
    print("\n== targets (issue 29, against the Pollux reference)")
    print(
        _table(
            ["target", "measured", "limit", "met"],
            [[n, v, lim, "yes" if met else "NO"] for n, v, lim, met in targets],
            left=4,
        )
    )
    wall = time.perf_counter() - started
    print(f"\nwall time {wall:.0f} s")
    missed = [n for n, _, _, met in targets if not met]
    if missed:
        print(f"MISSED: {'; '.join(missed)}")
        return 1
    print("all targets met")
    return 0


def _pollux_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pollux", action="store_true",
                        help="instead: every policy beside the Pollux reference (issue 29), "
                             "efficiency charged and jobs on nodes")  # fmt: skip
    parser.add_argument("--workloads", type=int, nargs="+", default=list(range(1, 9)),
                        choices=range(1, 9), metavar="N",
                        help="with --pollux: which Pollux workloads (1-8)")  # fmt: skip
    parser.add_argument("--pollux-retune", choices=["in-place", "restart"], default="in-place",
                        help="with --pollux: the reference changes a batch in place, as "
                             "AdaptDL does (default), or by a restart priced and charged as "
                             "Bellows mode's")  # fmt: skip


def _bellows_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--min-runtime-s", type=float, default=0.0,
                        help="Bellows mode: shrink no job this soon after a start")  # fmt: skip
    parser.add_argument("--objective", choices=[o.value for o in Objective],
                        default=DEFAULT_OBJECTIVE.value,
                        help="Bellows mode: what a round maximises")  # fmt: skip
    parser.add_argument("--restart-growth", type=float, default=None,
                        help="Bellows mode: price added per earlier move "
                             "(default: the core's, 0.25)")  # fmt: skip
    parser.add_argument("--remaining-exponent", type=float, default=None,
                        help="Bellows mode: the power of the remaining-time weights "
                             "(default: the core's, 0.3)")  # fmt: skip
    parser.add_argument("--early-share", type=float, default=None,
                        help="Bellows mode: an early round once this share of the running "
                             "jobs finished (0: off; default: the core's, off)")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--workers", type=int, default=2, help="runs at once (processes)")
    parser.add_argument("--gpus", type=int, default=400)
    parser.add_argument("--minutes", type=float, default=480.0)
    parser.add_argument("--period-min", type=float, default=120.0)
    parser.add_argument("--restart-s", type=float, default=DEFAULT_RESTART_S,
                        help="restart cost charged to every policy per halt")  # fmt: skip
    parser.add_argument("--real", action=argparse.BooleanOptionalAction, default=True,
                        help="also the ITP cluster04 replay and the Pollux workloads")  # fmt: skip
    parser.add_argument("--skip-real", dest="real", action="store_false", help="= --no-real")
    parser.add_argument(
        "--charged",
        action="store_true",
        help="also the bursty seeds and Pollux workloads, efficiency charged",
    )
    _pollux_arguments(parser)
    _bellows_arguments(parser)
    parser.add_argument("--data", type=Path, default=data_folder(),
                        help=f"folder of the real traces (default: ${DATA_ENV}, else "
                             "shared/data beside the checkout)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.workers < 1 or len(set(args.seeds)) != len(args.seeds):
        parser.error("--workers must be >= 1 and --seeds distinct")
    if args.real and args.data is None:
        parser.error(no_data_folder() + "; or --skip-real")
    started = time.perf_counter()
    print("$ python " + shlex.join(["benchmarks/policies.py", *(sys.argv[1:] if argv is None
                                                                 else argv)]))  # fmt: skip
    if args.pollux:
        return pollux_main(args)
    seeds = {s: bursty(s, gpus=args.gpus, minutes=args.minutes, period_min=args.period_min)
             for s in args.seeds}  # fmt: skip
    real = real_scenarios(args.data) if args.real else []
    charged = charged_scenarios([*seeds.values(), *real]) if args.charged else []
    tasks = [(s, p) for s in [*seeds.values(), *real, *charged] for p in POLICIES]
    print(
        f"{len(tasks)} runs, {args.workers} at a time; restart cost {args.restart_s:g} s per "
        "halt charged to every policy; queue on; paper mode = the paper's elastic autoscaler "
        "(delta 10 min), baseline = fixed batch, a round at every event (delta 0)",
        flush=True,
    )

    def done(r: PolicyRun) -> None:
        print(f"  {r.scenario:<24} {r.policy:<8} {r.wall_s:7.1f} s", flush=True)

    runs = run_many(
        tasks, workers=args.workers, restart_s=args.restart_s, on_done=done,
        min_runtime_s=args.min_runtime_s, objective=Objective(args.objective),
        restart_growth=args.restart_growth, remaining_exponent=args.remaining_exponent,
        early_share=args.early_share,
    )  # fmt: skip
    by_key = {(r.scenario, r.policy): r for r in runs}
    by_seed = {seed: {p: by_key[(s.key, p)] for p in POLICIES} for seed, s in seeds.items()}
    first = next(iter(seeds.values()))
    print(f"\n== {first.title.rsplit(', seed', 1)[0]}, queue on")
    print_seeds(by_seed)
    if real:
        print("\n== real traces (queue on)")
        print_real([r for r in runs if r.scenario in {s.key for s in real}], real)
    if charged:
        print("\n== statistical efficiency charged to every policy (queue on)")
        print_real([r for r in runs if r.scenario in {s.key for s in charged}], charged)
    targets = check_targets(by_seed, [r for r in runs if r.scenario in {s.key for s in real}])
    print(f"\n== targets (issue 10), over seeds {', '.join(map(str, args.seeds))}")
    print(_table(["target", "measured", "limit", "met"],
                 [[t.name, t.value, t.limit, "yes" if t.met else "NO"] for t in targets],
                 left=4))  # fmt: skip
    missed = [t.name for t in targets if not t.met]
    wall = time.perf_counter() - started
    cpu = statistics.fmean([r.wall_s for r in runs]) * len(runs)
    print(f"\nwall time {wall:.0f} s ({cpu:.0f} s of simulation over {args.workers} workers)")
    if missed:
        print(f"MISSED: {'; '.join(missed)}")
        return 1
    print("all targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
