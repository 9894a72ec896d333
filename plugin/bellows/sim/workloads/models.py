"""Measured profiles of the six Pollux models, embedded with their source named.

Source: the Pollux/AdaptDL artifact (petuum/adaptdl, branch ``osdi21-artifact``,
``simulator/``; Apache-2.0), measured on AWS g4dn.12xlarge nodes (4 x NVIDIA T4), as kept in
``../shared/data/pollux/profiles/<model>/placements.csv``. Each entry is what the JSA fits
from that file - ``bellows.scaling.fit_job_profile(load_placements(csv),
weights=MODEL_WEIGHTS[model], cluster=default_cluster())``: the single-GPU step times per
measured per-GPU batch (means, rounded to the microsecond) and the *effective* parameter
count whose Allreduce time under the default cluster model best matches the model's own
multi-GPU rows. :func:`derive_model_profile` recomputes an entry from the CSV; a test keeps
the embedded numbers equal to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bellows.jobs import SpecError, StepProfile
from bellows.scaling import MODEL_WEIGHTS, default_cluster, fit_job_profile, load_placements

__all__ = ["MODELS", "SOURCE", "ModelProfile", "derive_model_profile", "model"]

SOURCE = (
    "Pollux/AdaptDL artifact (petuum/adaptdl osdi21-artifact), "
    "profiles/<model>/placements.csv, AWS g4dn.12xlarge (4 x T4), fitted by bellows.scaling"
)


@dataclass(frozen=True)
class ModelProfile:
    """One measured model: its name, effective Allreduce weights and single-GPU step times."""

    name: str
    weights: int
    step: StepProfile

    @property
    def m_max(self) -> int:
        """Largest measured per-GPU batch (taken as the memory limit)."""
        return self.step.local_batches[-1]

    @property
    def m_min(self) -> int:
        """Smallest measured per-GPU batch."""
        return self.step.local_batches[0]


MODELS: Mapping[str, ModelProfile] = {
    "bert": ModelProfile(
        "bert",
        102_682_418,
        StepProfile(
            (4, 6, 8, 11, 12),
            (0.455324, 0.56939, 0.703262, 0.855283, 0.921516),
        ),
    ),
    "cifar10": ModelProfile(
        "cifar10",
        9_578_954,
        StepProfile(
            (32, 45, 64, 91, 129, 182, 257, 363, 513, 725, 1024),
            (
                0.042789,
                0.050485,
                0.059833,
                0.075914,
                0.103851,
                0.137225,
                0.187083,
                0.259539,
                0.355363,
                0.496116,
                0.702093,
            ),
        ),
    ),
    "deepspeech2": ModelProfile(
        "deepspeech2",
        55_344_607,
        StepProfile(
            (10, 14, 20, 28, 40, 57, 80),
            (0.466446, 0.558496, 0.681204, 0.850897, 1.121678, 1.664194, 2.540623),
        ),
    ),
    "imagenet": ModelProfile(
        "imagenet",
        19_728_022,
        StepProfile(
            (20, 28, 40, 57, 81, 115, 163, 200),
            (0.147409, 0.208093, 0.253467, 0.323928, 0.420712, 0.560201, 0.762422, 0.923531),
        ),
    ),
    "ncf": ModelProfile(
        "ncf",
        1_594_741,
        StepProfile(
            (
                32,
                45,
                64,
                91,
                129,
                182,
                257,
                363,
                513,
                725,
                1025,
                1450,
                2051,
                2901,
                4103,
                5803,
                8207,
                11606,
                16413,
                23211,
                32768,
            ),
            (
                0.007306,
                0.007261,
                0.007257,
                0.007589,
                0.007329,
                0.007377,
                0.007438,
                0.007532,
                0.007436,
                0.007597,
                0.008658,
                0.008698,
                0.009048,
                0.009419,
                0.009947,
                0.010485,
                0.011356,
                0.013641,
                0.014977,
                0.017507,
                0.021316,
            ),
        ),
    ),
    "yolov3": ModelProfile(
        "yolov3",
        77_732_302,
        StepProfile(
            (4, 6, 8, 11, 16),
            (0.266939, 0.450664, 0.326148, 0.571677, 0.572608),
        ),
    ),
}


def model(name: str) -> ModelProfile:
    """The embedded profile of ``name``; :class:`SpecError` names the known ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise SpecError("model", name, f"one of {sorted(MODELS)}") from None


def derive_model_profile(name: str, placements_csv: Path) -> ModelProfile:
    """Refit a model's entry from its ``placements.csv`` (what the embedded table holds)."""
    fitted = fit_job_profile(
        load_placements(placements_csv), weights=MODEL_WEIGHTS[name], cluster=default_cluster()
    )
    seconds = tuple(round(s, 6) for s in fitted.step.seconds)
    return ModelProfile(
        name, fitted.effective_weights, StepProfile(fitted.step.local_batches, seconds)
    )
