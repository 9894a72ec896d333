"""Whether one job's progress reports hold together, before any of them is learned from.

A report says three things a job could lie about: its median step time at ``(k, b)``, the
samples it has seen, and (by its date) when. Each is checked against the others and against
what the job allows, so that a report can move a job's model only as far as its own earlier
reports and its annotations agree with it (the trust model of ``docs/security.md``). The
checks accept what an honest job does (``tests/hostile/test_honest_reporters.py``): it
pauses for evaluation and checkpoints, shares a node, compiles its first step, and its
reports come late, in bursts or again.

* **samples against steps**, over the whole run at one ``(k, b)`` (from its first report):
  each window's steps (its samples over ``b``) take the step time its closing report claims
  (the window's median), so the run's steps claim ``stepping`` seconds of its wall time.
  The rest, pauses (checkpoints, evaluation, stalls on input or on a loaded node), may be
  up to :data:`PAUSE_TOLERANCE` of the wall time, and the steps may overrun it by
  :data:`AHEAD_TOLERANCE` (a median step time against the window's mean); either way by one
  step and the :data:`LATE_S` a report's date may be off its samples at either end (a
  loaded node, a clock a little ahead of the controller's). Weighed by steps, not by wall
  time, so that a pause filling most of one window (whose median stays the fast steps
  around it) counts once, as the wall time it took; summed over the run, so that reports
  in a burst (dated close together) are judged by the time they span, not one by one. A
  job that reports fast steps while its samples crawl, or samples that run ahead of its
  steps, does not hold together;
* **samples against work**: never past the job's work while it runs (it would have
  completed), and never backwards;
* **bounded change**: a configuration's step time gets at most :data:`MAX_STEP_CHANGE`
  times slower from one report to the next (a shared node, a first compiled step), or more
  when the samples of the report's own window bear it out (a pause that fell in a window of
  one or two steps makes its median that long). Faster needs no bound: it is learned at no
  more than its window's pace (below);
* **old news**: a report with no more samples than the newest one and dated no later than
  :data:`LATE_S` after it (delivered late, out of order or again) is :class:`Stale`:
  nothing to learn, no fault. Fewer samples dated later than that went backwards.

What is learned from an accepted report is its step time, but never faster than the
wall time per step its window's samples show (pauses included, less
:data:`AHEAD_TOLERANCE`): a job claiming steps faster than its samples (which the pause
tolerance must let through) is learned at the pace its samples show, so it gains nothing; an
honest job is learned slower from the windows its pauses fall in, and the fit takes the
median of a configuration's windows.

The first report of a run (a new ``(k, b)``, or a start) is only held: it counts once the
next report of the run agrees with it. A report that does not hold together is refused with
its reason; the job keeps what it learned from the reports that did. Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from bellows.scaling.online import ProgressReport

__all__ = [
    "AHEAD_TOLERANCE",
    "LATE_S",
    "MAX_STEP_CHANGE",
    "PAUSE_TOLERANCE",
    "Accepted",
    "Held",
    "Refused",
    "ReportChecks",
    "RunMark",
    "Stale",
    "Verdict",
]

PAUSE_TOLERANCE: Final = 0.5
"""The share of a run's wall time its samples may lag what its step times claim (honest
pauses: checkpoints, evaluation, input stalls); was 15 % (issue 37)."""
AHEAD_TOLERANCE: Final = 0.05
"""How far they may run ahead of it (a median step time against the window's mean)."""
LATE_S: Final = 10.0
"""Seconds of steps either way for a report dated a little off its samples."""
MAX_STEP_CHANGE: Final = 4.0
"""How many times slower a configuration's step time may get from one report to the next
unless the report's window bears it out (was 2x either way, issue 37)."""


@dataclass(frozen=True)
class Accepted:
    """The report holds together: learn from ``reports`` (the held first one, then it)."""

    reports: tuple[ProgressReport, ...]


@dataclass(frozen=True)
class Held:
    """The first report of a run: kept until the next one agrees with it."""


@dataclass(frozen=True)
class Stale:
    """Older than the newest report (late, out of order, or again): nothing new, no fault."""


@dataclass(frozen=True)
class Refused:
    """Not learned from: ``backwards`` (samples went back) or, when not, inconsistent."""

    reason: str
    backwards: bool = False


Verdict = Accepted | Held | Stale | Refused


@dataclass(frozen=True)
class RunMark:
    """Where a job's current run stands in its checks (:meth:`ReportChecks.mark`): its
    first and newest report and when each came (clock seconds), the seconds of stepping
    its reports claim since the first, and whether the first was agreed with."""

    start: ProgressReport
    start_at: float
    last: ProgressReport
    last_at: float
    stepping: float
    confirmed: bool


@dataclass(frozen=True)
class _Seen:
    report: ProgressReport
    at: float


@dataclass(frozen=True)
class _Run:
    """The current run's first and newest report, and the seconds of stepping its reports'
    step times claim since the first: each window's steps (its samples over the batch) at
    its closing report's step time (the window's median)."""

    start: _Seen
    last: _Seen
    stepping: float = 0.0

    def then(self, now: _Seen) -> _Run:
        """The run with ``now`` as its newest report."""
        step = now.report.step_seconds
        steps = max(0.0, now.report.samples - self.last.report.samples) / now.report.batch
        return _Run(self.start, now, self.stepping + steps * step)

    @property
    def elapsed(self) -> float:
        """Seconds from the run's first report to its newest."""
        return max(0.0, self.last.at - self.start.at)

    @property
    def late(self) -> float:
        """Seconds a report's date off by :data:`LATE_S` (at either end) moves, and one
        step at the newest report's step time."""
        return 2.0 * LATE_S + self.last.report.step_seconds


@dataclass
class ReportChecks:
    """One job's reports checked against each other (see the module docstring)."""

    samples: float = 0.0  # the newest samples seen that held together
    _run: _Run | None = None  # the current run's reports that held together (or its first)
    _confirmed: bool = False  # whether the first report of the run was agreed with

    def mark(self) -> RunMark | None:
        """The current run (``None``: none since the last start), to :meth:`resume` from."""
        run = self._run
        if run is None:
            return None
        return RunMark(
            run.start.report, run.start.at, run.last.report, run.last.at, run.stepping,
            self._confirmed,
        )  # fmt: skip

    def resume(self, samples: float, run: RunMark | None) -> None:
        """Go on from what :meth:`mark` gave (and ``samples``, the newest that held)."""
        self.samples = samples
        self._run, self._confirmed = None, False
        if run is not None:
            start, last = _Seen(run.start, run.start_at), _Seen(run.last, run.last_at)
            self._run, self._confirmed = _Run(start, last, run.stepping), run.confirmed

    def restart(self, samples: float) -> Refused | None:
        """A start (``job.started``) with ``samples`` seen: a new run begins."""
        if samples < self.samples:
            return Refused(f"samples went backwards ({samples:g} < {self.samples:g})", True)
        self.samples = samples
        self._run = None
        return None

    def check(self, report: ProgressReport, at: float, *, work: float) -> Verdict:
        """Whether ``report``, dated ``at`` (seconds), holds with the earlier ones of a job
        whose whole work is ``work`` samples; a :class:`Held` or :class:`Accepted` report
        becomes the newest one the next is checked against."""
        run = self._run
        if run is not None and _older(report, at, run.last):
            return Stale()
        if report.samples < self.samples:
            return Refused(f"samples went backwards ({report.samples:g} < {self.samples:g})", True)
        if report.samples > work:
            return Refused(
                f"{report.samples:g} samples seen is past the job's work ({work:g}) while it runs"
            )
        seen = _Seen(report, at)
        config = (report.gpus, report.batch)
        if run is None or (run.last.report.gpus, run.last.report.batch) != config:
            self._run, self._confirmed = _Run(seen, seen), False
            return Held()
        if report.samples < run.last.report.samples:
            last = run.last.report.samples
            return Refused(f"samples went backwards ({report.samples:g} < {last:g})", True)
        grown = run.then(seen)
        reason = _disagreement(run.last, grown)
        if reason is not None:
            return Refused(reason)
        held = () if self._confirmed else (run.last.report,)
        self._run, self._confirmed, self.samples = grown, True, report.samples
        pace = _pace(run.last, seen)
        return Accepted(tuple(_learned(r, pace) for r in (*held, report)))


def _older(report: ProgressReport, at: float, last: _Seen) -> bool:
    """Whether ``report`` dated ``at`` is ``last`` again, or older than it: with no more
    samples, and dated no later than :data:`LATE_S` after it (a report dated ahead of the
    controller's clock is dated when it comes, so one delivered again may seem newer)."""
    return at <= last.at + LATE_S and report.samples <= last.report.samples


def _pace(last: _Seen, now: _Seen) -> float:
    """Seconds of wall time per step in the window from ``last`` to ``now`` (pauses
    included; as if one step, when none was made), less :data:`AHEAD_TOLERANCE` (a median
    against the mean)."""
    steps = max(1.0, (now.report.samples - last.report.samples) / now.report.batch)
    return max(0.0, now.at - last.at) / (1.0 + AHEAD_TOLERANCE) / steps


def _learned(report: ProgressReport, pace: float) -> ProgressReport:
    """``report`` as it is learned from: its step time, but no faster than the ``pace`` of
    its window. A job claiming faster steps than its samples show (which the pause tolerance
    must let through) is learned at the pace they show, so it gains nothing; an honest job
    is learned slower from a window a pause fell in (the fit takes the median of a
    configuration's windows)."""
    step = max(report.step_seconds, pace)
    return report if step == report.step_seconds else dataclasses.replace(report, step_seconds=step)


def _disagreement(last: _Seen, run: _Run) -> str | None:
    """Why ``run``'s newest report does not hold with its ``last`` one and the run's first."""
    now = run.last
    step, before = now.report.step_seconds, last.report.step_seconds
    if step > MAX_STEP_CHANGE * before:
        window = _Run(last, last).then(now)
        reason = _ahead(window, now.report.samples - last.report.samples)
        if reason is not None:
            return (
                f"step time {step:.4g} s is {step / before:.3g}x the last one ({before:.4g} s; "
                f"at most {MAX_STEP_CHANGE:g}x unless its window bears it out): {reason}"
            )
    done = now.report.samples - run.start.report.samples
    return _ahead(run, done) or _behind(run, done)


def _ahead(run: _Run, done: float) -> str | None:
    """Why ``done`` samples since ``run``'s first report are more than its claims allow:
    their steps at the claimed step times take longer than the run's wall time, by more
    than :data:`AHEAD_TOLERANCE` and what reports dated :data:`LATE_S` off move."""
    most = (run.elapsed + run.late) * (1.0 + AHEAD_TOLERANCE)
    if run.stepping <= most:
        return None
    batch = run.last.report.batch
    return (
        f"{done:g} samples in {run.elapsed:.4g} s at this (GPUs, batch), more than its "
        f"reports' step times of {batch} samples allow (their steps take {run.stepping:.4g} s, "
        f"at most {most:.4g} s)"
    )


def _behind(run: _Run, done: float) -> str | None:
    """Why ``done`` samples since ``run``'s first report are fewer than its claims make:
    their steps at the claimed step times fill less than ``1 -`` :data:`PAUSE_TOLERANCE`
    of the run's wall time (and :data:`AHEAD_TOLERANCE`, a median against the mean), less
    what reports dated :data:`LATE_S` off move."""
    least = (run.elapsed - run.late) * (1.0 - PAUSE_TOLERANCE) / (1.0 + AHEAD_TOLERANCE)
    if run.stepping >= least:
        return None
    batch = run.last.report.batch
    return (
        f"{done:g} samples in {run.elapsed:.4g} s at this (GPUs, batch), fewer than its "
        f"reports' step times of {batch} samples make (their steps take {run.stepping:.4g} s, "
        f"at least {least:.4g} s: {PAUSE_TOLERANCE:.0%} of pauses allowed)"
    )
