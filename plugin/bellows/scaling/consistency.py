"""Whether one job's progress reports hold together, before any of them is learned from.

A report says three things a job could lie about: its median step time at ``(k, b)``, the
samples it has seen, and (by its date) when. Each is checked against the others and against
what the job allows, so that a report can move a job's model only as far as its own earlier
reports and its annotations agree with it (the trust model of ``docs/security.md``):

* **samples against steps**: over a run at one ``(k, b)``, samples seen advance at the rate
  the step time claims, ``b / step_seconds``, within :data:`RATE_TOLERANCE` either way
  (slower than claimed: pauses for checkpoints or evaluation up to that share; faster: by
  :data:`AHEAD_TOLERANCE` and one step). A job that reports fast steps while its samples crawl, or
  samples that jump ahead of its steps, does not hold together;
* **samples against work**: never past the job's work while it runs (it would have
  completed), and never backwards;
* **bounded change**: a configuration's step time moves by at most :data:`MAX_STEP_CHANGE`
  times from one report to the next.

The first report of a run (a new ``(k, b)``, or a start) is only held: it counts once the
next report of the run agrees with it. A report that does not hold together is refused with
its reason; the job keeps what it learned from the reports that did. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from bellows.scaling.online import ProgressReport

__all__ = [
    "AHEAD_TOLERANCE",
    "MAX_STEP_CHANGE",
    "RATE_TOLERANCE",
    "Accepted",
    "Held",
    "Refused",
    "ReportChecks",
    "Verdict",
]

RATE_TOLERANCE: Final = 0.15
"""How far the samples' rate may fall short of what the step time claims, ``1 + this`` times
(honest pauses: a checkpoint, an evaluation)."""
AHEAD_TOLERANCE: Final = 0.05
"""How far it may exceed it (a median step time against the window's mean), and one step."""
MAX_STEP_CHANGE: Final = 2.0
"""The most a configuration's step time may change from one report to the next, either way."""


@dataclass(frozen=True)
class Accepted:
    """The report holds together: learn from ``reports`` (the held first one, then it)."""

    reports: tuple[ProgressReport, ...]


@dataclass(frozen=True)
class Held:
    """The first report of a run: kept until the next one agrees with it."""


@dataclass(frozen=True)
class Refused:
    """Not learned from: ``backwards`` (samples went back) or, when not, inconsistent."""

    reason: str
    backwards: bool = False


Verdict = Accepted | Held | Refused


@dataclass(frozen=True)
class _Seen:
    report: ProgressReport
    at: float


@dataclass
class ReportChecks:
    """One job's reports checked against each other (see the module docstring)."""

    samples: float = 0.0  # the newest samples seen that held together
    _start: _Seen | None = None  # the first report of the current run
    _last: _Seen | None = None  # its newest report that held together (or the first)
    _confirmed: bool = False  # whether the first report of the run was agreed with

    def restart(self, samples: float) -> Refused | None:
        """A start (``job.started``) with ``samples`` seen: a new run begins."""
        if samples < self.samples:
            return Refused(f"samples went backwards ({samples:g} < {self.samples:g})", True)
        self.samples = samples
        self._start = self._last = None
        return None

    def check(self, report: ProgressReport, at: float, *, work: float) -> Verdict:
        """Whether ``report``, dated ``at`` (seconds), holds with the earlier ones of a job
        whose whole work is ``work`` samples; a :class:`Held` or :class:`Accepted` report
        becomes the newest one the next is checked against."""
        if report.samples < self.samples:
            return Refused(f"samples went backwards ({report.samples:g} < {self.samples:g})", True)
        if report.samples > work:
            return Refused(
                f"{report.samples:g} samples seen is past the job's work ({work:g}) while it runs"
            )
        seen = _Seen(report, at)
        last, start = self._last, self._start
        config = (report.gpus, report.batch)
        if last is None or start is None or (last.report.gpus, last.report.batch) != config:
            self._start = self._last = seen
            self._confirmed = False
            return Held()
        reason = _disagreement(start, last, seen)
        if reason is not None:
            return Refused(reason)
        held = () if self._confirmed else (last.report,)
        self._last, self._confirmed, self.samples = seen, True, report.samples
        return Accepted((*held, report))


def _disagreement(start: _Seen, last: _Seen, now: _Seen) -> str | None:
    """Why ``now`` does not hold with the run's first report ``start`` and its ``last``."""
    step, batch = now.report.step_seconds, now.report.batch
    change = step / last.report.step_seconds
    if not 1.0 / MAX_STEP_CHANGE <= change <= MAX_STEP_CHANGE:
        return (
            f"step time {step:.4g} s moved {change:.3g}x from {last.report.step_seconds:.4g} s "
            f"in one report (at most {MAX_STEP_CHANGE:g}x)"
        )
    claimed = batch / step  # samples per second the step time claims
    ahead = now.report.samples - last.report.samples
    allowed = claimed * max(0.0, now.at - last.at) * (1.0 + AHEAD_TOLERANCE) + batch
    if ahead > allowed:
        return (
            f"{ahead:g} samples in {now.at - last.at:.4g} s, more than {step:.4g} s steps of "
            f"{batch} samples allow ({allowed:.4g})"
        )
    elapsed = now.at - start.at
    done = now.report.samples - start.report.samples
    expected = claimed * elapsed / (1.0 + RATE_TOLERANCE) - batch
    if done < expected:
        return (
            f"{done:g} samples in {elapsed:.4g} s at this (GPUs, batch), fewer than "
            f"{step:.4g} s steps of {batch} samples make ({expected:.4g}, "
            f"{RATE_TOLERANCE:.0%} of pauses allowed)"
        )
    return None
