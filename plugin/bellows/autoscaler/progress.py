"""The core's own estimate of each running job's progress, from the model's rates.

The simulator and the live controller know the true progress; the core needs an estimate of
the remaining work only to price a restart (the restart-cost option). The estimate follows
the same rule the simulator applies: a job progresses at ``X(b, k)`` samples per second,
except for ``restart_cost_s`` seconds after each rescale.
"""

from __future__ import annotations

from dataclasses import dataclass

from bellows.jobs import Allocation

__all__ = ["RunningJob"]


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
        self, allocation: Allocation, rate: float, now: float, *, restart_cost_s: float
    ) -> RunningJob:
        """The same job after a rescale at ``now``."""
        return RunningJob(
            allocation=allocation,
            rate=rate,
            done=self.done_at(now),
            since=now,
            paused_until=now + restart_cost_s,
        )
