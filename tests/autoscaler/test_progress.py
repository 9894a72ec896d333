"""The core's progress estimate: one job at a time and in whole arrays agree to the bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bellows.autoscaler.progress import GOODPUT_STEPS, RunningJob, done_at_all
from bellows.jobs import Allocation
from bellows.scaling import MODEL_EFFICIENCY, EfficiencyProfile

_times = st.floats(0.0, 1e7, allow_nan=False)
_plain = st.builds(
    RunningJob,
    allocation=st.just(Allocation(2, 64)),
    rate=st.floats(0.0, 1e5, allow_nan=False),
    done=st.floats(0.0, 1e9, allow_nan=False),
    since=_times,
    paused_until=_times,
)
_charged = st.builds(
    RunningJob,
    allocation=st.just(Allocation(2, 512)),
    rate=st.floats(0.0, 1e5, allow_nan=False),
    done=st.floats(0.0, 2e6, allow_nan=False),
    since=_times,
    paused_until=_times,
    charge=st.sampled_from(list(MODEL_EFFICIENCY.values())),
    work=st.floats(1.0, 1e6, allow_nan=False),
)


@given(st.lists(_plain | _charged, min_size=1, max_size=20), _times)
def test_done_at_all_is_done_at_of_each(jobs: list[RunningJob], now: float) -> None:
    assert done_at_all(jobs, now).tolist() == [job.done_at(now) for job in jobs]


def test_a_paused_job_has_made_no_progress_yet() -> None:
    job = RunningJob(Allocation(1, 32), rate=10.0, done=5.0, since=0.0, paused_until=100.0)
    assert done_at_all([job], 50.0).tolist() == [5.0]
    assert done_at_all([job], 110.0).tolist() == [105.0]


def test_a_charged_job_is_exact_at_each_step_end_and_goes_on_past_its_work() -> None:
    """Each goodput step at its mean rate: at the time the simulator's truth reaches a
    step's end (``progress_after``), the estimate is there too; past the last step the job
    goes on at the last one's rate (a job still running has work left: ``work_left``).
    (Each step integrated on its own, the truth over the whole span: both quadratures.)"""
    profile = EfficiencyProfile(32, 2000.0, 0.5)  # E at batch 512 rises from 1/16 to 0.8
    work, batch = 1e7, 512
    speed = 1000.0  # samples per second at (2, 512)
    middle = work * 0.5 / GOODPUT_STEPS
    rate = speed * float(profile.efficiency(batch, middle))  # its first step's row
    job = RunningJob(Allocation(2, batch), rate, 0.0, 0.0, 0.0, profile, work)
    ends = work * np.arange(1, GOODPUT_STEPS + 1) / GOODPUT_STEPS
    times = profile.samples_between(batch, 0.0, ends) / speed
    estimates = done_at_all([job] * len(times), 0.0)  # nothing yet
    assert estimates.tolist() == [0.0] * len(times)
    for end, at in zip(ends.tolist(), times.tolist(), strict=True):
        assert job.done_at(at) == pytest.approx(end, rel=1e-4)  # the quadrature's
    past = float(times[-1]) * 1.01
    assert job.done_at(past) > work
    assert job.done_at(past + 100.0) - job.done_at(past) == pytest.approx(100.0 * job.speeds[-1])
