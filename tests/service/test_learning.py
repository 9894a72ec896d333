"""What the controller learns from progress events: per job, and only from running jobs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bellows.bus.progress import ProgressEvent, ProgressType
from bellows.jobs import Allocation, StepProfile
from bellows.scaling import JobProfile, default_cluster
from bellows.scaling.online import SpeedFactors
from bellows.scaling.timing import local_batch, processing_seconds
from bellows.service.learning import ProgressLearner

T0 = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
CLUSTER = default_cluster()
PRIOR = JobProfile(
    25_557_032, StepProfile((16, 32, 64, 128), (0.05, 0.08, 0.14, 0.27)), "annotation"
)
RUNS = Allocation(4, 256)


def _step(profile: JobProfile, gpus: int, batch: int) -> float:
    compute = processing_seconds(profile.step, local_batch(gpus, batch))
    return CLUSTER.combine(compute, CLUSTER.allreduce_seconds(profile.effective_weights, gpus))


def progress(samples: int, seconds: float, at: Allocation = RUNS, name: str = "a") -> ProgressEvent:
    return ProgressEvent(
        ProgressType.PROGRESS, "team-a", name, T0, samples, at.gpus, at.batch, seconds, 50
    )


def started(samples: int, restart: float, at: Allocation = RUNS) -> ProgressEvent:
    return ProgressEvent(
        ProgressType.STARTED, "team-a", "a", T0, samples, at.gpus, at.batch, None, None, restart
    )


def test_only_reports_of_a_running_job_at_its_allocation_count() -> None:
    learner = ProgressLearner(CLUSTER)
    refused = learner.take("a", progress(100, 0.2), None, 10.0)
    assert refused is not None
    assert refused.reason == "the job is not running"
    stale = learner.take("a", progress(100, 0.2, Allocation(2, 128)), RUNS, 10.0)
    assert stale is not None
    assert "runs at (4, 256)" in stale.reason
    assert learner.samples("a") is None  # nothing was learned from either
    assert learner.take("a", progress(1000, 0.2), RUNS, 11.0) is None
    assert learner.samples("a") is None  # the run's first report is held ...
    assert learner.take("a", progress(1000 + 1280, 0.2), RUNS, 12.0) is None  # 1 s of steps
    assert learner.samples("a") == (2280.0, 12.0)  # ... until the next agrees with it
    backwards = learner.take("a", progress(500, 0.2), RUNS, 30.0)  # past LATE_S: no late one
    assert backwards is not None
    assert backwards.backwards
    assert "backwards" in backwards.reason
    assert learner.take("a", started(400, 30.0), RUNS, 13.0) is not None
    assert learner.samples("a") == (2280.0, 12.0)


def test_one_jobs_reports_never_change_anothers_model() -> None:
    learner = ProgressLearner(CLUSTER)
    truth = _step(SpeedFactors(0.8, 1.4).apply(PRIOR), RUNS.gpus, RUNS.batch)
    rate = RUNS.batch / truth  # samples a second at that step time
    for i in range(4):
        samples = 100 + round(rate * i)
        assert learner.take("a", progress(samples, truth), RUNS, float(i)) is None
    fit_a = learner.fit("a", PRIOR)
    assert _step(fit_a.profile, RUNS.gpus, RUNS.batch) == pytest.approx(truth, rel=0.02)
    assert learner.fit("b", PRIOR).profile is PRIOR  # b reported nothing: its prior stands
    for i in range(5):
        learner.take("b", progress(100 * (i + 1), 9.0, name="b"), RUNS, float(i))
    assert learner.fit("a", PRIOR) == fit_a


def test_restart_cost_is_the_median_of_measured_restarts() -> None:
    learner = ProgressLearner(CLUSTER)
    assert learner.restart_s("a") is None  # the default applies
    for samples, seconds in [(0, 50.0), (100, 20.0), (200, 35.0)]:
        assert learner.take("a", started(samples, seconds), RUNS, 1.0) is None
    assert learner.restart_s("a") == 35.0
    learner.forget("a")
    assert learner.restart_s("a") is None


def test_silence_flags_only_jobs_that_reported_and_run() -> None:
    learner = ProgressLearner(CLUSTER, stall_after_s=60.0)
    learner.take("a", progress(100, 0.2), RUNS, 0.0)
    learner.take("b", progress(100, 0.2, name="b"), RUNS, 0.0)
    assert learner.stalled(["a", "b", "quiet"], 59.0) == []
    learner.take("b", progress(100 + 50 * 1280, 0.2, name="b"), RUNS, 50.0)  # 50 s of steps
    assert learner.stalled(["a", "b", "quiet"], 61.0) == ["a"]  # "quiet" never reported
    assert learner.stalled(["b"], 200.0) == ["b"]  # "a" no longer runs
    with pytest.raises(ValueError, match="stall_after_s"):
        ProgressLearner(CLUSTER, stall_after_s=0.0)


def test_a_jobs_speed_is_learned_per_gpu_type() -> None:
    """Step times reported on another GPU type than the log holds begin a new log: the fit
    is of the type the job runs on now; its progress stands (issue 39)."""
    learner = ProgressLearner(CLUSTER)
    slow = _step(SpeedFactors(2.0, 1.0).apply(PRIOR), RUNS.gpus, RUNS.batch)
    rate = RUNS.batch / slow
    for i in range(4):
        assert learner.take("a", progress(100 + round(rate * i), slow), RUNS, float(i),
                            gpu_type="t4") is None  # fmt: skip
    on_t4 = learner.fit("a", PRIOR).profile
    assert _step(on_t4, RUNS.gpus, RUNS.batch) == pytest.approx(slow, rel=0.02)
    fast = _step(PRIOR, RUNS.gpus, RUNS.batch)  # on the A100s: the prior's speed
    done = learner.samples("a")
    assert done is not None
    at = 100.0
    learner.take("a", started(round(done[0]), 30.0), RUNS, at, gpu_type="a100")
    for i in range(1, 5):
        samples = round(done[0] + RUNS.batch / fast * 60.0 * i)
        assert learner.take("a", progress(samples, fast), RUNS, at + 60.0 * i,
                            gpu_type="a100") is None  # fmt: skip
    refit = learner.fit("a", PRIOR)
    assert _step(refit.profile, RUNS.gpus, RUNS.batch) == pytest.approx(fast, rel=0.02)
    assert refit.reports == 4  # the T4s' reports left out
    samples = learner.samples("a")
    assert samples is not None
    assert samples[0] > done[0]  # its progress went on
