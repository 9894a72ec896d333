"""The emulated jobs' training helpers: progress reports from the emulated cluster to NATS.

What ``examples/training/elastic.py``'s ``ProgressReporter`` publishes from rank 0 of a real
job, :class:`EmulatedReporter` publishes for every job the emulated operators run: once per
start a ``job.started`` with the restart it paid (the emulated cluster's restart cost), and
every ``interval_s`` real seconds a ``job.progress`` with the samples seen and the job's
*true* step time (:attr:`bellows.emulator.Progress.step_seconds`, which differs from
its annotation when the cluster was given ``true_speed``). A job that made no step since its
last report reports nothing, as a real helper between steps. With ``noise`` (the
statistical efficiency of a job's model, by namespace and name: e.g. a Pollux model's
:data:`~bellows.scaling.MODEL_EFFICIENCY`), each ``job.progress`` of such a job carries the
gradient statistics its helper would measure (payload version 2): ``gradSqr`` 1 and
``gradVar`` the model's noise scale at the job's batch and progress, the samples it trained
at each batch weighted by the model's efficiency (reference samples, as the controller counts
them; the emulated cluster itself still runs a job until its samples reach its work).
Publishing never stops the loop: a refused or lost report is logged and the next one comes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime

import structlog
from nats.js.client import JetStreamContext

from bellows.bus.progress import (
    MAX_GRAD_STAT,
    ProgressEvent,
    ProgressType,
    encode_progress,
    progress_subject,
)
from bellows.emulator import EmulatedCluster, Progress
from bellows.inputs import brief
from bellows.kube.adapters import KINDS
from bellows.scaling import EfficiencyProfile

__all__ = ["EmulatedReporter"]

_log = structlog.get_logger("bellows.emulator")


class EmulatedReporter:
    """Publishes what each emulated job's training helper would (see the module docstring)."""

    def __init__(
        self,
        cluster: EmulatedCluster,
        js: JetStreamContext,
        *,
        prefix: str,
        restart_s: float,
        interval_s: float = 0.2,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        noise: Callable[[str, str], EfficiencyProfile | None] | None = None,
    ) -> None:
        if cluster.operator is None:
            raise ValueError("the emulated cluster runs no operator: no job trains")
        self._cluster = cluster
        self._operator = cluster.operator
        self._js = js
        self._prefix = prefix
        self._restart_s = restart_s
        self._interval_s = interval_s
        self._now = now
        self._noise = noise
        self._starts: dict[str, int] = {}  # uid -> restarts already reported
        self._samples: dict[str, int] = {}  # uid -> samples of the last report
        self._progress: dict[str, tuple[int, float]] = {}  # uid -> samples, reference samples
        self.published = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Report every ``interval_s`` until ``stop``."""
        while not stop.is_set():
            await self.report_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._interval_s)

    async def report_once(self) -> None:
        """One round of reports from every running emulated job."""
        store = self._cluster.store
        for kind in KINDS:
            resource = store.resources[f"{kind.group}/{kind.version}/{kind.plural}"]
            for obj in store.list_objects(resource, None)[0]:
                meta = obj["metadata"]
                progress = self._operator.progress(meta["uid"])
                if progress is None:
                    continue
                for event in self._events(meta["namespace"], meta["name"], meta["uid"], progress):
                    await self._publish(event)

    def _events(
        self, namespace: str, name: str, uid: str, progress: Progress
    ) -> list[ProgressEvent]:
        gpus, batch = progress.gpus, progress.batch
        if gpus is None or batch is None or progress.step_seconds is None:
            return []  # stopped: no helper runs
        samples = int(progress.samples)
        common = (namespace, name, self._now(), samples, gpus, batch)
        out = []
        if self._starts.get(uid) != progress.restarts:
            self._starts[uid] = progress.restarts
            out.append(ProgressEvent(ProgressType.STARTED, *common, restart_s=self._restart_s))
        last = self._samples.get(uid)
        if last is not None and samples > last:
            steps = max(1, round((samples - last) / batch))
            sqr, var = self._gradients(namespace, name, uid, batch, samples)
            out.append(
                ProgressEvent(
                    ProgressType.PROGRESS,
                    *common,
                    step_seconds=progress.step_seconds,
                    steps=steps,
                    grad_sqr=sqr,
                    grad_var=var,
                )
            )
        self._samples[uid] = samples
        return out

    def _gradients(
        self, namespace: str, name: str, uid: str, batch: int, samples: int
    ) -> tuple[float | None, float | None]:
        """``(gradSqr, gradVar)`` of a job whose model is known, at ``samples`` seen, the
        samples since the last call trained at ``batch`` (``(None, None)``: no model)."""
        model = None if self._noise is None else self._noise(namespace, name)
        if model is None:
            return None, None
        seen, done = self._progress.get(uid, (0, 0.0))
        done = float(model.progress_after(batch, done, max(0, samples - seen)))
        self._progress[uid] = (samples, done)
        phi = float(model.noise_scale_at(batch, max(done, 1.0)))
        return 1.0, min(phi, MAX_GRAD_STAT)

    async def _publish(self, event: ProgressEvent) -> None:
        subject = progress_subject(self._prefix, event.namespace, event.name)
        try:
            await self._js.publish(subject, encode_progress(event), timeout=2.0)
            self.published += 1
        except Exception as err:  # a lost report costs the job nothing, as with the helper
            _log.warning("emulator.progress_not_published", job=event.name, error=brief(err))
