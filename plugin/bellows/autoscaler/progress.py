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

**Shown progress.** The model's rate is what the job's step times claim; the samples it
reports over the wall time are what it has *shown*. A job may claim more than it shows (the
report checks let a step time through up to ``AHEAD_TOLERANCE`` faster than its samples'
pace, since honest jobs pause) and would be believed nearer its end: the remaining-time
weights (:attr:`bellows.autoscaler.objectives.Objective.REMAINING`) and the restart prices
would pay for the lie (``benchmarks/liars.py``: a job reporting half its step time, 74 %
sooner done with the remaining-time power 0.3 and an early round). So each report the core
is told (``Autoscaler.revise(..., done=)``) is set against the last progress known exactly
at the same allocation (the previous report, or nothing done at a fresh start): the samples
the job took in between over those its revised model claims there is
:attr:`RunningJob.shown` (:func:`shown_share`), which follows the job through its moves,
the model scaling it to other counts. Where it is below 1, :func:`shown_left` takes the
estimate since its anchor at that pace and divides the work left by it: the job is weighed
by the time its shown pace leaves it, never more than :data:`LEAST_SHOWN` allows. A job
that has reported nothing, or shown its claim or more, keeps its model's word, to the bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from bellows.jobs import Allocation
from bellows.scaling import EfficiencyProfile
from bellows.scaling.consistency import AHEAD_TOLERANCE

__all__ = [
    "GOODPUT_STEPS",
    "LEAST_LEFT",
    "LEAST_SHOWN",
    "RunningJob",
    "Shown",
    "done_at_all",
    "middle_gain",
    "shown_left",
    "shown_share",
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


LEAST_SHOWN = 1.0 / (1.0 + AHEAD_TOLERANCE)
"""The least :attr:`Shown.share` the core takes. The report checks learn no step time faster
than the pace its window's samples show, less :data:`~bellows.scaling.consistency.
AHEAD_TOLERANCE` (``bellows.scaling.consistency``): a job that lies about its step time is
believed at most that much faster than it showed, and this takes back that much. A job that
showed less than that is one its model is wrong about (its efficiency, its startup, a stall),
not a liar: it is weighed as if it had shown this much, so that an honest job's weight moves
by at most as much as a lie could have moved it."""


@dataclass(frozen=True)
class Shown:
    """What a running job showed (:attr:`RunningJob.shown`): the samples it took over a span
    between two exact points over those its model claims there (``share``, at least
    :data:`LEAST_SHOWN`), at allocation ``on``."""

    share: float
    on: Allocation


@dataclass(frozen=True)
class RunningJob:
    """A job in ``Executing``: its allocation, its rate and the work done up to ``since``;
    ``charge``: the efficiency of a job decided by goodput (``rate`` is then reference
    samples per second in the step ``done`` is in, and ``work`` the job's work).

    ``seen``: the samples done and the time of the last progress known exactly at this
    allocation, from which the job stepped without a pause (its last report, or 0 at a fresh
    start); ``None`` after a move or a resume. ``shown``: the samples the job took between its
    last two such points over those its (revised) model claims there, and the allocation it
    showed them at; ``None`` when not known (see the module docstring). It follows the job
    through its moves (the model scales it to other counts) and its refits."""

    allocation: Allocation
    rate: float  # samples per second at ``allocation``
    done: float  # samples processed up to ``since``
    since: float  # time of the last change
    paused_until: float  # no progress before this (restart after a rescale)
    charge: EfficiencyProfile | None = None
    work: float = 0.0  # the job's work, where ``charge`` is set
    seen: tuple[float, float] | None = None  # (done, at): known exactly, stepping since
    shown: Shown | None = None  # samples shown over samples claimed, and where (or unknown)

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
            shown=self.shown,
        )

    def raw(self, rate: float, done: float) -> float:
        """``rate`` (at this job's allocation; a charged job's: reference samples per second
        at the goodput step ``done`` is in) as samples per second: ``X(b, k)``, what the
        job's step times claim."""
        if self.charge is None or self.work <= 0.0:
            return rate
        return rate / middle_gain(self.charge, self.allocation.batch, done, self.work)

    def rerated(self, rate: float, done: float) -> Shown | None:
        """:attr:`shown` against ``rate`` (at ``done``, as :meth:`raw` reads it), the job's
        new rate at its allocation (a refit or a new measurement, without a span to compare
        it with): where it was shown at this allocation, the same samples over the new
        claim; else as it was (a refit's change here says nothing of its claim there)."""
        shown = self.shown
        if shown is None or shown.on != self.allocation:
            return shown
        new, old = self.raw(rate, done), self.raw(self.rate, self.done)
        if new <= 0.0 or old <= 0.0:
            return shown
        return Shown(shown.share * old / new, shown.on)


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


def shown_share(run: RunningJob, rate: float, done: float, at: float) -> Shown | None:
    """The samples a running job processed from its last exactly known point
    (:attr:`RunningJob.seen`) to ``done`` at ``at`` over the samples ``rate`` (its revised
    model's at ``run``'s allocation, as :meth:`RunningJob.raw` reads it at ``done``) claims
    in that time: :attr:`RunningJob.shown` after a report. A charged job's progress is in
    reference samples: the samples it took are ``integral ds / E`` over it, exactly, where
    its estimate is linear within a goodput step. Where no span is known (no such point, or
    none before ``at``): :attr:`RunningJob.shown` rerated to ``rate``. Never below
    :data:`LEAST_SHOWN`."""
    claim = run.raw(rate, done)
    if run.seen is None or run.seen[1] >= at or claim <= 0.0:
        return run.rerated(rate, done)
    start, then = run.seen
    taken = max(0.0, done - start)
    if run.charge is not None and taken > 0.0:
        taken = float(run.charge.samples_between(run.allocation.batch, start, done))
    return Shown(max(LEAST_SHOWN, taken / (claim * (at - then))), run.allocation)


def shown_left(
    work: npt.ArrayLike, done: npt.ArrayLike, runs: Sequence[RunningJob | None]
) -> npt.NDArray[np.float64]:
    """:func:`work_left` of jobs whose ``done`` the model estimates (``runs[i]`` running, or
    ``None``), at the pace each *showed* where it claims more (:attr:`Shown.share` below 1):
    its progress since its estimate's anchor (:attr:`RunningJob.done`: its last report, move
    or refit) at that share of the model's estimate, and its work left divided by it, so
    that a job is weighed by the time its shown pace leaves it (at its model's rate). A job
    that showed its claim or more, or has not shown enough to tell, keeps its model's:
    unchanged, to the bit."""
    slower = [(i, run, run.shown.share) for i, run in enumerate(runs)
              if run is not None and run.shown is not None and run.shown.share < 1.0]  # fmt: skip
    if not slower:
        return work_left(work, done)
    believed = np.array(done, dtype=np.float64)
    for i, run, share in slower:
        believed[i] = run.done + share * max(0.0, float(believed[i]) - run.done)
    left = work_left(work, believed)
    for i, _, share in slower:
        left[i] /= share
    return left
