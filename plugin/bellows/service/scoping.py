"""Which jobs one controller takes: its namespaces, and beside Kueue its pool's.

With Kueue cooperation on, one controller runs per pool (:mod:`bellows.service.pools`):
every controller hears every event and reads every job, but takes only those that the
:class:`~bellows.service.queues.QueueIndex` routes to its pool. The default pool's
controller says once, in an Event (reason ``QueueUnknown``) and the skipped gauge, that a
job's queue cannot be resolved, and leaves that job alone; a job this controller held that
now belongs elsewhere is let go (:meth:`Roster.let_go <bellows.service.roster.Roster.let_go>`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bellows.kube import JobRef, KindAdapter, Skipped, keys, kind_named
from bellows.kube.kinds import finished_state, foreign_manager
from bellows.refs import job_key
from bellows.service.parts import Part, Parts
from bellows.service.queues import QueueIndex, QueueProblem

__all__ = ["QUEUE_UNKNOWN", "Scope", "object_key"]

QUEUE_UNKNOWN = "queue-unknown"  # skipped reason: the job's LocalQueue/ClusterQueue unreadable


def object_key(kind: KindAdapter, obj: Mapping[str, Any]) -> str:
    """The key of the job ``obj`` (a ``kind`` object read from the API)."""
    meta = obj.get("metadata") or {}
    return job_key(kind.kind, str(meta.get("namespace", "")), str(meta.get("name", "")))


class Scope(Part):
    """The namespaces and the pool one controller serves; see the module docstring."""

    def __init__(
        self, parts: Parts, *, namespaces: Sequence[str | None], queues: QueueIndex | None
    ) -> None:
        """``queues``: with a :class:`QueueIndex` (Kueue cooperation on), only the jobs
        that it routes to the roster's pool (a ClusterQueue's name; ``None``: the default
        pool); without one, every job."""
        super().__init__(parts)
        self.namespaces = tuple(namespaces)
        self._queues = queues

    def covers(self, ref: JobRef) -> bool:
        """Whether ``ref`` is in one of this controller's namespaces."""
        return None in self.namespaces or ref.namespace in self.namespaces

    async def takes(self, kind: KindAdapter, obj: Mapping[str, Any], now: float) -> bool:
        """Whether this controller takes ``obj`` (its pool's job). The default pool's says
        once that a job's queue cannot be resolved; a job this controller held that now
        belongs elsewhere is let go here (never written to)."""
        if self._queues is None:
            return True  # Kueue cooperation off: one pool, every job
        pool = self._roster.pool
        meta = obj.get("metadata") or {}
        if not keys.opted_in(meta.get("annotations") or {}):
            return pool is None  # examined (metadata only) by one controller
        key = object_key(kind, obj)
        # MultiKueue: never routed by its queue; the default pool says it is skipped
        foreign = foreign_manager(obj, kind.manager) is not None
        route = None if foreign else self._queues.pool_of(obj)
        if isinstance(route, QueueProblem):
            if pool is None and finished_state(obj) is None:
                message = f"{route.message}: Bellows leaves the job alone until it can read it"
                skipped = Skipped(key, QUEUE_UNKNOWN, message)
                await self._reports.skip(skipped, event="QueueUnknown", warning=True)
            elif pool is None:
                self._reports.unskip(key)
            self._roster.let_go(key, now)
            return False
        if self._reports.reason_skipped(key) == QUEUE_UNKNOWN:
            self._reports.unskip(key)  # resolved now
        if route != pool:
            self._roster.let_go(key, now)
            return False
        return True

    async def rescope(self, now: float) -> None:
        """Read again the jobs left alone because their queue could not be resolved: one
        whose queue resolves now is no longer counted as skipped."""
        for job in self._reports.skipped_for(QUEUE_UNKNOWN):
            ref = self._actuator.ref(job)
            kind = kind_named(ref.kind)
            obj = await self._api.get_job(kind, ref.namespace, ref.name)
            if obj is None:
                self._reports.unskip(job)
            else:
                await self.takes(kind, obj, now)
