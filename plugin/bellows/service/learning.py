"""What the controller learns from progress events, job by job: speed, restart cost, silence.

:class:`ProgressLearner` takes decoded progress events (:mod:`bellows.bus.progress`) with what
the controller knows of the job now (running at which allocation, or not), and keeps per job:

* a :class:`bellows.scaling.online.ProgressLog` of accepted reports, from which
  :meth:`~ProgressLearner.fit` refits the job's profile online (prior: its annotation);
* the restarts it measured (``job.started``), whose median replaces the default restart cost
  for that job (:meth:`~ProgressLearner.restart_s`);
* the gradient statistics of its reports (payload version 2), from which
  :meth:`~ProgressLearner.efficiency` refits the job's statistical efficiency online
  (:mod:`bellows.scaling.noise`; until it reported :data:`MIN_NOISE_POINTS` of them, its
  prior — the efficiency its profile states, :meth:`~ProgressLearner.prime` — or ``None``:
  a job without either is decided as before); the prior centres the refit;
* the last samples seen and when (:meth:`~ProgressLearner.samples`; in reference samples once
  its efficiency is known), the remaining work's source for restart pricing;
* when it last reported, so that a job silent for longer than ``stall_after_s`` is flagged
  (:meth:`~ProgressLearner.stalled`) — only jobs that reported at least once since they
  started: a job without a reporter is never "stalled".

Every event is a hint. :meth:`~ProgressLearner.take` returns why it dropped one (the job is
not running, the report is of another allocation than the job runs, samples went backwards);
the caller logs the reason and counts it. State is per job and keyed by the job the subject
named, so one job's reports never touch another's. Pure: no I/O, no clock of its own.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from bellows.bus.progress import ProgressEvent, ProgressType
from bellows.jobs import MAX_WORK, Allocation, JobSpec
from bellows.scaling import ClusterProfile, JobProfile
from bellows.scaling.consistency import Accepted, Refused, ReportChecks
from bellows.scaling.efficiency import EfficiencyProfile
from bellows.scaling.noise import MIN_NOISE_POINTS, NoiseLog, NoisePoint, refit_efficiency
from bellows.scaling.online import WINDOW, OnlineFit, ProgressLog, ProgressReport, refit_log
from bellows.scaling.placement_steps import PlacementSteps, refuted
from bellows.service.learned_state import JobLearning

__all__ = ["DEFAULT_STALL_AFTER_S", "MIN_NOISE_POINTS", "RESTARTS_KEPT", "ProgressLearner"]

DEFAULT_STALL_AFTER_S: Final = 900.0
RESTARTS_KEPT: Final = 8  # newest measured restarts per job


@dataclass
class _Job:
    log: ProgressLog = field(default_factory=ProgressLog)
    checks: ReportChecks = field(default_factory=ReportChecks)
    restarts: deque[float] = field(default_factory=lambda: deque(maxlen=RESTARTS_KEPT))
    last_report: float | None = None
    samples_at: float | None = None
    fit: OnlineFit | None = None
    fitted_prior: JobProfile | None = None
    noise: NoiseLog = field(default_factory=NoiseLog)
    efficiency: EfficiencyProfile | None = None  # the last efficiency fit (or the prior)
    prior: EfficiencyProfile | None = None  # the efficiency its profile states
    efficiency_due: bool = False  # points came since it
    gpu_type: str | None = None  # the type its log's step times were reported on


class ProgressLearner:
    """Per-job online fit, restart cost, progress and silence (see the module docstring)."""

    def __init__(
        self, cluster: ClusterProfile, *, stall_after_s: float = DEFAULT_STALL_AFTER_S
    ) -> None:
        if not stall_after_s > 0:
            raise ValueError(f"stall_after_s={stall_after_s!r}: expected seconds > 0")
        self._cluster = cluster
        self._said: PlacementSteps | None = None  # what jobs' measured placements say
        self._stall_after_s = stall_after_s
        self._jobs: dict[str, _Job] = {}

    @property
    def stall_after_s(self) -> float:
        """Seconds of silence after which a job that reported before is stalled."""
        return self._stall_after_s

    def take(
        self,
        job: str,
        event: ProgressEvent,
        running: Allocation | None,
        now: float,
        *,
        work: float = MAX_WORK,
        gpu_type: str = "",
    ) -> Refused | None:
        """Learn from ``event`` about ``job`` (whose work is ``work`` samples) at ``now``, on
        GPUs of ``gpu_type`` ("": one type; :meth:`_on`); returns why it was dropped, if so.

        ``running`` is the job's allocation now (``None``: not running, the event is
        dropped). A ``job.progress`` report of another ``(k, b)`` than the job runs at is a
        stale one (from before a rescale) and dropped too. Reports are checked against each
        other (:class:`~bellows.scaling.consistency.ReportChecks`): one that does not hold
        together is refused (``backwards`` false) and teaches nothing; the first of a run
        is held until the next agrees."""
        if running is None:
            return Refused("the job is not running", True)
        if (event.world_size, event.global_batch) != (running.gpus, running.batch):
            return Refused(
                f"reported ({event.world_size} GPUs, batch {event.global_batch}) but the job "
                f"runs at ({running.gpus}, {running.batch})",
                True,
            )
        state = self._on(self._jobs.setdefault(job, _Job()), gpu_type)
        if event.type is ProgressType.STARTED:
            refused = state.checks.restart(float(event.samples_seen))
            if refused is not None:
                return refused
            assert event.restart_s is not None  # checked by ProgressEvent
            state.restarts.append(event.restart_s)
            # the steps between the last report and the halt ran at the batch before
            last = state.noise.segments[-1][0] if state.noise.segments else event.global_batch
            state.noise.trained(last, state.checks.samples)
            state.log.samples = state.checks.samples
            state.samples_at = now
        else:
            assert event.step_seconds is not None  # checked by ProgressEvent
            report = ProgressReport(
                event.world_size, event.global_batch, event.step_seconds, event.samples_seen,
                event.grad_sqr, event.grad_var,
            )  # fmt: skip
            refused = self._noise_refused(state, report)
            if refused is not None:
                return refused
            verdict = state.checks.check(report, now, work=work)
            if isinstance(verdict, Refused):
                return verdict
            if isinstance(verdict, Accepted):
                for accepted in verdict.reports:
                    state.log.add(accepted)
                    self._learn_noise(state, accepted)
                state.samples_at = now
                state.fit = None  # refit on the next question
        state.last_report = now
        return None

    @staticmethod
    def _on(state: _Job, gpu_type: str) -> _Job:
        """``state``, its job on ``gpu_type``: step times of another type than its log holds
        begin a new log, so that a job's speed is learned per type (issue 39; its progress,
        restarts and noise stand)."""
        if state.gpu_type is not None and state.gpu_type != gpu_type:
            state.log, state.fit = ProgressLog(samples=state.checks.samples), None
        state.gpu_type = gpu_type
        return state

    def fit(self, job: str, prior: JobProfile) -> OnlineFit:
        """``job``'s profile refitted to its reports (``prior`` unchanged without any)."""
        state = self._jobs.get(job)
        if state is None:
            return refit_log(prior, self._cluster, ProgressLog())
        if state.fit is None or state.fitted_prior != prior:
            state.fit, state.fitted_prior = refit_log(prior, self._cluster, state.log), prior
        return state.fit

    @staticmethod
    def _noise_refused(state: _Job, report: ProgressReport) -> Refused | None:
        """Why ``report``'s gradient statistics do not hold with the job's earlier ones."""
        if report.grad_sqr is None or report.grad_var is None:
            return None
        point = NoisePoint(report.batch, report.samples, report.grad_sqr, report.grad_var)
        probe = NoiseLog()  # the same checks as adding it, without keeping it yet
        if state.noise.points:
            probe.points.append(state.noise.points[-1])
        reason = probe.add(point)
        return None if reason is None else Refused(reason)

    @staticmethod
    def _learn_noise(state: _Job, report: ProgressReport) -> None:
        state.noise.trained(report.batch, report.samples)
        if report.grad_sqr is not None and report.grad_var is not None:
            point = NoisePoint(report.batch, report.samples, report.grad_sqr, report.grad_var)
            if state.noise.add(point) is None:
                state.efficiency_due = True

    def prime(self, job: str, prior: EfficiencyProfile | None) -> None:
        """``job``'s efficiency known before it reported (its profile's, which the core
        decides it by from its first round): :meth:`efficiency` until its reports say more,
        and the centre of their refit. Kept from the first call on (``None``: none)."""
        state = self._jobs.setdefault(job, _Job())
        if state.prior is None and prior is not None:
            state.prior = prior
            if state.efficiency is None:
                state.efficiency = prior

    def efficiency(self, job: str, reference_batch: int) -> EfficiencyProfile | None:
        """``job``'s statistical efficiency relative to ``reference_batch``, refitted to its
        gradient statistics (:func:`~bellows.scaling.noise.refit_efficiency`, centred on its
        prior if it has one, :meth:`prime`); until it reported
        :data:`~bellows.scaling.noise.MIN_NOISE_POINTS` of them its prior, or ``None``."""
        state = self._jobs.get(job)
        if state is None:
            return None
        prior = state.prior
        if prior is not None and prior.reference_batch != reference_batch:
            prior = None  # stated at another batch than the job's: not this job's prior
        if len(state.noise) < MIN_NOISE_POINTS:
            return prior
        current = state.efficiency
        if current is not None and current.reference_batch != reference_batch:
            current, state.efficiency_due = None, True
        if state.efficiency_due or current is None or current is state.prior:
            source = f"bellows online fit of {len(state.noise)} gradient noise reports"
            if prior is not None:
                source += f" from the prior {prior.source}"[:300]
            fit = refit_efficiency(
                state.noise, reference_batch, current, prior=prior, source=source
            )
            state.efficiency, state.efficiency_due = fit, False
        return state.efficiency

    def learned_efficiency(self, job: str) -> EfficiencyProfile | None:
        """The last efficiency :meth:`efficiency` fitted for ``job`` (no refit)."""
        state = self._jobs.get(job)
        return None if state is None else state.efficiency

    def restart_s(self, job: str) -> float | None:
        """Median of the restarts ``job`` measured (``None``: none yet, use the default)."""
        state = self._jobs.get(job)
        if state is None or not state.restarts:
            return None
        return statistics.median(state.restarts)

    def samples(self, job: str) -> tuple[float, float] | None:
        """The last samples seen ``job`` reported, and when (``None``: no report); in
        reference samples once its efficiency is known (:meth:`efficiency`), as the core
        counts the progress of a job decided by goodput."""
        state = self._jobs.get(job)
        if state is None or state.samples_at is None:
            return None
        if state.efficiency is None:
            return state.log.samples, state.samples_at
        return state.noise.progress(state.efficiency, state.log.samples), state.samples_at

    def refutes(self, job: str, spec: JobSpec) -> bool:
        """Whether the step times ``job`` reported refute ``spec``'s measured placements
        (:func:`~bellows.scaling.placement_steps.refuted`; nodes taken as the fewest, as
        the progress loop takes them)."""
        state = self._jobs.get(job)
        if state is None or not spec.placements:
            return False
        if self._said is None:
            self._said = PlacementSteps(self._cluster)
        return refuted(spec, state.log.medians(), self._said)

    def step_seconds(self, job: str, gpus: int, batch: int) -> float | None:
        """The median step time ``job`` reported at ``(gpus, batch)`` over its last
        reports there (``None``: none)."""
        state = self._jobs.get(job)
        if state is None:
            return None
        return state.log.medians().get((gpus, batch))

    def stalled(self, running: Iterable[str], now: float) -> list[str]:
        """Running jobs that reported before but not for more than ``stall_after_s``."""
        return sorted(
            name
            for name in running
            if (state := self._jobs.get(name)) is not None
            and state.last_report is not None
            and now - state.last_report > self._stall_after_s
        )

    def snapshot(self, job: str) -> JobLearning | None:
        """What was learned of ``job``, whole (``None``: nothing yet), to put back with
        :meth:`restore` in another process (:mod:`bellows.service.memory`), the checks'
        current run with it."""
        state = self._jobs.get(job)
        if state is None:
            return None
        return JobLearning(
            steps={key: tuple(times) for key, times in state.log.by_config.items()},
            samples=state.log.samples,
            reports=state.log.reports,
            checked_samples=state.checks.samples,
            run=state.checks.mark(),
            restarts=tuple(state.restarts),
            noise=tuple(state.noise.points),
            segments=tuple(state.noise.segments),
            noise_samples=state.noise.samples,
            prior=state.prior,
            efficiency=state.efficiency,
            efficiency_due=state.efficiency_due,
            samples_at=state.samples_at,
            last_report=state.last_report,
        )

    def restore(self, job: str, learning: JobLearning) -> None:
        """Put back what :meth:`snapshot` took of ``job`` (replacing whatever is known):
        the fits, the efficiency and the samples this learner gives are then those the
        snapshot's learner gave."""
        state = _Job()
        for key, times in learning.steps.items():
            state.log.by_config[key] = deque(times, maxlen=WINDOW)
        state.log.samples, state.log.reports = learning.samples, learning.reports
        state.checks.resume(learning.checked_samples, learning.run)
        state.restarts.extend(learning.restarts)
        state.noise.points.extend(learning.noise)
        state.noise.segments.extend(learning.segments)
        state.noise.samples = learning.noise_samples
        state.prior = learning.prior
        state.efficiency = learning.efficiency
        state.efficiency_due = learning.efficiency_due
        state.samples_at, state.last_report = learning.samples_at, learning.last_report
        self._jobs[job] = state

    def forget(self, job: str) -> None:
        """Drop what was learned about ``job`` (it finished or was deleted)."""
        self._jobs.pop(job, None)

    def __len__(self) -> int:
        return len(self._jobs)
