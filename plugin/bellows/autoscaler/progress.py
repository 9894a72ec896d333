"""The core's own estimate of each running job's progress, from the model's rates.

The simulator and the live controller know the true progress; the core needs an estimate of
the remaining work only to price a restart (the restart-cost option). The estimate follows
the same rule the simulator applies: a job progresses at ``X(b, k)`` samples per second,
except for ``restart_s`` seconds after each rescale.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bellows.jobs import Allocation

__all__ = ["LEAST_LEFT", "RunningJob", "done_at_all", "work_left"]

LEAST_LEFT = 0.05
"""The least share of its work a running job is believed to have left. The estimate runs
ahead of the truth wherever the model is optimistic (the efficiency prior at a large batch,
a job whose stated work is short), and a job's work as its owner states it is an estimate
too. At zero left, every move of the job was priced worth nothing (a restart that finishes
no sooner) and its remaining-time weight was the largest: the core shrank a job it believed
done to one GPU and could never grow it again (the Pollux artifact's workload-3, a yolov3
job believed 50 % past its work ran its last 8 400 s on one GPU, at twice the published
JCT). A job still running has work left; how much is unknown, so the core assumes a share."""


@dataclass(frozen=True)
class RunningJob:
    """A job in ``Executing``: its allocation, its rate and the work done up to ``since``."""

    allocation: Allocation
    rate: float  # samples per second at ``allocation``
    done: float  # samples processed up to ``since``
    since: float  # time of the last change
    paused_until: float  # no progress before this (restart after a rescale)

    def done_at(self, now: float) -> float:
        """Samples processed by ``now`` (estimate)."""
        active = max(0.0, now - max(self.since, self.paused_until))
        return self.done + self.rate * active

    def moved_to(
        self, allocation: Allocation, rate: float, now: float, *, restart_s: float
    ) -> RunningJob:
        """The same job after a rescale at ``now``."""
        return RunningJob(
            allocation=allocation,
            rate=rate,
            done=self.done_at(now),
            since=now,
            paused_until=now + restart_s,
        )


def done_at_all(jobs: Sequence[RunningJob], now: float) -> npt.NDArray[np.float64]:
    """:meth:`RunningJob.done_at` of each job, in one array: the same float operations in
    the same order, so the same values to the last bit."""
    since = np.maximum(  # max(since, paused_until), as done_at, without a call per job
        np.array([job.since for job in jobs], dtype=np.float64),
        np.array([job.paused_until for job in jobs], dtype=np.float64),
    )
    done = np.array([job.done for job in jobs], dtype=np.float64)
    rate = np.array([job.rate for job in jobs], dtype=np.float64)
    return np.asarray(done + rate * np.maximum(0.0, now - since), dtype=np.float64)


def work_left(work: npt.ArrayLike, done: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Samples a running job is believed to have left: ``work - done``, but never below
    :data:`LEAST_LEFT` of ``work`` (elementwise)."""
    total = np.asarray(work, dtype=np.float64)
    return np.maximum(total - np.asarray(done, dtype=np.float64), LEAST_LEFT * total)
