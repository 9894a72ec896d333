"""Step times from a job's measured placements (bellows.scaling.placement_steps), their
document form, and a core that decides and revokes by them (issue 36)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.jobs import JobSpec, MeasuredPlacement, SpecError, StepProfile, TypeSection
from bellows.scaling import default_cluster, parse_job_profile, step_time
from bellows.scaling.documents import job_profile_to_json
from bellows.scaling.placement_memory import ObservedStep, PlacementMemory
from bellows.scaling.placement_steps import FLOOR, PlacementSteps, pass_limit

CLUSTER = default_cluster()  # 4 GPUs a node
PROFILE = StepProfile((8, 32, 64), (0.02, 0.05, 0.09))
# 8 GPUs on 2 nodes measured twice as slow as the JSA has them, 16 on 4 nodes at 3x
EIGHT = MeasuredPlacement(2, 8, (8, 32, 64), (0.2, 0.3, 0.5), (0.1, 0.1, 0.1))
ONE = MeasuredPlacement(1, 1, (8, 32, 64), (0.02, 0.05, 0.09))
FOUR = MeasuredPlacement(1, 4, (8, 64), (0.05, 0.15), (0.02, 0.03))
SIXTEEN = MeasuredPlacement(4, 16, (8, 64), (0.4, 0.9), (0.2, 0.3))


def _job(name: str = "a", *, placements: tuple[MeasuredPlacement, ...] = ()) -> JobSpec:
    return JobSpec(
        name=name, b_min=8, b_max=1024, batch_size=64, k_max=16, m_max=64,
        weights=11_173_962, work=1e7, profile=PROFILE, placements=placements,
    )  # fmt: skip


def _jsa(job: JobSpec, gpus: int, batch: int) -> float:
    return float(step_time(job, gpus, batch, CLUSTER, nodes=math.ceil(gpus / 4)))


def test_a_job_without_placements_is_not_answered_so_its_rows_stay_the_jsas() -> None:
    assert PlacementSteps(CLUSTER)(_job(), 8, 256) is None


def test_a_measured_placement_is_linear_in_the_per_gpu_batch_and_moved_by_the_jsa_beyond() -> None:
    job = _job(placements=(ONE, EIGHT))
    steps = PlacementSteps(CLUSTER)
    assert steps(job, 8, 8 * 32) == pytest.approx(0.3)
    assert steps(job, 8, 8 * 48) == pytest.approx(0.4)  # halfway between 32 and 64
    below = steps(job, 8, 8 * 4)
    assert below == pytest.approx(0.2 * _jsa(job, 8, 32) / _jsa(job, 8, 64))
    assert steps(job, 1, 32) == pytest.approx(0.05)


def test_a_placement_between_measured_ones_is_interpolated_and_one_outside_is_the_jsas() -> None:
    job = _job(placements=(ONE, FOUR, EIGHT, SIXTEEN))
    steps = PlacementSteps(CLUSTER)
    twelve = steps(job, 12, 12 * 32)  # 3 nodes: between 2 nodes of 8 and 4 of 16
    assert twelve is not None
    assert 0.3 < twelve < 0.9
    assert steps(job, 2, 2 * 8) == pytest.approx(0.03, rel=0.2)  # between 1 and 4 GPUs
    lone = _job(placements=(EIGHT,))  # one placement spans nothing: the JSA elsewhere
    assert steps(lone, 12, 12 * 32) == pytest.approx(_jsa(lone, 12, 12 * 32))


def test_beyond_the_largest_pass_a_step_accumulates_at_the_cost_of_its_compute() -> None:
    job = replace(_job(placements=(ONE, EIGHT)), m_max=128)
    assert pass_limit(job) == 64  # the profile's largest measured one-GPU batch
    two_passes = PlacementSteps(CLUSTER)(job, 8, 8 * 128)
    assert two_passes == pytest.approx(0.5 + (0.5 - 0.1))


def test_no_placement_is_believed_faster_than_the_jobs_own_one_gpu() -> None:
    """A claim of more than perfect scaling is held at the one-GPU step (less FLOOR's slack):
    no more than a profile claiming no communication could buy."""
    superlinear = MeasuredPlacement(2, 8, (8, 32, 64), (0.002, 0.005, 0.009))
    job = _job(placements=(ONE, superlinear))
    assert PlacementSteps(CLUSTER)(job, 8, 8 * 32) == pytest.approx(FLOOR * 0.05)
    unmeasured_one = _job(placements=(superlinear,))  # its profile's one-GPU times, then
    assert PlacementSteps(CLUSTER)(unmeasured_one, 8, 8 * 32) == pytest.approx(FLOOR * 0.05)


def test_placements_measured_slower_are_what_the_core_believes_the_job_runs_at() -> None:
    def done_at(job: JobSpec) -> float:  # samples the core believes done by 1000 s
        core = Autoscaler(AutoscalerConfig(delta_s=60.0), capacity=16, cluster=CLUSTER)
        core.arrive(job, 0.0)
        core.step(0.0)
        return core.estimated_done(job.name, 1000.0)

    slow = tuple(
        MeasuredPlacement(-(-k // 4), k, (8, 32, 64),
                          tuple(3 * _jsa(_job(), k, k * m) for m in (8, 32, 64)))
        for k in range(1, 17)
    )  # fmt: skip
    assert done_at(_job()) > 0
    assert done_at(_job(placements=slow)) == pytest.approx(done_at(_job()) / 3, rel=0.05)


def test_paper_mode_decides_with_the_jsa_whatever_a_profile_measured() -> None:
    core = Autoscaler(AutoscalerConfig.paper(), capacity=16, cluster=CLUSTER)
    plain = Autoscaler(AutoscalerConfig.paper(), capacity=16, cluster=CLUSTER)
    core.arrive(_job(placements=(ONE, EIGHT, SIXTEEN)), 0.0)
    plain.arrive(_job(), 0.0)
    assert core.step(600.0) == plain.step(600.0)


@pytest.mark.parametrize("memory", [False, True])
def test_a_step_that_contradicts_the_placements_revokes_them_and_an_honest_one_does_not(
    memory: bool,
) -> None:
    claimed = MeasuredPlacement(2, 8, (8, 32, 64), (0.02, 0.03, 0.05))  # ten times the truth
    job = _job(placements=(ONE, claimed))
    core = Autoscaler(
        AutoscalerConfig(delta_s=60.0), capacity=8, cluster=CLUSTER,
        measured=PlacementMemory(CLUSTER) if memory else None,
    )  # fmt: skip
    core.arrive(job, 0.0)
    core.step(0.0)
    held = core.allocations["a"]
    assert held.gpus == 8  # the claimed placement: 2 nodes
    said = PlacementSteps(CLUSTER)(job, held.gpus, held.batch)
    assert said is not None
    core.observe_step("a", 10.0, ObservedStep(held.gpus, held.batch, said * 1.1))
    assert core.job("a").placements  # within the tolerance: kept
    before = core.estimated_done("a", 1000.0)
    core.observe_step("a", 20.0, ObservedStep(8, held.batch, said * 10))
    assert not core.job("a").placements  # revoked: valued by the JSA (and the memory) now
    assert core.estimated_done("a", 1000.0) < before
    refit = replace(job, profile=StepProfile((8, 32, 64), (0.021, 0.05, 0.09)))
    assert core.revise(refit, 30.0)  # a refit of the owner's profile: the claim stays out
    assert core.job("a").profile == refit.profile
    assert not core.job("a").placements


def test_the_document_carries_placements_and_names_the_field_that_is_wrong() -> None:
    base = {
        "apiVersion": "bellows.io/v1alpha1", "kind": "JobProfile", "weights": 1000,
        "step": [{"localBatch": 8, "seconds": 0.1}],
        "placements": [{"nodes": 2, "gpus": 8, "localBatch": [4, 8], "seconds": [0.2, 0.3],
                        "syncSeconds": [0.1, 0.1]}],
    }  # fmt: skip
    profile = parse_job_profile(base)
    assert profile.placements == (MeasuredPlacement(2, 8, (4, 8), (0.2, 0.3), (0.1, 0.1)),)
    assert parse_job_profile(job_profile_to_json(profile)) == profile
    entry = base["placements"][0]  # type: ignore[index]
    wrong = {
        "placements[0].gpus": entry | {"gpus": 1},
        "placements[0].localBatch[1]": entry | {"localBatch": [8, 4]},
        "placements[0].seconds": entry | {"seconds": [0.2]},
        "placements[0].syncSeconds[0]": entry | {"syncSeconds": [0.5, 0.1]},
    }
    for field, bad in wrong.items():
        with pytest.raises(SpecError) as caught:
            parse_job_profile(base | {"placements": [bad]})
        assert caught.value.field == field
    with pytest.raises(SpecError, match="one entry per"):
        parse_job_profile(base | {"placements": [entry, entry]})


def test_a_typed_jobs_section_does_not_take_the_base_profiles_placements() -> None:
    section = TypeSection("a100", PROFILE, 11_173_962, 64)
    job = replace(_job(placements=(EIGHT,)), types=(section,))
    on = job.on("a100")
    assert on is not None
    assert on.placements == ()


def test_placements_are_bounded_and_equal_ones_share_one_interpolator() -> None:
    """At most 1 024 measured batches in all (a job's interpolator stays small), and jobs whose
    profiles measured the same placements share one table, however they were parsed."""
    many = [
        {"nodes": 1 + i // 16, "gpus": 1 + i, "localBatch": list(range(1, 17)),
         "seconds": [0.1] * 16}
        for i in range(65)
    ]  # fmt: skip
    doc = {
        "apiVersion": "bellows.io/v1alpha1", "kind": "JobProfile", "weights": 1000,
        "step": [{"localBatch": 8, "seconds": 0.1}], "placements": many,
    }  # fmt: skip
    with pytest.raises(SpecError, match="at most 1024 in all") as caught:
        parse_job_profile(doc)
    assert caught.value.field == "placements"
    steps = PlacementSteps(CLUSTER)
    first, again = (ONE, EIGHT), tuple(p for p in (ONE, EIGHT))
    assert again is not first
    assert steps.table(again) is steps.table(first)
