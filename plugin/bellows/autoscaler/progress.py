"""The core's own estimate of each running job's progress, from the model's rates.

The simulator and the live controller know the true progress; the core needs an estimate of
the remaining work to price a restart and to weigh jobs by their remaining time. The estimate
follows the same rule the simulator applies: a job progresses at ``X(b, k)`` samples per
second, except for ``restart_s`` seconds after each rescale.

A job decided by goodput (charged an :class:`~bellows.scaling.EfficiencyProfile`) progresses
in reference samples at ``X(b, k) E(b, progress)``, and ``E`` moves as training goes on. Its
estimate goes through the ``GOODPUT_STEPS`` steps of its work its goodput rows follow
(:mod:`bellows.autoscaler.rows`), each at the step's mean rate, ``integral ds / E`` over it
(:attr:`RunningJob.speeds`): exact at each step's end, linear within. Its rate was that of
the E at its step's middle until the core next looked (a round: minutes, or longer between
events), so an early job at a large batch, whose ``E`` rises fast, was believed far ahead of
its truth (the demo's c3-00001, believed 115 % done when the simulator had it at 54 %).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from bellows.jobs import Allocation
from bellows.scaling import EfficiencyProfile

__all__ = [
    "GOODPUT_STEPS",
    "LEAST_LEFT",
    "RunningJob",
    "done_at_all",
    "middle_gain",
    "step_middle",
    "step_of",
    "work_left",
]

GOODPUT_STEPS = 10  # a goodput row is recomputed each 1/10 of a job's work (10 % progress)

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
    """A job in ``Executing``: its allocation, its rate and the work done up to ``since``;
    ``charge``: the efficiency of a job decided by goodput (``rate`` is then reference
    samples per second in the step ``done`` is in, and ``work`` the job's work)."""

    allocation: Allocation
    rate: float  # samples per second at ``allocation``
    done: float  # samples processed up to ``since``
    since: float  # time of the last change
    paused_until: float  # no progress before this (restart after a rescale)
    charge: EfficiencyProfile | None = None
    work: float = 0.0  # the job's work, where ``charge`` is set

    def done_at(self, now: float) -> float:
        """Samples processed by ``now`` (estimate)."""
        active = max(0.0, now - max(self.since, self.paused_until))
        if self.charge is None:
            return self.done + self.rate * active
        return self._stepped(active)

    def _stepped(self, active: float) -> float:
        """Reference samples after ``active`` seconds of progress from ``done``, step by
        step at :attr:`speeds`: exact at each step's end, linear within a step."""
        done, work = self.done, self.work
        step, last = step_of(done, work), GOODPUT_STEPS - 1
        for rate in self.speeds:
            if step == last or rate <= 0.0:
                return done + rate * active
            end = work * (step + 1) / GOODPUT_STEPS
            need = max(0.0, (end - done) / rate)
            if need >= active:
                return done + rate * active
            active -= need
            done = end
            step += 1
        raise AssertionError("a speed for every step up to the last")  # pragma: no cover

    @cached_property
    def speeds(self) -> tuple[float, ...]:
        """A charged job's mean rate (reference samples per second) in each goodput step
        from the one ``done`` is in (from ``done`` to its end) to the last: ``X(b, k)``
        (``rate`` over ``E`` at the middle of ``done``'s step, as its row gave it) times the
        step's ``span / integral ds / E(b, s)``, so that the estimate is exact at each
        step's end, as the simulator charges (``EfficiencyProfile.progress_after``)."""
        if self.charge is None or self.work <= 0.0 or self.rate <= 0.0:
            return (self.rate,)
        work, batch = self.work, self.allocation.batch
        first = step_of(self.done, work)
        bounds = work * np.arange(first + 1, GOODPUT_STEPS + 1, dtype=np.float64) / GOODPUT_STEPS
        starts = np.concatenate(([min(max(self.done, 0.0), float(bounds[0]))], bounds[:-1]))
        spans = bounds - starts
        samples = self.charge.samples_between(batch, starts, bounds)
        gain = np.where(spans > 0.0, spans / np.where(spans > 0.0, samples, 1.0), 0.0)
        gain[spans <= 0.0] = self.charge.efficiency(batch, starts)[spans <= 0.0]
        speed = self.rate / middle_gain(self.charge, batch, self.done, work)
        return tuple((speed * gain).tolist())

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
            charge=self.charge,
            work=self.work,
        )


def done_at_all(jobs: Sequence[RunningJob], now: float) -> npt.NDArray[np.float64]:
    """:meth:`RunningJob.done_at` of each job, in one array: the same float operations in
    the same order, so the same values to the last bit (a charged job's: its own call)."""
    since = np.maximum(  # max(since, paused_until), as done_at, without a call per job
        np.array([job.since for job in jobs], dtype=np.float64),
        np.array([job.paused_until for job in jobs], dtype=np.float64),
    )
    done = np.array([job.done for job in jobs], dtype=np.float64)
    rate = np.array([job.rate for job in jobs], dtype=np.float64)
    out = np.asarray(done + rate * np.maximum(0.0, now - since), dtype=np.float64)
    for i, job in enumerate(jobs):
        if job.charge is not None:
            out[i] = job.done_at(now)
    return out


def middle_gain(profile: EfficiencyProfile, batch: int, done: float, work: float) -> float:
    """``E(batch)`` at the middle of the goodput step ``done`` is in: the gain a charged job's
    rate carries (its row's, :mod:`bellows.autoscaler.rows`)."""
    return float(profile.efficiency(batch, step_middle(step_of(done, work), work)))


def step_middle(step: int, work: float) -> float:
    """The progress at the middle of goodput step ``step`` of a job of ``work``: where its
    rows take E (:mod:`bellows.autoscaler.rows`) and its estimate's rate carries it."""
    return work * (step + 0.5) / GOODPUT_STEPS


def step_of(done: float, work: float) -> int:
    """The goodput step (``0 .. GOODPUT_STEPS - 1``) a job of ``work`` is in at ``done``."""
    return min(GOODPUT_STEPS - 1, int(GOODPUT_STEPS * max(done, 0.0) / work))


def work_left(work: npt.ArrayLike, done: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Samples a running job is believed to have left: ``work - done``, but never below
    :data:`LEAST_LEFT` of ``work`` (elementwise)."""
    total = np.asarray(work, dtype=np.float64)
    return np.maximum(total - np.asarray(done, dtype=np.float64), LEAST_LEFT * total)
