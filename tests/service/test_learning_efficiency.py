"""Statistical efficiency learned online: gradient noise in reports, goodput rows in the core.

The progress loop over a real core (no server: :meth:`ProgressLoop.take` per payload). A job
whose reports carry ``gradSqr``/``gradVar`` gets its efficiency fitted and is then decided by
goodput, its progress counted in reference samples; a job whose reports carry none, and
every job in paper mode, is revised exactly as before.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from bellows.autoscaler import Mode, Rescale
from bellows.bus.progress import ProgressEvent, ProgressType, encode_progress, progress_subject
from bellows.jobs import JobSpec
from bellows.scaling import default_cluster
from bellows.scaling.timing import step_time
from bellows.service.learning import ProgressLearner
from bellows.service.progress_loop import ProgressLoop, Rejection
from tests.service.core_controller import CoreController
from tests.strategies import make_job

CLUSTER = default_cluster()
PREFIX = "bellows"
T0 = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
KEY = "pytorchjob/team-a/resnet"
SUBJECT = progress_subject(PREFIX, "team-a", "resnet")
NOISE = 40.0  # samples: far below the batches the throughput tables pick
SLOWER = 1.3  # the job steps slower than profiled: its speed is revised either way


def _job() -> JobSpec:
    return make_job(KEY, b_min=32, b_max=512, batch_size=32, work=5e7)


async def _feed(controller: CoreController, *, noise: bool, reports: int = 6) -> ProgressLoop:
    controller.reported = []
    """``reports`` reports of the job at its allocation, 30 s apart, its steps as profiled."""
    loop = ProgressLoop(
        controller=controller,
        learner=ProgressLearner(CLUSTER),
        prefix=PREFIX,
        now=lambda: controller.now,
        wall_to_clock=lambda when: (when - T0).total_seconds(),
    )
    auto = controller.autoscaler
    alloc = auto.allocations[KEY]
    seconds = SLOWER * step_time(_job(), alloc.gpus, alloc.batch, CLUSTER)
    for i in range(reports):
        at = 30.0 * i
        samples = 1000 + round(at * alloc.batch / seconds)
        grads = {"grad_sqr": 1e-2, "grad_var": NOISE * 1e-2 * (1 + 0.01 * i)} if noise else {}
        event = ProgressEvent(
            ProgressType.PROGRESS, "team-a", "resnet", T0 + timedelta(seconds=at), samples,
            alloc.gpus, alloc.batch, seconds, 20, **grads,
        )  # fmt: skip
        controller.now = at
        assert await loop.take(SUBJECT, encode_progress(event)) is None
        controller.reported.append(float(samples))
    return loop


async def test_a_job_reporting_gradient_noise_is_decided_by_goodput() -> None:
    controller = CoreController([_job()], capacity=8)
    auto = controller.autoscaler
    before = auto.allocations[KEY]
    assert before.batch > 8 * NOISE  # by throughput: a batch the noise makes wasteful
    await _feed(controller, noise=True)
    learned = auto.charged(KEY)
    assert learned is not None
    assert learned.reference_batch == 32
    assert learned.noise_scale_at(32, 1e6) == pytest.approx(NOISE, rel=0.2)
    # progress is counted in reference samples: at batch >> noise, far fewer than samples
    done = controller.done[-1]
    assert done is not None
    assert 0 < done < 0.5 * controller.reported[-1]
    assert controller.efficiencies[-1] is learned
    # the next round picks, for the GPUs it gives, the batch of the best goodput
    at = auto.next_round_at()
    assert at is not None
    decisions = auto.step(at)
    after = auto.allocations[KEY]
    assert any(isinstance(d, Rescale) for d in decisions)
    assert after.batch < before.batch
    gpus = after.gpus
    goodput = {
        b: b / step_time(auto.job(KEY), gpus, b, CLUSTER) * float(learned.efficiency(b, done))
        for b in range(max(32, gpus), 513, 1)
        if -(-b // gpus) <= auto.job(KEY).m_max
    }
    best = max(goodput.values())
    assert goodput[after.batch] >= 0.97 * best  # the table's candidate batches: within 3 %


async def test_done_is_in_reference_samples_once_efficiency_is_known() -> None:
    controller = CoreController([_job()], capacity=8)
    await _feed(controller, noise=True)
    learned = controller.autoscaler.charged(KEY)
    assert learned is not None
    done = controller.done[-1]
    assert done is not None
    alloc = controller.autoscaler.allocations[KEY]
    # the reported samples, weighted by the learned efficiency at the job's batch
    weighted = [float(learned.progress_after(alloc.batch, 0.0, n)) for n in controller.reported]
    assert min(abs(done - w) / w for w in weighted) < 2e-3


@pytest.mark.parametrize("mode", [Mode.BELLOWS, Mode.PAPER])
async def test_without_gradient_noise_or_in_paper_mode_a_job_is_revised_as_before(
    mode: Mode,
) -> None:
    plain = CoreController([_job()], capacity=8, mode=mode)
    await _feed(plain, noise=False)
    noisy = CoreController([_job()], capacity=8, mode=mode)
    await _feed(noisy, noise=mode is Mode.PAPER)  # paper mode: the noise is ignored
    for controller in (plain, noisy):
        assert controller.autoscaler.charged(KEY) is None
        assert all(e is None for e in controller.efficiencies)
    assert plain.done == noisy.done
    assert plain.done
    assert set(plain.done) <= set(plain.reported)  # samples, as today
    at = plain.autoscaler.next_round_at()
    if at is not None:
        assert plain.autoscaler.step(at) == noisy.autoscaler.step(at)
        assert plain.autoscaler.allocations == noisy.autoscaler.allocations


async def test_implausible_gradient_noise_is_refused_as_inconsistent() -> None:
    controller = CoreController([_job()], capacity=8)
    loop = await _feed(controller, noise=True, reports=3)
    auto = controller.autoscaler
    alloc = auto.allocations[KEY]
    seconds = SLOWER * step_time(_job(), alloc.gpus, alloc.batch, CLUSTER)
    at = 90.0
    jump = ProgressEvent(
        ProgressType.PROGRESS, "team-a", "resnet", T0 + timedelta(seconds=at),
        1000 + round(at * alloc.batch / seconds), alloc.gpus, alloc.batch, seconds, 20,
        grad_sqr=1e-2, grad_var=NOISE * 1e-2 * 100,  # the noise scale 100x in one report
    )  # fmt: skip
    controller.now = at
    assert await loop.take(SUBJECT, encode_progress(jump)) is Rejection.INCONSISTENT
    honest = dataclasses.replace(jump, grad_var=NOISE * 1e-2)
    assert await loop.take(SUBJECT, encode_progress(honest)) is None


@pytest.mark.parametrize("claimed", [1e-2, 1e11])  # noise scales far below and far above
async def test_a_lie_about_gradient_noise_buys_no_gpus(claimed: float) -> None:
    """Two jobs share 8 GPUs; one reports a made-up noise scale. A tiny one makes its big
    batches look wasteful (fewer GPUs or the same), a huge one makes it look as without
    reports: never more GPUs than the same reports without gradient noise give it."""

    async def share(noise: float | None) -> int:
        liar, other = _job(), make_job("pytorchjob/team-a/other", b_min=32, b_max=512, work=5e7)
        controller = CoreController([liar], capacity=8)
        auto = controller.autoscaler
        auto.arrive(other, now=0.0)
        controller.now = 1.0
        auto.step(1.0)
        loop = ProgressLoop(
            controller=controller, learner=ProgressLearner(CLUSTER), prefix=PREFIX,
            now=lambda: controller.now, wall_to_clock=lambda when: (when - T0).total_seconds(),
        )  # fmt: skip
        alloc = auto.allocations[KEY]
        seconds = SLOWER * step_time(_job(), alloc.gpus, alloc.batch, CLUSTER)
        grads = {} if noise is None else {"grad_sqr": 1.0, "grad_var": noise}
        for i in range(6):
            at = 2.0 + 30.0 * i
            event = ProgressEvent(
                ProgressType.PROGRESS, "team-a", "resnet", T0 + timedelta(seconds=at),
                1000 + round((at - 2.0) * alloc.batch / seconds), alloc.gpus, alloc.batch,
                seconds, 20, **grads,
            )  # fmt: skip
            controller.now = at
            assert await loop.take(SUBJECT, encode_progress(event)) is None
        assert (auto.charged(KEY) is None) == (noise is None)
        at = max(auto.next_round_at() or 0.0, 600.0)
        auto.step(at)
        return auto.allocations[KEY].gpus if KEY in auto.allocations else 0

    plain = await share(None)
    assert await share(claimed) <= plain
