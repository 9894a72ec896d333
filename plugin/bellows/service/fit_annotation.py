"""The ``bellows.io/fit`` annotation: what the controller learned of a job, on the job.

The progress loop (:mod:`bellows.service.progress_loop`) writes the refitted JobProfile
there (:func:`fit_text`, :func:`fit_annotator`); ``bellows jsa current`` reads it back
(:func:`read_fit`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Awaitable, Callable

from bellows.inputs import SpecError
from bellows.kube import JobRef, KubeApi, NotFoundError, keys, kind_named
from bellows.kube.adapters import ALL_KINDS
from bellows.scaling import EfficiencyProfile, JobProfile, job_profile_to_json
from bellows.scaling.online import OnlineFit

__all__ = ["Annotate", "efficiency_fields", "fit_annotator", "fit_text", "read_fit"]

Annotate = Callable[[str, str], Awaitable[None]]
"""Writes a job's current fit where users read it: ``(job key, JobProfile JSON)``."""


def fit_text(
    fit: OnlineFit, restart_s: float | None, efficiency: EfficiencyProfile | None = None
) -> str:
    """The ``bellows.io/fit`` annotation: the refitted JobProfile, its ``source`` saying how
    it was made (a document ``bellows.io/profile`` would accept as it is), and the
    statistical efficiency learned, if any."""
    measured = "" if restart_s is None else f"; restarts measured: median {restart_s:.3g} s"
    learned = (
        ""
        if efficiency is None
        else (
            f"; efficiency learned: noise scale {efficiency.noise_scale:.4g} samples at 1e6 "
            f"reference samples, growth {efficiency.growth:.3g}, batch exponent "
            f"{efficiency.batch_exponent:.3g}, reference batch {efficiency.reference_batch}"
        )
    )
    source = (
        f"bellows online fit: compute x{fit.compute:.4g}, Allreduce x"
        f"{fit.communication:.4g} of the prior, from {fit.reports} reports at "
        f"{fit.configurations} (GPUs, batch) configurations{measured}{learned}"
    )
    profile = dataclasses.replace(fit.profile, source=source)
    return json.dumps(job_profile_to_json(profile), separators=(",", ":"))


def efficiency_fields(efficiency: EfficiencyProfile | None) -> dict[str, float]:
    """The learned efficiency as log fields (none without one)."""
    if efficiency is None:
        return {}
    return {
        "noise_scale": round(efficiency.noise_scale, 4),
        "noise_growth": round(efficiency.growth, 4),
        "noise_batch_exponent": round(efficiency.batch_exponent, 4),
    }


def fit_annotator(api: KubeApi) -> Annotate:
    """Writes ``bellows.io/fit`` on the job with a merge patch (the annotation is Bellows'
    own, so no precondition: the newest fit wins); a job gone meanwhile is skipped."""

    async def annotate(job: str, text: str) -> None:
        ref = _ref(job)
        patch = {"metadata": {"annotations": {keys.FIT: text}}}
        with contextlib.suppress(NotFoundError):
            await api.patch_job(kind_named(ref.kind), ref.namespace, ref.name, patch)

    return annotate


async def read_fit(api: KubeApi, job: str) -> JobProfile | None:
    """The profile the controller refitted for ``job`` (``<kind>/<namespace>/<name>``): its
    ``bellows.io/fit`` annotation (``None``: none yet). :class:`SpecError` when the job is
    not there or the key or the annotation is malformed."""
    ref = _ref(job)
    obj = await api.get_job(kind_named(ref.kind), ref.namespace, ref.name)
    if obj is None:
        raise SpecError("job", job, "a job that exists")
    text = (obj["metadata"].get("annotations") or {}).get(keys.FIT)
    return None if text is None else keys.parse_profile_text(keys.FIT, text)


def _ref(job: str) -> JobRef:
    return JobRef.parse(job, [kind.kind for kind in ALL_KINDS])
