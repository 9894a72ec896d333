"""A job's statistical efficiency known before it runs: the ``efficiency`` section of its profile.

A JobProfile document (:mod:`bellows.scaling.documents`) may carry the job's efficiency
(:class:`bellows.scaling.efficiency.EfficiencyProfile`) in one of two forms::

    "efficiency": {"model": "cifar10"}
        # the model class's fit to its validation runs (bellows.scaling.MODEL_EFFICIENCY)

    "efficiency": {"referenceBatch": 32, "noiseScale": 2400.0,
                   "growth": 0.69, "batchExponent": 0.19, "source": "free text"}
        # measured (``bellows profile``), or the owner's own numbers

The controller decides such a job by goodput from its first round (docs/jsa.md), and the
job's progress reports refine it. A profile comes from a place its tenant writes (the
``bellows.io/profile`` annotation, a ConfigMap of its namespace), so the section is data,
bounded as what progress reports may teach (docs/security.md): the noise scale within
:data:`PRIOR_NOISE_RANGE` samples, ``growth`` within ``[0, 4]``, ``batchExponent`` within
``[0, 0.99]``, ``referenceBatch`` a batch size. Each bad value is a
:class:`bellows.jobs.SpecError` naming the field (``efficiency.noiseScale``), the value and
what is valid.
"""

from __future__ import annotations

from collections.abc import Mapping

from bellows.inputs import check_float, check_int
from bellows.jobs import MAX_BATCH, SpecError
from bellows.scaling.efficiency import MAX_GROWTH, EfficiencyProfile
from bellows.scaling.noise import NOISE_RANGE
from bellows.scaling.reference import MODEL_EFFICIENCY

__all__ = [
    "MAX_PRIOR_EXPONENT",
    "PRIOR_NOISE_RANGE",
    "check_keys",
    "efficiency_prior_to_json",
    "parse_efficiency_prior",
]

PRIOR_NOISE_RANGE = NOISE_RANGE
"""Noise scales (samples) a prior may state: those a progress report may claim."""
MAX_PRIOR_EXPONENT = 0.99
"""Largest ``batchExponent`` (``E`` must keep falling with the batch)."""
MAX_SOURCE = 1024  # characters of a prior's provenance text

_NUMBERS = {"referenceBatch", "noiseScale", "growth", "batchExponent"}


def parse_efficiency_prior(path: str, value: object) -> EfficiencyProfile:
    """The efficiency section at ``path`` (``efficiency``) of a profile document."""
    if not isinstance(value, Mapping):
        raise SpecError(path, value, "a JSON object: {model} or {referenceBatch, noiseScale, ...}")
    if "model" in value:
        check_keys(path, value, {"model"}, set())
        model = value["model"]
        if not isinstance(model, str) or model not in MODEL_EFFICIENCY:
            models = ", ".join(sorted(MODEL_EFFICIENCY))
            raise SpecError(f"{path}.model", model, f"one of the fitted model classes: {models}")
        return MODEL_EFFICIENCY[model]
    check_keys(path, value, _NUMBERS, {"source"})
    low, high = PRIOR_NOISE_RANGE
    source = value.get("source", "")
    if not isinstance(source, str) or len(source) > MAX_SOURCE:
        raise SpecError(f"{path}.source", source, f"a string of at most {MAX_SOURCE} characters")
    return EfficiencyProfile(
        reference_batch=check_int(
            f"{path}.referenceBatch", value["referenceBatch"], minimum=1, maximum=MAX_BATCH
        ),
        noise_scale=check_float(
            f"{path}.noiseScale", value["noiseScale"], minimum=low, maximum=high
        ),
        growth=check_float(f"{path}.growth", value["growth"], minimum=0.0, maximum=MAX_GROWTH),
        batch_exponent=check_float(
            f"{path}.batchExponent", value["batchExponent"], minimum=0.0,
            maximum=MAX_PRIOR_EXPONENT,
        ),
        source=source,
    )  # fmt: skip


def efficiency_prior_to_json(profile: EfficiencyProfile) -> dict[str, object]:
    """The section of ``profile`` (round-trips through :func:`parse_efficiency_prior`): the
    model form for a model class's own fit, else the numbers."""
    for model, fitted in MODEL_EFFICIENCY.items():
        if profile == fitted:
            return {"model": model}
    return {
        "referenceBatch": profile.reference_batch,
        "noiseScale": profile.noise_scale,
        "growth": profile.growth,
        "batchExponent": profile.batch_exponent,
        "source": profile.source,
    }


def check_keys(
    path: str, obj: Mapping[str, object], required: set[str], optional: set[str]
) -> None:
    """Refuse a key of ``obj`` (at ``path``; ``""``: the document) not in ``required`` or
    ``optional``, and a missing required one (a typo must not fall back to a default)."""
    prefix = f"{path}." if path else ""
    for key in obj:
        if key not in required | optional:
            allowed = ", ".join(sorted(required | optional))
            raise SpecError(f"{prefix}{key}", obj[key], f"no such field (allowed: {allowed})")
    for key in sorted(required):
        if key not in obj:
            raise SpecError(f"{prefix}{key}", None, "a value (the field is required)")
