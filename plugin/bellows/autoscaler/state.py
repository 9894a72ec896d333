"""What the core knows of its jobs: their specs, rows, queue, allocations and progress.

One mutable value, :class:`State`, that the core (:mod:`bellows.autoscaler.core`) holds and
the pure modules it calls read and update: admission and preemption
(:mod:`bellows.autoscaler.admission`), pricing (:mod:`bellows.autoscaler.valuing`) and
applying decisions (:mod:`bellows.autoscaler.applying`). No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bellows.autoscaler.progress import RunningJob
from bellows.autoscaler.rows import Row
from bellows.jobs import JobSpec

__all__ = ["State"]


@dataclass
class State:
    """The core's jobs: ``Arrived`` (``arrived``, FIFO) and ``Executing`` (``running``)."""

    jobs: dict[str, JobSpec] = field(default_factory=dict)
    rows: dict[str, Row] = field(default_factory=dict)
    arrived: list[str] = field(default_factory=list)  # FIFO
    running: dict[str, RunningJob] = field(default_factory=dict)  # in start order
    carried: dict[str, float] = field(default_factory=dict)  # progress kept over a preemption
    resumed: dict[str, float] = field(default_factory=dict)  # running job -> (re)started at
    moves: dict[str, int] = field(default_factory=dict)  # rescales each job has made
    in_use: int = 0  # GPUs the running jobs hold

    def copy(self) -> State:
        """An independent state: the containers copied, the immutable values they hold
        (specs, rows, running jobs) shared."""
        return State(
            jobs=dict(self.jobs), rows=dict(self.rows), arrived=list(self.arrived),
            running=dict(self.running), carried=dict(self.carried), in_use=self.in_use,
            resumed=dict(self.resumed), moves=dict(self.moves),
        )  # fmt: skip

    def min_need(self, names: Sequence[str]) -> int:
        """GPUs the jobs ``names`` need at their smallest allocation."""
        return sum(self.rows[n].min_gpus for n in names)
