"""Sweeps that outgrow one process: ``bellows reproduce`` on local workers, and a 200-cell
``bellows sweep`` on a local Ray instance (issue 14).

    python benchmarks/sweep.py [--part reproduce|ray|all] [--workers 2] [--full] [--seeds 50]
                               [--out DIR] [--data DIR]

* ``reproduce``: ``bellows reproduce --quick`` (``--full``: the whole reproduction)
  sequentially (``--workers 1``), then on ``--workers`` local processes; prints both wall and
  CPU times and the ratio of the walls (target <= 0.6 with two workers), and checks that the
  two reports carry the same numbers.
* ``ray``: a GRID of 40-GPU, 240-minute bursty runs (categories 1-4), ``--seeds`` seeds x four
  policies (Bellows mode, paper mode with and without a queue, the event-driven fixed-batch
  baseline): 200 cells with the default 50 seeds. Runs it with ``bellows sweep --ray local``
  (a Ray instance started for the run, on every CPU of this machine), counts the cells in
  ``sweep.csv`` (target: every one ``ok``, none lost), then runs the same command again
  (target: no cell runs) and prints both wall times.

Every command is run as a user would, in a child process, and printed before it runs. The
output folder (a temporary one unless ``--out``) keeps the reports and the sweep.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bellows.cli.data import DATA_ENV, data_folder

BELLOWS = [sys.executable, "-m", "bellows.cli.main"]
POLICIES = """\
policies:
  bellows: {}
  paper-queue: {mode: paper, queue: true}
  paper: {mode: paper}
  baseline: {mode: paper, queue: true, policy: baseline, delta_min: 0}
"""
_TIMES = re.compile(r"\d+(\.\d+)? s\b")  # the wall times each run prints
_WORKERS = re.compile(r" --workers \d+")  # the report's command line names them


def _cpu() -> float:
    """CPU seconds used so far by finished children (and theirs: the workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(words: Sequence[str]) -> tuple[float, float, str]:
    """Run ``bellows WORDS``; its wall time, CPU time and output (it must succeed)."""
    print("$ bellows " + shlex.join(words), flush=True)
    started, cpu = time.perf_counter(), _cpu()
    done = subprocess.run([*BELLOWS, *words], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return wall, _cpu() - cpu, done.stdout


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def _numbers(report: Path) -> str:
    """A report's text without its timings and ``--workers``: what must not depend on them."""
    return _WORKERS.sub("", _TIMES.sub("", report.read_text(encoding="utf-8")))


def reproduce(out: Path, workers: int, data: Path | None, *, full: bool) -> bool:
    """``bellows reproduce [--quick]``: sequential, then on ``workers`` local processes."""
    given = ([] if full else ["--quick"]) + ([] if data is None else ["--data", str(data)])
    walls, cpus = {}, {}
    for n in (1, workers):
        folder = out / f"reproduce-w{n}"
        command = ["reproduce", *given, "--out", str(folder / "reproduction.md"),
                   "--figures", str(folder / "figures"), "--workers", str(n)]  # fmt: skip
        walls[n], cpus[n], _ = _run(command)
    ratio = walls[workers] / walls[1]
    same = _numbers(out / "reproduce-w1" / "reproduction.md") == _numbers(
        out / f"reproduce-w{workers}" / "reproduction.md"
    )
    print(_table([
        ["bellows reproduce" + ("" if full else " --quick"), "wall (s)", "CPU (s)",
         "wall vs sequential", "target"],
        ["--workers 1", f"{walls[1]:.1f}", f"{cpus[1]:.1f}", "1.00", ""],
        [f"--workers {workers}", f"{walls[workers]:.1f}", f"{cpus[workers]:.1f}",
         f"{ratio:.2f}", "<= 0.6 (2 workers)"],
    ]))  # fmt: skip
    print(
        f"(load average over the last minute, after: {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs)"
    )
    print(f"reports carry the same numbers: {'yes' if same else 'NO'}\n")
    return same and ratio <= 0.6


def ray_sweep(out: Path, seeds: int) -> bool:
    """The 200-cell GRID on a local Ray instance, then the same command again."""
    grid = out / "grid.yaml"
    grid.write_text(
        "traces:\n"
        "  - generate: {pattern: bursty, minutes: 240, categories: [1, 2, 3, 4], "
        "period_min: 60}\n"
        "gpus: 40\n"
        f"seeds: [{', '.join(str(s) for s in range(1, seeds + 1))}]\n" + POLICIES,
        encoding="utf-8",
    )
    folder = out / "sweep"
    command = ["sweep", str(grid), "--out", str(folder), "--ray", "local"]
    first, _, _ = _run(command)
    with (folder / "sweep.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    cells = 4 * seeds
    ok = sum(r["status"] == "ok" for r in rows)
    simulated = sum(float(r["wall_s"] or 0.0) for r in rows)
    again, _, text = _run(command)
    rerun = re.search(r"(\d+) run \(", text)
    ran_again = int(rerun.group(1)) if rerun else -1
    print(_table([
        ["bellows sweep --ray local", "wall (s)", "cells ok / in GRID", "cells run", "target"],
        ["first run", f"{first:.1f}", f"{ok} / {cells}", str(ok),
         f"all {cells} ok, none lost ({simulated:.0f} s of simulation)"],
        ["same command again", f"{again:.1f}", "", str(ran_again), "0 (nothing to do)"],
    ]))  # fmt: skip
    return ok == cells == len(rows) and ran_again == 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("reproduce", "ray", "all"), default="all")
    parser.add_argument("--workers", type=int, default=2, help="local workers for reproduce")
    parser.add_argument("--full", action="store_true",
                        help="the whole reproduction (minutes) instead of --quick")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=50, help="seeds of the Ray GRID (x 4)")
    parser.add_argument("--out", type=Path, default=None, help="keep the results here")
    parser.add_argument("--data", type=Path, default=data_folder(),
                        help=f"the real traces for reproduce (default: ${DATA_ENV}, else "
                             "shared/data beside the checkout)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.workers < 2 or args.seeds < 1:
        parser.error("--workers must be >= 2 and --seeds >= 1")
    given = sys.argv[1:] if argv is None else list(argv)
    print("$ python " + shlex.join(["benchmarks/sweep.py", *given]))
    with tempfile.TemporaryDirectory(prefix="bellows-sweep-") as temporary:
        out = args.out or Path(temporary)
        out.mkdir(parents=True, exist_ok=True)
        met = True
        if args.part in ("reproduce", "all"):
            met &= reproduce(out, args.workers, args.data, full=args.full)
        if args.part in ("ray", "all"):
            met &= ray_sweep(out, args.seeds)
    print("targets met" if met else "MISSED a target (see above)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
