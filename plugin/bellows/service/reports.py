"""What a controller says about the jobs it leaves alone: invalid settings, skipped jobs.

A job with invalid settings gets a warning Event and a status annotation saying what is
wrong (:meth:`Reports.report`); a skipped job (another controller runs it, or its Kueue
queue cannot be resolved) gets one Event per reason and nothing written on the job itself
(:meth:`Reports.skip`). The counts go to the observer's gauges.
"""

from __future__ import annotations

import structlog

from bellows.inputs import brief
from bellows.kube import Actuator, Invalid, Skipped
from bellows.kube.readback import DISTRUSTED_EVENT, Distrusted
from bellows.service.observing import ControllerObserver

__all__ = ["Reports"]

_log = structlog.get_logger("bellows.controller")
_MAX_DISTRUSTED = 10_000


class Reports:
    """The opted-in jobs a controller leaves alone, and the Events that say so."""

    def __init__(self, actuator: Actuator, observer: ControllerObserver) -> None:
        self._actuator = actuator
        self._observer = observer
        self._invalid: set[str] = set()  # opted-in jobs left alone for their data
        self._skipped: dict[str, str] = {}  # opted-in jobs another controller runs: reason
        # journal values said distrusted, per job (each said once; at most _MAX_DISTRUSTED
        # jobs remembered, the oldest forgotten first)
        self._distrusted: dict[str, set[tuple[str, str]]] = {}

    def reason_skipped(self, job: str) -> str | None:
        """Why ``job`` is skipped (``None``: it is not)."""
        return self._skipped.get(job)

    def skipped_for(self, reason: str) -> list[str]:
        """The jobs skipped for ``reason``."""
        return [j for j, r in self._skipped.items() if r == reason]

    def set_invalid(self, job: str, invalid: bool) -> None:
        before = len(self._invalid)
        if invalid:
            self._invalid.add(job)
        else:
            self._invalid.discard(job)
        if len(self._invalid) != before:
            self._observer.invalid_jobs(len(self._invalid))

    async def report(self, seen: Invalid) -> None:
        self.set_invalid(seen.job, not seen.refused)
        reason = "Refused" if seen.refused else "InvalidSettings"
        try:
            await self._actuator.report_problem(seen.job, seen.problem, reason=reason)
        except Exception as err:  # best effort: the job is left alone whatever the API says
            _log.warning("job.report_failed", job=seen.job, error=brief(err))
        _log.warning("job.not_managed", job=seen.job, problem=seen.problem)

    async def skip(self, seen: Skipped, *, event: str = "Skipped", warning: bool = False) -> None:
        """Say once per job, in an Event (``event`` its reason) and the metric, that it is
        skipped; nothing is written to the job itself (not even the status annotation)."""
        was = self._skipped.get(seen.job)
        if was == seen.reason:
            return
        self._skipped[seen.job] = seen.reason
        if was is not None:
            self._count_skipped(was)
        self._count_skipped(seen.reason)
        _log.info("job.skipped", job=seen.job, reason=seen.reason)
        await self.notify(seen.job, event, seen.message, warning=warning)

    async def distrust(self, job: str, found: list[Distrusted]) -> None:
        """Say on ``job`` (a Warning Event each) and count the journal values Bellows will
        not act on, each once while it stays the same."""
        said = self._distrusted.pop(job, set())
        self._distrusted[job] = said  # the most recent last
        while len(self._distrusted) > _MAX_DISTRUSTED:
            del self._distrusted[next(iter(self._distrusted))]
        for item in found:
            if (item.key, item.value) in said:
                continue
            said.add((item.key, item.value))
            self._observer.journal_distrusted(item.key)
            _log.warning("job.journal_distrusted", job=job, key=item.key, why=item.why)
            await self.notify(job, DISTRUSTED_EVENT, item.message())

    def unskip(self, job: str) -> None:
        reason = self._skipped.pop(job, None)
        if reason is not None:
            self._count_skipped(reason)

    async def notify(self, job: str, reason: str, message: str, *, warning: bool = True) -> None:
        """An Event on ``job`` (best effort, nothing else written)."""
        try:
            await self._actuator.notify(job, reason, message, warning=warning)
        except Exception as err:  # best effort: an Event is never worth a failed pass
            _log.warning("job.notify_failed", job=job, error=brief(err))

    def _count_skipped(self, reason: str) -> None:
        count = sum(1 for r in self._skipped.values() if r == reason)
        self._observer.skipped_jobs(reason, count)
