"""``bellows demo --wrong-priors``: jobs whose annotations lie about their speed, and learning.

Every job of the demo trace keeps its annotated profile (the prior), but the emulated cluster
trains it at another, true speed (:data:`~bellows.sim.learning.WRONG_PRIORS`, by the job's
place in the trace; ``bellows simulate --wrong-priors`` replays the same pattern). The emulated
jobs report progress as the training helper does
(:class:`~bellows.twin.emulated_progress.EmulatedReporter`); with learning on, the live
controller refits each job from its reports (:class:`~bellows.service.progress_loop.ProgressLoop`)
and decides with the refit from the next round on; with learning off it keeps the wrong prior.
The simulator half replays the trace with the *true* profiles: the decisions an oracle would
make, against which both live runs are measured.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Final

from nats.js.client import JetStreamContext

from bellows.bus.settings import NatsSettings
from bellows.emulator import EmulatedCluster
from bellows.kube import KubeApi
from bellows.scaling import ClusterProfile, EfficiencyProfile
from bellows.scaling.online import SpeedFactors
from bellows.service.learning import ProgressLearner
from bellows.service.progress_loop import (
    ProgressLoop,
    Revising,
    fit_annotator,
    open_progress_subscription,
)
from bellows.sim.learning import DEFAULT_REPORT_S, WRONG_PRIORS, true_spec, wrong_priors
from bellows.sim.workloads import TraceJob
from bellows.twin.emulated_progress import EmulatedReporter
from bellows.twin.replay import manifest_name

__all__ = ["REPORT_S", "WRONG_PRIORS", "learning_tasks", "true_speeds", "true_trace"]

REPORT_S: Final = DEFAULT_REPORT_S  # cluster seconds between two reports of an emulated job


def _truth(trace: Sequence[TraceJob]) -> dict[str, SpeedFactors]:
    """:func:`~bellows.sim.learning.wrong_priors`, keyed by the job's object name."""
    by_spec = wrong_priors(trace)
    return {manifest_name(job): by_spec[job.spec.name] for job in trace}


def true_speeds(trace: Sequence[TraceJob]) -> Callable[[str, str], SpeedFactors | None]:
    """The emulated cluster's ``true_speed``: each trace job's factors, by object name."""
    truth = _truth(trace)
    return lambda namespace, name: truth.get(name)


def true_trace(trace: Sequence[TraceJob]) -> tuple[TraceJob, ...]:
    """The trace with every job's true profile in its spec (what an oracle would know)."""
    truth = _truth(trace)
    return tuple(
        dataclasses.replace(job, spec=true_spec(job.spec, truth[manifest_name(job)]))
        for job in trace
    )


async def learning_tasks(
    *,
    kube: EmulatedCluster,
    js: JetStreamContext,
    settings: NatsSettings,
    controller: Revising,
    api: KubeApi,
    cluster: ClusterProfile,
    now: Callable[[], float],
    wall_to_clock: Callable[[datetime], float],
    speedup: float,
    restart_s: float,
    namespace: str,
    learn: bool,
    stop: asyncio.Event,
    noise: Callable[[str, str], EfficiencyProfile | None] | None = None,
) -> list[asyncio.Task[None]]:
    """The emulated jobs' reporters, which report as their pods would, through the endpoint
    the controller wrote into them (with ``noise``, the gradient noise of each job's
    efficiency), and, with ``learn``, the controller's progress loop."""
    reporter = EmulatedReporter(
        kube, None, prefix=settings.subject_prefix, restart_s=restart_s,
        interval_s=REPORT_S / speedup, noise=noise, through_pods=True,
    )  # fmt: skip
    tasks = [asyncio.create_task(reporter.run(stop), name="emulated-progress")]
    if learn:
        sub = await open_progress_subscription(js, settings)
        loop = ProgressLoop(
            controller=controller, learner=ProgressLearner(cluster), prefix=settings.subject_prefix,
            now=now, namespaces=(namespace,), annotate=fit_annotator(api),
            wall_to_clock=wall_to_clock,
        )  # fmt: skip
        tasks.append(asyncio.create_task(loop.run(sub, stop, check_s=REPORT_S), name="learning"))
    return tasks
