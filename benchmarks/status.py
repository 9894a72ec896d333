"""``bellows status`` on the emulated cluster holding 10 000 opted-in jobs, as a whole
process, cold and warm, medians (target, issue 28: <= 2 s).

    python benchmarks/status.py [--jobs 10000] [--running 0] [--repeat 3] [--before DIR]

The cluster (``controller_latency.ClusterProcess``: the mixed workload's jobs, suspended,
opted in, each with its inline profile) runs in a child process; each run is
``bellows status -A --kubeconfig ...`` to its end, output discarded: one list per kind in
pages of 500, one list of Bellows' Events, one of the nodes, every row built. ``--running N``
makes the first N jobs ones Bellows started (unsuspended, journaled): their rows parse the
spec and compute the predicted speed, a waiting job's only its journal. Cold: a fresh,
empty bytecode cache (``PYTHONPYCACHEPREFIX``) for every run; warm: the installed bytecode.
Each run also times the same lists as plain HTTP requests, the emulated API server's share
(it serves 10 000 jobs from Python, far slower than a real API server's watch cache).
``--before DIR`` (a source tree, e.g. ``git worktree add DIR main``) adds a warm run of that
tree's ``bellows status`` beside each of this one, against the same cluster, and the ratio
of the medians: on a loaded machine only runs measured together compare.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from controller_latency import ClusterProcess
from controller_memory import _kubeconfig
from processes import bellows_command, median_of, time_process

TARGET_S = 2.0
KINDS = (("kubeflow.org/v1", "pytorchjobs"), ("kubeflow.org/v2beta1", "mpijobs"))


def _raw_lists(url: str) -> float:
    """Seconds to list every job page by page as plain HTTP: the server's share of a run."""
    started = time.perf_counter()
    for group_version, plural in KINDS:
        token = ""
        while True:
            query = f"{url}/apis/{group_version}/{plural}?limit=500"
            with urllib.request.urlopen(query + (f"&continue={token}" if token else "")) as got:
                token = json.loads(got.read())["metadata"].get("continue") or ""
            if not token:
                break
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=0, help="jobs started by Bellows")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--before", type=Path, default=None, help="a source tree to compare")
    args = parser.parse_args()
    with (
        ClusterProcess(args.jobs, args.jobs, args.seed, running=args.running) as url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        config = _kubeconfig(Path(tmp) / "kubeconfig", url)
        command, _ = bellows_command()
        argv = [*command, "status", "-A", "--kubeconfig", str(config)]
        time_process(argv)  # the server's first lists warm its caches, as a running cluster's
        old, old_env = bellows_command(args.before) if args.before else ([], {})
        old_argv = [*old, *argv[len(command) :]]
        if args.before:
            time_process(old_argv, env=old_env)  # its bytecode written, as an installed one's
        cold, warm, lists, before = [], [], [], []
        for i in range(args.repeat):
            lists.append(_raw_lists(url))
            with tempfile.TemporaryDirectory() as prefix:
                cold.append(time_process(argv, env={"PYTHONPYCACHEPREFIX": prefix}))
            warm.append(time_process(argv))
            then = ""
            if args.before:
                before.append(time_process(old_argv, env=old_env))
                then = f", before warm {before[-1].wall_s:.2f} s (CPU {before[-1].cpu_s:.2f} s)"
            print(
                f"run {i + 1}: cold {cold[-1].wall_s:.2f} s, warm {warm[-1].wall_s:.2f} s "
                f"(CPU {warm[-1].cpu_s:.2f} s){then}, "
                f"the server's lists alone {lists[-1]:.2f} s"
            )
    c, w = median_of(cold), median_of(warm)
    flag = "" if w.wall_s <= TARGET_S else "  (over target)"
    print(
        f"bellows status, {args.jobs} jobs ({args.running} running): cold {c.wall_s:.2f} s, "
        f"warm {w.wall_s:.2f} s "
        f"(CPU {w.cpu_s:.2f} s), {w.peak_mib:.0f} MiB (medians of {args.repeat}; target "
        f"{TARGET_S} s){flag}; the emulated server's lists alone {statistics.median(lists):.2f} s"
    )
    if before:
        b = median_of(before)
        print(
            f"before: warm {b.wall_s:.2f} s (CPU {b.cpu_s:.2f} s), {b.peak_mib:.0f} MiB: "
            f"{b.wall_s / w.wall_s:.2f}x the wall time, {b.cpu_s / w.cpu_s:.2f}x the CPU"
        )


if __name__ == "__main__":
    main()
