"""Online learning in the simulator: jobs that run at another speed than their annotation.

A :class:`Learning` setup, given to :func:`bellows.sim.run`, splits what the simulator knows of
a job from what the autoscaler core is told:

* the *truth* — the job's annotated profile with its :class:`SpeedFactors` applied
  (:meth:`SpeedFactors.apply`, :func:`true_spec`) — drives the job's rate and completion time;
* the core is told the annotated spec (the prior) at arrival, as the live controller is.

While a job steps (after its restart pause), every ``report_s`` simulated seconds it reports
its true step time at its ``(k, b)`` and the samples it has processed (an event in the
simulator's heap, :attr:`bellows.sim.events.Kind.REPORT`). With ``learn=True``,
:class:`OnlineLearner` does what the live controller's progress loop does
(:mod:`bellows.service.progress_loop`): it keeps the job's
:class:`~bellows.scaling.online.ProgressLog`, refits the prior to it
(:func:`~bellows.scaling.online.refit_profile`) and, when the fit moved
(:func:`~bellows.scaling.online.moved`) or the core's estimate of the samples done drifted
(:func:`~bellows.scaling.online.drifted`), revises the job in the core
(:meth:`bellows.autoscaler.Autoscaler.revise`) with the refitted profile and the true samples
done. The allocation stays; the next round decides with the revision. With ``learn=False`` the
core keeps the wrong prior (the baseline). The simulator keeps the truth either way: a
revision changes what the core believes, never when a job completes.

:data:`WRONG_PRIORS` is the pattern of ``bellows demo --wrong-priors`` and ``bellows simulate
--wrong-priors``: job ``i`` in arrival order really runs at ``WRONG_PRIORS[i % 3]`` of its
annotation (:func:`wrong_priors`). Reports carry no noise and read no clock: a run is a pure
function of the trace, the settings and the setup.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from bellows.autoscaler import Autoscaler
from bellows.inputs import SpecError, check_float
from bellows.jobs import JobSpec
from bellows.scaling import ClusterProfile, JobProfile
from bellows.scaling.consistency import Accepted, Refused, ReportChecks
from bellows.scaling.online import (
    FIT_BOUND,
    MAX_FACTOR,
    REVISE_TOLERANCE,
    Learned,
    OnlineFit,
    ProgressLog,
    ProgressReport,
    SpeedFactors,
    drifted,
    moved,
    refit_profile,
)
from bellows.scaling.placement_memory import ObservedStep
from bellows.sim.workloads.traces import TraceJob

__all__ = [
    "DEFAULT_REPORT_S",
    "WRONG_PRIORS",
    "Learning",
    "Lie",
    "OnlineLearner",
    "Revision",
    "Truth",
    "true_spec",
    "wrong_priors",
]

WRONG_PRIORS: Final = (
    SpeedFactors(communication=2.5),  # its Allreduce is 2.5x slower than annotated
    SpeedFactors(compute=0.6),  # it computes 40 % faster than annotated
    SpeedFactors(compute=1.5, communication=1.5),  # it is 50 % slower in both
)
"""The true speed of trace job ``i`` (in arrival order) against its annotation:
``WRONG_PRIORS[i % 3]``."""
DEFAULT_REPORT_S: Final = 60.0
"""Simulated seconds between two progress reports of a stepping job (the demo's interval)."""

Truth = Mapping[str, SpeedFactors] | Callable[[TraceJob], SpeedFactors | None]
"""Each job's true speed against its annotation: by job name, or a function of the trace job;
a job it does not name (or ``None``) runs as annotated."""


def wrong_priors(trace: Sequence[TraceJob]) -> dict[str, SpeedFactors]:
    """:data:`WRONG_PRIORS` by job name: job ``i`` in arrival order (ties in trace order)
    gets ``WRONG_PRIORS[i % 3]``."""
    order = sorted(range(len(trace)), key=lambda i: (trace[i].arrival_s, i))
    return {
        trace[i].spec.name: WRONG_PRIORS[rank % len(WRONG_PRIORS)] for rank, i in enumerate(order)
    }


def true_spec(spec: JobSpec, factors: SpeedFactors) -> JobSpec:
    """``spec`` with its profile at the true speed ``factors`` (``spec`` itself at 1, 1)."""
    if factors == SpeedFactors():
        return spec
    real = factors.apply(_profile(spec))
    return dataclasses.replace(spec, weights=real.effective_weights, profile=real.step)


def _profile(spec: JobSpec) -> JobProfile:
    return JobProfile(weights=spec.weights, step=spec.profile)


@dataclass(frozen=True)
class Lie:
    """What a lying job reports instead of the truth: its step time times ``step`` and, with
    ``samples`` in (0, 1], that share of its work as samples seen (``None``: the truth)."""

    step: float = 1.0
    samples: float | None = None

    def __post_init__(self) -> None:
        check_float("step", self.step, minimum=0.0, maximum=1e3, open_min=True)
        if self.samples is not None:
            check_float("samples", self.samples, minimum=0.0, maximum=1.0, open_min=True)

    def report(self, report: ProgressReport, work: float) -> ProgressReport:
        """``report`` as this liar makes it."""
        samples = report.samples if self.samples is None else self.samples * work
        return ProgressReport(report.gpus, report.batch, report.step_seconds * self.step, samples)


@dataclass(frozen=True)
class Learning:
    """A run's learning setup: each job's true speed, the report interval, learning on/off,
    and the jobs whose reports lie (by name: :class:`Lie`)."""

    truth: Truth
    report_s: float = DEFAULT_REPORT_S
    learn: bool = True
    lies: Mapping[str, Lie] = field(default_factory=dict)
    checks: bool = True  # False: learn from every report, fit bound MAX_FACTOR (as before)

    def __post_init__(self) -> None:
        check_float("report_s", self.report_s, minimum=0.0, maximum=math.inf, open_min=True)
        if math.isinf(self.report_s):
            raise SpecError("report_s", self.report_s, "finite seconds > 0")
        for name in ("learn", "checks"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(name, getattr(self, name), "a bool")

    def factors(self, job: TraceJob) -> SpeedFactors:
        """``job``'s true speed against its annotation."""
        found = self.truth(job) if callable(self.truth) else self.truth.get(job.spec.name)
        if found is None:
            return SpeedFactors()
        if not isinstance(found, SpeedFactors):
            raise SpecError(f"truth[{job.spec.name}]", found, "SpeedFactors")
        return found


@dataclass(frozen=True)
class Revision:
    """One revision of a job in the core: when, the samples done, the fit it used."""

    job: str
    at_s: float
    done: float
    compute: float
    communication: float
    reports: int
    configurations: int
    spec: JobSpec  # what the core was told


@dataclass(eq=False)
class _Job:
    prior: JobSpec
    log: ProgressLog = field(default_factory=ProgressLog)
    checks: ReportChecks = field(default_factory=ReportChecks)
    fitted: tuple[tuple[tuple[int, int], float], ...] | None = None  # medians of ``fit``
    fit: OnlineFit | None = None
    learned: Learned | None = None  # what the last revision used


class OnlineLearner:
    """The live progress loop's decisions, for the simulator (see the module docstring).

    The refit runs only when a configuration's median moved (reports without noise repeat
    themselves): the fit is a pure function of the medians, so this changes no result.
    """

    def __init__(
        self, cluster: ClusterProfile, *, tolerance: float = REVISE_TOLERANCE, checks: bool = True
    ) -> None:
        self._cluster = cluster
        self._tolerance = tolerance
        self._checks = checks
        self._bound = FIT_BOUND if checks else MAX_FACTOR
        self._jobs: dict[str, _Job] = {}
        self.revisions: list[Revision] = []
        self.inconsistent: set[str] = set()  # jobs whose reports did not hold together
        self.refused = 0  # reports refused: backwards or inconsistent

    def report(
        self,
        auto: Autoscaler,
        prior: JobSpec,
        report: ProgressReport,
        now: float,
        *,
        placements: bool = False,
        reference: float | None = None,
        most: float | None = None,
    ) -> bool:
        """Learn from ``report`` of the job ``prior`` names (running in ``auto`` at the
        report's ``(k, b)``); revise it in ``auto`` when worth it. Whether it was revised.
        ``placements``: tell the core, first, the median step time of the reports accepted
        at that ``(k, b)`` (``Autoscaler.observe_step``, nodes unknown), as the controller's
        progress loop does. ``reference``: the job's progress in reference samples, where the
        core counts it so (a charged job: ``report`` carries the samples it processed, which
        the checks and the fit read; the revision says this, as the controller learns it from
        the job's gradient noise); ``None``: the report's samples. ``most``: the most samples
        it may report while it runs (default: its work)."""
        name = prior.name
        state = self._jobs.get(name)
        if state is None:
            state = self._jobs[name] = _Job(prior)
        verdict = (
            state.checks.check(report, now, work=prior.work if most is None else most)
            if self._checks
            else Accepted((report,))
            if report.samples >= state.log.samples
            else Refused("backwards", True)
        )
        if isinstance(verdict, Refused):
            self.refused += 1
            if not verdict.backwards:
                self.inconsistent.add(name)
            return False
        if not isinstance(verdict, Accepted):
            return False  # the first report of a run: held until the next agrees
        for accepted in verdict.reports:
            state.log.add(accepted)
        by_config = state.log.medians()
        seconds = by_config.get((report.gpus, report.batch))
        if (placements or prior.placements) and seconds is not None:
            auto.observe_step(name, now, ObservedStep(report.gpus, report.batch, seconds))
        medians = tuple(sorted(by_config.items()))
        if state.fit is None or medians != state.fitted:
            state.fit = refit_profile(
                _profile(state.prior),
                self._cluster,
                dict(medians),
                reports=state.log.reports,
                bound=self._bound,
            )
            state.fitted = medians
        fit = state.fit
        learned = Learned(fit.compute, fit.communication)
        estimate = auto.estimated_done(name, now)
        done = report.samples if reference is None else reference
        work = auto.job(name).work
        if not moved(state.learned, learned, tolerance=self._tolerance) and not drifted(
            estimate, done, work, tolerance=self._tolerance
        ):
            return False
        spec = dataclasses.replace(
            state.prior, weights=fit.profile.effective_weights, profile=fit.profile.step
        )
        if not auto.revise(spec, now, done=done):
            return False
        state.learned = learned
        self.revisions.append(
            Revision(
                name, now, done, fit.compute, fit.communication,
                state.log.reports, fit.configurations, spec,
            )
        )  # fmt: skip
        return True

    def started(self, name: str, samples: float) -> None:
        """Job ``name`` (re)started with ``samples`` seen: its reports begin a new run, as the
        controller's progress loop learns from a job's ``started`` event. Without it, a job
        moved away and back to the same ``(k, b)`` between two reports (two restarts) seemed
        one run that made too little progress for the step time it reported, and an honest
        job was marked inconsistent."""
        state = self._jobs.get(name)
        if state is None:
            return  # nothing reported yet: its first report begins its first run
        if state.checks.restart(samples) is None:
            state.log.samples = state.checks.samples

    def forget(self, name: str) -> None:
        """Drop what was learned about job ``name`` (it finished)."""
        self._jobs.pop(name, None)

    def __len__(self) -> int:
        return len(self._jobs)
