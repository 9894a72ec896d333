"""Controller CPU for 500 progress reports of one job in one second (issue 25).

    PYTHONPATH=. python benchmarks/progress_flood.py [--repeats 5] [--noise]

One running job (8 GPUs, batch 512) sends 500 valid, consistent reports in one second of the
loop's clock. ``per report``: every report taken and refitted as it comes, no rate limit
(``ProgressLoop.take`` with limits too wide to bind and no refit interval: the loop before
issue 25). ``coalesced``: as ``ProgressLoop.run`` takes a fetched batch (``accept`` each, then
``flush``) with the defaults (50 reports/s a namespace, bursts of 200, one refit per job per
second). Prints the median CPU seconds over ``--repeats`` and the ratio (target <= 5 %).
``--noise``: every report also carries gradient statistics (payload version 2, a noise scale
of about 400 samples), so the job's statistical efficiency is refitted too and the job is
decided by goodput once it is known.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from tests.strategies import make_job

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.bus.progress import ProgressEvent, ProgressType, encode_progress, progress_subject
from bellows.jobs import JobSpec
from bellows.scaling import EfficiencyProfile, default_cluster
from bellows.scaling.placement_memory import ObservedStep
from bellows.scaling.timing import step_time
from bellows.service.learning import ProgressLearner
from bellows.service.progress_limits import ProgressLimits
from bellows.service.progress_loop import ProgressLoop

CLUSTER = default_cluster()
T0 = datetime(2025, 5, 1, tzinfo=UTC)
KEY = "pytorchjob/team-a/resnet"


class _Controller:
    def __init__(self, spec: JobSpec) -> None:
        self.now = 0.0
        self.autoscaler = Autoscaler(AutoscalerConfig(), capacity=16, cluster=CLUSTER)
        self.autoscaler.arrive(spec, now=0.0)
        self.autoscaler.step(0.0)

    async def revise(
        self,
        spec: JobSpec,
        *,
        done: float | None,
        since: float | None,
        efficiency: EfficiencyProfile | None = None,
    ) -> bool:
        if efficiency is not None:
            self.autoscaler.charge(spec.name, efficiency)
        return self.autoscaler.revise(spec, self.now, done=done, since=since)

    async def notify(self, job: str, reason: str, message: str) -> None:
        return None

    async def observe_step(self, job: str, step: ObservedStep) -> bool:
        return self.autoscaler.observe_step(job, self.now, step)


async def _flood(coalesced: bool, noise: bool = False) -> float:
    spec = make_job(KEY, work=1e12)
    controller = _Controller(spec)
    seconds = 1.3 * step_time(spec, 8, 512, CLUSTER)  # slower than its profile: refits move
    wide = ProgressLimits(1e9, 1e9, 1e12, 1e12)
    loop = ProgressLoop(
        controller=controller, learner=ProgressLearner(CLUSTER), prefix="bellows",
        now=lambda: controller.now, wall_to_clock=lambda when: (when - T0).total_seconds(),
        limits=None if coalesced else wide, refit_interval_s=1.0 if coalesced else 0.0,
    )  # fmt: skip
    subject = progress_subject("bellows", "team-a", "resnet")
    messages = []
    for i in range(500):
        at = i / 500
        samples = round(1000 + at * 512 / seconds)
        grads = {"grad_sqr": 1.0, "grad_var": 400.0 * (1 + 0.02 * (i % 5))} if noise else {}
        event = ProgressEvent(
            ProgressType.PROGRESS, "team-a", "resnet", T0 + timedelta(seconds=at), samples,
            8, 512, seconds * (1 + 0.01 * (i % 7)), 20, **grads,
        )  # fmt: skip
        messages.append((at, encode_progress(event)))
    started = time.process_time()
    for start in range(0, 500, 50):  # fetched batches of 50
        for at, data in messages[start : start + 50]:
            controller.now = at
            if coalesced:
                await loop.accept(subject, data)
            else:
                await loop.take(subject, data)
        if coalesced:
            await loop.flush()
    return time.process_time() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--noise", action="store_true", help="reports carry gradient noise")
    args = parser.parse_args(argv)
    print(
        "$ python benchmarks/progress_flood.py " + " ".join(sys.argv[1:] if argv is None else argv)
    )
    before, after = [], []
    for _ in range(args.repeats):  # interleaved: the machine's load hits both alike
        before.append(asyncio.run(_flood(False, args.noise)))
        after.append(asyncio.run(_flood(True, args.noise)))
    b, a = statistics.median(before), statistics.median(after)
    print(f"per report (before): median {b:.3f} s CPU for 500 reports")
    print(f"coalesced + limited: median {a:.4f} s CPU")
    print(f"ratio {a / b:.2%} (target <= 5 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
