"""Whole-process ``bellows simulate``, as a user runs it: cold and warm, medians, both modes.

    python benchmarks/sim_processes.py [--repeat 3] [--skip-itp] [--before DIR]

Cases: the 400-GPU bursty trace (``bellows workload generate --pattern bursty --period-min
120 --minutes 480 --categories 1,2,3,4 --gpus 400 --seed 5 --baseline-batch random``),
simulated with ``--queue`` and plots on, in Bellows mode and with ``--paper``; and the ITP
cluster04 replay at offered load 1 (``--no-plots``). Cold: a fresh, empty JAX compilation
cache (``BELLOWS_JAX_CACHE``); warm: the next run, with that cache. Each line gives the
median wall time and peak RSS of the process beside the targets of issue 11 (400 GPUs:
3 s and 400 MiB; ITP: 10 s). ``--before DIR`` runs a second source tree (``DIR/plugin``,
e.g. ``git archive HEAD plugin | tar -x -C DIR``) on the same traces, side by side, and
checks that both wrote the same jobs.csv and summary.json.
"""

from __future__ import annotations

import argparse
import filecmp
import tempfile
from pathlib import Path

from bellows.scaling import default_cluster
from bellows.sim.workloads.importing import gpus_for_load
from bellows.sim.workloads.traces import read_trace
from processes import BELLOWS, Timed, bellows_command, median_of, time_process

ITP = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "itp" / "cluster04.csv"
BURSTY = ["--pattern", "bursty", "--period-min", "120", "--minutes", "480", "--categories",
          "1,2,3,4", "--gpus", "400", "--seed", "5", "--baseline-batch", "random"]  # fmt: skip


def _cold_warm(argv: list[str], env: dict[str, str], out: Path, repeat: int) -> tuple[Timed, Timed]:
    cold: list[Timed] = []
    warm: list[Timed] = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="bellows-jax-") as cache:
            env_run = {**env, "BELLOWS_JAX_CACHE": cache}
            cold.append(time_process([*argv, "--out", str(out)], env=env_run))
            warm.append(time_process([*argv, "--out", str(out)], env=env_run))
    return median_of(cold), median_of(warm)


def _case(
    name: str, args: list[str], *, target_s: float, work: Path, repeat: int, before: Path | None
) -> None:
    trees = {"after": None, **({"before": before} if before else {})}
    for label, tree in trees.items():
        command, env = bellows_command(tree)
        out = work / f"{name}-{label}"
        cold, warm = _cold_warm([*command, "simulate", *args], env, out, repeat)
        print(
            f"{name:<26} {label:<6} cold {cold.wall_s:6.2f} s {cold.peak_mib:5.0f} MiB | "
            f"warm {warm.wall_s:6.2f} s {warm.peak_mib:5.0f} MiB | target {target_s:g} s"
        )
    if before:
        same = all(
            filecmp.cmp(work / f"{name}-after" / f, work / f"{name}-before" / f, shallow=False)
            for f in ("jobs.csv", "summary.json")
        )
        print(f"{name:<26} same jobs.csv and summary.json before and after: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-itp", action="store_true")
    parser.add_argument("--before", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bellows-sim-") as folder:
        work = Path(folder)
        bursty = work / "bursty.jsonl"
        time_process([str(BELLOWS), "workload", "generate", *BURSTY, "--out", str(bursty)])
        for name, extra in (("400 GPUs, Bellows mode", []), ("400 GPUs, paper mode", ["--paper"])):
            run_args = [str(bursty), "--gpus", "400", "--queue", *extra]
            _case(name, run_args, target_s=3.0, work=work, repeat=args.repeat, before=args.before)
        if args.skip_itp:
            return
        itp = work / "itp.jsonl"
        time_process([str(BELLOWS), "workload", "import", "itp", str(ITP), "--out", str(itp)])
        gpus = gpus_for_load(read_trace(itp), load=1.0, cluster=default_cluster())
        for name, extra in (("ITP cluster04, Bellows", []), ("ITP cluster04, paper", ["--paper"])):
            run_args = [str(itp), "--gpus", str(gpus), "--no-plots", *extra]
            _case(name, run_args, target_s=10.0, work=work, repeat=1, before=args.before)


if __name__ == "__main__":
    main()
