"""The loop closed on the live stack: emulated jobs train at their true speed and report it,
the controller (``run_controller``) learns it and writes the refitted profile on the job."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bellows.autoscaler import Autoscaler
from bellows.bus import NatsSettings, connect
from bellows.jobs import JobSpec
from bellows.kube import keys
from bellows.scaling import EfficiencyProfile, JobProfile, default_cluster
from bellows.scaling.noise import EXPONENT_PRIOR, GROWTH_PRIOR
from bellows.scaling.online import SpeedFactors
from bellows.scaling.timing import step_time
from bellows.service import runner
from bellows.service.pools import Pools
from bellows.service.progress_loop import ProgressLoop
from bellows.sim.workloads import TraceJob
from bellows.twin.emulated_progress import EmulatedReporter
from tests.service.livecluster import jobs, live

TRUTH = SpeedFactors(compute=0.75, communication=1.4)  # 25 % faster compute, 40 % slower Allreduce


@pytest.mark.slow
async def test_the_controller_learns_a_jobs_true_speed_from_its_reports() -> None:
    (job,) = jobs(1, seed=5, categories=(2,), scale=200.0)
    speeds = live(capacity=8, delta_s=120.0, true_speed=lambda ns, name: TRUTH)
    async with speeds as stack, _reporting(stack, job) as (name, reporter):
        await _learns_speed(stack, job, name, reporter)


async def _learns_speed(stack: Any, job: TraceJob, name: str, reporter: EmulatedReporter) -> None:
    prior = JobProfile(job.spec.weights, job.spec.profile)
    operator = stack.kube.operator
    assert operator is not None
    errors: list[tuple[float, float]] = []  # (prior's error, fit's error) at each look

    def learned() -> bool:
        obj = stack.objects()[name]
        text = (obj["metadata"].get("annotations") or {}).get(keys.FIT)
        truth = operator.progress(obj["metadata"]["uid"])
        if text is None or truth is None or truth.step_seconds is None:
            return False
        assert truth.gpus is not None
        assert truth.batch is not None
        fit = keys.parse_profile_text(keys.FIT, text)
        off = [
            abs(_step(job.spec, profile, truth.gpus, truth.batch) / truth.step_seconds - 1)
            for profile in (prior, fit)
        ]
        errors.append((off[0], off[1]))
        return errors[-1][1] <= 0.05

    await stack.until("the fit on the job predicts its true step time", learned, 20.0)
    stack.alive()
    assert errors[-1][0] > 0.05  # where the prior was wrong
    assert reporter.published > 0


@contextlib.asynccontextmanager
async def _reporting(
    stack: Any, job: TraceJob, **options: Any
) -> AsyncIterator[tuple[str, EmulatedReporter]]:
    """The controller running, ``job`` submitted and its emulated helper reporting."""
    stack.start_bridge()
    stack.start_controller("controller")
    (name,) = await stack.submit([job])
    nc = await connect(NatsSettings(servers=(stack.nats.url,)))
    stop = asyncio.Event()
    reporter = EmulatedReporter(
        stack.kube, nc.jetstream(), prefix="bellows", restart_s=0.0, interval_s=0.05,
        **options,
    )  # fmt: skip
    task = asyncio.create_task(reporter.run(stop))

    async def stopped() -> None:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    reporter.stop = stopped  # type: ignore[attr-defined]
    try:
        yield name, reporter
    finally:
        await stopped()
        await nc.close()


def _step(job: JobSpec, profile: JobProfile, gpus: int, batch: int) -> float:
    """``job``'s step time at ``(gpus, batch)`` if its profile were ``profile``."""
    spec = dataclasses.replace(job, weights=profile.effective_weights, profile=profile.step)
    return step_time(spec, gpus, batch, default_cluster())


@pytest.mark.slow
async def test_the_controller_learns_a_jobs_efficiency_from_its_gradient_noise() -> None:
    """The emulated helper reports a model's gradient noise (payload version 2); the
    controller fits the job's efficiency and writes it on the job with the fit."""
    (job,) = jobs(1, seed=5, categories=(2,), scale=200.0)
    growth, exponent = GROWTH_PRIOR[0], EXPONENT_PRIOR[0]  # the prior's: the scale is told
    truth = EfficiencyProfile(job.spec.batch_size, 900.0, growth, exponent)
    noise = {"noise": lambda namespace, job_name: truth}
    async with live(capacity=8, delta_s=120.0) as stack, _reporting(stack, job, **noise) as got:
        await _learns_efficiency(stack, got[0], truth)


async def _learns_efficiency(stack: Any, name: str, truth: EfficiencyProfile) -> None:
    scale = re.compile(r"noise scale ([0-9.e+]+) samples at 1e6 reference samples")

    def learned() -> float | None:
        obj = stack.objects()[name]
        text = (obj["metadata"].get("annotations") or {}).get(keys.FIT) or ""
        found = scale.search(keys.parse_profile_text(keys.FIT, text).source) if text else None
        return None if found is None else float(found.group(1))

    await stack.until("the efficiency is on the job", lambda: learned() is not None, 20.0)
    stack.alive()
    assert learned() == pytest.approx(truth.noise_scale, rel=0.2)


@pytest.mark.slow
async def test_a_follower_decides_from_what_the_killed_leader_learned(monkeypatch) -> None:
    """Issue 37 item 2 on the twin: the leader learns a job's speed and efficiency from its
    reports and is killed while the job runs; the follower's rebuild recalls what it learned
    from the controller's bucket, so its core holds what the dead leader's core held, and
    from there both decide alike."""
    cores: list[tuple[Pools, Autoscaler]] = []  # each leader, and its core as it first decided
    flushes: list[float] = []
    started_controller, flush = runner._started_controller, ProgressLoop.flush

    async def started(*args: Any, **kwargs: Any) -> Pools | None:
        pools = await started_controller(*args, **kwargs)
        if pools is not None:  # rebuilt, its first round run; nothing learned since
            cores.append((pools, pools.default.autoscaler.fork()))
        return pools

    async def flushed(self: ProgressLoop) -> None:
        await flush(self)
        flushes.append(time.monotonic())

    monkeypatch.setattr(runner, "_started_controller", started)
    monkeypatch.setattr(ProgressLoop, "flush", flushed)
    (job,) = jobs(1, seed=5, categories=(2,), scale=2000.0)
    truth = EfficiencyProfile(job.spec.batch_size, 900.0, GROWTH_PRIOR[0], EXPONENT_PRIOR[0])
    speeds = live(capacity=8, delta_s=120.0, true_speed=lambda ns, name: TRUTH)
    async with speeds as stack, _reporting(stack, job, noise=lambda ns, n: truth) as got:
        name, reporter = got
        await _learns_efficiency(stack, name, truth)
        await reporter.stop()
        quiet = time.monotonic()  # every report is in the stream; three refits later,
        # the leader has taken them all (a fetch takes what waits, at most 256)
        await stack.until("the leader took every report", lambda: _after(flushes, quiet) >= 3)
        await stack.kill("controller")
        leader = cores[0][0].default.autoscaler.fork()  # what it knew as it died
        stack.start_controller("follower")
        await stack.until("the follower rebuilt", lambda: len(cores) == 2, 30.0)
        follower = cores[1][1]
        now = stack.clock.now()
    (key,) = leader.allocations
    assert follower.allocations == leader.allocations  # its first round moved nothing
    assert follower.job(key) == leader.job(key)  # the speed learned
    assert follower.charged(key) == leader.charged(key)  # the efficiency learned
    assert leader.charged(key) is not None
    # from that point, the same facts give the same decisions: the job at the samples the
    # dead leader estimated (the follower estimates from the last report it recalled, and
    # its next reports revise it), then a job arrives; each core's next round (a new leader
    # starts its own round grid) decides the same
    done = leader.estimated_done(key, now)
    late = dataclasses.replace(job.spec, name="pytorchjob/bellows-test/late")
    decided = []
    for core in (leader, follower):
        assert core.revise(core.job(key), now, done=done, since=now)
        core.arrive(late, now)
        core.step(now)
        while (due := core.next_round_at()) is not None and due <= now + 2 * core.config.delta_s:
            core.step(due)
        decided.append(({n: core.job(n) for n in core.allocations}, core.allocations))
    assert decided[0] == decided[1]
    assert late.name in decided[0][1]  # the late job runs: the round did something


def _after(times: list[float], since: float) -> int:
    return sum(1 for t in times if t > since)
