"""A Pollux model's measured placements as a job profile carries them, and the simulator
deciding with them (issue 36)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from bellows.jobs import SpecError, StepProfile
from bellows.scaling import default_cluster
from bellows.scaling.documents import job_profile_to_json
from bellows.scaling.placement_steps import PlacementSteps, packed
from bellows.scaling.profiles import JobProfile
from bellows.sim.measured_steps import MeasuredSteps
from bellows.sim.packed_steps import PackedSteps
from bellows.sim.workloads.importing import import_pollux
from bellows.sim.workloads.pollux_placements import pollux_placements
from bellows.sim.workloads.traces import write_trace


def test_the_artifacts_packed_shapes_are_packed_and_its_spread_ones_not() -> None:
    """The placement names of ``placements.csv`` (GPUs per node) on nodes of 4."""
    for shape in ("1", "4", "14", "41", "44", "1444", "4444"):
        assert packed([int(c) for c in shape], 4), shape
    for shape in ("11", "22", "1111", "114", "1244"):
        assert not packed([int(c) for c in shape], 4), shape


def test_the_packed_placements_and_the_spread_ones_beyond_16_gpus_are_read(
    shared_data: Path,
) -> None:
    placements = pollux_placements(shared_data / "pollux" / "profiles" / "cifar10")
    keys = {(p.nodes, p.gpus) for p in placements}
    assert {(1, g) for g in range(1, 5)} | {(2, g) for g in range(5, 9)} <= keys
    assert (4, 16) in keys
    assert (16, 64) in keys  # scalability.csv
    assert (4, 4) not in keys  # "1111" is measured, not packed: not carried
    assert all(p.gpus > 16 for p in placements if p.nodes > 4)
    schema = json.loads(
        resources.files("bellows.scaling").joinpath("schemas/job-profile.schema.json").read_text()
    )
    doc = job_profile_to_json(JobProfile(1000, StepProfile((8,), (0.1,)), placements=placements))
    jsonschema.validate(doc, schema)


def test_an_imported_job_decides_by_what_the_physics_charges_on_measured_placements(
    shared_data: Path, tmp_path: Path
) -> None:
    """Where a packed placement was measured, the profile's answer is the physics' own."""
    profiles = shared_data / "pollux" / "profiles"
    trace = import_pollux(
        shared_data / "pollux" / "workloads" / "workload-6.csv", work="validation",
        batches="accumulate", placements=profiles,
    )  # fmt: skip
    cluster = default_cluster()
    steps = PlacementSteps(cluster)
    truth = PackedSteps(MeasuredSteps(profiles), {j.spec.name: j.model for j in trace}, 4)
    for job in {j.model: j for j in trace}.values():
        spec = job.spec
        assert spec.placements
        for gpus in (2, 4, 8, 16):
            batch = max(spec.b_min, gpus * 8)
            if batch <= spec.b_max:
                assert steps(spec, gpus, batch) == pytest.approx(truth(spec, gpus, batch))
    with pytest.raises(SpecError, match="placements"):
        write_trace(trace[:1], tmp_path / "trace.jsonl")
