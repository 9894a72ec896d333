"""A simulator's measured step times as a core's (issue 36): each count packed on the
fewest nodes.

The simulator charges a job the step time measured on its placement
(:data:`~bellows.sim.pollux.speedups.StepSeconds`, by the job's trace model). The Pollux
reference decides with those times (its goodput rows); :class:`PackedSteps` lets Bellows
mode's core decide with them too (``run(decide_measured=True)``): a count ``k`` is priced
as ``k`` GPUs on the fewest nodes, ``ceil(k / gpus_per_node)``, filled in order, the
placement the simulator gives a job on a cluster with whole nodes free. A job the trace
does not name a model for is left to the JSA (``None``).
"""

from __future__ import annotations

from collections.abc import Mapping

from bellows.jobs import JobSpec
from bellows.sim.nodes import packed
from bellows.sim.pollux.speedups import StepSeconds

__all__ = ["PackedSteps"]


class PackedSteps:
    """``(job, gpus, batch)`` to the measured seconds of a step of ``steps`` (the
    simulator's truth) on :func:`packed` GPUs; ``models`` maps job names to trace models."""

    def __init__(self, steps: StepSeconds, models: Mapping[str, str], per_node: int) -> None:
        self._steps = steps
        self._models = dict(models)
        self._per_node = per_node

    def __call__(self, job: JobSpec, gpus: int, batch: int) -> float | None:
        model = self._models.get(job.name)
        if model is None or gpus < 1:
            return None
        return self._steps(model, job, packed(gpus, self._per_node), batch)
