"""What a rebuilt controller holds of the jobs it read: their specs, sharing one profile per
profile text, and nothing of the objects read by the time its first round (and the
rehearsal's compilations after it) runs (docs/live.md, "Speed and size")."""

from __future__ import annotations

import gc
from typing import Any

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.emulator import EmulatedCluster
from bellows.kube import Actuator, Arrived, JobReader, KubeApi
from bellows.scaling import default_cluster
from bellows.service.clock import ServiceClock
from bellows.service.controller import Controller
from bellows.twin.replay import job_manifest
from tests.service.livecluster import NS, crds, jobs


class Watched(Controller):
    """A controller that notes what its rebuild queues, and what is alive at its first round."""

    def __init__(self, names: set[str], **options: Any) -> None:
        super().__init__(**options)
        self.names = names
        self.queued: list[tuple[Any, Any, Any]] = []  # (raw, annotations, env) of each view
        self.alive_at_round: int | None = None
        admit, step = self._intake.admit, self._settler.round

        async def noted_admit(seen: Arrived, now: float, **how: Any) -> None:
            self.queued.append((seen.view.raw, seen.view.annotations, seen.view.env))
            await admit(seen, now, **how)

        async def counted_round(now: float) -> float:
            if self.alive_at_round is None:
                gc.collect()
                self.alive_at_round = sum(
                    1
                    for o in gc.get_objects()
                    if isinstance(o, Arrived) and o.spec.name in self.names
                )
            return await step(now)

        # the rebuild queues each waiting job through the intake; its first round is the
        # settler's
        self._intake.admit = noted_admit  # type: ignore[method-assign]
        self._settler.round = counted_round  # type: ignore[method-assign]


async def test_a_rebuild_keeps_the_specs_not_the_jobs_it_read() -> None:
    trace = jobs(12, categories=(1, 2))
    async with EmulatedCluster(crds=crds(), compression=60.0, namespaces=(NS,)) as kube:
        names = set()
        for i, job in enumerate(trace):
            ref, body = job_manifest(job, i, namespace=NS)
            names.add(ref.key)
            plural = body["kind"].lower() + "s"
            key = next(k for k in kube.store.resources if k.endswith("/" + plural))
            kube.store.create(kube.store.resources[key], NS, body)
        api = KubeApi(kube.api_client())
        clock = ServiceClock(speedup=60.0)
        controller = Watched(
            names,
            api=api,
            autoscaler=Autoscaler(AutoscalerConfig(), capacity=4, cluster=default_cluster()),
            actuator=Actuator(api),
            reader=JobReader(api, namespace=NS),
            now=clock.now,
            wall_to_clock=clock.at,
        )
        await controller.rebuild()
        core = controller.autoscaler
        assert set(core.allocations) | set(core.queued) == names
        # queued from a view without the object, its annotations or env values
        assert len(controller.queued) == len(names)
        assert all(view == ({}, {}, {}) for view in controller.queued)
        # none of the jobs read is alive by the first round: only the core's specs are
        assert controller.alive_at_round == 0
        # one profile object per profile text, however many jobs carry it
        profiles = {id(core.job(name).profile) for name in names}
        assert len(profiles) == len({job.spec.profile for job in trace}) < len(names)
