"""Job and cluster profiles: what the JSA knows about a job and about the cluster's network.

A :class:`JobProfile` carries a job's measured single-GPU iteration times ``t_proc(m)`` and its
parameter count; a :class:`ClusterProfile` carries the fitted, job-independent Allreduce
model ``t_ar(weights, k)`` and how much of it overlaps with computation. Both are frozen and
validated on construction: a bad value raises :class:`bellows.jobs.SpecError` naming the field.

Allreduce model (see ``docs/jsa.md``): ``k`` GPUs are packed onto ``ceil(k / gpus_per_node)``
nodes. A ring Allreduce of ``w`` parameters takes ``2(k-1)`` latency steps and moves
``2(k-1)/k`` times the buffer, so with per-link coefficients ``(latency, per_weight)``::

    t_ar(w, k) = latency * (k - 1) + per_weight * w * 2 (k - 1) / k        t_ar(w, 1) = 0

using the intra-node link when the job fits on one node and the inter-node link otherwise.
An iteration then takes ``(t_proc**g + t_ar**g) ** (1/g)`` with ``g = overlap``: ``g = 1`` is
the paper's additive model, larger ``g`` hides more communication behind backpropagation
(the form Pollux fits; ``g -> inf`` is ``max(t_proc, t_ar)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bellows.jobs import (
    MeasuredPlacement,
    SpecError,
    StepProfile,
    TypeSection,
    check_placements,
    check_type_sections,
)

if TYPE_CHECKING:
    from bellows.scaling.efficiency import EfficiencyProfile

__all__ = [
    "DEFAULT_PRIOR",
    "MAX_OVERLAP",
    "ClusterProfile",
    "JobProfile",
    "LinkCost",
]

MAX_OVERLAP = 16.0
"""Largest overlap exponent accepted; beyond it the combination is ``max`` to 4 % anyway."""


def _finite(name: str, value: object, *, minimum: float, maximum: float = math.inf) -> float:
    valid = f"a finite number in [{minimum:g}, {maximum:g}]"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(name, value, valid)
    number = float(value)
    if not math.isfinite(number) or not minimum <= number <= maximum:
        raise SpecError(name, value, valid)
    return number


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(name, value, "an integer >= 1")
    return value


@dataclass(frozen=True)
class LinkCost:
    """Ring-Allreduce cost of one kind of link: seconds per ring step and per parameter."""

    latency: float
    per_weight: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "latency", _finite("latency", self.latency, minimum=0.0))
        object.__setattr__(self, "per_weight", _finite("per_weight", self.per_weight, minimum=0.0))


@dataclass(frozen=True)
class ClusterProfile:
    """The cluster's generic Allreduce model (fitted once per cluster, shared by every job).

    ``intra_node`` applies when all ``k`` GPUs sit on one node (``k <= gpus_per_node``),
    ``inter_node`` otherwise. ``overlap`` is the exponent ``g >= 1`` that combines compute
    and communication time (1 = additive). ``source`` says where the numbers came from.
    """

    intra_node: LinkCost
    inter_node: LinkCost
    overlap: float = 1.0
    gpus_per_node: int = 4
    source: str = ""
    gpu_type: str = ""  # the GPU type it was measured on (bellows calibrate --gpu-type); "": one

    def __post_init__(self) -> None:
        for name in ("intra_node", "inter_node"):
            if not isinstance(getattr(self, name), LinkCost):
                raise SpecError(name, getattr(self, name), "a LinkCost")
        overlap = _finite("overlap", self.overlap, minimum=1.0, maximum=MAX_OVERLAP)
        object.__setattr__(self, "overlap", overlap)
        _positive_int("gpus_per_node", self.gpus_per_node)
        if not isinstance(self.source, str):
            raise SpecError("source", self.source, "a string")
        if not isinstance(self.gpu_type, str):
            raise SpecError("gpu_type", self.gpu_type, "a GPU type name, or '' for none")

    def nodes(self, gpus: int) -> int:
        """Nodes a job on ``gpus`` GPUs spans when packed onto as few nodes as possible."""
        return -(-gpus // self.gpus_per_node)

    def allreduce_seconds(self, weights: int, gpus: int, *, nodes: int | None = None) -> float:
        """``t_ar(weights, gpus)``; ``nodes`` overrides the packed placement (measured rows)."""
        _positive_int("weights", weights)
        _positive_int("gpus", gpus)
        if gpus == 1:
            return 0.0
        spread = self.nodes(gpus) if nodes is None else _positive_int("nodes", nodes)
        link = self.intra_node if spread == 1 else self.inter_node
        return link.latency * (gpus - 1) + link.per_weight * weights * 2.0 * (gpus - 1) / gpus

    def combine(self, compute: float, communicate: float) -> float:
        """Iteration time from compute and Allreduce time under this cluster's overlap."""
        if communicate <= 0.0:
            return compute
        g = self.overlap
        if g == 1.0:
            return compute + communicate
        return float((compute**g + communicate**g) ** (1.0 / g))


@dataclass(frozen=True)
class JobProfile:
    """What was measured about one job: parameters, single-GPU step times, provenance.

    ``comm_weights``, when set, is the parameter count whose Allreduce time under the
    cluster model best matches the job's own multi-GPU measurements (fitted by
    :func:`bellows.scaling.fit_job_profile`); use :attr:`effective_weights` when building a
    :class:`bellows.jobs.JobSpec` so that the JSA predicts with it.

    ``efficiency``, when set, is the job's statistical efficiency known before it runs (the
    document's ``efficiency`` section, :mod:`bellows.scaling.priors`): measured by
    ``bellows profile``, or its model class's fit to validation runs. The controller decides
    such a job by goodput from its first round.

    ``types``, on a cluster of several GPU types (issue 39): what was measured of the job on
    each type (the document's ``types`` section; ``bellows profile --gpu-type``), carried to
    :attr:`bellows.jobs.JobSpec.types`.

    ``placements``: step times measured on several GPUs (the document's ``placements``;
    :class:`bellows.jobs.MeasuredPlacement`), carried to :attr:`bellows.jobs.JobSpec.placements`:
    the core decides the job's packed placements by them (issue 36).
    """

    weights: int
    step: StepProfile
    source: str = ""
    comm_weights: int | None = None
    efficiency: EfficiencyProfile | None = None
    types: tuple[TypeSection, ...] = ()
    placements: tuple[MeasuredPlacement, ...] = ()

    def __post_init__(self) -> None:
        _positive_int("weights", self.weights)
        if not isinstance(self.step, StepProfile):
            raise SpecError("step", self.step, "a StepProfile")
        if not isinstance(self.source, str):
            raise SpecError("source", self.source, "a string")
        if self.comm_weights is not None:
            _positive_int("comm_weights", self.comm_weights)
        if self.efficiency is not None:
            from bellows.scaling.efficiency import EfficiencyProfile  # noqa: PLC0415 (a cycle)

            if not isinstance(self.efficiency, EfficiencyProfile):
                raise SpecError("efficiency", self.efficiency, "an EfficiencyProfile")
        check_type_sections(self.types)
        check_placements(self.placements)

    @property
    def effective_weights(self) -> int:
        """Parameter count that drives Allreduce time: the fitted one if any, else ``weights``."""
        return self.weights if self.comm_weights is None else self.comm_weights


DEFAULT_PRIOR = JobProfile(
    weights=25_557_032,
    step=StepProfile((20, 200), (0.146, 0.922)),
    source="Bellows' default prior (a ResNet-50-sized model): the job has no profile",
)
"""The profile of a job that gives none (docs/user-guide-annotations.md): a ResNet-50-sized
model (25.6 M parameters, 0.146 s per step at 20 samples per GPU, 0.922 s at 200). It makes
the job schedulable at once; the controller refits it to the job's progress reports
(:mod:`bellows.scaling.online`), so a wrong guess costs the first rounds, not the whole job."""
