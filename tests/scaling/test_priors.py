"""The profile document's ``efficiency`` section (bellows.scaling.priors): both forms round
trip, the JSON Schema says what the parser does, and a prior stated at one batch is the
same noise scale stated at the job's own."""

from __future__ import annotations

import jsonschema
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bellows.jobs import SpecError, StepProfile
from bellows.scaling import (
    MODEL_EFFICIENCY,
    EfficiencyProfile,
    JobProfile,
    job_profile_to_json,
    parse_job_profile,
)
from tests.scaling.test_profiles import schema

STEP = StepProfile((8, 64), (0.05, 0.3))
MEASURED = EfficiencyProfile(32, 2400.0, 0.69, 0.19, "bellows profile")


@pytest.mark.parametrize("efficiency", [MODEL_EFFICIENCY["imagenet"], MEASURED, None])
def test_both_forms_round_trip_and_validate(efficiency: EfficiencyProfile | None) -> None:
    profile = JobProfile(1000, STEP, "test", efficiency=efficiency)
    document = job_profile_to_json(profile)
    assert parse_job_profile(document) == profile
    jsonschema.validate(document, schema("job-profile.schema.json"))
    if efficiency is MODEL_EFFICIENCY["imagenet"]:
        assert document["efficiency"] == {"model": "imagenet"}  # the class, not its numbers


@pytest.mark.parametrize(
    "section",
    [
        {"model": "gpt"},
        {"referenceBatch": 32, "noiseScale": 1e13, "growth": 0.5, "batchExponent": 0.1},
        {"referenceBatch": 32, "noiseScale": 10.0, "growth": 5.0, "batchExponent": 0.1},
        {"referenceBatch": 32, "noiseScale": 10.0, "growth": 0.5, "batchExponent": 1.0},
        {"model": "bert", "growth": 0.5},
    ],
)
def test_the_schema_refuses_what_the_parser_refuses(section: dict[str, object]) -> None:
    document = job_profile_to_json(JobProfile(1000, STEP))
    document["efficiency"] = section
    with pytest.raises(SpecError):
        parse_job_profile(document)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, schema("job-profile.schema.json"))


@given(
    st.integers(1, 4096),
    st.sampled_from(sorted(MODEL_EFFICIENCY)),
    st.floats(0.0, 4e6),
)
def test_a_rebased_prior_is_the_same_noise_scale_at_the_job_s_batch(
    batch: int, model: str, progress: float
) -> None:
    prior = MODEL_EFFICIENCY[model]
    rebased = prior.rebased(batch)
    assert rebased.reference_batch == batch
    batches = np.array([1.0, 7.0, 64.0, 1000.0, 65536.0])
    assert np.allclose(
        rebased.noise_scale_at(batches, progress), prior.noise_scale_at(batches, progress),
        rtol=1e-12,
    )  # fmt: skip
    assert float(rebased.efficiency(batch, progress)) == pytest.approx(1.0)
    assert prior.rebased(prior.reference_batch) is prior
