"""The core's progress estimate: one job at a time and in whole arrays agree to the bit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bellows.autoscaler.progress import RunningJob, done_at_all
from bellows.jobs import Allocation

_times = st.floats(0.0, 1e7, allow_nan=False)
_jobs = st.builds(
    RunningJob,
    allocation=st.just(Allocation(2, 64)),
    rate=st.floats(0.0, 1e5, allow_nan=False),
    done=st.floats(0.0, 1e9, allow_nan=False),
    since=_times,
    paused_until=_times,
)


@given(st.lists(_jobs, min_size=1, max_size=20), _times)
def test_done_at_all_is_done_at_of_each(jobs: list[RunningJob], now: float) -> None:
    assert done_at_all(jobs, now).tolist() == [job.done_at(now) for job in jobs]


def test_a_paused_job_has_made_no_progress_yet() -> None:
    job = RunningJob(Allocation(1, 32), rate=10.0, done=5.0, since=0.0, paused_until=100.0)
    assert done_at_all([job], 50.0).tolist() == [5.0]
    assert done_at_all([job], 110.0).tolist() == [105.0]
