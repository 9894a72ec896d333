"""Honest progress reporters are never refused (issue 37): the checks accept what real jobs do.

Each example is one honest job, reporting as ``examples/training/elastic.py``'s
``ProgressReporter`` does (after each step: a report when its window holds ``every_steps``
steps or ``every_s`` seconds passed; the report carries the window's median step time, a
step's time being the time since the previous step, so a pause lands in the step after it),
with what honest jobs go through:

* a true step time per run at its (GPUs, batch), each step within 5 % of it (a loaded node);
* a first step compiled, up to 4x as long;
* step-time jumps of up to 4x, either way, at report boundaries (a shared node);
* pauses for evaluation and checkpoints, each at most the steps since the run's first
  report (so pauses are at most half the wall time of the run seen so far) and at most one
  per report window;
* reports dated up to 5 s after their samples were counted (a loaded node), delivered late
  (up to 10 minutes, in the order published: JetStream keeps a subject's order) and in
  bursts, some delivered again later (a redelivery: out of order).

They go through the controller's own code: :class:`~bellows.service.progress_loop.ProgressLoop`
(its accept and flush, as its ``run`` takes a fetched batch) over the controller's
:class:`~bellows.service.learning.ProgressLearner` and a real core, dated as the controller
dates them (a report's own time, never later than the loop's now). None is refused, none
flagged, and the job is learned from.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from dataclasses import dataclass
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bellows.bus.progress import ProgressEvent, ProgressType, encode_progress, progress_subject
from bellows.service.learning import ProgressLearner
from bellows.service.metrics import Metrics
from bellows.service.progress_loop import MetricsProgressObserver, ProgressLoop
from tests.hostile.test_progress_trust import CLUSTER, KEY
from tests.service.core_controller import CoreController
from tests.service.test_progress_loop import PREFIX, T0
from tests.strategies import make_job

GPUS, BATCH = 8, 512  # where the core runs the job
STAMP_LAG_S = 5.0  # how late a report may be dated after its samples were counted
MAX_DELAY_S = 600.0  # how late a report may be delivered


@dataclass(frozen=True)
class Made:
    """One report as the job made it: its samples counted at ``counted_s``, dated
    ``dated_s``, with its window's median step time."""

    counted_s: float
    dated_s: float
    samples: int
    step_seconds: float


@dataclass(frozen=True)
class Reporter:
    """An honest job's behaviour (see the module docstring)."""

    step_s: float
    every_steps: int
    every_s: float
    compile_factor: float
    windows: tuple[tuple[float, float, int, float], ...]  # jump, pause share, its step, lag
    seed: int

    def reports(self) -> list[Made]:
        """The reports it makes, in order."""
        rng = random.Random(self.seed)
        now, samples, step = 0.0, 10 * BATCH, self.step_s
        stepping = paused = 0.0  # since the run's first report
        out: list[Made] = []
        for jump, share, at_step, lag in self.windows:
            if out:
                step = min(max(step * jump, 0.01), 600.0)
            window: list[float] = []
            start = now
            while True:
                seconds = step * rng.uniform(0.95, 1.05)
                if not out and not window:
                    seconds *= self.compile_factor  # the run's first step
                if out:
                    stepping += seconds
                if out and len(window) == at_step:  # a pause before this step: in its time
                    pause = share * (stepping - paused)
                    paused += pause
                    seconds += pause
                now += seconds
                samples += BATCH
                window.append(seconds)
                if len(window) >= self.every_steps or now - start >= self.every_s:
                    break
            out.append(Made(now, now + lag, samples, statistics.median(window)))
        return out


@st.composite
def reporters(draw: st.DrawFn) -> Reporter:
    """Honest reporters with the behaviours of the module docstring."""
    every_steps = draw(st.integers(1, 60))
    windows = draw(
        st.lists(
            st.tuples(
                st.one_of(st.just(1.0), st.floats(0.25, 4.0)),
                st.one_of(st.just(0.0), st.floats(0.0, 1.0)),
                st.integers(0, every_steps - 1),
                st.floats(0.0, STAMP_LAG_S),
            ),
            min_size=3,
            max_size=30,
        )
    )
    return Reporter(
        step_s=draw(st.floats(0.02, 60.0)),
        every_steps=every_steps,
        every_s=draw(st.floats(5.0, 120.0)),
        compile_factor=draw(st.floats(1.0, 4.0)),
        windows=tuple(windows),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


@st.composite
def deliveries(draw: st.DrawFn, made: list[Made]) -> list[tuple[float, int]]:
    """When each report reaches the controller, in order (``(at, index)``): each after it
    was made, in the order published, in bursts; some again, later."""
    out: list[tuple[float, int]] = []
    last = 0.0
    for i, report in enumerate(made):
        delay = draw(st.one_of(st.just(0.0), st.floats(0.0, MAX_DELAY_S)))
        last = max(last, report.counted_s + delay)
        out.append((last, i))
    again = draw(st.lists(st.tuples(st.integers(0, len(made) - 1), st.integers(1, 4)), max_size=4))
    for i, later in again:
        j = min(len(out) - 1, next(k for k, (_, index) in enumerate(out) if index == i) + later)
        out.insert(j + 1, (out[j][0], i))
    return out


def _event(report: Made) -> ProgressEvent:
    when = T0 + timedelta(seconds=report.dated_s)
    return ProgressEvent(
        ProgressType.PROGRESS, "team-a", "resnet", when, report.samples, GPUS, BATCH,
        report.step_seconds, 1,
    )  # fmt: skip


async def _feed(made: list[Made], delivered: list[tuple[float, int]]) -> ProgressLearner:
    """Deliver ``made`` as ``delivered`` says to the controller's loop; its learner."""
    controller = CoreController([make_job(KEY, work=1e12)])
    alloc = controller.autoscaler.allocations[KEY]
    assert (alloc.gpus, alloc.batch) == (GPUS, BATCH)
    metrics = Metrics()
    learner = ProgressLearner(CLUSTER, stall_after_s=1e9)
    loop = ProgressLoop(
        controller=controller, learner=learner, prefix=PREFIX, now=lambda: controller.now,
        observer=MetricsProgressObserver(metrics), refit_interval_s=1.0,
        wall_to_clock=lambda when: (when - T0).total_seconds(),
    )  # fmt: skip
    subject = progress_subject(PREFIX, "team-a", "resnet")
    for at, index in delivered:
        if at > controller.now:
            await loop.flush()  # the batch fetched so far
            controller.now = at
        rejection = await loop.accept(subject, encode_progress(_event(made[index])))
        assert rejection is None, (index, made[index], rejection)
    await loop.flush()
    assert not metrics.registry.get_sample_value("bellows_job_inconsistent", {"job": KEY})
    assert controller.events == []  # no InconsistentProgress (nor any other) Event
    return learner


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), reporter=reporters())
def test_an_honest_reporter_is_never_refused_nor_flagged(
    data: st.DataObject, reporter: Reporter
) -> None:
    made = reporter.reports()
    delivered = data.draw(deliveries(made))
    learner = asyncio.run(_feed(made, delivered))
    learned = learner.samples(KEY)
    assert learned is not None  # learned from
    assert learned[0] == made[-1].samples


def test_a_pause_filling_most_of_one_window_is_not_refused() -> None:
    """A pause as long as the run's stepping so far (half its wall time), in a window of
    three fast steps whose median stays fast: it counts once, as the time it took (CI found
    it refused when each window claimed its wall time at its median step)."""
    window = (1.0, 0.0, 0, 0.0)
    reporter = Reporter(2.0, 15, 29.0, 1.0, (window, window, window, (0.25, 1.0, 2, 0.0)), 0)
    made = reporter.reports()
    assert made[-1].step_seconds < made[0].step_seconds / 2  # the median stays fast
    learner = asyncio.run(_feed(made, [(report.counted_s, i) for i, report in enumerate(made)]))
    learned = learner.samples(KEY)
    assert learned is not None
    assert learned[0] == made[-1].samples
