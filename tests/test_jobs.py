"""Domain types: validation names the field, and feasibility agrees with the listed set."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from bellows.jobs import (
    Allocation,
    JobSpec,
    SpecError,
    StepProfile,
    feasible_allocations,
    is_feasible,
)
from tests.strategies import LINEAR_PROFILE, job_specs, make_job


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"b_min": 600}, "b_min"),
        ({"k_max": 0}, "k_max"),
        ({"m_max": 0}, "m_max"),
        ({"work": -1.0}, "work"),
        ({"batch_size": 1024}, "batch_size"),
        ({"gpus": 9}, "gpus"),
        ({"b_min": 7, "b_max": 7, "m_max": 4, "k_max": 6}, "b_min"),
    ],
)
def test_invalid_jobs_name_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as error:
        make_job("x", **changes)  # type: ignore[arg-type]
    assert error.value.field == field
    assert str(changes[field]) in str(error.value)


def test_profile_validation() -> None:
    with pytest.raises(SpecError, match="at least one point"):
        StepProfile((), ())
    with pytest.raises(SpecError, match=r"profile.local_batches\[1\]"):
        StepProfile((8, 8), (0.1, 0.2))
    with pytest.raises(SpecError, match=r"profile.seconds\[0\]"):
        StepProfile((8,), (-0.1,))
    assert StepProfile.from_points([(16, 0.2), (8, 0.1), (16, 0.4)]) == StepProfile(
        (8, 16), (0.1, 0.30000000000000004)
    )


@settings(max_examples=200, deadline=None)
@given(job_specs("j"))
def test_is_feasible_agrees_with_the_listed_allocations(job: JobSpec) -> None:
    listed = set(feasible_allocations(job))
    assert listed
    for k in range(1, job.k_max + 2):
        for b in range(1, job.b_max + 2, max(1, job.b_max // 50)):
            assert is_feasible(job, Allocation(k, b)) == (Allocation(k, b) in listed)


def test_fixed_batch_feasibility_charges_the_slowest_gpu() -> None:
    job = make_job("x", b_min=100, b_max=100, batch_size=100, m_max=40, k_max=8)
    assert not is_feasible(job, Allocation(2, 100), fixed_batch=True)  # 50 > m_max
    assert is_feasible(job, Allocation(3, 100), fixed_batch=True)  # ceil(100/3) = 34
    rigid = make_job("r", elastic=False, gpus=2, batch_size=64, profile=LINEAR_PROFILE)
    assert feasible_allocations(rigid) == [Allocation(2, 64)]


def test_a_spec_error_survives_pickling() -> None:
    """A SpecError raised in a worker process (benchmarks/fidelity.py --workers 2) reaches
    the parent whole: before, unpickling needed its three arguments and broke the pool."""
    import pickle  # noqa: PLC0415

    from bellows.scaling.measurements import MeasurementError  # noqa: PLC0415
    from bellows.sim.workloads.traces import TraceError  # noqa: PLC0415

    errors = [
        SpecError("efficiency.growth", 9.0, "a number in [0, 4]"),
        TraceError(3, "gpus", -1, "a count >= 1", source="trace.csv"),  # other constructors
        MeasurementError("placements.csv", 7, "step_time", "x", "seconds > 0"),
    ]
    for err in errors:
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err)
        assert (back.field, back.value, back.valid, str(back)) == (
            err.field, err.value, err.valid, str(err),
        )  # fmt: skip
