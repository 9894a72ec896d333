"""A real core behind the progress loop's controller port, for tests without Kubernetes.

:class:`CoreController` is the :class:`~bellows.service.progress_interfaces.Revising` the
progress loop talks to (``revise``, ``notify``, ``observe_step``, ``uid``), over a real
:class:`~bellows.autoscaler.Autoscaler` on a clock the test moves (``now``); it records
what it was told.
"""

from __future__ import annotations

from collections.abc import Sequence

from bellows.autoscaler import AnyAutoscaler, Autoscaler, AutoscalerConfig, Mode, TypedAutoscaler
from bellows.jobs import JobSpec
from bellows.scaling import EfficiencyProfile, default_cluster
from bellows.scaling.gpu_types import TypedCluster
from bellows.scaling.placement_memory import ObservedStep, PlacementMemory


class CoreController:
    """``jobs`` arrived at 0 and a step taken there, on ``capacity`` GPUs in ``mode`` (on
    ``typed``'s GPU types instead, where given: a typed core)."""

    def __init__(
        self,
        jobs: Sequence[JobSpec],
        *,
        capacity: int = 16,
        mode: Mode = Mode.BELLOWS,
        placements: bool = False,
        typed: TypedCluster | None = None,
    ) -> None:
        self.now = 0.0
        cluster = default_cluster()
        self.autoscaler: AnyAutoscaler = (
            Autoscaler(
                AutoscalerConfig(mode=mode), capacity=capacity, cluster=cluster,
                measured=PlacementMemory(cluster) if placements else None,
            ) if typed is None
            else TypedAutoscaler(AutoscalerConfig(mode=mode), cluster=typed)
        )  # fmt: skip
        for job in jobs:
            self.autoscaler.arrive(job, now=0.0)
        self.autoscaler.step(0.0)
        self.uids = {job.name: f"uid-{job.name.rsplit('/', 1)[-1]}" for job in jobs}
        self.revisions: list[JobSpec] = []
        self.done: list[float | None] = []
        self.efficiencies: list[EfficiencyProfile | None] = []
        self.events: list[tuple[str, str]] = []
        self.reported: list[float] = []  # the samples of each report a test fed
        self.observed: list[tuple[str, ObservedStep]] = []  # steps told to the core

    async def revise(
        self,
        spec: JobSpec,
        *,
        done: float | None,
        since: float | None,
        efficiency: EfficiencyProfile | None = None,
    ) -> bool:
        self.revisions.append(spec)
        self.done.append(done)
        self.efficiencies.append(efficiency)
        if efficiency is not None:
            self.autoscaler.charge(spec.name, efficiency)
        return self.autoscaler.revise(spec, self.now, done=done, since=since)

    async def notify(self, job: str, reason: str, message: str) -> None:
        self.events.append((job, reason))

    async def observe_step(self, job: str, step: ObservedStep) -> bool:
        self.observed.append((job, step))
        return self.autoscaler.observe_step(job, self.now, step)

    def uid(self, job: str) -> str | None:
        return self.uids.get(job)
