"""What a controller tells its observers: rounds, outcomes, counts, start-up, and each job's
arrival, effective decisions and end.

The service's :class:`~bellows.service.metrics.MetricsObserver` turns these into the
Prometheus metrics; the twin's :class:`~bellows.twin.ledger.Ledger` into the simulator's
job records (``bellows demo``). The base class ignores everything.
"""

from __future__ import annotations

from collections.abc import Sequence

from bellows.autoscaler import Decision
from bellows.jobs import JobSpec
from bellows.kube import Outcome

__all__ = ["ControllerObserver", "NullControllerObserver"]


class ControllerObserver:
    """Hooks for metrics and records; the base class ignores everything."""

    def round_done(
        self,
        seconds: float,
        decisions: Sequence[Decision],
        *,
        running: int,
        queued: int,
        gpus_allocated: int,
        capacity: int,
    ) -> None:
        """A round ran in ``seconds`` (optimizer included); the core's state after it."""

    def applied(self, decision: Decision, outcome: Outcome) -> None:
        """One decision was driven to ``outcome`` on the cluster."""

    def invalid_jobs(self, count: int) -> None:
        """``count`` opted-in jobs are left alone now because their data is invalid."""

    def decision_failed(self, decision: Decision) -> None:
        """The cluster did not take ``decision`` (an API error, anything): it is retried
        after a backoff."""

    def journal_distrusted(self, key: str) -> None:
        """A journal value (annotation ``key``) read back from a job was not trusted: its
        job's settings, replicas or the cluster's GPUs rule it out (it reads as absent)."""

    def job_set_aside(self, reason: str) -> None:
        """One job's objects failed its rebuild or resume (``reason``: ``spec``, ``api``,
        ``record``: its re-creation record failed its checks, ``unexpected``); the job was
        set aside and the others went on."""

    def skipped_jobs(self, reason: str, count: int) -> None:
        """``count`` opted-in jobs are skipped now, never written to, for ``reason``
        (``managed-by``: another controller runs them; ``queue-unknown``: their Kueue
        queue cannot be resolved)."""

    def started(self, step: str, seconds: float) -> None:
        """A step of the controller's start-up took ``seconds``: ``rebuild`` (the jobs read
        from the cluster), ``first-round`` (the core's first step on them, the optimizer
        included) or ``rehearsal`` (the optimizer meeting the next rounds' shapes)."""

    def arrived(self, spec: JobSpec, at: float) -> None:
        """The core took ``spec`` (queued, or adopted running); it arrived at ``at`` (the
        controller's clock)."""

    def took_effect(self, decision: Decision, at: float) -> None:
        """The cluster took ``decision`` at ``at``: the job holds its GPUs from then (or
        none); a running job adopted at start-up counts as a :class:`Start` then."""

    def finished(self, job: str, at: float) -> None:
        """The core let ``job`` go: it finished (or went) at ``at``."""

    def kueue_admitted_first(self, job: str) -> None:
        """Kueue admitted ``job`` at its owner's size before Bellows held or sized it."""


NullControllerObserver = ControllerObserver
