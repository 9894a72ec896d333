"""bellows.sim.bounds (the idealised schedulers benchmarks/bursty_bounds.py measures against)
and the benchmark itself, on a small cluster."""

from __future__ import annotations

import statistics
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bellows.sim.bounds import Demand, demands, elastic_srpt, fluid_srpt, rigid_srpt
from bellows.sim.metrics import JobRecord, Segment
from tests.conftest import REPO, load_script


def test_fluid_srpt_serves_the_least_work_first_and_preempts_for_it() -> None:
    jobs = [Demand(0.0, 200.0, 1, 1), Demand(0.0, 100.0, 1, 1)]
    assert fluid_srpt(jobs, 10) == pytest.approx([30.0, 10.0])
    # a short job arriving mid-way takes the machine at once; the long one finishes later
    jobs = [Demand(0.0, 1000.0, 1, 1), Demand(10.0, 10.0, 1, 1)]
    assert fluid_srpt(jobs, 10) == pytest.approx([101.0, 1.0])


def test_elastic_srpt_holds_each_job_to_its_most_gpus() -> None:
    jobs = [Demand(0.0, 40.0, 1, 4), Demand(0.0, 80.0, 1, 8)]
    # the small one takes 4 of 10 GPUs (10 s), the big one 6, then 8 once it is alone
    assert elastic_srpt(jobs, 10) == pytest.approx([10.0, 10.0 + (80.0 - 60.0) / 8])


def test_rigid_srpt_packs_least_work_first_and_charges_each_preemption() -> None:
    jobs = [Demand(0.0, 800.0, 8, 8), Demand(10.0, 40.0, 4, 4)]
    jct, preemptions = rigid_srpt(jobs, 10, restart_s=5.0)
    # the 4-GPU job does not fit beside the 8-GPU one: it preempts it (less work left)
    assert preemptions == 1
    assert jct == pytest.approx([10.0 + 10.0 + 90.0 + 5.0, 10.0])
    # past a head that does not fit, a smaller job is packed
    jobs = [Demand(0.0, 800.0, 8, 8), Demand(0.0, 900.0, 8, 8), Demand(0.0, 1000.0, 2, 2)]
    jct, preemptions = rigid_srpt(jobs, 10, restart_s=5.0)
    assert preemptions == 0
    assert jct == pytest.approx([100.0, 212.5, 500.0])


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"gpu_s": 0.0}, "gpu_s > 0"),
        ({"gpus": 0}, "1 <= gpus"),
        ({"gpus": 3, "most_gpus": 2}, "gpus <= most_gpus"),
    ],
)
def test_a_demand_names_what_is_wrong(bad: dict[str, Any], match: str) -> None:
    fields: dict[str, Any] = {"arrival_s": 0.0, "gpu_s": 1.0, "gpus": 1, "most_gpus": 2} | bad
    with pytest.raises(ValueError, match=match):
        Demand(**fields)


def test_a_capacity_below_one_gpu_or_a_job_wider_than_the_cluster_is_refused() -> None:
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        fluid_srpt([Demand(0.0, 1.0, 1, 1)], 0)
    with pytest.raises(ValueError, match="more than the 4 GPUs"):
        rigid_srpt([Demand(0.0, 1.0, 8, 8)], 4, restart_s=0.0)


def test_demands_are_the_finished_jobs_gpu_time_and_average_width() -> None:
    def record(name: str, segments: tuple[Segment, ...], finish: float | None) -> JobRecord:
        start = segments[0].start_s if segments else None
        return JobRecord(name, "1", "m", 5.0, 60.0, start, finish, False, segments, 0, 0)

    finished = record("a", (Segment(10.0, 20.0, 2, 64), Segment(20.0, 30.0, 4, 64)), 30.0)
    waiting = record("b", (), None)
    assert demands([finished, waiting], {"a": 8, "b": 1}) == [Demand(5.0, 60.0, 3, 8)]


_jobs = st.lists(
    st.builds(
        lambda a, w, g, extra: Demand(a, w, g, g + extra),
        st.floats(0.0, 1000.0),
        st.floats(1.0, 5000.0),
        st.integers(1, 8),
        st.integers(0, 8),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(_jobs, st.integers(8, 40))
def test_no_schedule_of_the_same_work_beats_the_fluid_bound_on_average(
    jobs: list[Demand], capacity: int
) -> None:
    bound = statistics.fmean(fluid_srpt(jobs, capacity))
    elastic = elastic_srpt(jobs, capacity)
    rigid, _ = rigid_srpt(jobs, capacity, restart_s=0.0)
    assert bound <= statistics.fmean(elastic) * (1 + 1e-9)
    assert bound <= statistics.fmean(rigid) * (1 + 1e-9)
    for job, e, r in zip(jobs, elastic, rigid, strict=True):  # no job faster than it can run
        # (elastic_srpt calls a job done within 1e-6 of its work: a job arriving 6e-8 s
        # after another of the same size finished with it, 6e-8 s early)
        assert e >= job.gpu_s / job.most_gpus * (1 - 1e-6)
        assert r >= job.gpu_s / job.gpus * (1 - 1e-9)


def test_the_benchmark_prints_every_yardstick_beside_the_target(
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = load_script(REPO / "benchmarks" / "bursty_bounds.py")
    assert module.main(["--seeds", "1", "--gpus", "16"]) == 0
    out = capsys.readouterr().out
    for name in ("paper mode", "Pollux reference", "Bellows mode", "alone", "fluid SRPT",
                 "elastic SRPT", "rigid SRPT", "target: 0.33x paper mode"):  # fmt: skip
        assert f"| {name}" in out
    rows = {line.split(" | ")[0][2:]: line for line in out.splitlines() if line.startswith("| ")}
    paper = float(rows["paper mode"].split(" | ")[1])
    fluid = float(rows["fluid SRPT (bound)"].split(" | ")[1])
    bellows = float(rows["Bellows mode"].split(" | ")[1])
    assert 0 < fluid <= bellows
    assert paper > 0
