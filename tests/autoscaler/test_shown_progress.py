"""A running job's remaining time weighed by the progress it has shown, not only by the speed
its model claims (``bellows.autoscaler.progress``, "Shown progress"): a job that reports
step times faster than its samples bear out is not believed nearer its end."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Objective, objectives, valuing
from bellows.autoscaler.progress import (
    LEAST_SHOWN,
    RunningJob,
    Shown,
    middle_gain,
    shown_left,
    shown_share,
    work_left,
)
from bellows.jobs import Allocation, JobSpec
from bellows.scaling import EfficiencyProfile, JobProfile, default_cluster, throughput
from bellows.scaling.consistency import AHEAD_TOLERANCE
from bellows.scaling.online import SpeedFactors
from tests.strategies import make_job

CLUSTER = default_cluster()
HERE = Allocation(2, 64)


def _fresh(rate: float, **fields: object) -> RunningJob:
    """A job started at 0 with nothing done, stepping since (what a fresh start knows)."""
    return RunningJob(HERE, rate, 0.0, 0.0, 0.0, seen=(0.0, 0.0), **fields)  # type: ignore[arg-type]


def _left(runs: list[RunningJob | None], left: float = 1000.0) -> list[float]:
    """The work ``runs`` are believed to have left (``left`` each as their model has it)."""
    done = [0.0 if run is None else run.done for run in runs]
    work = [left + d for d in done]
    return [float(x) for x in shown_left(work, done, runs)]


def test_a_job_claiming_more_than_it_showed_is_weighed_by_what_it_showed() -> None:
    run = _fresh(100.0)  # what it claimed until now
    shown = shown_share(run, 102.0, 100.0 * 60.0, 60.0)  # revised: 2 % faster than it went
    assert shown is not None
    assert shown.share == pytest.approx(1.0 / 1.02)
    assert shown.on == HERE
    weighed = dataclasses.replace(run, rate=102.0, shown=shown)
    assert _left([weighed]) == [pytest.approx(1020.0)]  # as if at the pace it showed


def test_the_estimate_since_a_report_goes_on_at_the_pace_shown() -> None:
    reported = RunningJob(HERE, 110.0, 5000.0, 60.0, 60.0, shown=Shown(1.0 / 1.1, HERE))
    estimate = reported.done_at(160.0)  # 11 000 samples on at the claim: 10 000 shown
    left = shown_left([1e5], [estimate], [reported])
    assert left.tolist() == [pytest.approx((1e5 - 5000.0 - 10_000.0) * 1.1)]


def test_a_lie_is_taken_back_as_far_as_the_checks_let_it_through() -> None:
    """The checks learn no step time faster than the samples' pace by more than
    ``AHEAD_TOLERANCE``; a job that showed less than that over its model's claim is one the
    model is wrong about, and weighs no less than that bound."""
    run = _fresh(100.0)
    shown = shown_share(run, 200.0, 100.0 * 60.0, 60.0)
    assert shown is not None
    assert shown.share == LEAST_SHOWN
    weighed = dataclasses.replace(run, rate=200.0, shown=shown)
    assert _left([weighed]) == [pytest.approx(1000.0 * (1.0 + AHEAD_TOLERANCE))]


def test_a_job_without_reports_is_unchanged_to_the_bit() -> None:
    plain = RunningJob(HERE, 100.0, 50.0, 0.0, 0.0)  # adopted, moved or resumed: nothing seen
    assert shown_share(plain, 300.0, 5000.0, 60.0) is None  # no span to compare
    work, done = np.array([1000.0 / 3.0, 7.0]), np.array([100.0, 0.0])
    expected = work_left(work, done)
    assert shown_left(work, done, [plain, None]).tobytes() == expected.tobytes()  # waiting too


def test_an_honest_job_is_unchanged_and_one_that_showed_more_too() -> None:
    run = _fresh(100.0)
    honest = shown_share(run, 100.0, 100.0 * 60.0, 60.0)
    assert honest is not None
    assert honest.share == pytest.approx(1.0, rel=1e-12)
    faster = shown_share(run, 100.0, 150.0 * 60.0, 60.0)  # its model is pessimistic
    assert faster is not None
    assert faster.share == pytest.approx(1.5)
    runs: list[RunningJob | None] = [dataclasses.replace(run, shown=s) for s in (honest, faster)]
    assert _left(runs) == [pytest.approx(1000.0, rel=1e-12), 1000.0]


def test_a_charged_honest_job_shows_its_claim_across_goodput_steps() -> None:
    """A charged job's progress is in reference samples: what it took is ``integral ds / E``
    over it, exact where the estimate is linear within a step (E rises fast at the start)."""
    profile = EfficiencyProfile(32, 2000.0, 0.5)
    work, batch, speed = 1e7, 512, 1000.0  # X(b, k): samples per second at (2, 512)
    here = Allocation(2, batch)
    run = RunningJob(here, speed * middle_gain(profile, batch, 0.0, work), 0.0, 0.0, 0.0,
                     profile, work, seen=(0.0, 0.0))  # fmt: skip
    for at in (30.0, 600.0, 4000.0):  # within the first step, and a few steps on
        done = float(profile.progress_after(batch, 0.0, speed * at))
        rate = speed * middle_gain(profile, batch, done, work)  # its row's at done's step
        shown = shown_share(run, rate, done, at)
        assert shown is not None
        assert shown.share == pytest.approx(1.0, rel=1e-6)


def test_what_was_shown_follows_the_job_and_a_refit_here_rerates_it() -> None:
    run = _fresh(100.0, shown=Shown(0.98, HERE))
    moved = run.moved_to(Allocation(4, 128), 190.0, 60.0, restart_s=30.0)
    assert moved.seen is None  # a new allocation: nothing known exactly there yet
    assert moved.shown == run.shown  # the model scales it to 4 GPUs
    # a span begins only at a report: the estimate at the move is not a measurement
    assert shown_share(moved, 380.0, 9000.0, 200.0) == run.shown
    # a refit at the allocation it was shown at: the same samples over the new claim
    rerated = run.rerated(110.0, 0.0)
    assert rerated is not None
    assert rerated.share == pytest.approx(0.98 * 100.0 / 110.0)
    assert rerated.on == HERE
    assert moved.rerated(380.0, 0.0) == run.shown  # shown elsewhere: kept as it was


# ---------------------------------------------------------------- through the core


def _faster(job: JobSpec, factor: float) -> JobSpec:
    """``job`` claiming step times ``factor`` times shorter (one GPU: compute only)."""
    real = SpeedFactors(compute=1.0 / factor).apply(JobProfile(job.weights, job.profile))
    return dataclasses.replace(job, weights=real.effective_weights, profile=real.step)


def _remaining_after(
    claim: float | None, monkeypatch: pytest.MonkeyPatch, *, report: bool = True
) -> float:
    """The remaining one-GPU seconds a round weighs job ``a`` by, after it ran 600 s at its
    annotated speed and (``claim``) was revised to claim that factor of it, the samples it
    processed reported (``report``) or not."""
    job = make_job("a", k_max=1, work=1e9)
    auto = Autoscaler(AutoscalerConfig(objective=Objective.REMAINING), capacity=4, cluster=CLUSTER)
    auto.arrive(job, 0.0)
    auto.step(0.0)
    held = auto.allocations["a"]
    done = throughput(job, held.gpus, held.batch, CLUSTER) * 600.0  # the truth
    if claim is not None:
        spec = _faster(job, claim)
        assert auto.revise(spec, 600.0, done=done if report else None)
    seen: list[float] = []
    real = objectives.objective_values

    def spy(values: np.ndarray, objective: Objective, remaining_s: np.ndarray | None = None,
            **options: float) -> np.ndarray:  # fmt: skip
        assert remaining_s is not None
        seen.append(float(remaining_s[0]))
        return real(values, objective, remaining_s, **options)

    monkeypatch.setattr(valuing, "objective_values", spy)
    auto.arrive(make_job("b", k_max=1), 600.0)  # a round has something to decide
    auto.step(720.0)
    assert seen, "the round weighed no job"
    return seen[0]


def test_the_core_weighs_a_liar_as_the_honest_job(monkeypatch: pytest.MonkeyPatch) -> None:
    honest = _remaining_after(None, monkeypatch)
    assert _remaining_after(1.0, monkeypatch) == pytest.approx(honest, rel=1e-9)
    liar = _remaining_after(1.04, monkeypatch)  # 4 % faster: inside the checks' tolerance
    assert liar == pytest.approx(honest, rel=1e-9)
    assert liar > honest / 1.04 + 1e5  # the lie alone would have taken 160 000 s off
    # without the report the core has nothing to weigh the claim against: its model's word
    unseen = _remaining_after(1.04, monkeypatch, report=False)
    assert unseen < honest / 1.04  # (and its estimate ran on at the claim since 600 s)
