"""Workloads on a cluster of several GPU types (issue 39): each job's sections per type.

:func:`sia_sections` fits, from Sia's measurements (``<data>/sia/profiles``), each of the six
Pollux models' section on every type of :func:`~bellows.scaling.gpu_types.sia_mix`
(:func:`bellows.scaling.accuracy.fit_type_sections`, on the type's embedded Allreduce model);
:func:`with_sections` gives every job of a trace its model's sections. A job of a model with
no sections keeps none: it then runs at its one profile on every type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from bellows.jobs import TypeSection
from bellows.scaling.accuracy import fit_type_sections, load_sia_models
from bellows.scaling.gpu_types import SIA_TYPES, TypedCluster
from bellows.sim.workloads.traces import TraceJob

__all__ = ["sia_sections", "with_sections"]


def sia_sections(data: Path, cluster: TypedCluster) -> dict[str, tuple[TypeSection, ...]]:
    """Per model, its section on each of ``cluster``'s types that Sia measured (by the
    type's name, :data:`~bellows.scaling.gpu_types.SIA_TYPES`)."""
    out: dict[str, list[TypeSection]] = {}
    for gpu in cluster.types:
        suffix = SIA_TYPES.get(gpu.name)
        if suffix is None:
            continue
        models = load_sia_models(data / "sia" / "profiles", suffix)
        for model, section in fit_type_sections(models, gpu.cluster, gpu.name).items():
            out.setdefault(model, []).append(section)
    return {model: tuple(sections) for model, sections in out.items()}


def with_sections(
    trace: Sequence[TraceJob], sections: Mapping[str, tuple[TypeSection, ...]]
) -> tuple[TraceJob, ...]:
    """``trace`` with each job given its model's sections (a job of another model as it is)."""
    return tuple(
        dataclasses.replace(job, spec=dataclasses.replace(job.spec, types=sections[job.model]))
        if job.model in sections else job
        for job in trace
    )  # fmt: skip
