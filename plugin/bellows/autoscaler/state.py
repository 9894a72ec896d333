"""What the core knows of its jobs (their specs, rows, queue, allocations and progress),
and what its last round did (:class:`RoundStats`).

One mutable value, :class:`State`, that the core (:mod:`bellows.autoscaler.core`) holds and
the pure modules it calls read and update: admission and preemption
(:mod:`bellows.autoscaler.admission`), pricing (:mod:`bellows.autoscaler.valuing`) and
applying decisions (:mod:`bellows.autoscaler.applying`). No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from bellows.autoscaler.progress import RunningJob
from bellows.jobs import JobSpec
from bellows.scaling import EfficiencyProfile

__all__ = ["RoundStats", "Row", "State"]


@dataclass(frozen=True)
class Row:
    """A job's TSF row under the configured policy, computed once on arrival
    (:mod:`bellows.autoscaler.rows`)."""

    values: np.ndarray  # float64 [k_max+1], -inf where infeasible, column 0 = -inf
    batch: tuple[int, ...]  # [k_max+1], best global batch per GPU count (Python ints)
    rate: np.ndarray  # float64 [k_max+1], samples/s at (k, batch[k])
    min_gpus: int  # smallest feasible k (k_max + 1 when none)
    x1: float  # samples/s on one GPU at the job's largest per-GPU batch (TSF's unit)
    grid: np.ndarray  # values on the optimizer's exact grid (pricing.exact), no keep bonus


@dataclass(frozen=True)
class RoundStats:
    """What the last round (or fill) looked at and decided (for metrics and logs)."""

    at: float
    candidates: int
    admitted: int
    objective: float
    decisions: int
    kind: str = "round"  # "round", "fill" or "preempt"


@dataclass
class State:
    """The core's jobs: ``Arrived`` (``arrived``, FIFO) and ``Executing`` (``running``)."""

    jobs: dict[str, JobSpec] = field(default_factory=dict)
    rows: dict[str, Row] = field(default_factory=dict)
    arrived: list[str] = field(default_factory=list)  # FIFO
    running: dict[str, RunningJob] = field(default_factory=dict)  # in start order
    carried: dict[str, float] = field(default_factory=dict)  # progress kept over a preemption
    revoked: set[str] = field(default_factory=set)  # jobs whose measured placements a step refuted
    resumed: dict[str, float] = field(default_factory=dict)  # running job -> (re)started at
    moves: dict[str, int] = field(default_factory=dict)  # rescales each job has made
    in_use: int = 0  # GPUs the running jobs hold
    charged: dict[str, EfficiencyProfile] = field(default_factory=dict)  # goodput's profiles

    def copy(self) -> State:
        """An independent state: the containers copied, the immutable values they hold
        (specs, rows, running jobs) shared."""
        return State(
            jobs=dict(self.jobs), rows=dict(self.rows), arrived=list(self.arrived),
            running=dict(self.running), carried=dict(self.carried), in_use=self.in_use,
            resumed=dict(self.resumed), moves=dict(self.moves), charged=dict(self.charged),
            revoked=set(self.revoked),
        )  # fmt: skip

    def forget(self, name: str) -> None:
        """Drop job ``name``'s spec, row, progress, moves and charge (it neither runs nor
        waits)."""
        self.jobs.pop(name, None)
        self.rows.pop(name, None)
        self.carried.pop(name, None)
        self.resumed.pop(name, None)
        self.moves.pop(name, None)
        self.charged.pop(name, None)
        self.revoked.discard(name)

    def min_need(self, names: Sequence[str]) -> int:
        """GPUs the jobs ``names`` need at their smallest allocation."""
        return sum(self.rows[n].min_gpus for n in names)
