"""What one controller holds beside its core: the jobs it runs or queues, the GPUs each may
hold on the cluster, the decisions the cluster has not taken yet, and what it last wrote on
each job a round kept.

The core (:class:`~bellows.autoscaler.Autoscaler`) says what each job should have; the
roster says what the cluster may still be giving it. A job leaves the roster when it
finishes (:meth:`Roster.finish`) or when it is routed to another pool
(:meth:`Roster.let_go`).
"""

from __future__ import annotations

import structlog

from bellows.autoscaler import AnyAutoscaler, Decision
from bellows.service.observing import ControllerObserver
from bellows.service.reports import Reports

__all__ = ["Roster"]

_log = structlog.get_logger("bellows.controller")


class Roster:
    """The jobs of one controller and their state on the cluster."""

    def __init__(
        self,
        core: AnyAutoscaler,
        *,
        reports: Reports,
        observer: ControllerObserver,
        pool: str | None,
    ) -> None:
        self.core = core
        self.pool = pool
        self.retry: dict[str, Decision] = {}  # decisions the cluster has not taken yet
        # GPUs each job may hold on the cluster now: what the last applied decision gave it,
        # or, while a decision is unsettled, the larger of before and after (an upper bound)
        self.held: dict[str, int] = {}
        self.active: set[str] = set()  # jobs the core runs or queues (not finished)
        # the uid of each active job: the object the core's job is (a job deleted and
        # submitted again under its name is another job; a copy Bellows re-created is not)
        self.uids: dict[str, str] = {}
        self.kept: dict[str, str] = {}  # the reason last written on each kept job
        # jobs whose decision the cluster refused in a row: (failures, retry not before, on
        # the settler's timer); a success or the job's end forgets it
        self.failed: dict[str, tuple[int, float]] = {}
        self.widest = core.capacity  # the most GPUs the cluster has had: k_max's bound
        self.let_go_some = False  # a job left this pool: its core cannot take it back
        self._reports = reports
        self._observer = observer

    def known(self, job: str, uid: str) -> None:
        """``job`` is the core's now (running or queued), as the object ``uid``."""
        self.active.add(job)
        self.uids[job] = uid

    def finish(self, job: str, now: float, at: float) -> None:
        """``job`` finished (or went) at ``at``: the core frees its GPUs at ``now`` and
        forgets it, and so does the roster (whatever the core knew of it: a job the core
        rejected or let go is unknown to it, and nothing of it may stay behind here)."""
        self._reports.set_invalid(job, False)
        self._reports.unskip(job)
        known = self.core.finish(job, now)
        self._forget(job)
        if known:
            _log.info("job.finished", job=job)
            self._observer.finished(job, at)

    def let_go(self, job: str, now: float) -> None:
        """Forget a job of this pool that is no longer routed here (its LocalQueue moved or
        went): nothing is written to it; the pool it now belongs to takes it. The core
        forgets it as finished, so this controller is stale from now on."""
        if job not in self.active:
            return
        _log.warning("job.left_pool", job=job, pool=self.pool)
        self.let_go_some = True
        self.core.finish(job, now)
        self._forget(job)

    def _forget(self, job: str) -> None:
        """Drop what the roster holds of ``job``: its retry, its GPUs, its kept reason."""
        self.retry.pop(job, None)
        self.held.pop(job, None)
        self.kept.pop(job, None)
        self.failed.pop(job, None)
        self.active.discard(job)
        self.uids.pop(job, None)
