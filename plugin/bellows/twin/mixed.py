"""``bellows demo --cluster mixed``: the twin on Sia's mix of GPU types (issue 39).

The emulated cluster's nodes are :func:`~bellows.scaling.gpu_types.sia_mix`'s (``t4-0`` …,
``a100-0`` …, ``rtx2080ti-0`` …), each labelled ``nvidia.com/gpu.product`` at its type's
``product``, and every job trains at the speed of the type its pods run on
(:mod:`bellows.emulator.typed`). The trace's jobs get their model's sections per type, as
``bellows simulate --cluster sia-mix`` gives them (:func:`typed_trace`), and carry them in
their profile annotation (``types``); the controller decides by type
(``Pools(typed=...)``, the actuator pinning each job to its type's nodes), and the
simulator half runs the same trace on the same typed cluster.

One pool of GPU types only: the paper's mode keeps one pool (the simulator refuses it on
types), Kueue assigns flavors itself, and neither learning from wrong priors nor per-class
placements is modelled on types (:func:`refusal`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Final

from bellows.jobs import TypeSection
from bellows.scaling.gpu_types import TypedCluster
from bellows.service.config import CapacitySettings
from bellows.sim.workloads import TraceJob
from bellows.sim.workloads.gpu_types import with_sections

__all__ = ["MIXED", "capacity_settings", "refusal", "typed_trace"]

MIXED: Final = "mixed"  # --cluster's name for Sia's mix


def typed_trace(
    trace: Sequence[TraceJob], sections: Mapping[str, tuple[TypeSection, ...]]
) -> tuple[TraceJob, ...]:
    """``trace`` with each job given its model's ``sections`` (``with_sections``, as
    ``bellows simulate --cluster sia-mix``), its ``m_max`` (the ``max-batch-per-gpu`` its
    manifest carries) raised to the largest of its sections': the controller's reader holds
    a job's per-GPU batch to that annotation, and a type with more memory (the A100's) may
    run more per GPU than the trace's one profile allowed. The simulator half runs the
    same jobs, so both halves price the same single-GPU lengths."""
    out = []
    for job in with_sections(trace, sections):
        most = max((t.m_max for t in job.spec.types), default=job.spec.m_max)
        spec = dataclasses.replace(job.spec, m_max=max(most, job.spec.m_max))
        out.append(dataclasses.replace(job, spec=spec))
    return tuple(out)


def refusal(
    typed: TypedCluster,
    *,
    gpus: int,
    paper: bool,
    kueue: bool,
    wrong_priors: bool,
    learn_placements: bool,
) -> str | None:
    """Why the demo cannot run on ``typed`` with these options (``None``: it can)."""
    if gpus != typed.total:
        return f"--gpus {gpus}: --cluster {MIXED} has {typed.total} GPUs (--gpus {typed.total})"
    refused = [
        name
        for name, given in (
            ("--paper", paper),  # paper mode keeps one pool
            ("--kueue", kueue),  # Kueue assigns flavors; no typed pool beside it yet
            ("--wrong-priors", wrong_priors),  # learning is not modelled on types
            ("--learn-placements", learn_placements),  # per class, not per type
        )
        if given
    ]
    if refused:
        return (
            f"--cluster {MIXED} takes no {', '.join(refused)}: it runs Bellows mode's one "
            "pool of GPU types, without Kueue, learning from wrong priors or per-class "
            "placements (not modelled on several types)"
        )
    return None


def capacity_settings(typed: TypedCluster | None) -> CapacitySettings:
    """The capacity watch's settings: on ``typed``, each node's ``nvidia.com/gpu.product``
    value named as its type (``gpu_types``)."""
    if typed is None:
        return CapacitySettings()
    return CapacitySettings(gpu_types={t.product: t.name for t in typed.types if t.product})
