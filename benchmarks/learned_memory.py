"""What a new leader pays to recall what the last one learned (issue 37 item 2).

    python benchmarks/learned_memory.py [--jobs 10000] [--reports 40] [--repeats 3]

Each job's learned state is what a job reporting ``--reports`` times (gradient noise
included, 30 s apart, at one allocation) leaves in the learner; ``--jobs`` such records are
written to the controller's bucket on a real ``nats-server``, and then, in a fresh process
each time (``--repeats``), a new leader's :meth:`Memory.load` reads and decodes them all.
Prints the record's size, the medians of the load's wall time and of the child's resident
set before and after it (``VmRSS``, MiB), and the growth per 1 000 records.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bellows.bus import NatsSettings, connect
from bellows.bus.learned import KvLearnedStore
from bellows.bus.progress import ProgressEvent, ProgressType
from bellows.bus.server import running_nats_server
from bellows.bus.streams import ensure_learned_kv
from bellows.jobs import Allocation
from bellows.scaling import default_cluster
from bellows.service.learned_state import encode
from bellows.service.learning import ProgressLearner
from bellows.service.memory import Memory

T0 = datetime(2025, 5, 1, tzinfo=UTC)


def wall(reading: float) -> datetime:
    return T0 + timedelta(seconds=reading)


def clock(when: datetime) -> float:
    return (when - T0).total_seconds()


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def record(reports: int) -> bytes:
    """One job's learned state after ``reports`` reports, as the controller keeps it."""

    learner = ProgressLearner(default_cluster())
    run, seconds = Allocation(4, 512), 0.7
    for i in range(reports):
        at = 30.0 * i
        samples = 1000 + round(at * run.batch / seconds)
        event = ProgressEvent(
            ProgressType.PROGRESS, "team-a", "job", wall(at), samples, run.gpus, run.batch,
            seconds, 20, grad_sqr=1e-2, grad_var=0.4 * (1 + 0.01 * i),
        )  # fmt: skip
        learner.take("job", event, run, at, work=5e7)
    learning = learner.snapshot("job")
    assert learning is not None
    return encode(learning, job="pytorchjob/team-a/job", uid="uid", wall=wall)


async def _fill(url: str, jobs: int, reports: int) -> int:

    settings = NatsSettings(servers=(url,))
    nc = await connect(settings)
    try:
        store = KvLearnedStore(await ensure_learned_kv(nc.jetstream(), settings))
        one = record(reports)
        for start in range(0, jobs, 500):
            await asyncio.gather(*(
                store.save(f"pytorchjob/team-a/job-{i}", one.replace(
                    b'"pytorchjob/team-a/job"', f'"pytorchjob/team-a/job-{i}"'.encode()))
                for i in range(start, min(jobs, start + 500))
            ))  # fmt: skip
        return len(one)
    finally:
        await nc.close()


async def _load(url: str) -> dict[str, float]:

    settings = NatsSettings(servers=(url,))
    nc = await connect(settings)
    try:
        store = KvLearnedStore(await ensure_learned_kv(nc.jetstream(), settings))
        memory = Memory(ProgressLearner(default_cluster()), store, wall=wall, clock=clock)
        before = _rss_mib()
        started = time.perf_counter()
        loaded = await memory.load()
        return {
            "seconds": time.perf_counter() - started,
            "rss_before": before,
            "rss_after": _rss_mib(),
            "records": loaded,
        }
    finally:
        await nc.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--reports", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:  # one new leader's load, in this fresh process
        logging.disable(logging.CRITICAL)
        print(json.dumps(asyncio.run(_load(args.child))))
        return 0

    async def run() -> tuple[int, list[dict[str, float]]]:
        with tempfile.TemporaryDirectory() as folder:
            async with running_nats_server(Path(folder)) as server:
                size = await _fill(server.url, args.jobs, args.reports)
                runs = []
                for _ in range(args.repeats):
                    child = await asyncio.to_thread(
                        subprocess.run,
                        [sys.executable, __file__, "--child", server.url],
                        capture_output=True, text=True, check=True, env=dict(os.environ),
                    )  # fmt: skip
                    runs.append(json.loads(child.stdout.strip().splitlines()[-1]))
                return size, runs

    size, runs = asyncio.run(run())
    assert all(r["records"] == args.jobs for r in runs), runs
    seconds = statistics.median(r["seconds"] for r in runs)
    grown = statistics.median(r["rss_after"] - r["rss_before"] for r in runs)
    print(f"| records | record bytes | load s (median of {args.repeats}) | RSS before | "
          "RSS after | growth | per 1 000 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    before = statistics.median(r["rss_before"] for r in runs)
    after = statistics.median(r["rss_after"] for r in runs)
    print(
        f"| {args.jobs} | {size} | {seconds:.2f} | {before:.1f} MiB | {after:.1f} MiB | "
        f"{grown:.1f} MiB | {grown / max(args.jobs, 1) * 1000:.2f} MiB |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
