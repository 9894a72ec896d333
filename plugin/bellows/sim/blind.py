"""A cluster of several GPU types seen as one pool of equal nodes: how a type-blind policy runs
on it (issue 39: the Pollux reference, as Sia's paper compares it).

Sia's simulator runs heterogeneity-unaware Pollux this way (SOSP'23 artifact,
``cluster_unaware.py``, read to learn how, not copied): every node is cut into *virtual nodes*
of the smallest node's size (sia-mix: a T4 node is one, an A100 or 2080 Ti node of 8 is two,
16 in all), the policy allocates and places over them as over one homogeneous cluster, and
each job's allocation is then *repaired*: it runs on the type where it holds the most GPUs
(its primary type), on those GPUs only. The GPUs it was given on other types stay held and
do nothing (wasted), as there.

:class:`VirtualNodes` is that map; :func:`blind_run` what a job given virtual nodes runs on:
its type, the GPUs and nodes it uses there, and its batch clipped to what those GPUs hold
(the batch the policy chose on its virtual GPUs may not fit fewer or smaller GPUs). A job
whose primary type cannot hold it at all runs on the next type it holds GPUs on that can.
"""

from __future__ import annotations

from dataclasses import dataclass

from bellows.jobs import JobSpec, SpecError
from bellows.scaling.gpu_types import TypedCluster
from bellows.sim.nodes import Placement

__all__ = ["BlindRun", "VirtualNodes", "blind_run"]


@dataclass(frozen=True)
class VirtualNodes:
    """Virtual node ``v`` of ``size`` GPUs is part of node ``owner[v][1]`` of type
    ``owner[v][0]``; the types' nodes in the cluster's order, each cut in ``size`` pieces."""

    size: int
    owner: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, typed: TypedCluster) -> VirtualNodes:
        """``typed``'s nodes cut to its smallest node; each type's node size must be a
        multiple of it (else no cut gives equal nodes)."""
        size = min(t.gpus_per_node for t in typed.types)
        owner: list[tuple[str, int]] = []
        for gpu in typed.types:
            if gpu.gpus_per_node % size:
                raise SpecError(
                    f"types[{gpu.name}].gpus_per_node", gpu.gpus_per_node,
                    f"a multiple of the smallest node's {size} GPUs, to see the cluster as "
                    "one pool of equal nodes",
                )  # fmt: skip
            for node in range(gpu.nodes):
                owner.extend((gpu.name, node) for _ in range(gpu.gpus_per_node // size))
        return cls(size, tuple(owner))

    @property
    def gpus(self) -> int:
        return self.size * len(self.owner)

    def by_type(self, held: Placement) -> dict[str, dict[int, int]]:
        """``held`` (virtual node, GPUs) as GPUs per real node, per type."""
        out: dict[str, dict[int, int]] = {}
        for vnode, gpus in held:
            name, node = self.owner[vnode]
            per_node = out.setdefault(name, {})
            per_node[node] = per_node.get(node, 0) + gpus
        return out


@dataclass(frozen=True)
class BlindRun:
    """What a job placed on virtual nodes runs on: ``gpus`` GPUs of ``gpu_type`` over
    ``nodes`` real nodes at ``batch``, with ``spec`` its section there."""

    gpu_type: str
    gpus: int
    nodes: int
    batch: int
    spec: JobSpec


def blind_run(job: JobSpec, held: Placement, batch: int, virtual: VirtualNodes,
              typed: TypedCluster) -> BlindRun:  # fmt: skip
    """Where ``job``, given ``held`` virtual GPUs at ``batch``, runs (module docstring): the
    type it holds most GPUs of (ties: the cluster's order) among those that hold it."""
    split = virtual.by_type(held)
    order = {name: i for i, name in enumerate(typed.names)}
    for name in sorted(split, key=lambda n: (-sum(split[n].values()), order[n])):
        spec = job.on(name)
        gpus = sum(split[name].values())
        if spec is None or spec.b_min > gpus * spec.m_max:
            continue
        fitted = max(spec.b_min, min(batch, spec.b_max, gpus * spec.m_max))
        return BlindRun(name, gpus, len(split[name]), fitted, spec)
    raise SpecError(
        f"{job.name}.placement", held,
        "virtual nodes on a GPU type that holds the job (its sections: "
        f"{', '.join(s.gpu_type for s in job.types) or 'none'})",
    )  # fmt: skip
