"""What the progress loop (:mod:`bellows.service.progress_loop`) speaks: why it drops a
report (:class:`Rejection`), what it reads of the core (:class:`Core`) and needs of the
controller (:class:`Revising`), and its metrics hooks (:class:`ProgressObserver`)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Protocol

from bellows.jobs import Allocation, JobSpec
from bellows.scaling import EfficiencyProfile
from bellows.scaling.placement_memory import ObservedStep
from bellows.service.progress_limits import Limited

__all__ = ["Core", "ProgressObserver", "Rejection", "Revising"]


class Rejection(StrEnum):
    """Why a report was dropped: the ``reason`` label of ``bellows_progress_rejected_total``."""

    INVALID = "invalid"  # did not decode: schema, bounds, subject and payload disagree
    OUT_OF_SCOPE = "out_of_scope"  # a namespace the controller does not manage
    NOT_RUNNING = "not_running"  # no running job of that namespace and name
    AMBIGUOUS = "ambiguous"  # two running jobs of different kinds share namespace and name
    STALE = "stale"  # of another (GPUs, batch) than the job runs at: before a rescale
    BACKWARDS = "backwards"  # samples seen went backwards
    INCONSISTENT = "inconsistent"  # does not hold with the job's other reports or its work
    RATE_LIMITED = Limited.REPORTS.value  # its namespace's reports per second spent
    BYTES_LIMITED = Limited.BYTES.value  # its namespace's bytes per second spent


class Core(Protocol):
    """What the loop reads of the core: an :class:`~bellows.autoscaler.Autoscaler`, or the
    pools' cores together (:class:`~bellows.service.pools.Pools`)."""

    @property
    def allocations(self) -> Mapping[str, Allocation]: ...

    @property
    def queued(self) -> tuple[str, ...]: ...

    def job(self, name: str) -> JobSpec: ...

    def estimated_done(self, name: str, now: float) -> float: ...

    @property
    def goodput(self) -> bool: ...

    def charged(self, name: str) -> EfficiencyProfile | None: ...


class Revising(Protocol):
    """What the loop needs of the controller (:class:`~bellows.service.controller.Controller`
    or :class:`~bellows.service.pools.Pools`)."""

    @property
    def autoscaler(self) -> Core: ...

    async def revise(
        self,
        spec: JobSpec,
        *,
        done: float | None,
        since: float | None,
        efficiency: EfficiencyProfile | None = None,
    ) -> bool: ...

    async def notify(self, job: str, reason: str, message: str) -> None: ...

    async def observe_step(self, job: str, step: ObservedStep) -> bool:
        """A step the job measured where it runs, for its class's placement memory
        (:meth:`~bellows.autoscaler.Autoscaler.observe_step`); whether it changed it."""
        ...

    def uid(self, job: str) -> str | None:
        """The uid of the object the core's ``job`` is (``None``: not one of its jobs)."""
        ...


class ProgressObserver:
    """Hooks for metrics; the base class ignores everything."""

    def rejected(self, reason: Rejection) -> None:
        return None

    def stalled(self, job: str, stalled: bool) -> None:
        return None

    def inconsistent(self, job: str, inconsistent: bool) -> None:
        return None
